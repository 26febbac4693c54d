//! Conformance: the official JSON-Schema-Test-Suite (vendored under
//! tests/data/JSON-Schema-Test-Suite, commit in its COMMIT file), every
//! required test of drafts 4, 6, 7, 2019-09 and 2020-12, and
//! `optional/format` separately with format assertion on. The `jsonschema`
//! crate runs the same tests in the same program; both counts are printed
//! (`cargo test -p sluice-validate --test suite -- --nocapture`).
//!
//! Tests this validator intentionally does not pass are listed, each with a
//! reason, in tests/data/suite_skip.tsv. The list must be exact: a failing
//! test missing from it fails this test, and so does a listed test that
//! passes (remove it).
//!
//! Remote references (`http://localhost:1234/<path>`) are the files under
//! the suite's remotes/, handed to both validators.
// Tests may unwrap and expect: a failed unwrap is a failed test (clippy.toml
// covers #[test] functions; this covers their helpers).
#![cfg_attr(test, allow(clippy::unwrap_used, clippy::expect_used))]

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use serde_json::Value;
use sluice_validate::Reference;
use sluice_validate::json::{CompileOptions, Draft, FormatMode, JsonSchema};

const DRAFTS: &[(&str, Draft, jsonschema::Draft)] = &[
    ("draft4", Draft::Draft4, jsonschema::Draft::Draft4),
    ("draft6", Draft::Draft6, jsonschema::Draft::Draft6),
    ("draft7", Draft::Draft7, jsonschema::Draft::Draft7),
    (
        "draft2019-09",
        Draft::Draft2019_09,
        jsonschema::Draft::Draft201909,
    ),
    (
        "draft2020-12",
        Draft::Draft2020_12,
        jsonschema::Draft::Draft202012,
    ),
];

const REMOTE_BASE: &str = "http://localhost:1234/";

fn suite_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/JSON-Schema-Test-Suite")
}

fn json_files(dir: &Path) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .collect();
    out.sort();
    out
}

/// Every file under remotes/, as (URL, text).
fn remotes() -> Vec<(String, String)> {
    fn walk(dir: &Path, rel: &str, out: &mut Vec<(String, String)>) {
        let mut entries: Vec<_> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().path())
            .collect();
        entries.sort();
        for p in entries {
            let name = p.file_name().unwrap().to_str().unwrap().to_string();
            if p.is_dir() {
                walk(&p, &format!("{rel}{name}/"), out);
            } else {
                let text = std::fs::read_to_string(&p).unwrap();
                out.push((format!("{REMOTE_BASE}{rel}{name}"), text));
            }
        }
    }
    let mut out = Vec::new();
    walk(&suite_dir().join("remotes"), "", &mut out);
    out
}

/// The remotes the `jsonschema` crate may fetch.
struct Remotes(BTreeMap<String, Value>);

impl jsonschema::Retrieve for Remotes {
    fn retrieve(
        &self,
        uri: &jsonschema::Uri<String>,
    ) -> Result<Value, Box<dyn std::error::Error + Send + Sync>> {
        let key = uri.as_str().trim_end_matches('#');
        self.0
            .get(key)
            .cloned()
            .ok_or_else(|| format!("no remote {key}").into())
    }
}

#[derive(Default, Clone, Copy)]
struct Count {
    total: usize,
    ours: usize,
    theirs: usize,
}

/// One test's identity: file (relative to tests/), case and test description.
type Id = (String, String, String);

fn skip_list() -> BTreeMap<Id, String> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/suite_skip.tsv");
    let text = std::fs::read_to_string(&path).unwrap();
    let mut out = BTreeMap::new();
    for (n, line) in text.lines().enumerate() {
        if line.trim().is_empty() || line.starts_with('#') {
            continue;
        }
        let f: Vec<&str> = line.split('\t').collect();
        assert!(
            f.len() == 4 && !f[3].trim().is_empty(),
            "suite_skip.tsv:{}: want file<TAB>case<TAB>test<TAB>reason",
            n + 1
        );
        let id = (f[0].to_string(), f[1].to_string(), f[2].to_string());
        assert!(
            out.insert(id, f[3].to_string()).is_none(),
            "suite_skip.tsv:{}: listed twice",
            n + 1
        );
    }
    out
}

struct Run<'a> {
    refs: Vec<Reference<'a>>,
    theirs_remotes: &'a BTreeMap<String, Value>,
    failing: BTreeSet<Id>,
    reasons: BTreeMap<Id, String>,
}

