//! The hot path: one strict parse of the section that checks the node table
//! as it goes. No allocation, no lock; see the module docs for the bounds.
//! Objects and arrays are walked in walk.rs.
//!
//! `unevaluatedProperties`/`unevaluatedItems` need to know which members
//! (items) the adjacent keywords and the in-place applicators that
//! succeeded have evaluated: a node that has one collects that into a
//! [`Marks`] bit set on its stack (EVALUATED_MAX bits, no allocation),
//! passing it down to the in-place subschemas; a failed subschema's marks
//! are dropped. `$dynamicRef`/`$recursiveRef` choose their target from the
//! dynamic scope: the schema resources entered so far, kept in a fixed
//! array of SCOPE_MAX entries in the walker (only when some reference is
//! dynamic).

use super::format::Format;
use super::scan::{self, err, msg, skip_ws};
use super::{
    BUDGET_EXCEEDED, EVALUATED_EXCEEDED, EVALUATED_MAX, JsonSchema, NONE, Node, SCOPE_MAX,
};
use super::{T_BOOL, T_INT, T_NULL, T_NUM, T_STR, WORK_STEPS_BASE, WORK_STEPS_PER_BYTE};
use crate::Invalid;

/// Static messages of the schema layer.
pub(crate) mod rule {
    pub const FALSE_SCHEMA: &str = "schema is false: no value allowed";
    pub const REQUIRED: &str = "required property missing";
    pub const DEPENDENT_REQUIRED: &str =
        "property required by a present property (dependentRequired) missing";
    pub const ADDITIONAL_PROPERTY: &str = "additional property not allowed";
    pub const UNEVALUATED_PROPERTY: &str = "unevaluated property not allowed";
    pub const MIN_PROPERTIES: &str = "fewer properties than minProperties";
    pub const MAX_PROPERTIES: &str = "more properties than maxProperties";
    pub const ADDITIONAL_ITEM: &str = "additional item not allowed";
    pub const UNEVALUATED_ITEM: &str = "unevaluated item not allowed";
    pub const MIN_ITEMS: &str = "fewer items than minItems";
    pub const MAX_ITEMS: &str = "more items than maxItems";
    pub const UNIQUE: &str = "uniqueItems: duplicate item";
    pub const MIN_CONTAINS: &str = "contains: too few matching items";
    pub const MAX_CONTAINS: &str = "contains: too many matching items";
    pub const MIN_LENGTH: &str = "string shorter than minLength";
    pub const MAX_LENGTH: &str = "string longer than maxLength";
    pub const PATTERN: &str = "string does not match pattern";
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
    pub const SCOPE: &str = "dynamic scope deeper than SCOPE_MAX";
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
        scope: [0; SCOPE_MAX],
        scope_len: 0,
    };
    let end = w.value(i, schema.root, 0, None)?;
    let j = skip_ws(s, end);
    if j != s.len() {
        return Err(err(msg::TRAILING, j));
    }
    Ok(())
}

/// Which members of an object (items of an array) have been evaluated.
#[derive(Clone, Copy, Default)]
pub(crate) struct Marks {
    bits: [u64; EVALUATED_MAX / 64],
    /// Every member (item) is.
    pub all: bool,
    /// How many members (items) the instance has, once a walk counted them.
    pub len: Option<usize>,
}

impl Marks {
    /// Marks member `k`; false when `k` is past EVALUATED_MAX.
    #[inline]
    pub fn set(&mut self, k: usize) -> bool {
        match self.bits.get_mut(k / 64) {
            Some(w) => {
                *w |= 1 << (k % 64);
                true
            }
            None => self.all,
        }
    }

    #[inline]
    pub fn get(&self, k: usize) -> bool {
        self.all
            || self
                .bits
                .get(k / 64)
                .is_some_and(|w| w & (1 << (k % 64)) != 0)
    }

    #[inline]
    pub fn merge(&mut self, o: &Marks) {
        for (a, b) in self.bits.iter_mut().zip(o.bits) {
            *a |= b;
        }
        self.all |= o.all;
        self.len = self.len.or(o.len);
    }

