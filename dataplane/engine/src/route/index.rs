//! The route index: for each field some route names an exact value of, a
//! hash map from value to the routes requiring it, and the field's wildcard
//! list (the routes that take any value there, or a glob or range). A
//! request's candidates on a field are its value's bucket plus that
//! wildcard list; every matching route is among the candidates of every
//! field, so the index takes the field with the fewest and scans them
//! merged in priority order. First match is therefore exactly the linear
//! scan's first match, at the cost of one hash lookup per indexed field
//! plus the candidates.

use rustc_hash::FxHashMap;
use sluice_validate::json::{Spot, plain_string_at};

use super::bounds::V3;
use super::{Route, RouteKey};

/// Tables this small are scanned whole: cheaper than the lookups.
pub(super) const SCAN_ROUTES_MAX: usize = 4;

/// A field routes match on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Field {
    Model,
    Version,
    Adapter,
    Intent,
    Tenant,
}

impl Field {
    const ALL: [Field; 5] = [
        Field::Model,
        Field::Version,
        Field::Adapter,
        Field::Intent,
        Field::Tenant,
    ];

    fn of<'a>(self, k: &RouteKey<'a>) -> &'a str {
        match self {
            Field::Model => k.model,
            Field::Version => k.version,
            Field::Adapter => k.adapter,
            Field::Intent => k.intent,
            Field::Tenant => k.tenant,
        }
    }
}

#[derive(Debug, Clone)]
struct FieldIndex {
    field: Field,
    /// Routes (indexes, ascending) requiring each exact value.
    exact: FxHashMap<Box<str>, Vec<u32>>,
    /// Routes taking any value or a pattern (ascending).
    wild: Vec<u32>,
}

/// Routes by the string a content condition `PATH == "text"` requires at
/// one path node; the rest of the routes in `wild`. A request whose value
/// there is a plain string looks it up; one with anything else (an escaped
/// string, another value, no value) is not narrowed by this node unless the
/// bucket is necessarily empty (no string there: no `==` string holds).
#[derive(Debug, Clone)]
struct ContentIndex {
    node: usize,
    exact: FxHashMap<Box<[u8]>, Vec<u32>>,
    wild: Vec<u32>,
}

/// Semver ranges within one major version, by that major; every other
/// route in `wild`. A request whose version does not parse matches no
/// range, so only `wild` remains.
#[derive(Debug, Clone, Default)]
struct MajorIndex {
    exact: FxHashMap<u64, Vec<u32>>,
    wild: Vec<u32>,
}

/// The index of a route table.
#[derive(Debug, Clone, Default)]
pub(super) struct Index {
    /// Fields some route names an exact value of.
    fields: Vec<FieldIndex>,
    /// Every route, for small tables and tables with no exact value.
    all: Vec<u32>,
    /// Path nodes some route compares with a string literal.
    content: Vec<ContentIndex>,
    /// Ranges by major version, when some range has one.
    major: Option<MajorIndex>,
    /// Some route has a semver range: parse the request's version.
    pub semver: bool,
}

