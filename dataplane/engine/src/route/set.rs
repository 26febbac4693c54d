//! A list of patterns (a tenant's models, adapters, routes or subjects) as
//! sets: exact names hashed, `prefix*` and `*suffix` hashed by length,
//! `*` a flag, and any other glob (at most [`GLOB_COUNT_MAX`] per list)
//! matched one by one. A lookup costs a hash per distinct prefix or suffix
//! length plus the general globs, whatever the number of exact names.

use rustc_hash::FxHashSet;

use super::{Pattern, glob};

/// Most general globs (anything but `*`, `name*` and `*name`) in one list:
/// they are the only entries matched one by one.
pub const GLOB_COUNT_MAX: usize = 16;

/// A compiled list of patterns.
#[derive(Debug, Clone, Default)]
pub struct PatternSet {
    any: bool,
    exact: FxHashSet<Box<[u8]>>,
    /// `name*` entries, without the star, and their distinct lengths.
    prefixes: FxHashSet<Box<[u8]>>,
    prefix_lens: Vec<usize>,
    /// `*name` entries, without the star, and their distinct lengths.
    suffixes: FxHashSet<Box<[u8]>>,
    suffix_lens: Vec<usize>,
    globs: Vec<Pattern>,
}

/// The form of one pattern.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Form {
    /// `*`.
    Any,
    /// No `*` or `?`.
    Exact,
    /// One `*`, at the end.
    Prefix,
    /// One `*`, at the start.
    Suffix,
    /// Anything else with `*` or `?`.
    Glob,
}

/// The form of a pattern.
pub fn form(p: &str) -> Form {
    let wild = |b: &u8| *b == b'*' || *b == b'?';
    let b = p.as_bytes();
    match b.iter().filter(|c| wild(c)).count() {
        0 => Form::Exact,
        1 if b == b"*" => Form::Any,
        1 if b.last() == Some(&b'*') => Form::Prefix,
        1 if b.first() == Some(&b'*') => Form::Suffix,
        _ => Form::Glob,
    }
}

impl PatternSet {
    /// Compiles a list; the config check keeps general globs within
    /// [`GLOB_COUNT_MAX`].
    pub fn new<S: AsRef<str>>(list: &[S]) -> PatternSet {
        let mut s = PatternSet::default();
        for p in list {
            let p = p.as_ref();
            match form(p) {
                Form::Any => s.any = true,
                Form::Exact => {
                    s.exact.insert(p.as_bytes().into());
                }
                Form::Prefix => {
                    let t = &p.as_bytes()[..p.len() - 1];
                    s.prefixes.insert(t.into());
                    s.prefix_lens.push(t.len());
                }
                Form::Suffix => {
                    let t = &p.as_bytes()[1..];
                    s.suffixes.insert(t.into());
                    s.suffix_lens.push(t.len());
                }
                Form::Glob => s.globs.push(Pattern::new(p)),
            }
        }
        for v in [&mut s.prefix_lens, &mut s.suffix_lens] {
            v.sort_unstable();
            v.dedup();
        }
        s
    }

    /// Whether some pattern matches `s`.
    pub fn matches(&self, s: &str) -> bool {
        let b = s.as_bytes();
        self.any
            || self.exact.contains(b)
            || self
                .prefix_lens
                .iter()
                .take_while(|&&n| n <= b.len())
                .any(|&n| self.prefixes.contains(&b[..n]))
            || self
                .suffix_lens
                .iter()
                .take_while(|&&n| n <= b.len())
                .any(|&n| self.suffixes.contains(&b[b.len() - n..]))
            || self.globs.iter().any(|g| glob(g.as_str().as_bytes(), b))
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    proptest! {
        #[test]
        fn set_matches_as_the_list_does(
            list in prop::collection::vec("[ab*?]{0,4}", 0..12),
            probes in prop::collection::vec("[abc]{0,5}", 1..16),
        ) {
            let set = PatternSet::new(&list);
            for s in &probes {
                let want = list.iter().any(|p| Pattern::new(p).matches(s));
                prop_assert_eq!(set.matches(s), want, "{:?} on {:?}", list, s);
            }
        }
    }

    #[test]
    fn forms() {
        assert_eq!(form("*"), Form::Any);
        assert_eq!(form("gpt-4"), Form::Exact);
        assert_eq!(form("gpt-*"), Form::Prefix);
        assert_eq!(form("*-lora"), Form::Suffix);
        assert_eq!(form("*-lora-*"), Form::Glob);
        assert_eq!(form("m?"), Form::Glob);
        assert_eq!(form("**"), Form::Glob);
    }
}
