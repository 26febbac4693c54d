//! Semver ranges compiled to integer bounds at apply time. A request's
//! version is parsed once ([`lenient`]); each range is then two
//! comparisons of `(major, minor, patch)` triples.
//!
//! The bounds reproduce `semver::VersionReq::matches` exactly for versions
//! without a pre-release, which are the only ones [`lenient`] produces: each
//! comparator of a requirement accepts one interval of such versions, and
//! the requirement (all comparators) their intersection. The rules below
//! follow the semver crate's evaluation of each operator; the tests check
//! them against the crate on random and boundary versions.

use semver::{Comparator, Op, VersionReq};

/// A version as `(major, minor, patch)`, ordered lexicographically.
pub type V3 = (u64, u64, u64);

const MIN: V3 = (0, 0, 0);
const MAX: V3 = (u64::MAX, u64::MAX, u64::MAX);

/// The versions a range accepts: `lo..=hi`, empty when `lo > hi`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Bounds {
    lo: V3,
    hi: V3,
}

impl Bounds {
    /// Whether `v` lies in the range.
    #[inline]
    pub fn contains(&self, v: V3) -> bool {
        self.lo <= v && v <= self.hi
    }

    /// The one major version every accepted version has, when there is one
    /// (`^1.2`, `~2`, `>=3, <4`): the index buckets the range under it.
    pub fn major(&self) -> Option<u64> {
        (self.lo <= self.hi && self.lo.0 == self.hi.0).then_some(self.lo.0)
    }

    /// The bounds of a requirement.
    pub fn of(req: &VersionReq) -> Bounds {
        let mut b = Bounds { lo: MIN, hi: MAX };
        for c in &req.comparators {
            let (lo, hi) = comparator(c);
            b.lo = b.lo.max(lo);
            b.hi = b.hi.min(hi);
        }
        b
    }
}

const EMPTY: (V3, V3) = (MAX, MIN);

/// The version just after `v`, None past the largest.
fn succ(v: V3) -> Option<V3> {
    match v {
        (a, b, c) if c < u64::MAX => Some((a, b, c + 1)),
        (a, b, _) if b < u64::MAX => Some((a, b + 1, 0)),
        (a, _, _) if a < u64::MAX => Some((a + 1, 0, 0)),
        _ => None,
    }
}

/// The version just before `v`, None before the smallest.
fn pred(v: V3) -> Option<V3> {
    match v {
        (a, b, c) if c > 0 => Some((a, b, c - 1)),
        (a, b, _) if b > 0 => Some((a, b - 1, u64::MAX)),
        (a, _, _) if a > 0 => Some((a - 1, u64::MAX, u64::MAX)),
        _ => None,
    }
}

/// `>= v`.
fn at_least(v: V3) -> (V3, V3) {
    (v, MAX)
}

/// `> v`.
fn above(v: V3) -> (V3, V3) {
    succ(v).map_or(EMPTY, at_least)
}

/// `< v`.
fn below(v: V3) -> (V3, V3) {
    pred(v).map_or(EMPTY, |p| (MIN, p))
}

/// The interval of non-pre-release versions one comparator accepts.
fn comparator(c: &Comparator) -> (V3, V3) {
    let m = c.major;
    let pre = !c.pre.is_empty();
    // The lowest and highest versions the comparator's fields name:
    // "1" spans 1.0.0 to 1.max.max, "1.2" spans 1.2.0 to 1.2.max.
    let first = (m, c.minor.unwrap_or(0), c.patch.unwrap_or(0));
    let last = (m, c.minor.unwrap_or(u64::MAX), c.patch.unwrap_or(u64::MAX));
    match c.op {
        // An exact comparator with a pre-release accepts only that
        // pre-release.
        Op::Exact | Op::Wildcard if pre => EMPTY,
        Op::Exact | Op::Wildcard => (first, last),
        // `> 1.2.3-alpha` accepts 1.2.3 (a release is above its pre-releases).
        Op::Greater if pre => at_least(first),
        Op::Greater => above(last),
        Op::GreaterEq => at_least(first),
        Op::Less => below(first),
        // `<= 1.2.3-alpha`: the exact part needs the pre-release.
        Op::LessEq if pre => below(first),
        Op::LessEq => (MIN, last),
        Op::Tilde => (first, (m, c.minor.unwrap_or(u64::MAX), u64::MAX)),
        Op::Caret => match (c.minor, c.patch) {
            (None, _) => (first, (m, u64::MAX, u64::MAX)),
            (Some(minor), None) if m > 0 => ((m, minor, 0), (m, u64::MAX, u64::MAX)),
            (Some(minor), None) => ((0, minor, 0), (0, minor, u64::MAX)),
            (Some(minor), Some(patch)) if m > 0 => ((m, minor, patch), (m, u64::MAX, u64::MAX)),
            (Some(minor), Some(patch)) if minor > 0 => ((0, minor, patch), (0, minor, u64::MAX)),
            (Some(_), Some(patch)) => ((0, 0, patch), (0, 0, patch)),
        },
        // semver's Op is non-exhaustive; a new operator matches nothing
        // rather than something it should not.
        _ => EMPTY,
    }
}