    /// Whether every member is marked (so the unevaluated pass has nothing
    /// to do and need not re-walk the instance).
    pub fn covers(&self) -> bool {
        if self.all {
            return true;
        }
        let Some(len) = self.len else {
            return false;
        };
        if len > EVALUATED_MAX {
            return false;
        }
        let (full, rest) = (len / 64, len % 64);
        self.bits[..full].iter().all(|&w| w == u64::MAX)
            && (rest == 0 || self.bits[full] & ((1u64 << rest) - 1) == (1u64 << rest) - 1)
    }
}

/// The in-place applicator that already ran as the syntax pass.
#[derive(Clone, Copy, PartialEq, Eq)]
enum First {
    None,
    Ref,
    Dyn,
    AllOf,
}

pub(crate) struct Walker<'a> {
    pub s: &'a [u8],
    pub schema: &'a JsonSchema,
    pub budget: usize,
    /// Set when the budget ran out (or a tracking limit was hit):
    /// applicators must not read that failure as "subschema did not match".
    pub fatal: bool,
    /// Resources entered, outermost first (only when `schema.dynamic`).
    scope: [u16; SCOPE_MAX],
    scope_len: usize,
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

impl<'a> Walker<'a> {
    #[inline]
    pub fn charge(&mut self, n: usize, at: usize) -> Result<(), Invalid> {
        if self.budget < n {
            self.budget = 0;
            self.fatal = true;
            return Err(err(BUDGET_EXCEEDED, at));
        }
        self.budget -= n;
        Ok(())
    }

    /// A failure that no applicator may read as a mismatch.
    #[cold]
    pub fn fatal(&mut self, message: &'static str, at: usize) -> Invalid {
        self.fatal = true;
        err(message, at)
    }

    /// Marks member `k` evaluated, or fails when it is past EVALUATED_MAX.
    #[inline]
    pub fn mark(&mut self, m: &mut Marks, k: usize, at: usize) -> Result<(), Invalid> {
        if m.set(k) {
            Ok(())
        } else {
            Err(self.fatal(EVALUATED_EXCEEDED, at))
        }
    }

    #[inline]
    pub fn ws(&mut self, i: usize) -> usize {
        let j = skip_ws(self.s, i);
        self.budget = self.budget.saturating_sub(j - i);
        j
    }

    #[inline]
    pub fn skip(&mut self, i: usize, depth: usize) -> Result<usize, Invalid> {
        let end = scan::skip_value(self.s, i, depth)?;
        self.charge(end - i, i)?;
        Ok(end)
    }

    /// Enters `n`'s schema resource in the dynamic scope.
    #[inline]
    fn enter(&mut self, n: &Node, at: usize) -> Result<(), Invalid> {
        if self.scope_len == 0 || self.scope[self.scope_len - 1] != n.resource {
            let Some(slot) = self.scope.get_mut(self.scope_len) else {
                return Err(self.fatal(rule::SCOPE, at));
            };
            *slot = n.resource;
            self.scope_len += 1;
        }
        Ok(())
    }

    /// Validates the value at `i` (no leading whitespace) against `node`;
    /// returns the offset past it. `depth` counts the enclosing containers.
    /// `marks`, when given, collects the members (items) of this value
    /// that the node evaluates.
    pub fn value(
        &mut self,
        i: usize,
        node: u32,
        depth: usize,
        marks: Option<&mut Marks>,
    ) -> Result<usize, Invalid> {
        self.charge(1, i)?;
        if node == NONE {
            return self.skip(i, depth);
        }
        if self.schema.dynamic {
            return self.value_scoped(i, node, depth, marks);
        }
        let nodes = &self.schema.nodes;
        let mut n = &nodes[node as usize];
        // Compile refused cycles of pure refs, so this ends.
        while n.pure_ref {
            n = &nodes[n.ref_ as usize];
        }
        if n.uneval_props != NONE || n.uneval_items != NONE {
            return self.unevaluated(i, n, depth, marks);
        }
        self.node(i, n, depth, marks)
    }

    /// [`Walker::value`] for a schema with dynamic references: the same,
    /// keeping the dynamic scope (resources entered, left on return).
    #[inline(never)]
    fn value_scoped(
        &mut self,
        i: usize,
        node: u32,
        depth: usize,
        marks: Option<&mut Marks>,
    ) -> Result<usize, Invalid> {
        let nodes = &self.schema.nodes;
        let mut n = &nodes[node as usize];
        let base = self.scope_len;
        self.enter(n, i)?;
        while n.pure_ref {
            n = &nodes[n.ref_ as usize];
            self.enter(n, i)?;
        }
        let r = if n.uneval_props != NONE || n.uneval_items != NONE {
            self.unevaluated(i, n, depth, marks)
        } else {
            self.node(i, n, depth, marks)
        };
        self.scope_len = base;
        r
    }

