//! `format` assertions (only where the schema's dialect opts in, or the
//! compile options say so): byte-level checkers of the string's decoded
//! bytes, allocation-free. A string with escapes is decoded into a stack
//! buffer of FORMAT_BYTES_MAX bytes first; a longer one fails the check.
//!
//! Limits (docs/design.md): `hostname` and `idn-hostname` check label
//! syntax and Punycode, not IDNA2008's per-character and contextual rules
//! (those need Unicode tables); `idn-email` accepts any non-ASCII in the
//! local part and domain labels; `regex` checks ECMA-262 syntax without
//! looking Unicode property names up; `iri` accepts any non-ASCII
//! character where RFC 3987 allows `ucschar`.

use super::Draft;
use super::ecma;
use super::scan;

/// Longest escaped string a format check decodes.
pub const FORMAT_BYTES_MAX: usize = 1024;

/// A format the validator can assert.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Format {
    None,
    DateTime,
    Date,
    Time,
    Duration,
    Email,
    IdnEmail,
    Hostname,
    IdnHostname,
    Ipv4,
    Ipv6,
    Uri,
    UriReference,
    Iri,
    IriReference,
    UriTemplate,
    JsonPointer,
    RelativeJsonPointer,
    Uuid,
    Regex,
}

impl Format {
    /// The format `name` in `draft`, if the draft defines it.
    pub(crate) fn from_name(name: &str, draft: Draft) -> Option<Format> {
        use Draft::*;
        let (f, since) = match name {
            "date-time" => (Format::DateTime, Draft4),
            "email" => (Format::Email, Draft4),
            "hostname" => (Format::Hostname, Draft4),
            "ipv4" => (Format::Ipv4, Draft4),
            "ipv6" => (Format::Ipv6, Draft4),
            "uri" => (Format::Uri, Draft4),
            "uri-reference" => (Format::UriReference, Draft6),
            "uri-template" => (Format::UriTemplate, Draft6),
            "json-pointer" => (Format::JsonPointer, Draft6),
            "date" => (Format::Date, Draft7),
            "time" => (Format::Time, Draft7),
            "idn-email" => (Format::IdnEmail, Draft7),
            "idn-hostname" => (Format::IdnHostname, Draft7),
            "iri" => (Format::Iri, Draft7),
            "iri-reference" => (Format::IriReference, Draft7),
            "relative-json-pointer" => (Format::RelativeJsonPointer, Draft7),
            "regex" => (Format::Regex, Draft7),
            "duration" => (Format::Duration, Draft2019_09),
            "uuid" => (Format::Uuid, Draft2019_09),
            _ => return None,
        };
        (draft >= since).then_some(f)
    }

    /// The error message when a string fails this format.
    pub(crate) fn message(self) -> &'static str {
        match self {
            Format::None => "format",
            Format::DateTime => "format: not an RFC 3339 date-time",
            Format::Date => "format: not an RFC 3339 full-date",
            Format::Time => "format: not an RFC 3339 full-time",
            Format::Duration => "format: not an RFC 3339 duration",
            Format::Email => "format: not an email address",
            Format::IdnEmail => "format: not an internationalized email address",
            Format::Hostname => "format: not a hostname",
            Format::IdnHostname => "format: not an internationalized hostname",
            Format::Ipv4 => "format: not an IPv4 address",
            Format::Ipv6 => "format: not an IPv6 address",
            Format::Uri => "format: not a URI",
            Format::UriReference => "format: not a URI reference",
            Format::Iri => "format: not an IRI",
            Format::IriReference => "format: not an IRI reference",
            Format::UriTemplate => "format: not a URI template",
            Format::JsonPointer => "format: not a JSON pointer",
            Format::RelativeJsonPointer => "format: not a relative JSON pointer",
            Format::Uuid => "format: not a UUID",
            Format::Regex => "format: not an ECMA-262 regular expression",
        }
    }
}

