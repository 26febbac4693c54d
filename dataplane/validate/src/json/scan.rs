//! Strict RFC 8259 lexing shared by the validator and the predicates. Every
//! function is bounds-checked and returns an error on malformed input, so it
//! is safe on arbitrary bytes; none allocates.

use crate::Invalid;
use crate::limits::DEPTH_MAX;

/// Static messages of the syntax layer.
pub(crate) mod msg {
    pub const EOF: &str = "unexpected end of input";
    pub const EMPTY: &str = "empty section: expected a JSON value";
    pub const UTF8: &str = "invalid UTF-8";
    pub const UNEXPECTED: &str = "unexpected character";
    pub const TRAILING: &str = "trailing characters after the value";
    pub const TRAILING_COMMA: &str = "trailing comma";
    pub const EXPECTED_KEY: &str = "expected a string key";
    pub const EXPECTED_COLON: &str = "expected ':' after a key";
    pub const EXPECTED_OBJ_SEP: &str = "expected ',' or '}'";
    pub const EXPECTED_ARR_SEP: &str = "expected ',' or ']'";
    pub const CONTROL: &str = "unescaped control character in string";
    pub const ESCAPE: &str = "invalid escape in string";
    pub const SURROGATE: &str = "lone surrogate in \\u escape";
    pub const NUMBER: &str = "invalid number";
    pub const LEADING_ZERO: &str = "leading zero in number";
    pub const LITERAL: &str = "invalid literal";
    pub const DEPTH: &str = "nesting deeper than DEPTH_MAX";
}

pub(crate) const fn err(message: &'static str, offset: usize) -> Invalid {
    Invalid { message, offset }
}

#[inline]
pub(crate) fn skip_ws(s: &[u8], mut i: usize) -> usize {
    while let Some(&b) = s.get(i) {
        if !matches!(b, b' ' | b'\t' | b'\n' | b'\r') {
            break;
        }
        i += 1;
    }
    i
}

/// A scanned string token.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Str {
    /// Offset just past the closing quote.
    pub end: usize,
    /// Length in Unicode code points (a surrogate pair counts once). Exact
    /// only for valid UTF-8, which the validator checks up front.
    pub chars: usize,
    /// Whether the raw bytes contain an escape (the raw bytes are then not
    /// the decoded string).
    pub escaped: bool,
}

fn hex4(s: &[u8], i: usize) -> Option<u32> {
    let mut v = 0u32;
    for k in 0..4 {
        let d = (*s.get(i + k)? as char).to_digit(16)?;
        v = v << 4 | d;
    }
    Some(v)
}

const ONES: u64 = 0x0101_0101_0101_0101;
const HIGHS: u64 = 0x8080_8080_8080_8080;

/// One flag bit (0x80) per byte of `w` that is `"`, `\\`, a control
/// character or not ASCII. The lowest flag is exact (borrows only run
/// upwards), so `trailing_zeros` finds the first such byte.
#[inline]
fn special_mask(w: u64) -> u64 {
    let zero_in = |x: u64| x.wrapping_sub(ONES) & !x & HIGHS;
    let below_space = w.wrapping_sub(ONES * 0x20) & !w & HIGHS;
    zero_in(w ^ (ONES * u64::from(b'"')))
        | zero_in(w ^ (ONES * u64::from(b'\\')))
        | below_space
        | (w & HIGHS)
}

