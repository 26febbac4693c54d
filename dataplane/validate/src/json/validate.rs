//! The hot path: one strict parse of the section that checks the node table
//! as it goes. No allocation, no lock; see the module docs for the bounds.

use super::scan::{self, err, msg, skip_ws};
use super::{BUDGET_EXCEEDED, JsonSchema, NONE, Node, PROPERTY_NAME_BYTES_MAX};
use super::{
    T_ARR, T_BOOL, T_INT, T_NULL, T_NUM, T_OBJ, T_STR, WORK_STEPS_BASE, WORK_STEPS_PER_BYTE,
};
use crate::Invalid;
use crate::limits::DEPTH_MAX;

/// Static messages of the schema layer.
pub(crate) mod rule {
    pub const FALSE_SCHEMA: &str = "schema is false: no value allowed";
    pub const REQUIRED: &str = "required property missing";
    pub const ADDITIONAL_PROPERTY: &str = "additional property not allowed";
    pub const MIN_PROPERTIES: &str = "fewer properties than minProperties";
    pub const MAX_PROPERTIES: &str = "more properties than maxProperties";
    pub const ADDITIONAL_ITEM: &str = "additional item not allowed";
    pub const MIN_ITEMS: &str = "fewer items than minItems";
    pub const MAX_ITEMS: &str = "more items than maxItems";
    pub const UNIQUE: &str = "uniqueItems: duplicate item";
    pub const MIN_CONTAINS: &str = "contains: too few matching items";
    pub const MAX_CONTAINS: &str = "contains: too many matching items";
    pub const MIN_LENGTH: &str = "string shorter than minLength";
    pub const MAX_LENGTH: &str = "string longer than maxLength";
    pub const MINIMUM: &str = "number below minimum";
    pub const EX_MINIMUM: &str = "number not above exclusiveMinimum";
    pub const MAXIMUM: &str = "number above maximum";
    pub const EX_MAXIMUM: &str = "number not below exclusiveMaximum";
    pub const MULTIPLE_OF: &str = "number not a multiple of multipleOf";
    pub const ENUM: &str = "value not in enum";
    pub const CONST: &str = "value not equal to const";
    pub const ANY_OF: &str = "anyOf: no subschema matched";
    pub const ONE_OF_NONE: &str = "oneOf: no subschema matched";
    pub const ONE_OF_MANY: &str = "oneOf: more than one subschema matched";
    pub const NOT: &str = "not: value matched the subschema";
}

pub(crate) fn validate(schema: &JsonSchema, s: &[u8]) -> Result<(), Invalid> {
    if let Err(e) = std::str::from_utf8(s) {
        return Err(err(msg::UTF8, e.valid_up_to()));
    }
    let i = skip_ws(s, 0);
    if i == s.len() {
        return Err(err(msg::EMPTY, i));
    }
    let mut w = Walker {
        s,
        schema,
        budget: WORK_STEPS_BASE.saturating_add(s.len().saturating_mul(WORK_STEPS_PER_BYTE)),
        fatal: false,
    };
    let end = w.value(i, schema.root, 0)?;
    let j = skip_ws(s, end);
    if j != s.len() {
        return Err(err(msg::TRAILING, j));
    }
    Ok(())
}

struct Walker<'a> {
    s: &'a [u8],
    schema: &'a JsonSchema,
    budget: usize,
    /// Set when the budget ran out: applicators must not read that failure
    /// as "subschema did not match".
    fatal: bool,
}

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

/// `multipleOf` test: exact on integers below 2^53, else a relative
/// tolerance on the quotient (decimal fractions are not exact in f64).
fn is_multiple(v: f64, m: f64) -> bool {
    const EXACT: f64 = 9_007_199_254_740_992.0;
    if v.fract() == 0.0 && m.fract() == 0.0 && v.abs() < EXACT && m.abs() < EXACT {
        return v % m == 0.0;
    }
    let q = v / m;
    if !q.is_finite() {
        return false;
    }
    (q - q.round()).abs() <= 1e-9 * q.abs().max(1.0)
}