/// Checks the string token at `open` (scanned as `t`) against `f`.
pub(crate) fn check_token(f: Format, s: &[u8], open: usize, t: &scan::Str) -> bool {
    if t.escaped {
        check_escaped(f, s, open)
    } else {
        check(f, &s[open + 1..t.end - 1])
    }
}

#[cold]
#[inline(never)]
fn check_escaped(f: Format, s: &[u8], open: usize) -> bool {
    let mut buf = [0u8; FORMAT_BYTES_MAX];
    let mut len = 0;
    let mut it = scan::StrBytes::new(s, open);
    for b in it.by_ref() {
        let Some(slot) = buf.get_mut(len) else {
            return false;
        };
        *slot = b;
        len += 1;
    }
    !it.bad && check(f, &buf[..len])
}

/// Checks the decoded string `b` against `f`.
pub(crate) fn check(f: Format, b: &[u8]) -> bool {
    match f {
        Format::None => true,
        Format::DateTime => date_time(b),
        Format::Date => b.len() == 10 && full_date(b),
        Format::Time => full_time(b),
        Format::Duration => duration(b),
        Format::Email => email(b, false),
        Format::IdnEmail => email(b, true),
        Format::Hostname => hostname(b, false),
        Format::IdnHostname => hostname(b, true),
        Format::Ipv4 => ipv4(b),
        Format::Ipv6 => ipv6(b),
        Format::Uri => uri(b, false, false),
        Format::UriReference => uri(b, false, true),
        Format::Iri => uri(b, true, false),
        Format::IriReference => uri(b, true, true),
        Format::UriTemplate => uri_template(b),
        Format::JsonPointer => json_pointer(b),
        Format::RelativeJsonPointer => relative_json_pointer(b),
        Format::Uuid => uuid(b),
        Format::Regex => {
            std::str::from_utf8(b).is_ok_and(|p| ecma::parse::<ecma::Check>(p).is_ok())
        }
    }
}

fn digits(b: &[u8]) -> Option<u32> {
    if b.is_empty() || !b.iter().all(u8::is_ascii_digit) {
        return None;
    }
    Some(b.iter().fold(0u32, |v, d| v * 10 + u32::from(d - b'0')))
}

fn leap(y: u32) -> bool {
    y.is_multiple_of(4) && (!y.is_multiple_of(100) || y.is_multiple_of(400))
}

/// RFC 3339 full-date: YYYY-MM-DD, a real calendar day.
fn full_date(b: &[u8]) -> bool {
    if b.len() < 10 || b[4] != b'-' || b[7] != b'-' {
        return false;
    }
    let (Some(y), Some(m), Some(d)) = (digits(&b[..4]), digits(&b[5..7]), digits(&b[8..10])) else {
        return false;
    };
    let days = match m {
        1 | 3 | 5 | 7 | 8 | 10 | 12 => 31,
        4 | 6 | 9 | 11 => 30,
        2 if leap(y) => 29,
        2 => 28,
        _ => return false,
    };
    (1..=days).contains(&d)
}

/// RFC 3339 full-time: HH:MM:SS[.frac](Z|±HH:MM); second 60 only as a
/// leap second at 23:59 UTC.
fn full_time(b: &[u8]) -> bool {
    if b.len() < 9 || b[2] != b':' || b[5] != b':' {
        return false;
    }
    let (Some(h), Some(m), Some(s)) = (digits(&b[..2]), digits(&b[3..5]), digits(&b[6..8])) else {
        return false;
    };
    if h > 23 || m > 59 || s > 60 {
        return false;
    }
    let mut i = 8;
    if b[i] == b'.' {
        i += 1;
        let start = i;
        while b.get(i).is_some_and(u8::is_ascii_digit) {
            i += 1;
        }
        if i == start {
            return false;
        }
    }
    let offset_min: i64 = match &b[i..] {
        [b'Z' | b'z'] => 0,
        [sign @ (b'+' | b'-'), oh @ .., b':', m1, m2] if oh.len() == 2 => {
            let (Some(oh), Some(om)) = (digits(oh), digits(&[*m1, *m2])) else {
                return false;
            };
            if oh > 23 || om > 59 {
                return false;
            }
            let v = i64::from(oh * 60 + om);
            if *sign == b'+' { v } else { -v }
        }
        _ => return false,
    };
    if s == 60 {
        let utc = (i64::from(h * 60 + m) - offset_min).rem_euclid(24 * 60);
        return utc == 23 * 60 + 59;
    }
    true
}