/// Scans the string whose opening quote is at `i`.
#[inline]
pub(crate) fn scan_string(s: &[u8], i: usize) -> Result<Str, Invalid> {
    let mut j = i + 1;
    let mut chars = 0usize;
    let mut escaped = false;
    loop {
        // Plain ASCII runs, 8 bytes at a time: the common case.
        if let Some(w) = s.get(j..j + 8) {
            let w = u64::from_le_bytes([w[0], w[1], w[2], w[3], w[4], w[5], w[6], w[7]]);
            let m = special_mask(w);
            if m == 0 {
                chars += 8;
                j += 8;
                continue;
            }
            let k = (m.trailing_zeros() / 8) as usize;
            chars += k;
            j += k;
        } else {
            while let Some(&b) = s.get(j) {
                if b == b'"' || b == b'\\' || !(0x20..0x80).contains(&b) {
                    break;
                }
                chars += 1;
                j += 1;
            }
        }
        match s.get(j) {
            None => return Err(err(msg::EOF, j)),
            Some(b'"') => {
                return Ok(Str {
                    end: j + 1,
                    chars,
                    escaped,
                });
            }
            Some(b'\\') => {
                escaped = true;
                chars += 1;
                j = escape_end(s, j)?;
            }
            Some(&b) if b >= 0x80 => {
                // Validity of UTF-8 is checked elsewhere; count lead bytes.
                chars += usize::from(b & 0xC0 != 0x80);
                j += 1;
            }
            Some(_) => return Err(err(msg::CONTROL, j)),
        }
    }
}

/// Checks the escape starting with the backslash at `i`; returns the offset
/// past it (past both halves of a surrogate pair).
fn escape_end(s: &[u8], i: usize) -> Result<usize, Invalid> {
    match s.get(i + 1) {
        None => Err(err(msg::EOF, i + 1)),
        Some(b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't') => Ok(i + 2),
        Some(b'u') => {
            let u = hex4(s, i + 2).ok_or(err(msg::ESCAPE, i))?;
            match u {
                0xD800..=0xDBFF => {
                    if s.get(i + 6) == Some(&b'\\') && s.get(i + 7) == Some(&b'u') {
                        match hex4(s, i + 8) {
                            Some(0xDC00..=0xDFFF) => Ok(i + 12),
                            Some(_) => Err(err(msg::SURROGATE, i)),
                            None => Err(err(msg::ESCAPE, i + 6)),
                        }
                    } else {
                        Err(err(msg::SURROGATE, i))
                    }
                }
                0xDC00..=0xDFFF => Err(err(msg::SURROGATE, i)),
                _ => Ok(i + 6),
            }
        }
        Some(_) => Err(err(msg::ESCAPE, i)),
    }
}

/// A scanned number token.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Num {
    pub end: usize,
    /// No fraction and no exponent: an integer whatever its size.
    pub integer_literal: bool,
}

/// Scans the number starting at `i` (RFC 8259 grammar).
#[inline]
pub(crate) fn scan_number(s: &[u8], i: usize) -> Result<Num, Invalid> {
    let mut j = i;
    if s.get(j) == Some(&b'-') {
        j += 1;
    }
    match s.get(j) {
        Some(b'0') => {
            j += 1;
            if s.get(j).is_some_and(u8::is_ascii_digit) {
                return Err(err(msg::LEADING_ZERO, i));
            }
        }
        Some(b'1'..=b'9') => {
            while s.get(j).is_some_and(u8::is_ascii_digit) {
                j += 1;
            }
        }
        None => return Err(err(msg::EOF, j)),
        Some(_) => return Err(err(msg::NUMBER, i)),
    }
    let mut integer_literal = true;
    if s.get(j) == Some(&b'.') {
        integer_literal = false;
        j += 1;
        if !s.get(j).is_some_and(u8::is_ascii_digit) {
            return Err(err(msg::NUMBER, i));
        }
        while s.get(j).is_some_and(u8::is_ascii_digit) {
            j += 1;
        }
    }
    if matches!(s.get(j), Some(b'e' | b'E')) {
        integer_literal = false;
        j += 1;
        if matches!(s.get(j), Some(b'+' | b'-')) {
            j += 1;
        }
        if !s.get(j).is_some_and(u8::is_ascii_digit) {
            return Err(err(msg::NUMBER, i));
        }
        while s.get(j).is_some_and(u8::is_ascii_digit) {
            j += 1;
        }
    }
    Ok(Num {
        end: j,
        integer_literal,
    })
}

/// The value of a number token already scanned (core's float parser does
/// not allocate). Literals beyond the f64 range become ±infinity.
pub(crate) fn number_value(s: &[u8], start: usize, end: usize) -> f64 {
    s.get(start..end)
        .and_then(|t| std::str::from_utf8(t).ok())
        .and_then(|t| t.parse::<f64>().ok())
        .unwrap_or(f64::NAN)
}

