//! Every path a route table's content predicates name, as one trie, located
//! in a section by one walk: the cost of content routing is then one pass
//! over the section whatever the number of routes, plus a comparison per
//! route that is looked at.
//!
//! The walk gives each node exactly what [`Predicate::matches`]'s own
//! search would find for that path (the first member of a name, the n-th
//! element, `Missing` past a scalar, `Malformed` where its search would meet
//! bad syntax), and like that search it stops reading an object or array as
//! soon as every child it looks for is found.

use super::Predicate;
use super::predicate::{Found, Next, Segment, Spot, after};
use super::scan::{self, skip_ws};
use crate::CompileError;

/// Most nodes in one path set (the trie of every path, the root included):
/// a walk records one 4-byte [`Spot`] per node.
pub const PATH_NODES_MAX: usize = 512;

#[derive(Debug, Clone, Default)]
struct Node {
    /// Member names, sorted, with their child node.
    keys: Vec<(Box<[u8]>, u32)>,
    /// Element indexes, sorted, with their child node.
    indexes: Vec<(usize, u32)>,
}

/// The trie of the paths of a set of predicates. Built on the control path;
/// [`PathSet::locate`] allocates nothing.
#[derive(Debug, Clone)]
pub struct PathSet {
    nodes: Vec<Node>,
}

impl Default for PathSet {
    fn default() -> Self {
        PathSet {
            nodes: vec![Node::default()],
        }
    }
}

impl PathSet {
    /// Nodes, the root included: the length `locate` needs.
    pub fn len(&self) -> usize {
        self.nodes.len()
    }

    /// Whether no path was added (only the root).
    pub fn is_empty(&self) -> bool {
        self.nodes.len() == 1
    }

    /// Adds a predicate's path; returns its node, whose spot
    /// [`Predicate::matches_at`] takes. Paths shared by predicates share
    /// nodes. Refused past [`PATH_NODES_MAX`] nodes.
    pub fn insert(&mut self, p: &Predicate) -> Result<usize, CompileError> {
        let mut at = 0usize;
        for seg in p.segments() {
            let node = &self.nodes[at];
            let found = match seg {
                Segment::Key(k) => node
                    .keys
                    .binary_search_by(|(n, _)| n.as_ref().cmp(k.as_bytes())),
                Segment::Index(n) => node.indexes.binary_search_by(|(i, _)| i.cmp(n)),
            };
            let existing = match (seg, found) {
                (Segment::Key(_), Ok(i)) => Some(node.keys[i].1),
                (Segment::Index(_), Ok(i)) => Some(node.indexes[i].1),
                _ => None,
            };
            at = match existing {
                Some(child) => child as usize,
                None => {
                    if self.nodes.len() >= PATH_NODES_MAX {
                        return Err(CompileError(format!(
                            "content paths need more than PATH_NODES_MAX ({PATH_NODES_MAX}) nodes"
                        )));
                    }
                    let child = self.nodes.len();
                    let id = u32::try_from(child).unwrap_or(u32::MAX);
                    let node = &mut self.nodes[at];
                    match (seg, found) {
                        (Segment::Key(k), Err(i)) => {
                            node.keys.insert(i, (k.as_bytes().into(), id));
                        }
                        (Segment::Index(n), Err(i)) => node.indexes.insert(i, (*n, id)),
                        _ => {}
                    }
                    self.nodes.push(Node::default());
                    child
                }
            };
        }
        Ok(at)
    }

    /// Locates every node in `section` in one walk, writing node i's spot
    /// to `out[i]`. Returns false (and writes nothing) when `out` is shorter
    /// than [`PathSet::len`] or the section is longer than
    /// [`Spot::OFFSET_MAX`]: the caller then evaluates predicates one by one.
    pub fn locate(&self, section: &[u8], out: &mut [Spot]) -> bool {
        if out.len() < self.nodes.len() || section.len() > Spot::OFFSET_MAX {
            return false;
        }
        let root = skip_ws(section, 0);
        out[0] = Spot::at(root);
        self.walk(section, 0, root, 0, out);
        true
    }

    /// Resolves the children of `node`, whose value starts at `i` inside
    /// `depth` containers, then their children.
    fn walk(&self, s: &[u8], node: usize, i: usize, depth: usize, out: &mut [Spot]) {
        let n = &self.nodes[node];
        if !n.keys.is_empty() {
            self.members(s, n, i, depth, out);
        }
        if !n.indexes.is_empty() {
            self.elements(s, n, i, depth, out);
        }
        for &(_, c) in &n.keys {
            self.descend(s, c as usize, depth, out);
        }
        for &(_, c) in &n.indexes {
            self.descend(s, c as usize, depth, out);
        }
    }

