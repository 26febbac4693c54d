//! Routing on semantic headers: first match wins. Matching never allocates.
//!
//! The table is compiled at apply time into an index (`index.rs`): routes
//! bucketed by each exact value they require (model, version, adapter,
//! intent, tenant), the rest in a wildcard list per field; a request looks
//! up its own values and scans only the smallest bucket merged with that
//! field's wildcard list, in priority order. Semver ranges are integer
//! bounds (`bounds.rs`) against the request's version parsed once; content
//! conditions read spots of one walk over the section (`PathSet`).

mod bounds;
mod index;
mod request;
pub mod set;

use sluice_validate::json::{PATH_NODES_MAX, PathSet, Predicate, Spot};

use self::bounds::Bounds;
use self::index::{Field, Index, Merge};
use self::request::{Located, Request};
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
            VersionMatcher::Semver(req) => bounds::lenient(v)
                .is_some_and(|(a, b, c)| req.matches(&semver::Version::new(a, b, c))),
        }
    }
}

/// Most content conditions on one route.
pub const CONTENT_CONDITIONS_MAX: usize = 8;

/// A compiled route. [`Route::matches`] is the reference matcher: every
/// matcher checked from the strings, as routing worked before the index;
/// the index gives the same answers (a property test holds it to that).
#[derive(Debug, Clone)]
pub struct Route {
    /// Route name.
    pub name: String,
    model: Option<Pattern>,
    version: Option<VersionMatcher>,
    /// A semver range's bounds (with `version` a range).
    bounds: Option<Bounds>,
    adapter: Option<Pattern>,
    intent: Option<Pattern>,
    tenant: Option<Pattern>,
    /// Each condition with its node in the table's path set.
    content: Vec<(Predicate, usize)>,
    /// Index of the target shard.
    pub shard: usize,
    /// Position in the table (priority order): per-route tables such as the
    /// transforms' `accepts` are indexed by it.
    pub index: usize,
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

fn exact(p: &Option<Pattern>) -> Option<&str> {
    p.as_ref().filter(|p| !p.glob).map(Pattern::as_str)
}

impl Route {
    /// Compiles a route; `shard` is the index of `cfg.shard`; its content
    /// paths join `paths`.
    fn compile(
        cfg: &RouteCfg,
        shard: usize,
        index: usize,
        paths: &mut PathSet,
    ) -> Result<Route, String> {
        if cfg.content.len() > CONTENT_CONDITIONS_MAX {
            return Err(format!(
                "at most {CONTENT_CONDITIONS_MAX} content conditions"
            ));
        }
        let mut content = Vec::with_capacity(cfg.content.len());
        for e in &cfg.content {
            let p = Predicate::parse(e).map_err(|err| format!("content {e:?}: {err}"))?;
            let node = paths
                .insert(&p)
                .map_err(|err| format!("content {e:?}: {err}"))?;
            content.push((p, node));
        }
        let version = cfg
            .version
            .as_deref()
            .map(VersionMatcher::parse)
            .transpose()?;
        let bounds = match &version {
            Some(VersionMatcher::Semver(req)) => Some(Bounds::of(req)),
            _ => None,
        };
        Ok(Route {
            name: cfg.name.clone(),
            model: cfg.model.as_deref().map(Pattern::new),
            version,
            bounds,
            adapter: cfg.adapter.as_deref().map(Pattern::new),
            intent: cfg.intent.as_deref().map(Pattern::new),
            tenant: cfg.tenant.as_deref().map(Pattern::new),
            content,
            shard,
            index,
        })
    }

    /// Whether the request matches every matcher of this route, each
    /// checked from the strings (the reference matcher).
    pub fn matches(&self, k: &RouteKey<'_>) -> bool {
        self.model.as_ref().is_none_or(|p| p.matches(k.model))
            && self.version.as_ref().is_none_or(|p| p.matches(k.version))
            && self.adapter.as_ref().is_none_or(|p| p.matches(k.adapter))
            && self.intent.as_ref().is_none_or(|p| p.matches(k.intent))
            && self.tenant.as_ref().is_none_or(|p| p.matches(k.tenant))
            && (self.content.is_empty()
                || k.json
                    .is_some_and(|j| self.content.iter().all(|(p, _)| p.matches(j))))
    }

    /// The exact value this route requires of a field, when it names one
    /// (no glob, no range): the index buckets it under that value.
    fn exact(&self, f: Field) -> Option<&str> {
        match f {
            Field::Model => exact(&self.model),
            Field::Version => match &self.version {
                Some(VersionMatcher::Text(p)) if !p.glob => Some(p.as_str()),
                _ => None,
            },
            Field::Adapter => exact(&self.adapter),
            Field::Intent => exact(&self.intent),
            Field::Tenant => exact(&self.tenant),
        }
    }