/// Whether a scanned number is an integer in the JSON Schema sense (`1.0`
/// is). Precision limit: with a fraction or exponent the test is made on
/// the f64 value, so beyond 2^53 every value counts as an integer.
pub(crate) fn number_is_integer(s: &[u8], n: &Num, start: usize) -> bool {
    if n.integer_literal {
        return true;
    }
    let v = number_value(s, start, n.end);
    v.is_infinite() || v.fract() == 0.0
}

fn literal(s: &[u8], i: usize, word: &[u8]) -> Result<usize, Invalid> {
    match s.get(i..i + word.len()) {
        Some(t) if t == word => Ok(i + word.len()),
        Some(_) => Err(err(msg::LITERAL, i)),
        None if word.starts_with(&s[i.min(s.len())..]) => Err(err(msg::EOF, s.len())),
        None => Err(err(msg::LITERAL, i)),
    }
}

/// Scans `true`, `false` or `null` at `i`.
#[inline]
pub(crate) fn scan_literal(s: &[u8], i: usize) -> Result<usize, Invalid> {
    match s.get(i) {
        Some(b't') => literal(s, i, b"true"),
        Some(b'f') => literal(s, i, b"false"),
        Some(b'n') => literal(s, i, b"null"),
        None => Err(err(msg::EOF, i)),
        Some(_) => Err(err(msg::UNEXPECTED, i)),
    }
}

/// Skips the value at `i` (no leading whitespace), checking its syntax.
/// `depth` is the number of containers enclosing it. Recursion is bounded
/// by `DEPTH_MAX`.
pub(crate) fn skip_value(s: &[u8], i: usize, depth: usize) -> Result<usize, Invalid> {
    match s.get(i) {
        None => Err(err(msg::EOF, i)),
        Some(b'"') => Ok(scan_string(s, i)?.end),
        Some(b'-' | b'0'..=b'9') => Ok(scan_number(s, i)?.end),
        Some(b't' | b'f' | b'n') => scan_literal(s, i),
        Some(b'{') => {
            if depth >= DEPTH_MAX {
                return Err(err(msg::DEPTH, i));
            }
            let mut j = skip_ws(s, i + 1);
            if s.get(j) == Some(&b'}') {
                return Ok(j + 1);
            }
            loop {
                match s.get(j) {
                    Some(b'"') => {}
                    None => return Err(err(msg::EOF, j)),
                    Some(_) => return Err(err(msg::EXPECTED_KEY, j)),
                }
                j = skip_ws(s, scan_string(s, j)?.end);
                match s.get(j) {
                    Some(b':') => {}
                    None => return Err(err(msg::EOF, j)),
                    Some(_) => return Err(err(msg::EXPECTED_COLON, j)),
                }
                j = skip_ws(s, j + 1);
                j = skip_ws(s, skip_value(s, j, depth + 1)?);
                match s.get(j) {
                    Some(b',') => {
                        j = skip_ws(s, j + 1);
                        if s.get(j) == Some(&b'}') {
                            return Err(err(msg::TRAILING_COMMA, j));
                        }
                    }
                    Some(b'}') => return Ok(j + 1),
                    None => return Err(err(msg::EOF, j)),
                    Some(_) => return Err(err(msg::EXPECTED_OBJ_SEP, j)),
                }
            }
        }
        Some(b'[') => {
            if depth >= DEPTH_MAX {
                return Err(err(msg::DEPTH, i));
            }
            let mut j = skip_ws(s, i + 1);
            if s.get(j) == Some(&b']') {
                return Ok(j + 1);
            }
            loop {
                j = skip_ws(s, skip_value(s, j, depth + 1)?);
                match s.get(j) {
                    Some(b',') => {
                        j = skip_ws(s, j + 1);
                        if s.get(j) == Some(&b']') {
                            return Err(err(msg::TRAILING_COMMA, j));
                        }
                    }
                    Some(b']') => return Ok(j + 1),
                    None => return Err(err(msg::EOF, j)),
                    Some(_) => return Err(err(msg::EXPECTED_ARR_SEP, j)),
                }
            }
        }
        Some(_) => Err(err(msg::UNEXPECTED, i)),
    }
}

