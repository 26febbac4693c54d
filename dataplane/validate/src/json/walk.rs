//! The hot path's objects and arrays: members against `properties`,
//! `patternProperties` and `additionalProperties`, presence for `required`
//! and `dependent*`, items against `prefixItems`/`items`/`contains`,
//! uniqueness, and the second pass of `unevaluated*`.

use super::scan::{self, err, msg, skip_ws};
use super::validate::{Marks, Walker, rule};
use super::{BUDGET_EXCEEDED, NONE, Node, PROPERTY_NAME_BYTES_MAX, T_ARR, T_OBJ};
use crate::Invalid;
use crate::limits::DEPTH_MAX;

/// Looks up a key that has escapes: decoded into a stack buffer first. A key
/// longer than any property name (PROPERTY_NAME_BYTES_MAX) matches none.
#[cold]
#[inline(never)]
fn find_escaped(s: &[u8], k: usize, props: &[super::Prop]) -> Option<usize> {
    let mut buf = [0u8; PROPERTY_NAME_BYTES_MAX];
    let mut len = 0;
    let mut it = scan::StrBytes::new(s, k);
    for b in it.by_ref() {
        *buf.get_mut(len)? = b;
        len += 1;
    }
    if it.bad {
        return None;
    }
    let key = &buf[..len];
    let head = super::name_head(key);
    props
        .binary_search_by(|p| super::name_order(&p.name, p.head, key, head))
        .ok()
}

impl<'a> Walker<'a> {
    /// The `properties` entry of the member whose key token starts at `k`:
    /// its schema (NONE: not declared) and presence bit (0 when none).
    #[inline]
    fn lookup(&self, k: usize, key: &scan::Str, n: &Node) -> (u32, u64, bool) {
        let props = &self.schema.props[n.props.range()];
        if props.is_empty() {
            return (NONE, 0, false);
        }
        let found = if key.escaped {
            find_escaped(self.s, k, props)
        } else {
            let name = &self.s[k + 1..key.end - 1];
            let head = super::name_head(name);
            props
                .binary_search_by(|p| super::name_order(&p.name, p.head, name, head))
                .ok()
        };
        match found {
            Some(p) => {
                let p = &props[p];
                let bit = if p.bit == u8::MAX { 0 } else { 1u64 << p.bit };
                (p.node, bit, p.declared)
            }
            None => (NONE, 0, false),
        }
    }

    /// Whether pattern `re` matches the key token at `k`.
    fn key_matches(&mut self, re: u32, k: usize, key: &scan::Str) -> Result<bool, Invalid> {
        self.charge(key.end - k, k)?;
        let re = &self.schema.regexes[re as usize];
        Ok(if key.escaped {
            re.is_match(scan::StrBytes::new(self.s, k))
        } else {
            re.is_match_bytes(&self.s[k + 1..key.end - 1])
        })
    }

    /// Applies `node` to the value at `v`: the first schema applied to a
    /// value also checks its syntax (`end` is None until then).
    #[inline]
    fn apply(
        &mut self,
        v: usize,
        node: u32,
        d: usize,
        end: &mut Option<usize>,
    ) -> Result<(), Invalid> {
        let e = self.value(v, node, d, None)?;
        *end = Some(e);
        Ok(())
    }