/// Parses "1", "1.2" or "1.2.3" (optionally with a leading "v") without
/// allocating; missing parts are 0. None for anything else.
pub fn lenient(v: &str) -> Option<V3> {
    let v = v.strip_prefix('v').unwrap_or(v);
    let mut parts = [0u64; 3];
    let mut n = 0;
    for p in v.split('.') {
        if n == 3 || p.is_empty() || !p.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        parts[n] = p.parse().ok()?;
        n += 1;
    }
    (n > 0).then_some((parts[0], parts[1], parts[2]))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn agree(req: &str, v: V3) {
        let r = VersionReq::parse(req).unwrap();
        let want = r.matches(&semver::Version::new(v.0, v.1, v.2));
        assert_eq!(Bounds::of(&r).contains(v), want, "{req} on {v:?}");
    }

    const OPS: &[&str] = &["", "=", ">", ">=", "<", "<=", "~", "^"];

    fn parts() -> impl Strategy<Value = u64> {
        prop_oneof![0u64..4, Just(u64::MAX), Just(u64::MAX - 1)]
    }

    fn comparator_text() -> impl Strategy<Value = String> {
        (
            prop::sample::select(OPS),
            parts(),
            prop::option::of(parts()),
            prop::option::of(parts()),
            prop::bool::weighted(0.2),
            prop::bool::weighted(0.15),
        )
            .prop_map(|(op, a, b, c, pre, star)| {
                let mut s = format!("{op}{a}");
                match (b, star) {
                    (None, true) => s.push_str(".*"),
                    (None, false) => {}
                    (Some(b), _) => {
                        s.push_str(&format!(".{b}"));
                        match (c, star) {
                            (None, true) => s.push_str(".*"),
                            (None, false) => {}
                            (Some(c), _) => {
                                s.push_str(&format!(".{c}"));
                                if pre {
                                    s.push_str("-alpha.1");
                                }
                            }
                        }
                    }
                }
                s
            })
    }

    #[test]
    fn boundaries() {
        for req in [
            "^1.2",
            "^0.2.3",
            "^0.0.3",
            "^0",
            "~1",
            "~1.2",
            "~1.2.3",
            ">1",
            ">1.2",
            ">=1.2.3",
            "<2",
            "<=1.2",
            "<0.0.0",
            ">1.2.3-alpha",
            "<=1.2.3-alpha",
            "=1.2.3-alpha",
            "*",
            "1.*",
            ">=1, <2",
            "1.2.*",
            ">18446744073709551615.18446744073709551615.18446744073709551615",
        ] {
            for v in [
                (0, 0, 0),
                (0, 0, 3),
                (0, 0, 4),
                (0, 2, 3),
                (0, 3, 0),
                (1, 0, 0),
                (1, 1, 9),
                (1, 2, 0),
                (1, 2, 2),
                (1, 2, 3),
                (1, 2, 4),
                (1, 9, 9),
                (2, 0, 0),
                MAX,
            ] {
                agree(req, v);
            }
        }
        assert_eq!(lenient("v1.5"), Some((1, 5, 0)));
        assert_eq!(lenient("1.2.3.4"), None);
        assert_eq!(lenient("latest"), None);
        assert_eq!(lenient(""), None);
    }

    proptest! {
        #[test]
        fn bounds_agree_with_semver(
            cmps in prop::collection::vec(comparator_text(), 1..3),
            v in (parts(), parts(), parts()),
        ) {
            let text = cmps.join(", ");
            if VersionReq::parse(&text).is_ok() {
                agree(&text, v);
            }
        }
    }
}
