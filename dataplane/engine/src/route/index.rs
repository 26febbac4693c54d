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

/// The index of a route table.
#[derive(Debug, Clone, Default)]
pub(super) struct Index {
    /// Fields some route names an exact value of.
    fields: Vec<FieldIndex>,
    /// Every route, for small tables and tables with no exact value.
    all: Vec<u32>,
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
        Index {
            fields,
            all,
            semver,
        }
    }

    /// The request's candidates: two ascending lists to merge.
    #[inline]
    pub fn candidates(&self, k: &RouteKey<'_>) -> (&[u32], &[u32]) {
        let mut best: (&[u32], &[u32]) = (&self.all, &[]);
        for fi in &self.fields {
            let bucket = fi
                .exact
                .get(fi.field.of(k))
                .map_or(&[][..], Vec::as_slice);
            if bucket.len() + fi.wild.len() < best.0.len() + best.1.len() {
                best = (bucket, &fi.wild);
            }
        }
        best
    }
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
