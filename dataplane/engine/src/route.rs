//! Routing on semantic headers: first match wins. Matching never allocates.

use sluice_validate::json::Predicate;

use crate::config::RouteCfg;

/// Matches a string exactly, or as a glob with `*` and `?`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pattern {
    text: String,
    glob: bool,
}

impl Pattern {
    /// A pattern; `*` and `?` make it a glob.
    pub fn new(text: &str) -> Pattern {
        Pattern {
            text: text.to_owned(),
            glob: text.contains(['*', '?']),
        }
    }

    /// Whether `s` matches.
    pub fn matches(&self, s: &str) -> bool {
        if self.glob {
            glob(self.text.as_bytes(), s.as_bytes())
        } else {
            self.text == s
        }
    }

    /// The pattern text.
    pub fn as_str(&self) -> &str {
        &self.text
    }
}

/// Iterative glob match with single backtrack point: O(n·m) worst case,
/// bounded by the header string limits.
pub fn glob(p: &[u8], s: &[u8]) -> bool {
    let (mut pi, mut si) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while si < s.len() {
        if pi < p.len() && (p[pi] == b'?' || p[pi] == s[si]) {
            pi += 1;
            si += 1;
        } else if pi < p.len() && p[pi] == b'*' {
            star = Some((pi, si));
            pi += 1;
        } else if let Some((sp, ss)) = star {
            pi = sp + 1;
            si = ss + 1;
            star = Some((sp, ss + 1));
        } else {
            return false;
        }
    }
    while pi < p.len() && p[pi] == b'*' {
        pi += 1;
    }
    pi == p.len()
}

/// Matches a model version: exact, glob, or semver range.
#[derive(Debug, Clone, PartialEq)]
pub enum VersionMatcher {
    /// Exact string or glob.
    Text(Pattern),
    /// A semver requirement such as `^1.2` or `>=1, <2`.
    Semver(semver::VersionReq),
}

impl VersionMatcher {
    /// Parses a version matcher. Ranges start with an operator or contain a comma.
    pub fn parse(s: &str) -> Result<VersionMatcher, String> {
        let t = s.trim();
        if t.is_empty() {
            return Err("empty version matcher".into());
        }
        if t.starts_with(['^', '~', '<', '>', '=']) || t.contains(',') {
            return semver::VersionReq::parse(t)
                .map(VersionMatcher::Semver)
                .map_err(|e| format!("bad semver range {t:?}: {e}"));
        }
        Ok(VersionMatcher::Text(Pattern::new(t)))
    }

    /// Whether a request's version matches. For ranges, partial versions
    /// ("1", "1.2") count as "1.0.0", "1.2.0"; non-numeric versions never match.
    pub fn matches(&self, v: &str) -> bool {
        match self {
            VersionMatcher::Text(p) => p.matches(v),
            VersionMatcher::Semver(req) => lenient_version(v).is_some_and(|ver| req.matches(&ver)),
        }
    }
}

/// Parses "1", "1.2" or "1.2.3" (optionally with a leading "v") without allocating.
fn lenient_version(v: &str) -> Option<semver::Version> {
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
    (n > 0).then(|| semver::Version::new(parts[0], parts[1], parts[2]))
}

/// Most content conditions on one route.
pub const CONTENT_CONDITIONS_MAX: usize = 8;

fn compile_content(exprs: &[String]) -> Result<Vec<Predicate>, String> {
    if exprs.len() > CONTENT_CONDITIONS_MAX {
        return Err(format!(
            "at most {CONTENT_CONDITIONS_MAX} content conditions"
        ));
    }
    exprs
        .iter()
        .map(|e| Predicate::parse(e).map_err(|err| format!("content {e:?}: {err}")))
        .collect()
}

/// A compiled route.
#[derive(Debug, Clone)]
pub struct Route {
    /// Route name.
    pub name: String,
    model: Option<Pattern>,
    version: Option<VersionMatcher>,
    adapter: Option<Pattern>,
    intent: Option<Pattern>,
    tenant: Option<Pattern>,
    content: Vec<Predicate>,
    /// Index of the target shard.
    pub shard: usize,
}

/// The semantic headers a route looks at.
#[derive(Debug, Clone, Copy)]
pub struct RouteKey<'a> {
    /// Model name.
    pub model: &'a str,
    /// Model version (aliases already resolved when the model is local).
    pub version: &'a str,
    /// Adapter id, "" for none.
    pub adapter: &'a str,
    /// Intent.
    pub intent: &'a str,
    /// Tenant name, "" when authentication is off.
    pub tenant: &'a str,
    /// The request's structured section, when it was validated as JSON.
    pub json: Option<&'a [u8]>,
}