    /// A child's own children: located under it, or sharing its outcome.
    fn descend(&self, s: &[u8], child: usize, depth: usize, out: &mut [Spot]) {
        let c = &self.nodes[child];
        if c.keys.is_empty() && c.indexes.is_empty() {
            return;
        }
        match out[child].found() {
            Found::At(j) => self.walk(s, child, j, depth + 1, out),
            _ => self.set_subtree(child, out[child], out),
        }
    }

    fn set_subtree(&self, node: usize, spot: Spot, out: &mut [Spot]) {
        let n = &self.nodes[node];
        for &(_, c) in &n.keys {
            out[c as usize] = spot;
            self.set_subtree(c as usize, spot, out);
        }
        for &(_, c) in &n.indexes {
            out[c as usize] = spot;
            self.set_subtree(c as usize, spot, out);
        }
    }

    /// The members named by `n.keys` in the object at `i`, as `member` in
    /// predicate.rs finds each: the first of a name, Missing when the value
    /// is not an object, Malformed where its scan would fail.
    fn members(&self, s: &[u8], n: &Node, i: usize, depth: usize, out: &mut [Spot]) {
        let all = |out: &mut [Spot], spot: Spot| {
            for &(_, c) in &n.keys {
                if out[c as usize] == Spot::MISSING {
                    out[c as usize] = spot;
                }
            }
        };
        match s.get(i) {
            Some(b'{') => {}
            Some(b'[' | b'"' | b't' | b'f' | b'n' | b'-' | b'0'..=b'9') => return,
            _ => return all(out, Spot::MALFORMED),
        }
        let mut left = n.keys.len();
        let mut k = skip_ws(s, i + 1);
        if s.get(k) == Some(&b'}') {
            return;
        }
        loop {
            if s.get(k) != Some(&b'"') {
                return all(out, Spot::MALFORMED);
            }
            let Ok(key) = scan::scan_string(s, k) else {
                return all(out, Spot::MALFORMED);
            };
            let c = skip_ws(s, key.end);
            if s.get(c) != Some(&b':') {
                return all(out, Spot::MALFORMED);
            }
            let v = skip_ws(s, c + 1);
            let child = if key.escaped {
                n.keys
                    .iter()
                    .find(|(name, _)| scan::string_eq_bytes(s, k, name))
                    .map(|&(_, c)| c)
            } else {
                let raw = &s[k + 1..key.end - 1];
                n.keys
                    .binary_search_by(|(name, _)| name.as_ref().cmp(raw))
                    .ok()
                    .map(|x| n.keys[x].1)
            };
            if let Some(c) = child
                && out[c as usize] == Spot::MISSING
            {
                out[c as usize] = Spot::at(v);
                left -= 1;
                if left == 0 {
                    return;
                }
            }
            let Ok(end) = scan::skip_value(s, v, depth + 1) else {
                return all(out, Spot::MALFORMED);
            };
            match after(s, end, b'}') {
                Ok(Next::More(x)) => k = x,
                Ok(Next::End) => return,
                Err(()) => return all(out, Spot::MALFORMED),
            }
        }
    }

    /// The elements named by `n.indexes` in the array at `i`, as `element`
    /// in predicate.rs finds each.
    fn elements(&self, s: &[u8], n: &Node, i: usize, depth: usize, out: &mut [Spot]) {
        let all = |out: &mut [Spot], spot: Spot| {
            for &(_, c) in &n.indexes {
                if out[c as usize] == Spot::MISSING {
                    out[c as usize] = spot;
                }
            }
        };
        match s.get(i) {
            Some(b'[') => {}
            Some(b'{' | b'"' | b't' | b'f' | b'n' | b'-' | b'0'..=b'9') => return,
            _ => return all(out, Spot::MALFORMED),
        }
        let mut k = skip_ws(s, i + 1);
        if s.get(k) == Some(&b']') {
            return;
        }
        // Indexes are sorted: `next` is the first one not yet reached.
        let mut next = 0usize;
        let mut idx = 0usize;
        loop {
            if n.indexes[next].0 == idx {
                out[n.indexes[next].1 as usize] = Spot::at(k);
                next += 1;
                if next == n.indexes.len() {
                    return;
                }
            }
            let Ok(end) = scan::skip_value(s, k, depth + 1) else {
                return all(out, Spot::MALFORMED);
            };
            idx += 1;
            match after(s, end, b']') {
                Ok(Next::More(x)) => k = x,
                Ok(Next::End) => return,
                Err(()) => return all(out, Spot::MALFORMED),
            }
        }
    }
}