impl Walker<'_> {
    #[inline]
    fn charge(&mut self, n: usize, at: usize) -> Result<(), Invalid> {
        if self.budget < n {
            self.budget = 0;
            self.fatal = true;
            return Err(err(BUDGET_EXCEEDED, at));
        }
        self.budget -= n;
        Ok(())
    }

    #[inline]
    fn ws(&mut self, i: usize) -> usize {
        let j = skip_ws(self.s, i);
        self.budget = self.budget.saturating_sub(j - i);
        j
    }

    /// Validates the value at `i` (no leading whitespace) against `node`;
    /// returns the offset past it. `depth` counts the enclosing containers.
    fn value(&mut self, i: usize, node: u32, depth: usize) -> Result<usize, Invalid> {
        self.charge(1, i)?;
        if node == NONE {
            let end = scan::skip_value(self.s, i, depth)?;
            self.charge(end - i, i)?;
            return Ok(end);
        }
        let nodes = &self.schema.nodes;
        let mut n = &nodes[node as usize];
        // Compile refused cycles of pure refs, so this ends.
        while n.pure_ref {
            n = &nodes[n.ref_ as usize];
        }
        if n.falsy {
            return Err(err(rule::FALSE_SCHEMA, i));
        }
        if !n.checks {
            let end = scan::skip_value(self.s, i, depth)?;
            self.charge(end - i, i)?;
            return Ok(end);
        }
        if !n.own {
            // Only applicators: a subschema that must match (`$ref`, first
            // of `allOf`) doubles as the syntax pass, saving a scan per
            // level of a chain. Its success proves the span well-formed,
            // which the other applicators rely on.
            let first = if n.ref_ != NONE {
                n.ref_
            } else if !n.all_of.is_empty() {
                self.schema.edges[n.all_of.start as usize]
            } else {
                NONE
            };
            let end = if first == NONE {
                let end = scan::skip_value(self.s, i, depth)?;
                self.charge(end - i, i)?;
                end
            } else {
                self.value(i, first, depth)?
            };
            self.applicators(i, n, depth, first != NONE)?;
            return Ok(end);
        }
        let mut plain = false;
        let end = match self.s.get(i) {
            Some(b'{') => self.object(i, n, depth)?,
            Some(b'[') => self.array(i, n, depth)?,
            Some(b'"') => {
                if n.types & T_STR == 0 {
                    return Err(err(n.type_msg, i));
                }
                let t = scan::scan_string(self.s, i)?;
                self.charge(t.end - i, i)?;
                plain = !t.escaped;
                if t.chars < n.min_length {
                    return Err(err(rule::MIN_LENGTH, i));
                }
                if t.chars > n.max_length {
                    return Err(err(rule::MAX_LENGTH, i));
                }
                t.end
            }
            Some(b'-' | b'0'..=b'9') => {
                let t = scan::scan_number(self.s, i)?;
                self.charge(t.end - i, i)?;
                if n.types & T_NUM == 0
                    && (n.types & T_INT == 0
                        || !(t.integer_literal
                            || !n.integer_literal_only && scan::number_is_integer(self.s, &t, i)))
                {
                    return Err(err(n.type_msg, i));
                }
                if n.numeric {
                    self.number(i, t.end, n)?;
                }
                t.end
            }
            Some(b't' | b'f') => {
                let end = scan::scan_literal(self.s, i)?;
                if n.types & T_BOOL == 0 {
                    return Err(err(n.type_msg, i));
                }
                end
            }
            Some(b'n') => {
                let end = scan::scan_literal(self.s, i)?;
                if n.types & T_NULL == 0 {
                    return Err(err(n.type_msg, i));
                }
                end
            }
            None => return Err(err(msg::EOF, i)),
            Some(_) => return Err(err(msg::UNEXPECTED, i)),
        };
        if !n.enum_values.is_empty() && !self.in_consts(i, end, plain, n.enum_values.range())? {
            return Err(err(rule::ENUM, i));
        }
        if n.konst != NONE {
            let k = n.konst as usize;
            if !self.in_consts(i, end, plain, k..k + 1)? {
                return Err(err(rule::CONST, i));
            }
        }
        if n.applicators {
            self.applicators(i, n, depth, false)?;
        }
        Ok(end)
    }

    fn number(&mut self, i: usize, end: usize, n: &Node) -> Result<(), Invalid> {
        let v = scan::number_value(self.s, i, end);
        if v < n.minimum {
            return Err(err(rule::MINIMUM, i));
        }
        if v <= n.ex_minimum {
            return Err(err(rule::EX_MINIMUM, i));
        }
        if v > n.maximum {
            return Err(err(rule::MAXIMUM, i));
        }
        if v >= n.ex_maximum {
            return Err(err(rule::EX_MAXIMUM, i));
        }
        if n.multiple_of > 0.0 && !is_multiple(v, n.multiple_of) {
            return Err(err(rule::MULTIPLE_OF, i));
        }
        Ok(())
    }

    /// Whether the value at `i..end` equals one of the `which` consts.
    /// `plain`: the value is a string without escapes, so it compares as
    /// bytes with the consts that are too, and differs from non-strings.
    fn in_consts(
        &mut self,
        i: usize,
        end: usize,
        plain: bool,
        which: std::ops::Range<usize>,
    ) -> Result<bool, Invalid> {
        let schema = self.schema;
        for &(a, b, plain_const) in &schema.consts[which] {
            let c = &schema.const_bytes[a as usize..b as usize];
            if plain {
                if plain_const {
                    if c == &self.s[i..end] {
                        return Ok(true);
                    }
                    continue;
                }
                if c.first() != Some(&b'"') {
                    continue;
                }
            }
            if scan::equal(self.s, i, c, 0, &mut self.budget) {
                return Ok(true);
            }
            if self.budget == 0 {
                self.fatal = true;
                return Err(err(BUDGET_EXCEEDED, i));
            }
        }
        Ok(false)
    }

    /// Runs a subschema on a span already checked for syntax; `Ok(false)`
    /// when it does not match, `Err` only when the budget ran out.
    fn matches(&mut self, i: usize, node: u32, depth: usize) -> Result<bool, Invalid> {
        match self.value(i, node, depth) {
            Ok(_) => Ok(true),
            Err(e) if self.fatal => Err(e),
            Err(_) => Ok(false),
        }
    }

    /// `first_done`: the `$ref`, or else the first `allOf` entry, has
    /// already been applied.
    fn applicators(
        &mut self,
        i: usize,
        n: &Node,
        depth: usize,
        first_done: bool,
    ) -> Result<(), Invalid> {
        let edges = &self.schema.edges;
        let mut skip_all_of = 0;
        if n.ref_ != NONE {
            if !first_done {
                self.value(i, n.ref_, depth)?;
            }
        } else if first_done {
            skip_all_of = 1;
        }
        for &e in &edges[n.all_of.range()][skip_all_of..] {
            self.value(i, e, depth)?;
        }
        if !n.any_of.is_empty() {
            let mut ok = false;
            for &e in &edges[n.any_of.range()] {
                if self.matches(i, e, depth)? {
                    ok = true;
                    break;
                }
            }
            if !ok {
                return Err(err(rule::ANY_OF, i));
            }
        }
        if !n.one_of.is_empty() {
            let mut count = 0;
            for &e in &edges[n.one_of.range()] {
                if self.matches(i, e, depth)? {
                    count += 1;
                    if count > 1 {
                        return Err(err(rule::ONE_OF_MANY, i));
                    }
                }
            }
            if count == 0 {
                return Err(err(rule::ONE_OF_NONE, i));
            }
        }
        if n.not != NONE && self.matches(i, n.not, depth)? {
            return Err(err(rule::NOT, i));
        }
        if n.if_ != NONE {
            let branch = if self.matches(i, n.if_, depth)? {
                n.then_
            } else {
                n.else_
            };
            if branch != NONE {
                self.value(i, branch, depth)?;
            }
        }
        Ok(())
    }

    /// The schema for the member whose key token starts at `k`, the
    /// required bit it sets (0 when none), and whether it is additional.
    #[inline]
    fn lookup(&self, k: usize, key: &scan::Str, n: &Node) -> (u32, u64, bool) {
        let props = &self.schema.props[n.props.range()];
        if !props.is_empty() {
            let found = if key.escaped {
                find_escaped(self.s, k, props)
            } else {
                {
                    let name = &self.s[k + 1..key.end - 1];
                    let head = super::name_head(name);
                    props
                        .binary_search_by(|p| super::name_order(&p.name, p.head, name, head))
                        .ok()
                }
            };
            if let Some(p) = found {
                let p = &props[p];
                let bit = if p.bit == u8::MAX { 0 } else { 1u64 << p.bit };
                if p.declared {
                    return (p.node, bit, false);
                }
                return (n.additional, bit, true);
            }
        }
        (n.additional, 0, true)
    }

    fn object(&mut self, i: usize, n: &Node, depth: usize) -> Result<usize, Invalid> {
        if n.types & T_OBJ == 0 {
            return Err(err(n.type_msg, i));
        }
        if depth >= DEPTH_MAX {
            return Err(err(msg::DEPTH, i));
        }
        let d = depth + 1;
        let s = self.s;
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
                let key = scan::scan_string(s, j)?;
                self.charge(key.end - j, j)?;
                let (child, bit, additional) = self.lookup(j, &key, n);
                if additional && child != NONE && self.schema.nodes[child as usize].falsy {
                    return Err(err(rule::ADDITIONAL_PROPERTY, j));
                }
                if n.property_names != NONE {
                    self.value(j, n.property_names, d)?;
                }
                seen |= bit;
                j = self.ws(key.end);
                match s.get(j) {
                    Some(b':') => {}
                    None => return Err(err(msg::EOF, j)),
                    Some(_) => return Err(err(msg::EXPECTED_COLON, j)),
                }
                j = self.ws(j + 1);
                j = self.value(j, child, d)?;
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
        if seen & n.required_mask != n.required_mask {
            return Err(err(rule::REQUIRED, i));
        }
        if count < n.min_properties {
            return Err(err(rule::MIN_PROPERTIES, i));
        }
        if count > n.max_properties {
            return Err(err(rule::MAX_PROPERTIES, i));
        }
        Ok(j)
    }

    fn array(&mut self, i: usize, n: &Node, depth: usize) -> Result<usize, Invalid> {
        if n.types & T_ARR == 0 {
            return Err(err(n.type_msg, i));
        }
        if depth >= DEPTH_MAX {
            return Err(err(msg::DEPTH, i));
        }
        let d = depth + 1;
        let s = self.s;
        let edges = &self.schema.edges;
        let prefix = &edges[n.prefix.range()];
        let mut j = self.ws(i + 1);
        let mut count = 0usize;
        let mut contained = 0usize;
        if s.get(j) == Some(&b']') {
            j += 1;
        } else {
            loop {
                let child = prefix.get(count).copied().unwrap_or(n.items);
                if count >= prefix.len() && child != NONE && self.schema.nodes[child as usize].falsy
                {
                    return Err(err(rule::ADDITIONAL_ITEM, j));
                }
                let start = j;
                j = self.value(j, child, d)?;
                if n.contains != NONE && self.matches(start, n.contains, d)? {
                    contained += 1;
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

    /// Pairwise comparison of the items of the (valid) array at `open`:
    /// quadratic, paid from the work budget. Up to UNIQUE_SPANS_MAX items
    /// are located once in a stack table; longer arrays are re-walked.
    #[inline(never)] // keeps the span table out of the recursive frames
    fn unique(&mut self, open: usize, d: usize) -> Result<(), Invalid> {
        const UNIQUE_SPANS_MAX: usize = 32;
        let s = self.s;
        let next = |w: &mut Self, at: usize| -> Result<(usize, Option<usize>), Invalid> {
            let end = scan::skip_value(s, at, d)?;
            w.charge(end - at, at)?;
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