fn date_time(b: &[u8]) -> bool {
    b.len() > 11 && matches!(b[10], b'T' | b't') && full_date(&b[..10]) && full_time(&b[11..])
}

/// RFC 3339 appendix A: P(date-part[T time-part] | T time-part | nW).
fn duration(b: &[u8]) -> bool {
    let Some(rest) = b.strip_prefix(b"P") else {
        return false;
    };
    let (date, time) = match rest.iter().position(|&c| c == b'T') {
        Some(k) => (&rest[..k], Some(&rest[k + 1..])),
        None => (rest, None),
    };
    // Elements: digits then a unit, units a contiguous run of `order`.
    let run = |p: &[u8], order: &[u8]| -> Option<usize> {
        let mut i = 0;
        let mut next = None::<usize>;
        let mut count = 0;
        while i < p.len() {
            let start = i;
            while p.get(i).is_some_and(u8::is_ascii_digit) {
                i += 1;
            }
            let unit = *p.get(i)?;
            if i == start {
                return None;
            }
            let k = order.iter().position(|&u| u == unit)?;
            if next.is_some_and(|n| n != k) {
                return None;
            }
            next = Some(k + 1);
            count += 1;
            i += 1;
        }
        Some(count)
    };
    if time.is_none() && date.ends_with(b"W") {
        return date.len() > 1 && date[..date.len() - 1].iter().all(u8::is_ascii_digit);
    }
    let Some(nd) = run(date, b"YMD") else {
        return false;
    };
    match time {
        None => nd > 0,
        Some(t) => run(t, b"HMS").is_some_and(|n| n > 0),
    }
}

fn ipv4(b: &[u8]) -> bool {
    let mut parts = 0;
    for p in b.split(|&c| c == b'.') {
        parts += 1;
        if parts > 4 || p.is_empty() || p.len() > 3 || p.len() > 1 && p[0] == b'0' {
            return false;
        }
        if digits(p).is_none_or(|v| v > 255) {
            return false;
        }
    }
    parts == 4
}

fn ipv6(b: &[u8]) -> bool {
    if b.is_empty() {
        return false;
    }
    let (head, tail) = match b.windows(2).position(|w| w == b"::") {
        Some(k) => (&b[..k], Some(&b[k + 2..])),
        None => (b, None),
    };
    if tail.is_some_and(|t| t.windows(2).any(|w| w == b"::")) {
        return false;
    }
    // Groups of one side; an IPv4 tail counts as two and must be last.
    let groups = |s: &[u8], last: bool| -> Option<usize> {
        if s.is_empty() {
            return Some(0);
        }
        let mut n = 0;
        let count = s.split(|&c| c == b':').count();
        for (k, g) in s.split(|&c| c == b':').enumerate() {
            if last && k + 1 == count && g.contains(&b'.') {
                if !ipv4(g) {
                    return None;
                }
                n += 2;
            } else if g.is_empty() || g.len() > 4 || !g.iter().all(u8::is_ascii_hexdigit) {
                return None;
            } else {
                n += 1;
            }
        }
        Some(n)
    };
    match tail {
        None => groups(head, true) == Some(8),
        Some(t) => match (groups(head, false), groups(t, true)) {
            (Some(a), Some(c)) => a + c <= 7,
            _ => false,
        },
    }
}