    /// The target of the dynamic reference `d`: the outermost resource in
    /// the dynamic scope that has an alternative, else the static target.
    fn dyn_target(&mut self, d: u32, at: usize) -> Result<u32, Invalid> {
        let schema = self.schema;
        let r = &schema.dyn_refs[d as usize];
        let cands = &schema.dyn_targets[r.candidates.range()];
        if cands.is_empty() {
            return Ok(r.target);
        }
        self.charge(self.scope_len, at)?;
        for &res in &self.scope[..self.scope_len] {
            if let Ok(k) = cands.binary_search_by_key(&res, |c| c.0) {
                return Ok(cands[k].1);
            }
        }
        Ok(r.target)
    }

    /// A node with `unevaluatedProperties`/`unevaluatedItems`: its own
    /// keywords and applicators mark what they evaluate, then the rest
    /// goes to the unevaluated schema. Out of line: its bit set stays off
    /// the frames of ordinary recursion.
    #[inline(never)]
    fn unevaluated(
        &mut self,
        i: usize,
        n: &'a Node,
        depth: usize,
        outer: Option<&mut Marks>,
    ) -> Result<usize, Invalid> {
        let mut m = Marks::default();
        let end = self.node(i, n, depth, Some(&mut m))?;
        if m.covers() {
            m.all = true;
        }
        match self.s.get(i) {
            Some(b'{') if n.uneval_props != NONE => {
                self.rest_members(i, n.uneval_props, depth, &m)?;
                m.all = true;
            }
            Some(b'[') if n.uneval_items != NONE => {
                self.rest_items(i, n.uneval_items, depth, &m)?;
                m.all = true;
            }
            _ => {}
        }
        if let Some(o) = outer {
            o.merge(&m);
        }
        Ok(end)
    }