/// Decodes a string token into bytes (escapes expanded to UTF-8) one byte
/// at a time, so two strings compare without a buffer.
pub(crate) struct StrBytes<'a> {
    s: &'a [u8],
    i: usize,
    pending: [u8; 4],
    pending_len: u8,
    pending_at: u8,
    /// Set when the token is malformed; the stream then ends.
    pub bad: bool,
}

impl<'a> StrBytes<'a> {
    /// `open` is the offset of the opening quote.
    pub(crate) fn new(s: &'a [u8], open: usize) -> Self {
        StrBytes {
            s,
            i: open + 1,
            pending: [0; 4],
            pending_len: 0,
            pending_at: 0,
            bad: false,
        }
    }
}

impl Iterator for StrBytes<'_> {
    type Item = u8;
    fn next(&mut self) -> Option<u8> {
        if self.pending_at < self.pending_len {
            let b = self.pending[usize::from(self.pending_at)];
            self.pending_at += 1;
            return Some(b);
        }
        if self.bad {
            return None;
        }
        let s = self.s;
        let Some(&b) = s.get(self.i) else {
            self.bad = true;
            return None;
        };
        match b {
            b'"' => None,
            b'\\' => {
                let c = match s.get(self.i + 1) {
                    Some(b'"') => '"',
                    Some(b'\\') => '\\',
                    Some(b'/') => '/',
                    Some(b'b') => '\u{8}',
                    Some(b'f') => '\u{c}',
                    Some(b'n') => '\n',
                    Some(b'r') => '\r',
                    Some(b't') => '\t',
                    Some(b'u') => {
                        let Some(hi) = hex4(s, self.i + 2) else {
                            self.bad = true;
                            return None;
                        };
                        let (cp, len) = if (0xD800..0xDC00).contains(&hi) {
                            match (s.get(self.i + 6), s.get(self.i + 7), hex4(s, self.i + 8)) {
                                (Some(b'\\'), Some(b'u'), Some(lo @ 0xDC00..=0xDFFF)) => {
                                    (0x10000 + ((hi - 0xD800) << 10) + (lo - 0xDC00), 12)
                                }
                                _ => (u32::MAX, 0),
                            }
                        } else {
                            (hi, 6)
                        };
                        let Some(c) = char::from_u32(cp) else {
                            self.bad = true;
                            return None;
                        };
                        self.i += len - 2;
                        c
                    }
                    _ => {
                        self.bad = true;
                        return None;
                    }
                };
                self.i += 2;
                let n = c.encode_utf8(&mut self.pending).len();
                self.pending_len = n as u8;
                self.pending_at = 1;
                Some(self.pending[0])
            }
            _ => {
                self.i += 1;
                Some(b)
            }
        }
    }
}

/// Whether the string token at `open` decodes to exactly `want`.
pub(crate) fn string_eq_bytes(s: &[u8], open: usize, want: &[u8]) -> bool {
    let mut it = StrBytes::new(s, open);
    let mut w = want.iter();
    loop {
        match (it.next(), w.next()) {
            (None, None) => return !it.bad,
            (Some(a), Some(&b)) if a == b => {}
            _ => return false,
        }
    }
}

fn string_eq(a: &[u8], ai: usize, b: &[u8], bi: usize) -> bool {
    let mut x = StrBytes::new(a, ai);
    let mut y = StrBytes::new(b, bi);
    loop {
        match (x.next(), y.next()) {
            (None, None) => return !x.bad && !y.bad,
            (Some(p), Some(q)) if p == q => {}
            _ => return false,
        }
    }
}

/// Offset of the next element or member after the value at `i` in a
/// container, or None at its end (or on malformed input).
fn next_in(s: &[u8], i: usize, depth: usize) -> Option<usize> {
    let j = skip_ws(s, skip_value(s, i, depth).ok()?);
    if s.get(j) == Some(&b',') {
        Some(skip_ws(s, j + 1))
    } else {
        None
    }
}