    pub(super) fn object(
        &mut self,
        i: usize,
        n: &'a Node,
        depth: usize,
        mut marks: Option<&mut Marks>,
    ) -> Result<usize, Invalid> {
        if n.types & T_OBJ == 0 {
            return Err(err(n.type_msg, i));
        }
        if depth >= DEPTH_MAX {
            return Err(err(msg::DEPTH, i));
        }
        let d = depth + 1;
        let s = self.s;
        let schema = self.schema;
        let patterns = &schema.pattern_props[n.pattern_props.range()];
        let mut j = self.ws(i + 1);
        let mut count = 0usize;
        let mut seen = 0u64;
        if s.get(j) == Some(&b'}') {
            j += 1;
        } else {
            loop {
                match s.get(j) {
                    Some(b'"') => {}
                    None => return Err(err(msg::EOF, j)),
                    Some(_) => return Err(err(msg::EXPECTED_KEY, j)),
                }
                let k = j;
                let key = scan::scan_string(s, k)?;
                self.charge(key.end - k, k)?;
                let (prop, bit, declared) = self.lookup(k, &key, n);
                if n.property_names != NONE {
                    self.value(k, n.property_names, d, None)?;
                }
                seen |= bit;
                j = self.ws(key.end);
                match s.get(j) {
                    Some(b':') => {}
                    None => return Err(err(msg::EOF, j)),
                    Some(_) => return Err(err(msg::EXPECTED_COLON, j)),
                }
                let v = self.ws(j + 1);
                let mut end = None;
                if declared {
                    self.apply(v, prop, d, &mut end)?;
                }
                let mut matched = false;
                for &(re, node) in patterns {
                    if self.key_matches(re, k, &key)? {
                        matched = true;
                        self.apply(v, node, d, &mut end)?;
                    }
                }
                if !declared && !matched && n.additional != NONE {
                    if schema.nodes[n.additional as usize].falsy {
                        return Err(err(rule::ADDITIONAL_PROPERTY, k));
                    }
                    self.apply(v, n.additional, d, &mut end)?;
                }
                if let Some(m) = marks.as_deref_mut()
                    && n.additional == NONE
                    && (declared || matched)
                {
                    self.mark(m, count, k)?;
                }
                j = match end {
                    Some(e) => e,
                    None => self.skip(v, d)?,
                };
                count += 1;
                j = self.ws(j);
                match s.get(j) {
                    Some(b',') => {
                        j = self.ws(j + 1);
                        if s.get(j) == Some(&b'}') {
                            return Err(err(msg::TRAILING_COMMA, j));
                        }
                    }
                    Some(b'}') => {
                        j += 1;
                        break;
                    }
                    None => return Err(err(msg::EOF, j)),
                    Some(_) => return Err(err(msg::EXPECTED_OBJ_SEP, j)),
                }
            }
        }
        if let Some(m) = marks.as_deref_mut() {
            m.all |= n.additional != NONE;
            m.len = Some(count);
        }
        if seen & n.required_mask != n.required_mask {
            return Err(err(rule::REQUIRED, i));
        }
        for &(trigger, mask) in &schema.dep_required[n.dep_required.range()] {
            if seen & (1 << trigger) != 0 && seen & mask != mask {
                return Err(err(rule::DEPENDENT_REQUIRED, i));
            }
        }
        if count < n.min_properties {
            return Err(err(rule::MIN_PROPERTIES, i));
        }
        if count > n.max_properties {
            return Err(err(rule::MAX_PROPERTIES, i));
        }
        for &(trigger, node) in &schema.dep_schemas[n.dep_schemas.range()] {
            if seen & (1 << trigger) != 0 {
                self.value(i, node, depth, marks.as_deref_mut())?;
            }
        }
        Ok(j)
    }

    pub(super) fn array(
        &mut self,
        i: usize,
        n: &'a Node,
        depth: usize,
        mut marks: Option<&mut Marks>,
    ) -> Result<usize, Invalid> {
        if n.types & T_ARR == 0 {
            return Err(err(n.type_msg, i));
        }
        if depth >= DEPTH_MAX {
            return Err(err(msg::DEPTH, i));
        }
        let d = depth + 1;
        let s = self.s;
        let schema = self.schema;
        let prefix = &schema.edges[n.prefix.range()];
        let mut j = self.ws(i + 1);
        let mut count = 0usize;
        let mut contained = 0usize;
        if s.get(j) == Some(&b']') {
            j += 1;
        } else {
            loop {
                let child = prefix.get(count).copied().unwrap_or(n.items);
                if count >= prefix.len() && child != NONE && schema.nodes[child as usize].falsy {
                    return Err(err(rule::ADDITIONAL_ITEM, j));
                }
                let start = j;
                j = self.value(j, child, d, None)?;
                let mut hit = false;
                if n.contains != NONE && self.matches(start, n.contains, d, None)? {
                    contained += 1;
                    hit = true;
                }
                if let Some(m) = marks.as_deref_mut()
                    && n.items == NONE
                    && (count < prefix.len() || hit && n.contains_marks)
                {
                    self.mark(m, count, start)?;
                }
                count += 1;
                j = self.ws(j);
                match s.get(j) {
                    Some(b',') => {
                        j = self.ws(j + 1);
                        if s.get(j) == Some(&b']') {
                            return Err(err(msg::TRAILING_COMMA, j));
                        }
                    }
                    Some(b']') => {
                        j += 1;
                        break;
                    }
                    None => return Err(err(msg::EOF, j)),
                    Some(_) => return Err(err(msg::EXPECTED_ARR_SEP, j)),
                }
            }
        }
        if let Some(m) = marks {
            m.all |= n.items != NONE;
            m.len = Some(count);
        }
        if count < n.min_items {
            return Err(err(rule::MIN_ITEMS, i));
        }
        if count > n.max_items {
            return Err(err(rule::MAX_ITEMS, i));
        }
        if n.contains != NONE {
            if contained < n.min_contains {
                return Err(err(rule::MIN_CONTAINS, i));
            }
            if contained > n.max_contains {
                return Err(err(rule::MAX_CONTAINS, i));
            }
        }
        if n.unique_items && count > 1 {
            self.unique(i, d)?;
        }
        Ok(j)
    }