impl Run<'_> {
    fn file(
        &mut self,
        path: &Path,
        rel: &str,
        draft: Draft,
        their_draft: jsonschema::Draft,
        format: bool,
        count: &mut Count,
    ) {
        let cases: Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
        let options = CompileOptions {
            default_draft: draft,
            format: if format {
                FormatMode::Assertion
            } else {
                FormatMode::Annotation
            },
        };
        for case in cases.as_array().unwrap() {
            let desc = case["description"].as_str().unwrap();
            let text = serde_json::to_string(&case["schema"]).unwrap();
            let ours = JsonSchema::compile_with(&text, &self.refs, &options);
            let theirs = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                jsonschema::options()
                    .with_draft(their_draft)
                    .should_validate_formats(format)
                    .with_retriever(Remotes(self.theirs_remotes.clone()))
                    .build(&case["schema"])
                    .ok()
            }))
            .ok()
            .flatten();
            for t in case["tests"].as_array().unwrap() {
                let tdesc = t["description"].as_str().unwrap();
                let want = t["valid"].as_bool().unwrap();
                let data = serde_json::to_vec(&t["data"]).unwrap();
                count.total += 1;
                let id = (rel.to_string(), desc.to_string(), tdesc.to_string());
                let got = match &ours {
                    Ok(s) => Ok(s.validate(&data).is_ok()),
                    Err(e) => Err(e.to_string()),
                };
                if got == Ok(want) {
                    count.ours += 1;
                } else {
                    self.failing.insert(id.clone());
                    let why = match got {
                        Ok(g) => format!("got valid={g}"),
                        Err(e) => format!("compile error: {e}"),
                    };
                    self.reasons.insert(id, why);
                }
                if let Some(v) = &theirs
                    && std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                        v.is_valid(&t["data"])
                    }))
                    .ok()
                        == Some(want)
                {
                    count.theirs += 1;
                }
            }
        }
    }
}

#[test]
fn json_schema_test_suite() {
    let commit = std::fs::read_to_string(suite_dir().join("COMMIT")).unwrap();
    let remotes = remotes();
    let refs: Vec<Reference<'_>> = remotes
        .iter()
        .map(|(name, schema)| Reference { name, schema })
        .collect();
    let theirs_remotes: BTreeMap<String, Value> = remotes
        .iter()
        .map(|(u, t)| (u.clone(), serde_json::from_str(t).unwrap()))
        .collect();
    let mut run = Run {
        refs,
        theirs_remotes: &theirs_remotes,
        failing: BTreeSet::new(),
        reasons: BTreeMap::new(),
    };
    let mut table = String::new();
    writeln!(
        table,
        "JSON-Schema-Test-Suite {}\n{:<14} {:>24} {:>24}\n{:<14} {:>7} {:>7} {:>8} {:>7} {:>7} {:>8}",
        commit.split_whitespace().next().unwrap_or("?"),
        "",
        "required",
        "optional/format",
        "draft",
        "tests",
        "sluice",
        "jsonsch.",
        "tests",
        "sluice",
        "jsonsch."
    )
    .unwrap();
    for &(dir, draft, theirs) in DRAFTS {
        let mut req = Count::default();
        let mut fmt = Count::default();
        let base = suite_dir().join("tests").join(dir);
        for f in json_files(&base) {
            let rel = format!("{dir}/{}", f.file_name().unwrap().to_str().unwrap());
            run.file(&f, &rel, draft, theirs, false, &mut req);
        }
        for f in json_files(&base.join("optional/format")) {
            let rel = format!(
                "{dir}/optional/format/{}",
                f.file_name().unwrap().to_str().unwrap()
            );
            run.file(&f, &rel, draft, theirs, true, &mut fmt);
        }
        writeln!(
            table,
            "{dir:<14} {:>7} {:>7} {:>8} {:>7} {:>7} {:>8}",
            req.total, req.ours, req.theirs, fmt.total, fmt.ours, fmt.theirs
        )
        .unwrap();
    }
    println!("{table}");

    let skip = skip_list();
    let unlisted: Vec<_> = run
        .failing
        .iter()
        .filter(|id| !skip.contains_key(*id))
        .collect();
    let passing: Vec<_> = skip
        .keys()
        .filter(|id| !run.failing.contains(*id))
        .collect();
    let mut report = String::new();
    for id in unlisted.iter().take(200) {
        writeln!(
            report,
            "FAILS, not in suite_skip.tsv: {}\t{}\t{}\t({})",
            id.0, id.1, id.2, run.reasons[*id]
        )
        .unwrap();
    }
    for id in &passing {
        writeln!(
            report,
            "PASSES, remove from suite_skip.tsv: {}\t{}\t{}",
            id.0, id.1, id.2
        )
        .unwrap();
    }
    assert!(
        unlisted.is_empty() && passing.is_empty(),
        "{} failing tests not in the skip list, {} listed tests passing:\n{report}",
        unlisted.len(),
        passing.len()
    );
}