/// Punycode (RFC 3492) decoding of `input` into `out`; the number of code
/// points, or None when it is not valid Punycode.
fn punycode(input: &[u8], out: &mut [u32; 64]) -> Option<usize> {
    const BASE: u32 = 36;
    const TMIN: u32 = 1;
    const TMAX: u32 = 26;
    let adapt = |mut delta: u32, points: u32, first: bool| -> u32 {
        delta /= if first { 700 } else { 2 };
        delta += delta / points;
        let mut k = 0;
        while delta > ((BASE - TMIN) * TMAX) / 2 {
            delta /= BASE - TMIN;
            k += BASE;
        }
        k + (BASE - TMIN + 1) * delta / (delta + 38)
    };
    let (basic, rest) = match input.iter().rposition(|&c| c == b'-') {
        Some(k) => (&input[..k], &input[k + 1..]),
        None => (&input[..0], input),
    };
    let mut len = 0;
    for &c in basic {
        if !c.is_ascii() {
            return None;
        }
        *out.get_mut(len)? = u32::from(c);
        len += 1;
    }
    let (mut n, mut i, mut bias) = (128u32, 0u32, 72u32);
    let mut p = 0;
    while p < rest.len() {
        let old = i;
        let mut w = 1u32;
        let mut k = BASE;
        loop {
            let c = *rest.get(p)?;
            p += 1;
            let digit = match c {
                b'a'..=b'z' => u32::from(c - b'a'),
                b'A'..=b'Z' => u32::from(c - b'A'),
                b'0'..=b'9' => u32::from(c - b'0') + 26,
                _ => return None,
            };
            i = i.checked_add(digit.checked_mul(w)?)?;
            let t = if k <= bias {
                TMIN
            } else if k >= bias + TMAX {
                TMAX
            } else {
                k - bias
            };
            if digit < t {
                break;
            }
            w = w.checked_mul(BASE - t)?;
            k += BASE;
        }
        let points = len as u32 + 1;
        bias = adapt(i - old, points, old == 0);
        n = n.checked_add(i / points)?;
        i %= points;
        if len >= out.len() || char::from_u32(n).is_none() {
            return None;
        }
        out.copy_within(i as usize..len, i as usize + 1);
        out[i as usize] = n;
        len += 1;
        i += 1;
    }
    Some(len)
}

/// One hostname label: LDH (RFC 1123), 1 to 63 bytes, no hyphen at either
/// end; an A-label (`xn--`) must be valid Punycode of a label with
/// non-ASCII and no `--` in positions 3 and 4. `idn`: U-labels allowed.
fn label(l: &[u8], idn: bool) -> bool {
    if l.is_empty() || l.len() > 63 && (!idn || l.is_ascii()) {
        return false;
    }
    if l[0] == b'-' || l[l.len() - 1] == b'-' {
        return false;
    }
    if !l.is_ascii() {
        return idn
            && std::str::from_utf8(l)
                .is_ok_and(|u| u.chars().nth(2) != Some('-') || u.chars().nth(3) != Some('-'));
    }
    if !l.iter().all(|&c| c.is_ascii_alphanumeric() || c == b'-') {
        return false;
    }
    if l.len() >= 4 && l[..4].eq_ignore_ascii_case(b"xn--") {
        let mut out = [0u32; 64];
        let Some(n) = punycode(&l[4..], &mut out) else {
            return false;
        };
        let u = &out[..n];
        return u.iter().any(|&c| c >= 0x80) && !(u.len() >= 4 && u[2] == 0x2d && u[3] == 0x2d);
    }
    true
}

fn hostname(b: &[u8], idn: bool) -> bool {
    if b.is_empty() || b.len() > 253 && (!idn || b.is_ascii()) {
        return false;
    }
    if !idn {
        return b.split(|&c| c == b'.').all(|l| label(l, false));
    }
    let Ok(s) = std::str::from_utf8(b) else {
        return false;
    };
    s.split(['.', '\u{3002}', '\u{ff0e}', '\u{ff61}'])
        .all(|l| label(l.as_bytes(), true))
}