/// For the member whose key starts at `k`: the offset of its value.
fn member_value(s: &[u8], k: usize) -> Option<usize> {
    let j = skip_ws(s, scan_string(s, k).ok()?.end);
    (s.get(j) == Some(&b':')).then(|| skip_ws(s, j + 1))
}

/// Semantic equality of the JSON values at `ai` in `a` and `bi` in `b`
/// (numbers compare numerically, strings after unescaping, objects
/// regardless of member order). Both must be well-formed; on anything else
/// it returns false, never panics. Each step takes one unit of `budget`;
/// when it runs out the answer is false and `*budget == 0`.
pub(crate) fn equal(a: &[u8], ai: usize, b: &[u8], bi: usize, budget: &mut usize) -> bool {
    if *budget == 0 {
        return false;
    }
    *budget -= 1;
    let ai = skip_ws(a, ai);
    let bi = skip_ws(b, bi);
    let (Some(&x), Some(&y)) = (a.get(ai), b.get(bi)) else {
        return false;
    };
    match (x, y) {
        (b'"', b'"') => {
            let (Ok(p), Ok(q)) = (scan_string(a, ai), scan_string(b, bi)) else {
                return false;
            };
            *budget = budget.saturating_sub(p.end - ai);
            if !p.escaped && !q.escaped {
                return a[ai..p.end] == b[bi..q.end];
            }
            string_eq(a, ai, b, bi)
        }
        (b'-' | b'0'..=b'9', b'-' | b'0'..=b'9') => {
            let (Ok(p), Ok(q)) = (scan_number(a, ai), scan_number(b, bi)) else {
                return false;
            };
            number_value(a, ai, p.end) == number_value(b, bi, q.end)
        }
        (b't', b't') | (b'f', b'f') | (b'n', b'n') => true,
        (b'[', b'[') => {
            let mut i = skip_ws(a, ai + 1);
            let mut j = skip_ws(b, bi + 1);
            if a.get(i) == Some(&b']') || b.get(j) == Some(&b']') {
                return a.get(i) == b.get(j);
            }
            loop {
                if !equal(a, i, b, j, budget) {
                    return false;
                }
                match (next_in(a, i, 0), next_in(b, j, 0)) {
                    (Some(p), Some(q)) => {
                        i = p;
                        j = q;
                    }
                    (None, None) => return true,
                    _ => return false,
                }
            }
        }
        (b'{', b'{') => {
            let first_a = skip_ws(a, ai + 1);
            let first_b = skip_ws(b, bi + 1);
            let count = |s: &[u8], first: usize| -> Option<usize> {
                if s.get(first) == Some(&b'}') {
                    return Some(0);
                }
                let mut n = 1;
                let mut k = first;
                while let Some(v) = member_value(s, k) {
                    match next_in(s, v, 0) {
                        Some(next) => {
                            n += 1;
                            k = next;
                        }
                        None => return Some(n),
                    }
                }
                None
            };
            let (Some(na), Some(nb)) = (count(a, first_a), count(b, first_b)) else {
                return false;
            };
            *budget = budget.saturating_sub(na + nb);
            if na != nb {
                return false;
            }
            if na == 0 {
                return true;
            }
            // Each member of `a` must have an equal member in `b`; with
            // equal counts and unique keys that is equality.
            let mut ka = first_a;
            loop {
                let Some(va) = member_value(a, ka) else {
                    return false;
                };
                let mut kb = first_b;
                let mut found = false;
                loop {
                    if *budget == 0 {
                        return false;
                    }
                    *budget -= 1;
                    let Some(vb) = member_value(b, kb) else {
                        return false;
                    };
                    if string_eq(a, ka, b, kb) {
                        found = equal(a, va, b, vb, budget);
                        break;
                    }
                    match next_in(b, vb, 0) {
                        Some(next) => kb = next,
                        None => break,
                    }
                }
                if !found {
                    return false;
                }
                match next_in(a, va, 0) {
                    Some(next) => ka = next,
                    None => return true,
                }
            }
        }
        _ => false,
    }
}
