//! Content predicates for routing: `$.intent == "reasoning"`.

use std::fmt;

use serde_json::Value;

use super::PATH_SEGMENTS_MAX;
use super::scan::{self, skip_ws};
use crate::CompileError;

#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Segment {
    Key(Box<str>),
    Index(usize),
}

/// A comparison of the value at a path of a JSON section with a scalar.
/// Parsed on the control path; [`Predicate::matches`] allocates nothing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Predicate {
    path: String,
    segments: Vec<Segment>,
    negated: bool,
    /// The literal as canonical JSON text.
    literal: Vec<u8>,
}

fn fail(expr: &str, what: &str) -> CompileError {
    CompileError(format!("predicate {expr:?}: {what}"))
}

impl Predicate {
    /// Parses `PATH OP LITERAL`: PATH is `$` then `.name` (names of
    /// `[A-Za-z0-9_-]`), `["any name"]` or `[N]` segments, at most
    /// `PATH_SEGMENTS_MAX`; OP is `==` or `!=`; LITERAL a JSON string,
    /// number, `true`, `false` or `null`.
    pub fn parse(expr: &str) -> Result<Predicate, CompileError> {
        let e = expr.trim();
        let b = e.as_bytes();
        if b.first() != Some(&b'$') {
            return Err(fail(expr, "path must start with '$'"));
        }
        let mut i = 1;
        let mut segments = Vec::new();
        loop {
            match b.get(i) {
                Some(b'.') => {
                    let start = i + 1;
                    i = start;
                    while b
                        .get(i)
                        .is_some_and(|c| c.is_ascii_alphanumeric() || *c == b'_' || *c == b'-')
                    {
                        i += 1;
                    }
                    if i == start {
                        return Err(fail(expr, "empty name after '.'"));
                    }
                    segments.push(Segment::Key(e[start..i].into()));
                }
                Some(b'[') => {
                    i += 1;
                    if b.get(i) == Some(&b'"') {
                        let t = scan::scan_string(b, i)
                            .map_err(|_| fail(expr, "bad quoted name in path"))?;
                        let name: String = serde_json::from_str(&e[i..t.end])
                            .map_err(|_| fail(expr, "bad quoted name in path"))?;
                        segments.push(Segment::Key(name.into()));
                        i = t.end;
                    } else {
                        let start = i;
                        while b.get(i).is_some_and(u8::is_ascii_digit) {
                            i += 1;
                        }
                        let n = e[start..i]
                            .parse()
                            .map_err(|_| fail(expr, "expected an index or a quoted name in []"))?;
                        segments.push(Segment::Index(n));
                    }
                    if b.get(i) != Some(&b']') {
                        return Err(fail(expr, "expected ']'"));
                    }
                    i += 1;
                }
                _ => break,
            }
            if segments.len() > PATH_SEGMENTS_MAX {
                return Err(fail(
                    expr,
                    "path has more than PATH_SEGMENTS_MAX (8) segments",
                ));
            }
        }
        let path = e[..i].to_string();
        let rest = e[i..].trim_start();
        let negated = if rest.starts_with("==") {
            false
        } else if rest.starts_with("!=") {
            true
        } else {
            return Err(fail(expr, "expected '==' or '!=' after the path"));
        };
        let lit = rest[2..].trim();
        let v: Value =
            serde_json::from_str(lit).map_err(|_| fail(expr, "literal is not a JSON value"))?;
        if v.is_array() || v.is_object() {
            return Err(fail(
                expr,
                "literal must be a string, number, true, false or null",
            ));
        }
        let literal =
            serde_json::to_vec(&v).map_err(|_| fail(expr, "literal cannot be encoded"))?;
        Ok(Predicate {
            path,
            segments,
            negated,
            literal,
        })
    }

    /// The path, for diagnostics (`$.meta.priority`).
    pub fn path(&self) -> &str {
        &self.path
    }

    /// For `PATH == "text"`: the literal's bytes between its quotes, as
    /// canonical JSON writes them (a route index keys on them). None for
    /// `!=` and for other literals.
    pub fn string_literal(&self) -> Option<&[u8]> {
        match self.literal.as_slice() {
            [b'"', inner @ .., b'"'] if !self.negated => Some(inner),
            _ => None,
        }
    }

    pub(super) fn segments(&self) -> &[Segment] {
        &self.segments
    }

    /// [`Predicate::matches`] with the path already located by a
    /// [`PathSet`](super::PathSet) walk of the same section (`spot` is the
    /// entry of this predicate's node): the same answer, without walking.
    pub fn matches_at(&self, section: &[u8], spot: Spot) -> bool {
        self.decide(section, spot.found())
    }

    /// Whether the section satisfies the predicate. A missing path makes
    /// `==` false and `!=` true; malformed JSON met on the way makes both
    /// false. Never panics, allocates nothing; work is linear in the
    /// section length.
    pub fn matches(&self, section: &[u8]) -> bool {
        self.decide(section, self.find(section))
    }