fn email(b: &[u8], idn: bool) -> bool {
    let Some(at) = b.iter().rposition(|&c| c == b'@') else {
        return false;
    };
    let (local, domain) = (&b[..at], &b[at + 1..]);
    let local_ok = if local.first() == Some(&b'"') {
        // quoted-string: qtext or quoted-pair.
        if local.len() < 2 || local[local.len() - 1] != b'"' {
            return false;
        }
        let mut i = 1;
        let inner = local.len() - 1;
        let mut ok = true;
        while i < inner {
            match local[i] {
                b'\\' if i + 1 < inner && (32..127).contains(&local[i + 1]) => i += 2,
                b'"' | b'\\' => {
                    ok = false;
                    break;
                }
                c if (32..127).contains(&c) || idn && c >= 0x80 => i += 1,
                _ => {
                    ok = false;
                    break;
                }
            }
        }
        ok
    } else {
        let atext = |c: u8| {
            c.is_ascii_alphanumeric() || b"!#$%&'*+-/=?^_`{|}~".contains(&c) || idn && c >= 0x80
        };
        !local.is_empty()
            && local
                .split(|&c| c == b'.')
                .all(|a| !a.is_empty() && a.iter().all(|&c| atext(c)))
    };
    if !local_ok {
        return false;
    }
    if let Some(lit) = domain.strip_prefix(b"[").and_then(|d| d.strip_suffix(b"]")) {
        return match lit.strip_prefix(b"IPv6:") {
            Some(v6) => ipv6(v6),
            None => ipv4(lit),
        };
    }
    hostname(domain, idn)
}

fn unreserved(c: u8) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, b'-' | b'.' | b'_' | b'~')
}

fn sub_delim(c: u8) -> bool {
    b"!$&'()*+,;=".contains(&c)
}

/// Whether every byte of `s` is allowed (`ok`), `%` only as `%HH`, and
/// non-ASCII only when `iri`.
fn chars(s: &[u8], iri: bool, ok: impl Fn(u8) -> bool) -> bool {
    let mut i = 0;
    while i < s.len() {
        let c = s[i];
        if c == b'%' {
            if !(s.get(i + 1).is_some_and(u8::is_ascii_hexdigit)
                && s.get(i + 2).is_some_and(u8::is_ascii_hexdigit))
            {
                return false;
            }
            i += 3;
            continue;
        }
        if c >= 0x80 {
            if !iri {
                return false;
            }
        } else if !ok(c) {
            return false;
        }
        i += 1;
    }
    true
}

fn pchar(c: u8) -> bool {
    unreserved(c) || sub_delim(c) || c == b':' || c == b'@'
}

fn authority(a: &[u8], iri: bool) -> bool {
    let (user, hostport) = match a.iter().position(|&c| c == b'@') {
        Some(k) => (Some(&a[..k]), &a[k + 1..]),
        None => (None, a),
    };
    if let Some(u) = user
        && !chars(u, iri, |c| unreserved(c) || sub_delim(c) || c == b':')
    {
        return false;
    }
    let (host_ok, port) = if hostport.first() == Some(&b'[') {
        let Some(close) = hostport.iter().position(|&c| c == b']') else {
            return false;
        };
        let lit = &hostport[1..close];
        let ok = if matches!(lit.first(), Some(b'v' | b'V')) {
            // IPvFuture: "v" 1*HEXDIG "." 1*( unreserved / sub-delims / ":" )
            match lit.iter().position(|&c| c == b'.') {
                Some(dot) => {
                    dot > 1
                        && lit[1..dot].iter().all(u8::is_ascii_hexdigit)
                        && dot + 1 < lit.len()
                        && lit[dot + 1..]
                            .iter()
                            .all(|&c| unreserved(c) || sub_delim(c) || c == b':')
                }
                None => false,
            }
        } else {
            ipv6(lit)
        };
        let rest = &hostport[close + 1..];
        match rest.first() {
            None => (ok, None),
            Some(b':') => (ok, Some(&rest[1..])),
            Some(_) => return false,
        }
    } else {
        match hostport.iter().position(|&c| c == b':') {
            Some(k) => (
                chars(&hostport[..k], iri, |c| unreserved(c) || sub_delim(c)),
                Some(&hostport[k + 1..]),
            ),
            None => (
                chars(hostport, iri, |c| unreserved(c) || sub_delim(c)),
                None,
            ),
        }
    };
    host_ok && port.is_none_or(|p| p.iter().all(u8::is_ascii_digit))
}

