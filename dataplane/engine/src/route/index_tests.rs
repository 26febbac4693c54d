//! The index against the reference matcher (every route in order, each
//! matcher from the strings) over random tables and requests: the same
//! route, or the same "hidden" or "none", for every request.

use proptest::prelude::*;

use super::*;

fn opt(v: &'static [&'static str]) -> impl Strategy<Value = Option<String>> {
    prop::option::weighted(0.6, prop::sample::select(v).prop_map(String::from))
}

fn route_cfg() -> impl Strategy<Value = RouteCfg> {
    (
        opt(&["m0", "m1", "m2", "m*", "?1"]),
        opt(&[
            "1.0.0", "2", "^1", ">=1, <2", "1.*", "~2.1", "<=1.5", ">2.1.3", "=2.1.3", "^0.1",
            ">=2, <3", "latest",
        ]),
        opt(&["", "a1", "a2", "a*"]),
        opt(&["chat", "code", "c*"]),
        opt(&["t1", "t2", "t?"]),
        prop::collection::vec(
            prop::sample::select(vec![
                "$.tier == 1",
                "$.tier != 2",
                "$.meta.k == \"x\"",
                "$.l[1] == true",
                "$.meta[\"k\"] != null",
                "$ != 0",
                "$.intent == \"chat\"",
                "$.intent == \"code\"",
                "$.meta.k == \"y\"",
            ]),
            0..3,
        ),
        0usize..3,
    )
        .prop_map(
            |(model, version, adapter, intent, tenant, content, shard)| RouteCfg {
                model,
                version,
                adapter,
                intent,
                tenant,
                content: content.into_iter().map(String::from).collect(),
                shard: format!("s{shard}"),
                ..RouteCfg::default()
            },
        )
}

#[derive(Debug, Clone)]
struct Req {
    model: &'static str,
    version: &'static str,
    adapter: &'static str,
    intent: &'static str,
    tenant: &'static str,
    json: Option<&'static str>,
}

fn request() -> impl Strategy<Value = Req> {
    (
        prop::sample::select(vec!["m0", "m1", "m2", "mx"]),
        prop::sample::select(vec![
            "1.0.0", "1.5", "2.1.3", "2", "2.1.4", "latest", "v1", "0.1.7",
        ]),
        prop::sample::select(vec!["", "a1", "a2", "b"]),
        prop::sample::select(vec!["chat", "code", "x"]),
        prop::sample::select(vec!["", "t1", "t2", "t10"]),
        prop::option::of(prop::sample::select(vec![
            r#"{"tier":1,"meta":{"k":"x"},"l":[0,true]}"#,
            r#"{"meta":{"k":null},"tier":2}"#,
            r#"{"tier":1,"tier":2,"l":[1]}"#,
            r#"[1,2]"#,
            r#"0"#,
            r#"{"tier":1,"meta":"#,
            r#"{"intent":"chat","meta":{"k":"y"},"tier":1}"#,
            r#"{"intent":"c\u006fde","tier":2}"#,
            r#"{"intent":3,"intent":"chat"}"#,
            r#"{"meta":{"k":"x"},"intent":"code"}"#,
        ])),
    )
        .prop_map(|(model, version, adapter, intent, tenant, json)| Req {
            model,
            version,
            adapter,
            intent,
            tenant,
            json,
        })
}

fn key(r: &Req) -> RouteKey<'_> {
    RouteKey {
        model: r.model,
        version: r.version,
        adapter: r.adapter,
        intent: r.intent,
        tenant: r.tenant,
        json: r.json.map(str::as_bytes),
    }
}

fn same(a: RouteFound<'_>, b: RouteFound<'_>) -> bool {
    match (a, b) {
        (RouteFound::Route(x), RouteFound::Route(y)) => std::ptr::eq(x, y),
        (RouteFound::Hidden, RouteFound::Hidden) | (RouteFound::None, RouteFound::None) => true,
        _ => false,
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]
    #[test]
    fn index_finds_what_the_scan_finds(
        cfgs in prop::collection::vec(route_cfg(), 0..48),
        reqs in prop::collection::vec(request(), 1..24),
        hidden in prop::collection::vec(prop::bool::weighted(0.2), 48),
    ) {
        let cfgs: Vec<RouteCfg> = cfgs
            .into_iter()
            .enumerate()
            .map(|(i, c)| RouteCfg { name: format!("r{i}"), ..c })
            .collect();
        let t = RouteTable::compile(&cfgs, &["s0", "s1", "s2"]).unwrap();
        let allow = |r: &Route| {
            let i: usize = r.name[1..].parse().unwrap();
            !hidden[i]
        };
        for r in &reqs {
            let k = key(r);
            let fast = t.first_allowed(&k, allow);
            let slow = t.first_allowed_linear(&k, allow);
            prop_assert!(same(fast, slow), "{r:?}: index {fast:?}, scan {slow:?}");
            let all = t.first_allowed(&k, |_| true);
            let all_slow = t.first_allowed_linear(&k, |_| true);
            prop_assert!(same(all, all_slow), "{r:?} unfiltered");
        }
    }
}

#[test]
fn large_tables_take_the_smallest_bucket() {
    let mut cfgs: Vec<RouteCfg> = (0..1000)
        .map(|i| RouteCfg {
            name: format!("r{i}"),
            model: Some(format!("m{i}")),
            version: Some("^1".into()),
            shard: "s".into(),
            ..RouteCfg::default()
        })
        .collect();
    cfgs.push(RouteCfg {
        name: "any".into(),
        intent: Some("chat".into()),
        shard: "s".into(),
        ..RouteCfg::default()
    });
    let t = RouteTable::compile(&cfgs, &["s"]).unwrap();
    let k = |model, intent| RouteKey {
        model,
        version: "1.4",
        adapter: "",
        intent,
        tenant: "",
        json: None,
    };
    let (a, b) = t.index.candidates(&k("m999", "x"), Some((1, 4, 0)), None);
    assert_eq!((a, b), (&[999][..], &[1000][..]));
    assert_eq!(t.find(&k("m999", "x")).unwrap().name, "r999");
    assert_eq!(t.find(&k("m5000", "chat")).unwrap().name, "any");
    assert!(t.find(&k("m5000", "x")).is_none());
}

#[test]
fn content_paths_are_bounded_per_table() {
    let cfgs: Vec<RouteCfg> = (0..600)
        .map(|i| RouteCfg {
            name: format!("r{i}"),
            content: vec![format!("$.f{i} == 1")],
            shard: "s".into(),
            ..RouteCfg::default()
        })
        .collect();
    let e = RouteTable::compile(&cfgs, &["s"]).unwrap_err();
    assert!(e.contains("PATH_NODES_MAX"), "{e}");
}