impl Index {
    pub fn build(routes: &[Route]) -> Index {
        // Route counts are bounded by ROUTE_COUNT_MAX, far below u32::MAX.
        let id = |i: usize| u32::try_from(i).unwrap_or(u32::MAX);
        let all: Vec<u32> = (0..routes.len()).map(id).collect();
        let semver = routes.iter().any(|r| r.bounds.is_some());
        if routes.len() <= SCAN_ROUTES_MAX {
            return Index {
                fields: Vec::new(),
                all,
                content: Vec::new(),
                major: None,
                semver,
            };
        }
        let mut fields = Vec::new();
        for f in Field::ALL {
            let mut fi = FieldIndex {
                field: f,
                exact: FxHashMap::default(),
                wild: Vec::new(),
            };
            for (i, r) in routes.iter().enumerate() {
                match r.exact(f) {
                    Some(v) => fi.exact.entry(v.into()).or_default().push(id(i)),
                    None => fi.wild.push(id(i)),
                }
            }
            if !fi.exact.is_empty() {
                fields.push(fi);
            }
        }
        let mut nodes: Vec<usize> = routes
            .iter()
            .flat_map(|r| r.content.iter())
            .filter(|(p, _)| p.string_literal().is_some())
            .map(|&(_, n)| n)
            .collect();
        nodes.sort_unstable();
        nodes.dedup();
        let content = nodes
            .into_iter()
            .map(|node| {
                let mut ci = ContentIndex {
                    node,
                    exact: FxHashMap::default(),
                    wild: Vec::new(),
                };
                for (i, r) in routes.iter().enumerate() {
                    // A route needing two strings at one node matches
                    // nothing; the first is still necessary.
                    match r
                        .content
                        .iter()
                        .find(|(p, n)| *n == node && p.string_literal().is_some())
                        .and_then(|(p, _)| p.string_literal())
                    {
                        Some(lit) => ci.exact.entry(lit.into()).or_default().push(id(i)),
                        None => ci.wild.push(id(i)),
                    }
                }
                ci
            })
            .collect();
        let mut major = MajorIndex::default();
        for (i, r) in routes.iter().enumerate() {
            match r.bounds.and_then(|b| b.major()) {
                Some(m) => major.exact.entry(m).or_default().push(id(i)),
                None => major.wild.push(id(i)),
            }
        }
        let major = (!major.exact.is_empty()).then_some(major);
        Index {
            fields,
            all,
            content,
            major,
            semver,
        }
    }

    /// Whether candidates depend on the section's located paths.
    pub fn needs_spots(&self) -> bool {
        !self.content.is_empty()
    }

    /// The request's candidates: two ascending lists to merge. `spots`:
    /// the located paths of the request's section, when it was walked.
    #[inline]
    pub fn candidates<'s>(
        &'s self,
        k: &RouteKey<'_>,
        version: Option<V3>,
        spots: Option<&[Spot]>,
    ) -> (&'s [u32], &'s [u32]) {
        let mut best: (&[u32], &[u32]) = (&self.all, &[]);
        if let Some(mi) = &self.major {
            let bucket = version
                .and_then(|v| mi.exact.get(&v.0))
                .map_or(&[][..], Vec::as_slice);
            if bucket.len() + mi.wild.len() < best.0.len() {
                best = (bucket, &mi.wild);
            }
        }
        if let (Some(json), Some(spots)) = (k.json, spots) {
            for ci in &self.content {
                let spot = spots.get(ci.node).copied().unwrap_or(Spot::MISSING);
                let bucket = match plain_string_at(json, spot) {
                    Some(v) => ci.exact.get(v).map_or(&[][..], Vec::as_slice),
                    // Not a string at all: no `== "text"` can hold.
                    None if !is_string(json, spot) => &[][..],
                    // An escaped string: this node does not narrow.
                    None => continue,
                };
                if bucket.len() + ci.wild.len() < best.0.len() + best.1.len() {
                    best = (bucket, &ci.wild);
                }
            }
        }
        for fi in &self.fields {
            let bucket = fi.exact.get(fi.field.of(k)).map_or(&[][..], Vec::as_slice);
            if bucket.len() + fi.wild.len() < best.0.len() + best.1.len() {
                best = (bucket, &fi.wild);
            }
        }
        best
    }
}

/// Whether the located value is a string token (escaped or not).
fn is_string(json: &[u8], spot: Spot) -> bool {
    spot.offset().is_some_and(|i| json.get(i) == Some(&b'"'))
}

/// Two ascending lists as one, ascending (they never share an entry).
pub(super) struct Merge<'a> {
    a: &'a [u32],
    b: &'a [u32],
}

impl<'a> Merge<'a> {
    pub fn new(a: &'a [u32], b: &'a [u32]) -> Self {
        Merge { a, b }
    }
}

impl Iterator for Merge<'_> {
    type Item = u32;

    #[inline]
    fn next(&mut self) -> Option<u32> {
        match (self.a.split_first(), self.b.split_first()) {
            (Some((&x, ra)), Some((&y, _))) if x < y => {
                self.a = ra;
                Some(x)
            }
            (_, Some((&y, rb))) => {
                self.b = rb;
                Some(y)
            }
            (Some((&x, ra)), None) => {
                self.a = ra;
                Some(x)
            }
            (None, None) => None,
        }
    }
}
