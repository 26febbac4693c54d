//! `pattern` and `patternProperties` on the hot path: each ECMA-262
//! pattern (ecma.rs) becomes a dense DFA on the control path, built by
//! regex-automata with an unanchored start (JSON Schema patterns are not
//! anchored). Matching steps the DFA one byte at a time over the string's
//! decoded bytes: a table lookup per byte, no allocation, no backtracking,
//! linear time. A pattern whose DFA would exceed REGEX_DFA_BYTES_MAX is
//! refused at compile time.
//!
//! The commonest shape in real schemas, a whole string of one ASCII class
//! (`^[a-z0-9-]{1,63}$`, `^[0-9]+$`), skips the DFA: a 128-bit set test and
//! a length check per string, several times faster per byte.

use regex_automata::dfa::{Automaton, StartKind, dense};
use regex_automata::nfa::thompson;
use regex_automata::util::primitives::StateID;
use regex_automata::util::start;
use regex_automata::{Anchored, MatchKind};
use regex_syntax::hir::{Class, Hir, HirKind, Look};

use super::REGEX_DFA_BYTES_MAX;
use super::ecma;

/// A compiled pattern.
#[derive(Debug, Clone)]
pub(crate) enum Regex {
    Dfa {
        /// Boxed: the tables are on the heap anyway, and the run variant
        /// stays small.
        dfa: Box<dense::DFA<Vec<u32>>>,
        start: StateID,
    },
    /// `^[class]{min,max}$` over an ASCII class: bit `b` of `set` says
    /// whether byte `b` is in it (the upper half, non-ASCII, is empty).
    Run {
        set: [u64; 4],
        min: usize,
        max: usize,
    },
}

/// `^ class{min,max} $` with an ASCII class, as a [`Regex::Run`].
fn ascii_run(hir: &Hir) -> Option<Regex> {
    let HirKind::Concat(parts) = hir.kind() else {
        return None;
    };
    let [start, body, end] = parts.as_slice() else {
        return None;
    };
    if start.kind() != &HirKind::Look(Look::Start) || end.kind() != &HirKind::Look(Look::End) {
        return None;
    }
    let (class, min, max) = match body.kind() {
        HirKind::Class(c) => (c, 1, Some(1)),
        HirKind::Repetition(r) => match r.sub.kind() {
            HirKind::Class(c) => (c, r.min, r.max),
            _ => return None,
        },
        _ => return None,
    };
    let Class::Unicode(class) = class else {
        return None;
    };
    let mut set = [0u64; 4];
    for r in class.ranges() {
        if u32::from(r.end()) > 0x7f {
            return None;
        }
        for b in u32::from(r.start())..=u32::from(r.end()) {
            set[(b / 64) as usize] |= 1 << (b % 64);
        }
    }
    Some(Regex::Run {
        set,
        min: min as usize,
        max: max.map_or(usize::MAX, |m| m as usize),
    })
}

impl Regex {
    /// Compiles `pattern`; the error says why it is refused.
    pub(crate) fn new(pattern: &str) -> Result<Regex, String> {
        let hir = ecma::parse::<ecma::Build>(pattern).map_err(str::to_string)?;
        if let Some(run) = ascii_run(&hir) {
            return Ok(run);
        }
        let nfa = thompson::Compiler::new()
            .configure(
                thompson::Config::new()
                    .which_captures(thompson::WhichCaptures::None)
                    .nfa_size_limit(Some(REGEX_DFA_BYTES_MAX)),
            )
            .build_from_hir(&hir)
            .map_err(|e| format!("too large to compile ({e})"))?;
        let dfa = dense::Builder::new()
            .configure(
                dense::Config::new()
                    .start_kind(StartKind::Unanchored)
                    .match_kind(MatchKind::LeftmostFirst)
                    .dfa_size_limit(Some(REGEX_DFA_BYTES_MAX))
                    .determinize_size_limit(Some(REGEX_DFA_BYTES_MAX)),
            )
            .build_from_nfa(&nfa)
            .map_err(|e| {
                format!(
                    "its DFA would exceed REGEX_DFA_BYTES_MAX ({REGEX_DFA_BYTES_MAX} bytes) ({e})"
                )
            })?;
        let start = dfa
            .start_state(&start::Config::new().anchored(Anchored::No))
            .map_err(|e| format!("no start state ({e})"))?;
        Ok(Regex::Dfa {
            dfa: Box::new(dfa),
            start,
        })
    }

