//! What one request brings to the routes it is matched against: its version
//! parsed once, and the spots of its section's content paths, located by
//! one walk the first time a route with conditions is reached.

use sluice_validate::json::{PathSet, Predicate, Spot};

use super::RouteKey;
use super::bounds::V3;

/// Whether the section was walked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Located {
    /// Not yet.
    Not,
    /// `spots` holds every path node.
    Walked,
    /// The walk could not run (a section past `Spot::OFFSET_MAX`): each
    /// condition searches the section itself.
    Fallback,
}

pub(super) struct Request<'s> {
    /// The request's version as a semver triple, when it parses as one and
    /// some route has a range.
    pub version: Option<V3>,
    pub paths: &'s PathSet,
    pub spots: &'s mut [Spot],
    pub located: Located,
}

impl Request<'_> {
    /// Walks the section once (the first call); whether `spots` holds
    /// every path node.
    pub fn locate(&mut self, k: &RouteKey<'_>) -> bool {
        if self.located == Located::Not {
            self.located = match k.json {
                Some(json) if self.paths.locate(json, self.spots) => Located::Walked,
                _ => Located::Fallback,
            };
        }
        self.located == Located::Walked
    }

    /// Whether every condition holds on the request's section.
    pub fn content(&mut self, k: &RouteKey<'_>, conds: &[(Predicate, usize)]) -> bool {
        let Some(json) = k.json else {
            return false;
        };
        self.locate(k);
        match self.located {
            Located::Walked => conds.iter().all(|(p, n)| {
                self.spots
                    .get(*n)
                    .is_some_and(|&spot| p.matches_at(json, spot))
            }),
            _ => conds.iter().all(|(p, _)| p.matches(json)),
        }
    }
}