    // Inlined into `value`, the hot recursion (its other caller is the
    // out-of-line `unevaluated`).
    #[inline(always)]
    fn node(
        &mut self,
        i: usize,
        n: &'a Node,
        depth: usize,
        mut marks: Option<&mut Marks>,
    ) -> Result<usize, Invalid> {
        if n.falsy {
            return Err(err(rule::FALSE_SCHEMA, i));
        }
        if !n.checks {
            return self.skip(i, depth);
        }
        if !n.own {
            // Only applicators: a subschema that must match (`$ref`, the
            // dynamic reference, first of `allOf`) doubles as the syntax
            // pass, saving a scan per level of a chain. Its success proves
            // the span well-formed, which the other applicators rely on.
            let (first, kind) = if n.ref_ != NONE {
                (n.ref_, First::Ref)
            } else if n.dyn_ref != NONE {
                (self.dyn_target(n.dyn_ref, i)?, First::Dyn)
            } else if !n.all_of.is_empty() {
                (self.schema.edges[n.all_of.start as usize], First::AllOf)
            } else {
                (NONE, First::None)
            };
            let end = if first == NONE {
                self.skip(i, depth)?
            } else {
                self.value(i, first, depth, marks.as_deref_mut())?
            };
            self.applicators(i, n, depth, kind, marks)?;
            return Ok(end);
        }
        let mut plain = false;
        let end = match self.s.get(i) {
            Some(b'{') => self.object(i, n, depth, marks.as_deref_mut())?,
            Some(b'[') => self.array(i, n, depth, marks.as_deref_mut())?,
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
                if n.pattern != NONE || n.format != Format::None {
                    self.string(i, &t, n)?;
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
            self.applicators(i, n, depth, First::None, marks)?;
        }
        Ok(end)
    }

    /// `pattern` and `format` on the string token at `i` (out of line: most
    /// strings have neither).
    #[inline(never)]
    fn string(&mut self, i: usize, t: &scan::Str, n: &Node) -> Result<(), Invalid> {
        if n.pattern != NONE {
            self.charge(t.end - i, i)?;
            let re = &self.schema.regexes[n.pattern as usize];
            let ok = if t.escaped {
                re.is_match(scan::StrBytes::new(self.s, i))
            } else {
                re.is_match_bytes(&self.s[i + 1..t.end - 1])
            };
            if !ok {
                return Err(err(rule::PATTERN, i));
            }
        }
        if n.format != Format::None {
            self.charge(t.end - i, i)?;
            if !super::format::check_token(n.format, self.s, i, t) {
                return Err(err(n.format.message(), i));
            }
        }
        Ok(())
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
    pub fn matches(
        &mut self,
        i: usize,
        node: u32,
        depth: usize,
        marks: Option<&mut Marks>,
    ) -> Result<bool, Invalid> {
        match self.value(i, node, depth, marks) {
            Ok(_) => Ok(true),
            Err(e) if self.fatal => Err(e),
            Err(_) => Ok(false),
        }
    }

    /// In-place applicators; `first` has already been applied.
    fn applicators(
        &mut self,
        i: usize,
        n: &'a Node,
        depth: usize,
        first: First,
        marks: Option<&mut Marks>,
    ) -> Result<(), Invalid> {
        if let Some(m) = marks {
            return self.applicators_marked(i, n, depth, first, m);
        }
        let edges = &self.schema.edges;
        if n.ref_ != NONE && first != First::Ref {
            self.value(i, n.ref_, depth, None)?;
        }
        if n.dyn_ref != NONE && first != First::Dyn {
            let t = self.dyn_target(n.dyn_ref, i)?;
            self.value(i, t, depth, None)?;
        }
        let skip = usize::from(first == First::AllOf);
        for &e in &edges[n.all_of.range()][skip..] {
            self.value(i, e, depth, None)?;
        }
        if !n.any_of.is_empty() {
            let mut ok = false;
            for &e in &edges[n.any_of.range()] {
                if self.matches(i, e, depth, None)? {
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
                if self.matches(i, e, depth, None)? {
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
        if n.not != NONE && self.matches(i, n.not, depth, None)? {
            return Err(err(rule::NOT, i));
        }
        if n.if_ != NONE {
            let branch = if self.matches(i, n.if_, depth, None)? {
                n.then_
            } else {
                n.else_
            };
            if branch != NONE {
                self.value(i, branch, depth, None)?;
            }
        }
        Ok(())
    }

    /// [`Walker::applicators`] collecting evaluation marks: every `anyOf`
    /// branch runs (each that matches adds its marks), the matching `oneOf`
    /// branch and a matching `if` add theirs.
    #[inline(never)]
    fn applicators_marked(
        &mut self,
        i: usize,
        n: &'a Node,
        depth: usize,
        first: First,
        m: &mut Marks,
    ) -> Result<(), Invalid> {
        let edges = &self.schema.edges;
        if n.ref_ != NONE && first != First::Ref {
            self.value(i, n.ref_, depth, Some(m))?;
        }
        if n.dyn_ref != NONE && first != First::Dyn {
            let t = self.dyn_target(n.dyn_ref, i)?;
            self.value(i, t, depth, Some(m))?;
        }
        let skip = usize::from(first == First::AllOf);
        for &e in &edges[n.all_of.range()][skip..] {
            self.value(i, e, depth, Some(m))?;
        }
        if !n.any_of.is_empty() {
            let mut ok = false;
            for &e in &edges[n.any_of.range()] {
                let mut t = Marks::default();
                if self.matches(i, e, depth, Some(&mut t))? {
                    m.merge(&t);
                    ok = true;
                }
            }
            if !ok {
                return Err(err(rule::ANY_OF, i));
            }
        }
        if !n.one_of.is_empty() {
            let mut count = 0;
            let mut won = Marks::default();
            for &e in &edges[n.one_of.range()] {
                let mut t = Marks::default();
                if self.matches(i, e, depth, Some(&mut t))? {
                    count += 1;
                    if count > 1 {
                        return Err(err(rule::ONE_OF_MANY, i));
                    }
                    won = t;
                }
            }
            if count == 0 {
                return Err(err(rule::ONE_OF_NONE, i));
            }
            m.merge(&won);
        }
        if n.not != NONE && self.matches(i, n.not, depth, None)? {
            return Err(err(rule::NOT, i));
        }
        if n.if_ != NONE {
            let mut t = Marks::default();
            let branch = if self.matches(i, n.if_, depth, Some(&mut t))? {
                m.merge(&t);
                n.then_
            } else {
                n.else_
            };
            if branch != NONE {
                self.value(i, branch, depth, Some(m))?;
            }
        }
        Ok(())
    }
}