/// The raw bytes of the string at a located spot, when the value there is
/// a string written without escapes: then they are the decoded string, and
/// `PATH == "text"` holds exactly when they equal [`Predicate::string_literal`]
/// (a literal that needs escapes cannot equal a string that has none).
/// None for anything else (escaped strings, other values, missing paths).
pub fn plain_string_at(section: &[u8], spot: Spot) -> Option<&[u8]> {
    let Found::At(i) = spot.found() else {
        return None;
    };
    if section.get(i) != Some(&b'"') {
        return None;
    }
    let t = scan::scan_string(section, i).ok()?;
    (!t.escaped).then(|| &section[i + 1..t.end - 1])
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn located(preds: &[&str], section: &str) -> Vec<bool> {
        let preds: Vec<Predicate> = preds.iter().map(|p| Predicate::parse(p).unwrap()).collect();
        let mut set = PathSet::default();
        let nodes: Vec<usize> = preds.iter().map(|p| set.insert(p).unwrap()).collect();
        let mut out = vec![Spot::MISSING; set.len()];
        assert!(set.locate(section.as_bytes(), &mut out));
        preds
            .iter()
            .zip(&nodes)
            .map(|(p, &n)| {
                let fast = p.matches_at(section.as_bytes(), out[n]);
                assert_eq!(fast, p.matches(section.as_bytes()), "{p} on {section}");
                fast
            })
            .collect()
    }

    #[test]
    fn one_walk_agrees_with_each_search() {
        let preds = [
            "$.a == 1",
            "$.b.c == \"x\"",
            "$.b.c != \"x\"",
            "$.b[\"c\"] == \"y\"",
            "$.l[1] == true",
            "$.l[0] == 5",
            "$.l[3] == null",
            "$ == 3",
            "$.a.z == 1",
            "$.d == 1",
        ];
        let sections = [
            r#"{"a":1,"b":{"c":"x"},"l":[5,true]}"#,
            r#"{"a":2,"a":1,"b":{"c":"y","c":"x"},"l":{"1":true}}"#,
            r#"{"b":{"\u0063":"x"},"l":[[1],true,3,null]}"#,
            r#"3"#,
            r#"[1,2]"#,
            r#"{"a":1,"b":"#,
            r#"{"a":1 "b":2}"#,
            r#"{"d":1,"a":{"z":1}}"#,
            r#"{ "l" : [ 5 , true , {} , null ] , "d" : 1 }"#,
        ];
        for s in sections {
            located(&preds, s);
        }
    }

    #[test]
    fn node_limit_is_checked() {
        let mut set = PathSet::default();
        let mut err = None;
        for i in 0..PATH_NODES_MAX {
            if let Err(e) = set.insert(&Predicate::parse(&format!("$.k{i} == 1")).unwrap()) {
                err = Some(e);
                break;
            }
        }
        assert!(err.is_some());
        assert_eq!(set.len(), PATH_NODES_MAX);
    }

    fn json_value() -> impl Strategy<Value = String> {
        let leaf = prop_oneof![
            Just("1".to_string()),
            Just("2".to_string()),
            Just("true".to_string()),
            Just("null".to_string()),
            Just("\"x\"".to_string()),
            Just("\"y\"".to_string()),
        ];
        leaf.prop_recursive(3, 24, 4, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..4)
                    .prop_map(|v| format!("[{}]", v.join(","))),
                prop::collection::vec(
                    (prop::sample::select(vec!["a", "b", "c", "\\u0061"]), inner),
                    0..4
                )
                .prop_map(|v| {
                    let m: Vec<String> = v.iter().map(|(k, v)| format!("\"{k}\" : {v}")).collect();
                    format!("{{{}}}", m.join(","))
                }),
            ]
        })
    }

    fn predicate() -> impl Strategy<Value = String> {
        let seg = prop_oneof![
            prop::sample::select(vec![".a", ".b", ".c", "[0]", "[1]", "[2]"])
                .prop_map(String::from),
        ];
        (
            prop::collection::vec(seg, 0..4),
            prop::bool::ANY,
            prop::sample::select(vec!["1", "2", "true", "null", "\"x\""]),
        )
            .prop_map(|(segs, neg, lit)| {
                format!("${} {} {lit}", segs.concat(), if neg { "!=" } else { "==" })
            })
    }

    proptest! {
        #[test]
        fn one_walk_agrees_on_random_sections(
            section in json_value(),
            cut in 0usize..64,
            preds in prop::collection::vec(predicate(), 1..12),
        ) {
            let refs: Vec<&str> = preds.iter().map(String::as_str).collect();
            located(&refs, &section);
            // A truncated section: malformed on some paths, not others.
            let cut = section.len().saturating_sub(cut);
            if section.is_char_boundary(cut) {
                located(&refs, &section[..cut]);
            }
        }
    }
}