impl Route {
    /// Compiles a route; `shard` is the index of `cfg.shard`.
    pub fn compile(cfg: &RouteCfg, shard: usize) -> Result<Route, String> {
        Ok(Route {
            name: cfg.name.clone(),
            model: cfg.model.as_deref().map(Pattern::new),
            version: cfg
                .version
                .as_deref()
                .map(VersionMatcher::parse)
                .transpose()?,
            adapter: cfg.adapter.as_deref().map(Pattern::new),
            intent: cfg.intent.as_deref().map(Pattern::new),
            tenant: cfg.tenant.as_deref().map(Pattern::new),
            content: compile_content(&cfg.content)?,
            shard,
        })
    }

    /// Whether the request matches every matcher of this route.
    pub fn matches(&self, k: &RouteKey<'_>) -> bool {
        self.model.as_ref().is_none_or(|p| p.matches(k.model))
            && self.version.as_ref().is_none_or(|p| p.matches(k.version))
            && self.adapter.as_ref().is_none_or(|p| p.matches(k.adapter))
            && self.intent.as_ref().is_none_or(|p| p.matches(k.intent))
            && self.tenant.as_ref().is_none_or(|p| p.matches(k.tenant))
            && (self.content.is_empty()
                || k.json
                    .is_some_and(|j| self.content.iter().all(|p| p.matches(j))))
    }
}

/// Routes in priority order.
#[derive(Debug, Clone, Default)]
pub struct RouteTable {
    routes: Vec<Route>,
}

impl RouteTable {
    /// Compiles routes against shard names.
    pub fn compile(routes: &[RouteCfg], shard_names: &[&str]) -> Result<RouteTable, String> {
        let routes = routes
            .iter()
            .map(|r| {
                let shard = shard_names
                    .iter()
                    .position(|s| *s == r.shard)
                    .ok_or_else(|| format!("route {:?}: no shard {:?}", r.name, r.shard))?;
                Route::compile(r, shard)
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok(RouteTable { routes })
    }

    /// The first matching route and its index.
    pub fn find(&self, k: &RouteKey<'_>) -> Option<(usize, &Route)> {
        self.matching(k).next()
    }

    /// Every matching route with its index, in priority order (the tenant
    /// filter in `auth::route_for` takes the first it allows).
    pub fn matching<'s>(&'s self, k: &RouteKey<'_>) -> impl Iterator<Item = (usize, &'s Route)> {
        self.routes
            .iter()
            .enumerate()
            .filter(move |(_, r)| r.matches(k))
    }

    /// All routes.
    pub fn routes(&self) -> &[Route] {
        &self.routes
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn globs() {
        assert!(glob(b"*", b""));
        assert!(glob(b"1.*", b"1.2.3"));
        assert!(!glob(b"1.*", b"2.0"));
        assert!(glob(b"m?p", b"mlp"));
        assert!(glob(b"*-lora-*", b"x-lora-y"));
        assert!(!glob(b"a*b", b"acbd"));
        assert!(glob(b"a*b*", b"acbd"));
    }

    #[test]
    fn versions() {
        let m = VersionMatcher::parse("^1.2").unwrap();
        assert!(m.matches("1.2.0"));
        assert!(m.matches("1.9.3"));
        assert!(!m.matches("2.0.0"));
        assert!(!m.matches("1.1.9"));
        assert!(!m.matches("latest"));
        let r = VersionMatcher::parse(">=1, <2").unwrap();
        assert!(r.matches("1"));
        assert!(r.matches("v1.5"));
        assert!(!r.matches("2"));
        assert_eq!(
            VersionMatcher::parse("1.0.0").unwrap(),
            VersionMatcher::Text(Pattern::new("1.0.0"))
        );
        assert!(VersionMatcher::parse("1.*").unwrap().matches("1.4"));
        assert!(VersionMatcher::parse("^x").is_err());
    }

    #[test]
    fn first_match_wins() {
        let cfg = |name: &str, model: Option<&str>, intent: Option<&str>, shard: &str| RouteCfg {
            name: name.into(),
            model: model.map(Into::into),
            intent: intent.map(Into::into),
            shard: shard.into(),
            ..RouteCfg::default()
        };
        let t = RouteTable::compile(
            &[
                cfg("a", Some("mlp"), Some("chat"), "s1"),
                cfg("b", Some("mlp"), None, "s2"),
            ],
            &["s1", "s2"],
        )
        .unwrap();
        let k = |intent| RouteKey {
            model: "mlp",
            version: "1",
            adapter: "",
            intent,
            tenant: "",
            json: None,
        };
        assert_eq!(t.find(&k("chat")).unwrap().1.name, "a");
        assert_eq!(t.find(&k("other")).unwrap().1.shard, 1);
        let other = RouteKey {
            model: "x",
            ..k("chat")
        };
        assert!(t.find(&other).is_none());
    }
}