    /// [`Route::matches`] with the request's version parsed once and the
    /// content paths located once for every route (`req`).
    fn matches_req(&self, k: &RouteKey<'_>, req: &mut Request<'_>) -> bool {
        let version = match (&self.bounds, &self.version) {
            (Some(b), _) => req.version.is_some_and(|v| b.contains(v)),
            (None, v) => v.as_ref().is_none_or(|p| p.matches(k.version)),
        };
        version
            && self.model.as_ref().is_none_or(|p| p.matches(k.model))
            && self.adapter.as_ref().is_none_or(|p| p.matches(k.adapter))
            && self.intent.as_ref().is_none_or(|p| p.matches(k.intent))
            && self.tenant.as_ref().is_none_or(|p| p.matches(k.tenant))
            && (self.content.is_empty() || req.content(k, &self.content))
    }
}

/// What routing found, once a filter (the tenant's `routes`) had its say.
#[derive(Debug, Clone, Copy)]
pub enum RouteFound<'t> {
    /// The first matching route the filter allows.
    Route(&'t Route),
    /// Routes matched, but the filter allowed none: answered as if no
    /// route had matched.
    Hidden,
    /// No route matched.
    None,
}

/// Routes in priority order, and the index that finds the first match
/// without scanning them (`index.rs`).
#[derive(Debug, Clone, Default)]
pub struct RouteTable {
    routes: Vec<Route>,
    paths: PathSet,
    index: Index,
}

impl RouteTable {
    /// Compiles routes against shard names.
    pub fn compile(routes: &[RouteCfg], shard_names: &[&str]) -> Result<RouteTable, String> {
        let mut paths = PathSet::default();
        let routes = routes
            .iter()
            .enumerate()
            .map(|(i, r)| {
                let shard = shard_names
                    .iter()
                    .position(|s| *s == r.shard)
                    .ok_or_else(|| format!("route {:?}: no shard {:?}", r.name, r.shard))?;
                Route::compile(r, shard, i, &mut paths)
                    .map_err(|m| format!("route {:?}: {m}", r.name))
            })
            .collect::<Result<Vec<_>, _>>()?;
        let index = Index::build(&routes);
        Ok(RouteTable {
            routes,
            paths,
            index,
        })
    }

    /// The first matching route.
    pub fn find(&self, k: &RouteKey<'_>) -> Option<&Route> {
        match self.first_allowed(k, |_| true) {
            RouteFound::Route(r) => Some(r),
            _ => None,
        }
    }

    /// The first matching route that `allow` accepts; routes it refuses do
    /// not exist for the request, so a later route may take it. Found
    /// through the index: the candidates are the routes of the request's
    /// most selective exact value, in priority order. No allocation.
    pub fn first_allowed(
        &self,
        k: &RouteKey<'_>,
        mut allow: impl FnMut(&Route) -> bool,
    ) -> RouteFound<'_> {
        let version = if self.index.semver {
            bounds::lenient(k.version)
        } else {
            None
        };
        let mut hidden = false;
        let mut run = |req: &mut Request<'_>| {
            // With content buckets the section is walked first: its values
            // pick the candidates.
            let spots = if self.index.needs_spots() && req.locate(k) {
                Some(&*req.spots)
            } else {
                None
            };
            let (a, b) = self.index.candidates(k, req.version, spots);
            for i in Merge::new(a, b) {
                let r = &self.routes[i as usize];
                if r.matches_req(k, req) {
                    if allow(r) {
                        return Some(r);
                    }
                    hidden = true;
                }
            }
            None
        };
        // The walk's table lives on this stack frame, only when some route
        // looks into a section and the request has one.
        let found = match k.json {
            Some(_) if !self.paths.is_empty() => {
                let mut spots = [Spot::MISSING; PATH_NODES_MAX];
                run(&mut Request {
                    version,
                    paths: &self.paths,
                    spots: &mut spots,
                    located: Located::Not,
                })
            }
            _ => run(&mut Request {
                version,
                paths: &self.paths,
                spots: &mut [],
                located: Located::Not,
            }),
        };
        match found {
            Some(r) => RouteFound::Route(r),
            None if hidden => RouteFound::Hidden,
            None => RouteFound::None,
        }
    }

    /// [`RouteTable::first_allowed`] by the reference matcher: every route
    /// in order, each matcher from the strings. The index's test oracle and
    /// the scaling benchmark's baseline.
    pub fn first_allowed_linear(
        &self,
        k: &RouteKey<'_>,
        mut allow: impl FnMut(&Route) -> bool,
    ) -> RouteFound<'_> {
        let mut hidden = false;
        for r in self.routes.iter().filter(|r| r.matches(k)) {
            if allow(r) {
                return RouteFound::Route(r);
            }
            hidden = true;
        }
        if hidden {
            RouteFound::Hidden
        } else {
            RouteFound::None
        }
    }

    /// All routes.
    pub fn routes(&self) -> &[Route] {
        &self.routes
    }
}

#[cfg(test)]
mod index_tests;

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
        assert_eq!(t.find(&k("chat")).unwrap().name, "a");
        assert_eq!(t.find(&k("other")).unwrap().shard, 1);
        let other = RouteKey {
            model: "x",
            ..k("chat")
        };
        assert!(t.find(&other).is_none());
    }
}