    fn decide(&self, section: &[u8], found: Found) -> bool {
        match found {
            // Check the target's syntax before comparing it.
            Found::At(i) if scan::skip_value(section, i, self.segments.len()).is_err() => false,
            Found::At(i) => {
                let mut budget = usize::MAX;
                scan::equal(section, i, &self.literal, 0, &mut budget) != self.negated
            }
            Found::Missing => self.negated,
            Found::Malformed => false,
        }
    }

    fn find(&self, s: &[u8]) -> Found {
        let mut i = skip_ws(s, 0);
        for (depth, seg) in self.segments.iter().enumerate() {
            let next = match seg {
                Segment::Key(name) => member(s, i, name.as_bytes(), depth),
                Segment::Index(n) => element(s, i, *n, depth),
            };
            match next {
                Found::At(j) => i = j,
                other => return other,
            }
        }
        Found::At(i)
    }
}

impl fmt::Display for Predicate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let op = if self.negated { "!=" } else { "==" };
        write!(
            f,
            "{} {op} {}",
            self.path,
            String::from_utf8_lossy(&self.literal)
        )
    }
}

/// Where a path led in a section: the offset of its value, or why not.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Found {
    At(usize),
    Missing,
    Malformed,
}

/// The outcome of locating one path node, as a [`PathSet`](super::PathSet)
/// walk records it: 4 bytes, so a walk's table of every node is small.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Spot(u32);

impl Spot {
    /// The path is not in the section (its initial state).
    pub const MISSING: Spot = Spot(u32::MAX);
    /// Malformed JSON on the way to the path.
    pub const MALFORMED: Spot = Spot(u32::MAX - 1);
    /// Largest offset a spot holds; longer sections are not walked.
    pub const OFFSET_MAX: usize = (u32::MAX - 2) as usize;

    pub(super) fn at(i: usize) -> Spot {
        // Callers walk only sections up to OFFSET_MAX bytes.
        Spot(u32::try_from(i.min(Self::OFFSET_MAX)).unwrap_or(u32::MAX - 2))
    }

    /// The offset of the located value, None when missing or malformed.
    pub fn offset(self) -> Option<usize> {
        match self.found() {
            Found::At(i) => Some(i),
            _ => None,
        }
    }

    pub(super) fn found(self) -> Found {
        match self {
            Spot::MISSING => Found::Missing,
            Spot::MALFORMED => Found::Malformed,
            Spot(i) => Found::At(i as usize),
        }
    }
}

/// After a value, the next element or member of its container.
pub(super) enum Next {
    More(usize),
    End,
}

pub(super) fn after(s: &[u8], j: usize, close: u8) -> Result<Next, ()> {
    let j = skip_ws(s, j);
    match s.get(j) {
        Some(b',') => Ok(Next::More(skip_ws(s, j + 1))),
        Some(&c) if c == close => Ok(Next::End),
        _ => Err(()),
    }
}

/// The value of the first member named `name` of the object at `i`.
fn member(s: &[u8], i: usize, name: &[u8], depth: usize) -> Found {
    match s.get(i) {
        Some(b'{') => {}
        Some(b'[' | b'"' | b't' | b'f' | b'n' | b'-' | b'0'..=b'9') => return Found::Missing,
        _ => return Found::Malformed,
    }
    let mut k = skip_ws(s, i + 1);
    if s.get(k) == Some(&b'}') {
        return Found::Missing;
    }
    loop {
        if s.get(k) != Some(&b'"') {
            return Found::Malformed;
        }
        let Ok(key) = scan::scan_string(s, k) else {
            return Found::Malformed;
        };
        let c = skip_ws(s, key.end);
        if s.get(c) != Some(&b':') {
            return Found::Malformed;
        }
        let v = skip_ws(s, c + 1);
        let same = if key.escaped {
            scan::string_eq_bytes(s, k, name)
        } else {
            &s[k + 1..key.end - 1] == name
        };
        if same {
            return Found::At(v);
        }
        let Ok(end) = scan::skip_value(s, v, depth + 1) else {
            return Found::Malformed;
        };
        match after(s, end, b'}') {
            Ok(Next::More(n)) => k = n,
            Ok(Next::End) => return Found::Missing,
            Err(()) => return Found::Malformed,
        }
    }
}

/// Element `n` of the array at `i`.
fn element(s: &[u8], i: usize, n: usize, depth: usize) -> Found {
    match s.get(i) {
        Some(b'[') => {}
        Some(b'{' | b'"' | b't' | b'f' | b'n' | b'-' | b'0'..=b'9') => return Found::Missing,
        _ => return Found::Malformed,
    }
    let mut k = skip_ws(s, i + 1);
    if s.get(k) == Some(&b']') {
        return Found::Missing;
    }
    let mut idx = 0;
    loop {
        if idx == n {
            return Found::At(k);
        }
        let Ok(end) = scan::skip_value(s, k, depth + 1) else {
            return Found::Malformed;
        };
        idx += 1;
        match after(s, end, b']') {
            Ok(Next::More(x)) => k = x,
            Ok(Next::End) => return Found::Missing,
            Err(()) => return Found::Malformed,
        }
    }
}