    /// Bytes of DFA tables.
    pub(crate) fn memory_bytes(&self) -> usize {
        match self {
            Regex::Dfa { dfa, .. } => dfa.memory_usage(),
            Regex::Run { .. } => 0,
        }
    }

    /// Whether the pattern matches anywhere in `hay` (a string without
    /// escapes). Stepping the DFA from the start state computed at compile
    /// time beats regex-automata's own search loop here (measured: 13 ns
    /// against 33 on a 7-byte id, 4.3 µs against 4.9 on 1 KiB): the
    /// strings are short and a search pays for its set-up every time.
    #[inline]
    pub(crate) fn is_match_bytes(&self, hay: &[u8]) -> bool {
        self.is_match(hay.iter().copied())
    }

    /// Whether the pattern matches anywhere in the string whose (decoded,
    /// UTF-8) bytes `bytes` yields, one DFA step per byte. Stops at the
    /// first match or when the DFA can no longer match.
    #[inline]
    pub(crate) fn is_match(&self, bytes: impl Iterator<Item = u8>) -> bool {
        let (dfa, mut s) = match self {
            Regex::Dfa { dfa, start } => (dfa, *start),
            Regex::Run { set, min, max } => {
                // ASCII only: a byte past 0x7f is in no set.
                let mut n = 0usize;
                for b in bytes {
                    // b >> 6 < 4: no bounds check.
                    if set[usize::from(b >> 6)] & (1 << (b & 63)) == 0 {
                        return false;
                    }
                    n += 1;
                }
                return (*min..=*max).contains(&n);
            }
        };
        for b in bytes {
            s = dfa.next_state(s, b);
            if dfa.is_special_state(s) {
                if dfa.is_match_state(s) {
                    return true;
                }
                if dfa.is_dead_state(s) || dfa.is_quit_state(s) {
                    return false;
                }
            }
        }
        s = dfa.next_eoi_state(s);
        dfa.is_match_state(s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn m(p: &str, s: &str) -> bool {
        let re = Regex::new(p).unwrap_or_else(|e| panic!("{p}: {e}"));
        let stepped = re.is_match(s.bytes());
        assert_eq!(re.is_match_bytes(s.as_bytes()), stepped, "{p} on {s:?}");
        stepped
    }

    #[test]
    fn ecma_semantics() {
        assert!(m("a+", "xxaxx"), "not anchored");
        assert!(!m("^a*$", "aab"));
        assert!(m("^a*$", ""));
        assert!(m("^\\d+$", "0123"));
        assert!(!m("^\\d$", "\u{0660}"), "\\d is ASCII");
        assert!(!m("^\\w$", "é"), "\\w is ASCII");
        assert!(m("^\\s$", "\u{a0}"), "\\s includes NBSP");
        assert!(m("^\\s$", "\u{feff}"));
        assert!(!m("^.$", "\n"));
        assert!(m("^.$", "🐲"), "code points, not UTF-16 units");
        assert!(m("^🐲*$", "🐲🐲"));
        assert!(m("\\bfoo\\b", "a foo b"));
        assert!(!m("\\bfoo\\b", "afoo"));
        assert!(m("^[^]$", "\n"));
        assert!(!m("[]", "anything"));
        assert!(m("^\\p{Letter}cole$", "école"));
        assert!(m("^[a-z]{2,3}$", "abc"));
        assert!(!m("^[a-z]{2,3}$", "abcd"));
        assert!(
            m("^a{$", "a{"),
            "a brace that starts no quantifier is literal"
        );
        assert!(m("^\\cJ$", "\n"));
        assert!(m("^\\u{1F432}$", "🐲"));
        assert!(m("^\\uD83D\\uDC32$", "🐲"));
        assert!(m("^[\\d-z]+$", "1-z"));
        assert!(m("^(?:ab|cd)+(?<n>x)?$", "abcdx"));
        assert!(m("^a*?$", "aaa"));
        assert!(m("^\\x41\\t$", "A\t"));
        assert!(m("\\$", "a$"));
    }

    #[test]
    fn whole_string_ascii_classes_skip_the_dfa() {
        for p in ["^[a-z0-9-]{1,4}$", "^[0-9]+$", "^[A-Z]$", "^\\d*$"] {
            let re = Regex::new(p).unwrap_or_else(|e| panic!("{p}: {e}"));
            assert!(matches!(re, Regex::Run { .. }), "{p}");
        }
        for p in ["^[a-zé]+$", "[a-z]+", "^a[a-z]$", "^[a-z]+"] {
            let re = Regex::new(p).unwrap_or_else(|e| panic!("{p}: {e}"));
            assert!(matches!(re, Regex::Dfa { .. }), "{p}");
        }
        assert!(m("^[a-z0-9-]{1,4}$", "a-9z"));
        assert!(!m("^[a-z0-9-]{1,4}$", "a-9zz"));
        assert!(!m("^[a-z0-9-]{1,4}$", ""));
        assert!(!m("^[a-z0-9-]{1,4}$", "aé"));
        assert!(m("^\\d*$", ""));
        assert!(!m("^[A-Z]$", "AB"));
    }

    #[test]
    fn refused_with_a_reason() {
        for (p, why) in [
            ("(a)\\1", "back-references"),
            ("(?<n>a)\\k<n>", "back-references"),
            ("a(?=b)", "lookahead"),
            ("(?<!a)b", "lookbehind"),
            ("\\a", "not an ECMA-262 escape"),
            ("\\07", "octal"),
            ("a**", "nothing to repeat"),
            ("^*", "nothing to repeat"),
            ("(a", "unterminated group"),
            ("a)", "unmatched"),
            ("[a", "unterminated character class"),
            ("[z-a]", "out of order"),
            ("a{3,2}", "out of order"),
            ("a{1001}", "REPEAT_MAX"),
            ("\\p{NoSuchProperty}", "unknown Unicode property"),
            ("\\uD800", "lone surrogate"),
        ] {
            match Regex::new(p) {
                Err(e) => assert!(e.contains(why), "{p}: {e} lacks {why:?}"),
                Ok(_) => panic!("{p} should be refused"),
            }
        }
        let e = Regex::new("(\\w{1,300}){1,300}").unwrap_err();
        assert!(
            e.contains("REGEX_DFA_BYTES_MAX") || e.contains("too large"),
            "{e}"
        );
    }

    #[test]
    fn check_mode_agrees_with_build_mode() {
        for p in [
            "a+",
            "^(?:x|y){2,}$",
            "[\\d-z]",
            "\\p{L}",
            "(",
            "\\a",
            "a{2,1}",
        ] {
            assert_eq!(
                ecma::parse::<ecma::Check>(p).is_ok(),
                ecma::parse::<ecma::Build>(p).is_ok(),
                "{p}"
            );
        }
        // Valid ECMA-262 that no DFA expresses: syntax only.
        for p in ["a(?=b)", "(?<!a{1,3})b", "(a)\\1", "(?<n>a)\\k<n>"] {
            assert!(ecma::parse::<ecma::Check>(p).is_ok(), "{p}");
            assert!(ecma::parse::<ecma::Build>(p).is_err(), "{p}");
        }
    }
}