    /// `unevaluatedProperties`: `node` on every member of the (valid)
    /// object at `open` that `m` does not mark.
    pub(super) fn rest_members(
        &mut self,
        open: usize,
        node: u32,
        depth: usize,
        m: &Marks,
    ) -> Result<(), Invalid> {
        if m.all {
            return Ok(());
        }
        let s = self.s;
        let falsy = self.schema.nodes[node as usize].falsy;
        let mut j = self.ws(open + 1);
        let mut k = 0usize;
        while s.get(j) == Some(&b'"') {
            let key = scan::scan_string(s, j)?;
            let colon = skip_ws(s, key.end);
            let v = self.ws(colon + 1);
            let end = if m.get(k) {
                self.skip(v, depth + 1)?
            } else if falsy {
                return Err(err(rule::UNEVALUATED_PROPERTY, j));
            } else {
                self.value(v, node, depth + 1, None)?
            };
            k += 1;
            j = self.ws(end);
            if s.get(j) != Some(&b',') {
                break;
            }
            j = self.ws(j + 1);
        }
        Ok(())
    }

    /// `unevaluatedItems`: `node` on every item of the (valid) array at
    /// `open` that `m` does not mark.
    pub(super) fn rest_items(
        &mut self,
        open: usize,
        node: u32,
        depth: usize,
        m: &Marks,
    ) -> Result<(), Invalid> {
        if m.all {
            return Ok(());
        }
        let s = self.s;
        let falsy = self.schema.nodes[node as usize].falsy;
        let mut j = self.ws(open + 1);
        let mut k = 0usize;
        if s.get(j) == Some(&b']') {
            return Ok(());
        }
        loop {
            let end = if m.get(k) {
                self.skip(j, depth + 1)?
            } else if falsy {
                return Err(err(rule::UNEVALUATED_ITEM, j));
            } else {
                self.value(j, node, depth + 1, None)?
            };
            k += 1;
            j = self.ws(end);
            if s.get(j) != Some(&b',') {
                return Ok(());
            }
            j = self.ws(j + 1);
        }
    }

    /// Pairwise comparison of the items of the (valid) array at `open`:
    /// quadratic, paid from the work budget. Up to UNIQUE_SPANS_MAX items
    /// are located once in a stack table; longer arrays are re-walked.
    #[inline(never)] // keeps the span table out of the recursive frames
    fn unique(&mut self, open: usize, d: usize) -> Result<(), Invalid> {
        const UNIQUE_SPANS_MAX: usize = 32;
        let s = self.s;
        let next = |w: &mut Self, at: usize| -> Result<(usize, Option<usize>), Invalid> {
            let end = w.skip(at, d)?;
            let k = w.ws(end);
            Ok((end, (s.get(k) == Some(&b',')).then(|| skip_ws(s, k + 1))))
        };
        let mut spans = [(0usize, 0usize); UNIQUE_SPANS_MAX];
        let mut count = 0;
        let mut at = Some(skip_ws(s, open + 1));
        while let Some(a) = at
            && count < UNIQUE_SPANS_MAX
        {
            let (end, following) = next(self, a)?;
            spans[count] = (a, end);
            count += 1;
            at = following;
        }
        if at.is_none() {
            let spans = &spans[..count];
            for (x, &p) in spans.iter().enumerate() {
                for &q in &spans[x + 1..] {
                    if self.same(p, q)? {
                        return Err(err(rule::UNIQUE, q.0));
                    }
                }
            }
            return Ok(());
        }
        let mut a = skip_ws(s, open + 1);
        while let (_, Some(mut b)) = next(self, a)? {
            let following = b;
            loop {
                if self.same((a, usize::MAX), (b, usize::MAX))? {
                    return Err(err(rule::UNIQUE, b));
                }
                match next(self, b)?.1 {
                    Some(x) => b = x,
                    None => break,
                }
            }
            a = following;
        }
        Ok(())
    }

    /// Whether the values at `p.0` and `q.0` are equal. When both ends are
    /// known (not usize::MAX), scalars are decided without `equal`.
    fn same(&mut self, p: (usize, usize), q: (usize, usize)) -> Result<bool, Invalid> {
        let s = self.s;
        let (x, y) = (s[p.0], s[q.0]);
        let kind = |b: u8| match b {
            b'-' | b'0'..=b'9' => b'0',
            other => other,
        };
        if kind(x) != kind(y) {
            return Ok(false);
        }
        if matches!(x, b't' | b'f' | b'n') {
            return Ok(true);
        }
        if x == b'"' && p.1 != usize::MAX && q.1 != usize::MAX {
            let (a, b) = (&s[p.0..p.1], &s[q.0..q.1]);
            if !a.contains(&b'\\') && !b.contains(&b'\\') {
                self.charge(a.len().min(b.len()), q.0)?;
                return Ok(a == b);
            }
        }
        if scan::equal(s, p.0, s, q.0, &mut self.budget) {
            return Ok(true);
        }
        if self.budget == 0 {
            self.fatal = true;
            return Err(err(BUDGET_EXCEEDED, q.0));
        }
        Ok(false)
    }
}