/// RFC 3986 URI (or URI-reference when `reference`); RFC 3987 IRI when `iri`.
fn uri(b: &[u8], iri: bool, reference: bool) -> bool {
    let (rest, frag) = match b.iter().position(|&c| c == b'#') {
        Some(k) => (&b[..k], Some(&b[k + 1..])),
        None => (b, None),
    };
    let (rest, query) = match rest.iter().position(|&c| c == b'?') {
        Some(k) => (&rest[..k], Some(&rest[k + 1..])),
        None => (rest, None),
    };
    let tail_ok = |s: &[u8]| chars(s, iri, |c| pchar(c) || c == b'/' || c == b'?');
    if !frag.is_none_or(tail_ok) || !query.is_none_or(tail_ok) {
        return false;
    }
    let first_delim = rest.iter().position(|&c| c == b'/').unwrap_or(rest.len());
    let colon = rest[..first_delim].iter().position(|&c| c == b':');
    let path = match colon {
        Some(k) => {
            let scheme = &rest[..k];
            let valid = scheme.first().is_some_and(u8::is_ascii_alphabetic)
                && scheme
                    .iter()
                    .all(|&c| c.is_ascii_alphanumeric() || matches!(c, b'+' | b'-' | b'.'));
            if !valid {
                // Not a scheme: a relative path's first segment has no ':'.
                return false;
            }
            &rest[k + 1..]
        }
        None if reference => rest,
        None => return false,
    };
    let path = match path.strip_prefix(b"//") {
        Some(after) => {
            let end = after.iter().position(|&c| c == b'/').unwrap_or(after.len());
            if !authority(&after[..end], iri) {
                return false;
            }
            &after[end..]
        }
        None => path,
    };
    path.split(|&c| c == b'/').all(|seg| chars(seg, iri, pchar))
}

/// RFC 6570 URI Template syntax (levels 1 to 4).
fn uri_template(b: &[u8]) -> bool {
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'{' => {
                let Some(len) = b[i + 1..].iter().position(|&c| c == b'}') else {
                    return false;
                };
                if !expression(&b[i + 1..i + 1 + len]) {
                    return false;
                }
                i += len + 2;
            }
            b'%' => {
                if !(b.get(i + 1).is_some_and(u8::is_ascii_hexdigit)
                    && b.get(i + 2).is_some_and(u8::is_ascii_hexdigit))
                {
                    return false;
                }
                i += 3;
            }
            c if c >= 0x80 => i += 1,
            c if c <= 0x20 || c == 0x7f || b"\"<>\\^`|}".contains(&c) => return false,
            _ => i += 1,
        }
    }
    true
}

fn expression(e: &[u8]) -> bool {
    let e = match e.first() {
        Some(b'+' | b'#' | b'.' | b'/' | b';' | b'?' | b'&' | b'=' | b',' | b'!' | b'@' | b'|') => {
            &e[1..]
        }
        _ => e,
    };
    if e.is_empty() {
        return false;
    }
    e.split(|&c| c == b',').all(|spec| {
        let (name, modifier) = match spec.iter().position(|&c| c == b':' || c == b'*') {
            Some(k) => (&spec[..k], Some(&spec[k..])),
            None => (spec, None),
        };
        let name_ok = !name.is_empty()
            && name.split(|&c| c == b'.').all(|part| {
                !part.is_empty() && chars(part, false, |c| c.is_ascii_alphanumeric() || c == b'_')
            });
        let mod_ok = match modifier {
            None => true,
            Some(b"*") => true,
            Some(m) => {
                let n = &m[1..];
                m[0] == b':'
                    && !n.is_empty()
                    && n.len() <= 4
                    && n[0] != b'0'
                    && n.iter().all(u8::is_ascii_digit)
            }
        };
        name_ok && mod_ok
    })
}

