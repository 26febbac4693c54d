//! Control path: URI reference resolution (RFC 3986 section 5.2) for `$id`
//! and `$ref`. No normalisation beyond dot segments and an empty fragment:
//! schema identifiers are compared as the strings they resolve to.

/// Base URI of a document that has no `$id` and no retrieval URI (the root
/// schema, a reference without an absolute name).
pub(crate) const DEFAULT_BASE: &str = "json-schema:///";

struct Parts<'a> {
    scheme: Option<&'a str>,
    authority: Option<&'a str>,
    path: &'a str,
    query: Option<&'a str>,
    fragment: Option<&'a str>,
}

fn parse(s: &str) -> Parts<'_> {
    let (rest, fragment) = match s.split_once('#') {
        Some((a, f)) => (a, Some(f)),
        None => (s, None),
    };
    let (rest, query) = match rest.split_once('?') {
        Some((a, q)) => (a, Some(q)),
        None => (rest, None),
    };
    // A scheme is ALPHA *( ALPHA / DIGIT / "+" / "-" / "." ) before ':'.
    let mut scheme = None;
    let mut rest = rest;
    if let Some(k) = rest.find(':') {
        let cand = &rest[..k];
        let mut chars = cand.chars();
        if chars.next().is_some_and(|c| c.is_ascii_alphabetic())
            && chars.all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.'))
        {
            scheme = Some(cand);
            rest = &rest[k + 1..];
        }
    }
    let (authority, path) = match rest.strip_prefix("//") {
        Some(r) => match r.find('/') {
            Some(k) => (Some(&r[..k]), &r[k..]),
            None => (Some(r), ""),
        },
        None => (None, rest),
    };
    Parts {
        scheme,
        authority,
        path,
        query,
        fragment,
    }
}

/// RFC 3986 section 5.2.4, step by step.
fn remove_dot_segments(path: &str) -> String {
    let mut input = path;
    let mut out = String::with_capacity(path.len());
    let pop = |out: &mut String| {
        let k = out.rfind('/').unwrap_or(0);
        out.truncate(k);
    };
    while !input.is_empty() {
        if let Some(r) = input.strip_prefix("../") {
            input = r;
        } else if let Some(r) = input.strip_prefix("./") {
            input = r;
        } else if input.starts_with("/./") {
            input = &input[2..];
        } else if input == "/." {
            input = "/";
        } else if input.starts_with("/../") {
            input = &input[3..];
            pop(&mut out);
        } else if input == "/.." {
            input = "/";
            pop(&mut out);
        } else if input == "." || input == ".." {
            input = "";
        } else {
            let start = usize::from(input.starts_with('/'));
            let end = input[start..].find('/').map_or(input.len(), |k| k + start);
            out.push_str(&input[..end]);
            input = &input[end..];
        }
    }
    out
}

fn merge(base: &Parts<'_>, rel: &str) -> String {
    if base.authority.is_some() && base.path.is_empty() {
        return format!("/{rel}");
    }
    match base.path.rfind('/') {
        Some(k) => format!("{}{rel}", &base.path[..=k]),
        None => rel.to_string(),
    }
}

/// Resolves the reference `r` against the absolute URI `base`.
pub(crate) fn resolve(base: &str, r: &str) -> String {
    let b = parse(base);
    let p = parse(r);
    let (scheme, authority, path, query);
    if p.scheme.is_some() {
        scheme = p.scheme;
        authority = p.authority;
        path = remove_dot_segments(p.path);
        query = p.query;
    } else {
        scheme = b.scheme;
        if p.authority.is_some() {
            authority = p.authority;
            path = remove_dot_segments(p.path);
            query = p.query;
        } else {
            authority = b.authority;
            if p.path.is_empty() {
                path = b.path.to_string();
                query = p.query.or(b.query);
            } else {
                path = if p.path.starts_with('/') {
                    remove_dot_segments(p.path)
                } else {
                    remove_dot_segments(&merge(&b, p.path))
                };
                query = p.query;
            }
        }
    }
    let mut out = String::new();
    if let Some(s) = scheme {
        out.push_str(s);
        out.push(':');
    }
    if let Some(a) = authority {
        out.push_str("//");
        out.push_str(a);
    }
    out.push_str(&path);
    if let Some(q) = query {
        out.push('?');
        out.push_str(q);
    }
    if let Some(f) = p.fragment
        && !f.is_empty()
    {
        out.push('#');
        out.push_str(f);
    }
    out
}

/// Splits `uri` into the part before `#` and the fragment ("" when none).
pub(crate) fn split_fragment(uri: &str) -> (&str, &str) {
    uri.split_once('#').unwrap_or((uri, ""))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc3986_examples() {
        // RFC 3986 section 5.4.
        let base = "http://a/b/c/d;p?q";
        for (r, want) in [
            ("g", "http://a/b/c/g"),
            ("./g", "http://a/b/c/g"),
            ("g/", "http://a/b/c/g/"),
            ("/g", "http://a/g"),
            ("//g", "http://g"),
            ("?y", "http://a/b/c/d;p?y"),
            ("g?y", "http://a/b/c/g?y"),
            ("#s", "http://a/b/c/d;p?q#s"),
            ("g#s", "http://a/b/c/g#s"),
            ("", "http://a/b/c/d;p?q"),
            (".", "http://a/b/c/"),
            ("./", "http://a/b/c/"),
            ("..", "http://a/b/"),
            ("../", "http://a/b/"),
            ("../g", "http://a/b/g"),
            ("../..", "http://a/"),
            ("../../g", "http://a/g"),
            ("../../../g", "http://a/g"),
            ("/./g", "http://a/g"),
            ("/../g", "http://a/g"),
            ("g.", "http://a/b/c/g."),
            ("g..", "http://a/b/c/g.."),
            ("./../g", "http://a/b/g"),
            ("./g/.", "http://a/b/c/g/"),
            ("g/./h", "http://a/b/c/g/h"),
            ("g/../h", "http://a/b/c/h"),
            ("g;x=1/../y", "http://a/b/c/y"),
        ] {
            assert_eq!(resolve(base, r), want, "{r}");
        }
    }

    #[test]
    fn schema_identifiers() {
        assert_eq!(
            resolve(DEFAULT_BASE, "other.json"),
            "json-schema:///other.json"
        );
        assert_eq!(
            resolve("urn:uuid:deadbeef-1234", "#/$defs/a"),
            "urn:uuid:deadbeef-1234#/$defs/a"
        );
        assert_eq!(
            resolve("http://localhost:1234/tree", "node"),
            "http://localhost:1234/node"
        );
        assert_eq!(resolve("http://x.test/root", "#"), "http://x.test/root");
        assert_eq!(split_fragment("a#b#c"), ("a", "b#c"));
    }
}