fn json_pointer(b: &[u8]) -> bool {
    if b.is_empty() {
        return true;
    }
    if b[0] != b'/' {
        return false;
    }
    b.iter()
        .enumerate()
        .all(|(k, &c)| c != b'~' || matches!(b.get(k + 1), Some(b'0' | b'1')))
}

fn relative_json_pointer(b: &[u8]) -> bool {
    let mut i = 0;
    while b.get(i).is_some_and(u8::is_ascii_digit) {
        i += 1;
    }
    if i == 0 || b[0] == b'0' && i > 1 {
        return false;
    }
    // Index manipulation: ("+" / "-") positive integer.
    if matches!(b.get(i), Some(b'+' | b'-')) {
        let start = i + 1;
        let mut j = start;
        while b.get(j).is_some_and(u8::is_ascii_digit) {
            j += 1;
        }
        if j == start || b[start] == b'0' {
            return false;
        }
        i = j;
    }
    let rest = &b[i..];
    rest == b"#" || json_pointer(rest)
}

fn uuid(b: &[u8]) -> bool {
    b.len() == 36
        && b.iter().enumerate().all(|(k, &c)| match k {
            8 | 13 | 18 | 23 => c == b'-',
            _ => c.is_ascii_hexdigit(),
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats() {
        let yes = |f, s: &str| assert!(check(f, s.as_bytes()), "{f:?} {s}");
        let no = |f, s: &str| assert!(!check(f, s.as_bytes()), "{f:?} {s}");
        yes(Format::DateTime, "1963-06-19T08:30:06.283185Z");
        yes(Format::DateTime, "1998-12-31T15:59:60.123-08:00");
        no(Format::DateTime, "1998-12-31T23:59:61Z");
        no(Format::DateTime, "1990-02-31T15:59:59.123-08:00");
        yes(Format::Date, "2020-02-29");
        no(Format::Date, "2021-02-29");
        yes(Format::Time, "23:59:60Z");
        no(Format::Time, "22:59:60Z");
        no(Format::Time, "12:00:00");
        yes(Format::Duration, "P4DT12H30M5S");
        yes(Format::Duration, "P2W");
        no(Format::Duration, "P1Y2W");
        no(Format::Duration, "PT1D");
        no(Format::Duration, "P2D1Y");
        yes(Format::Email, "\"joe@bloggs\"@example.com");
        yes(Format::Email, "joe.bloggs@[IPv6:::1]");
        no(Format::Email, "te..st@example.com");
        yes(Format::Hostname, "xn--9n2bp8q.xn--9t4b11yi5a");
        no(Format::Hostname, "xn--X");
        no(Format::Hostname, "-hostname");
        yes(Format::Ipv4, "192.168.0.1");
        no(Format::Ipv4, "087.10.0.1");
        yes(Format::Ipv6, "1::d6:192.168.0.1");
        no(Format::Ipv6, "1::d6::42");
        no(Format::Ipv6, "12345::");
        yes(
            Format::Uri,
            "http://-.~_!$&'()*+,;=:%40:80%2f::::::@example.com",
        );
        yes(Format::Uri, "ldap://[2001:db8::7]/c=GB?objectClass?one");
        no(Format::Uri, "//foo.bar/?baz=qux#quux");
        no(Format::Uri, "http://example.com:abc/path");
        yes(Format::UriReference, "./this:that");
        no(Format::UriReference, "1:b");
        yes(Format::Iri, "http://ƒøø.ßår/?∂éœ=πîx#πîüx");
        yes(
            Format::UriTemplate,
            "http://example.com/dictionary/{term:1}/{term}",
        );
        no(Format::UriTemplate, "{v:01}");
        yes(Format::RelativeJsonPointer, "0#");
        no(Format::RelativeJsonPointer, "01#");
        yes(Format::JsonPointer, "/foo/bar~0/baz~1/%a");
        no(Format::JsonPointer, "/foo/bar~");
        yes(Format::Uuid, "2EB8AA08-AA98-11EA-B4AA-73B441D16380");
        yes(Format::Regex, "([abc])+\\s+$");
        no(Format::Regex, "^(abc]");
    }
}
