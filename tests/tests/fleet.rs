//! Fleet mode end to end with the real data plane: a 3-node nats-server
//! cluster (JetStream, R3 buckets) and three sluiced processes with the Rust
//! engine, configured from cfg/fleet.toml. A schema registered on one
//! appliance is validated by every engine; a route changed on one moves
//! traffic on all; with one NATS node stopped the fleet keeps working; an
//! appliance that was down catches up. Prints the time from a schema
//! registration to its first validated use on each appliance.
//!
//! Needs .cache/bin/nats-server (perf/nats/compare.sh --setup) and
//! .cache/bin/sluiced (scripts/build-ffi.sh).
// Tests may unwrap and expect: a failed unwrap is a failed test (clippy.toml
// covers #[test] functions; this covers their helpers).
#![cfg_attr(test, allow(clippy::unwrap_used, clippy::expect_used))]

use std::net::{SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use sluice_client::{Client, ClientConfig, ClientError, Request};
use sluice_tests::*;
use sluice_wire::{ErrorCode, TenantKey};

const DEMO_KEY_HEX: &str = "73756963652d64656d6f2d6b65792d30303030303030303030303030303030";
/// Failure bound of every wait for convergence (not a timing assertion).
const CONVERGE: Duration = Duration::from_secs(60);

fn demo_key() -> Vec<u8> {
    (0..DEMO_KEY_HEX.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&DEMO_KEY_HEX[i..i + 2], 16).unwrap())
        .collect()
}

/// The last 3 KiB of a log file.
fn tail(p: &Path) -> String {
    let b = std::fs::read(p).unwrap_or_default();
    String::from_utf8_lossy(&b[b.len().saturating_sub(3072)..]).into_owned()
}

/// `n` distinct free ports: every listener is held until all are chosen
/// (one at a time, the kernel may hand the same port out twice, and a
/// node that cannot bind never becomes healthy).
fn free_ports(n: usize) -> Vec<u16> {
    let held: Vec<TcpListener> = (0..n)
        .map(|_| TcpListener::bind("127.0.0.1:0").unwrap())
        .collect();
    held.iter()
        .map(|l| l.local_addr().unwrap().port())
        .collect()
}

struct Node {
    child: Option<Child>,
    args: Vec<String>,
    client: u16,
    monitor: u16,
    /// The node's output (shown when it does not become healthy).
    log: PathBuf,
}

/// A real nats-server cluster, each node its own process.
struct Cluster {
    nodes: Vec<Node>,
}

impl Cluster {
    fn start(dir: &Path, n: usize) -> Cluster {
        let bin = repo_root().join(".cache/bin/nats-server");
        assert!(
            bin.is_file(),
            "{} missing: run perf/nats/compare.sh --setup",
            bin.display()
        );
        let ports = free_ports(3 * n);
        let routes: Vec<u16> = ports[..n].to_vec();
        let route_urls = routes
            .iter()
            .map(|p| format!("nats://127.0.0.1:{p}"))
            .collect::<Vec<_>>()
            .join(",");
        let mut c = Cluster { nodes: vec![] };
        for (i, rp) in routes.iter().enumerate() {
            let (client, monitor) = (ports[n + 2 * i], ports[n + 2 * i + 1]);
            let args = vec![
                "-a".into(),
                "127.0.0.1".into(),
                "-p".into(),
                client.to_string(),
                "-m".into(),
                monitor.to_string(),
                "-n".into(),
                format!("n{i}"),
                "-js".into(),
                "-sd".into(),
                dir.join(format!("n{i}")).display().to_string(),
                "--cluster_name".into(),
                "sluice-e2e".into(),
                "--cluster".into(),
                format!("nats://127.0.0.1:{rp}"),
                "--routes".into(),
                route_urls.clone(),
            ];
            c.nodes.push(Node {
                child: None,
                args,
                client,
                monitor,
                log: dir.join(format!("n{i}.log")),
            });
        }
        for i in 0..n {
            c.start_node(i);
        }
        c.wait_healthy();
        c
    }

    fn start_node(&mut self, i: usize) {
        let bin = repo_root().join(".cache/bin/nats-server");
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.nodes[i].log)
            .unwrap();
        let child = Command::new(bin)
            .args(&self.nodes[i].args)
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .unwrap();
        self.nodes[i].child = Some(child);
    }

    fn stop_node(&mut self, i: usize) {
        if let Some(mut c) = self.nodes[i].child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Every running node reports JetStream healthy (meta leader known,
    /// streams current).
    fn wait_healthy(&self) {
        let t0 = Instant::now();
        for n in self.nodes.iter().filter(|n| n.child.is_some()) {
            let addr: SocketAddr = format!("127.0.0.1:{}", n.monitor).parse().unwrap();
            loop {
                let ok = std::net::TcpStream::connect(addr).is_ok()
                    && http(addr, "GET", "/healthz", None).0 == 200;
                if ok {
                    break;
                }
                assert!(
                    t0.elapsed() < CONVERGE,
                    "nats node on {} not healthy; its log ends:\n{}",
                    n.client,
                    tail(&n.log)
                );
                std::thread::sleep(Duration::from_millis(100));
            }
        }
    }

    fn urls(&self) -> Vec<String> {
        self.nodes
            .iter()
            .map(|n| format!("nats://127.0.0.1:{}", n.client))
            .collect()
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        for i in 0..self.nodes.len() {
            self.stop_node(i);
        }
    }
}

/// cfg/fleet.toml for one appliance of this test.
fn fleet_config(dir: &Path, name: &str, urls: &[String]) -> PathBuf {
    let root = repo_root();
    let src = std::fs::read_to_string(root.join("cfg/fleet.toml")).expect("cfg/fleet.toml");
    let servers = urls
        .iter()
        .map(|u| format!("{u:?}"))
        .collect::<Vec<_>>()
        .join(", ");
    let mut text = src
        .replace("../.cache/onnxruntime/", &format!("{}/.cache/onnxruntime/", root.display()))
        .replace("../models/", &format!("{}/models/", root.display()))
        .replace("listen = \"127.0.0.1:7070\"", "listen = \"127.0.0.1:0\"")
        .replace("admin_listen = \"127.0.0.1:7071\"", "admin_listen = \"127.0.0.1:0\"")
        .replace(
            "data_dir = \"../.cache/sluice-fleet-a\"",
            &format!("data_dir = \"{}/data-{name}\"", dir.display()),
        )
        .replace(
            "servers = [\"nats://127.0.0.1:4222\", \"nats://127.0.0.1:4223\", \"nats://127.0.0.1:4224\"]",
            &format!("servers = [{servers}]"),
        )
        .replace("name = \"a\"", &format!("name = {name:?}"))
        .replace("resync_interval_ms = 5000", "resync_interval_ms = 1000");
    assert!(
        text.contains(&format!("servers = [{servers}]")),
        "cfg/fleet.toml changed shape"
    );
    // A second local shard for traffic to move to.
    text += "\n[[shards]]\nname = \"hbm2-batch\"\nlabels = { \"hardware.gpu.memory\" = \"hbm2\" }\nmax_concurrency = 4\nqueue_depth = 64\n";
    let path = dir.join(format!("fleet-{name}.toml"));
    std::fs::write(&path, text).unwrap();
    path
}

struct Appliance {
    name: &'static str,
    config: PathBuf,
    d: Sluiced,
    client: Client,
}

impl Appliance {
    fn start(name: &'static str, config: PathBuf) -> Appliance {
        let d = Sluiced::start(&config);
        let cfg = ClientConfig {
            tenant_id: 1,
            key: Some(demo_key()),
            timeout: Duration::from_secs(2),
            ..ClientConfig::default()
        };
        let client = Client::connect(d.data, cfg).expect("client");
        Appliance {
            name,
            config,
            d,
            client,
        }
    }

    /// Sends one request to the null model, naming schema `id` v`version`
    /// when id is not 0, with an x of `width` floats.
    fn call(&mut self, schema: (u32, u32), width: usize) -> Result<(), ClientError> {
        let tkey = TenantKey::new(&demo_key());
        let x = vec![1.0f32; width];
        let req = Request::new("null", "1")
            .tenant(1, Some(&tkey))
            .schema(schema.0, schema.1)
            .tensor_f32("x", &[1, width as u64], &x);
        self.client.call(&req).map(|_| ())
    }

    fn shard_requests(&self, shard: &str) -> u64 {
        let (_, stats) = http(self.d.admin, "GET", "/v1/stats", None);
        stats["shards"]
            .as_array()
            .and_then(|a| a.iter().find(|s| s["name"] == shard))
            .and_then(|s| s["requests"].as_u64())
            .unwrap_or(0)
    }

    /// Whether the null model's requests now go to `shard` and not `other`.
    fn routes_null_to(&mut self, shard: &str, other: &str) -> bool {
        let (a0, b0) = (self.shard_requests(shard), self.shard_requests(other));
        for _ in 0..5 {
            self.call((0, 0), 4).expect("request");
        }
        std::thread::sleep(Duration::from_millis(50));
        self.shard_requests(shard) >= a0 + 5 && self.shard_requests(other) == b0
    }
}

fn register(admin: SocketAddr, subject: &str, schema: &str) -> u32 {
    let body = serde_json::json!({ "schemaType": "TENSOR", "schema": schema }).to_string();
    let t0 = Instant::now();
    loop {
        let (code, v) = http(
            admin,
            "POST",
            &format!("/registry/subjects/{subject}/versions"),
            Some(&body),
        );
        if code == 200 {
            return v["id"].as_u64().expect("schema id") as u32;
        }
        // A leader election after a node stopped answers 5xx for a moment.
        assert!(
            code >= 500 && t0.elapsed() < CONVERGE,
            "register: {code} {v}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn put_routes(admin: SocketAddr, routes: &str) {
    let t0 = Instant::now();
    loop {
        let (code, v) = http(admin, "PUT", "/v1/routes", Some(routes));
        if code == 200 {
            return;
        }
        assert!(code >= 500 && t0.elapsed() < CONVERGE, "routes: {code} {v}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Polls `cond` on every appliance until it holds on all; returns when
/// each first held.
fn converge(
    what: &str,
    apps: &mut [Appliance],
    mut cond: impl FnMut(&mut Appliance) -> bool,
) -> Vec<Duration> {
    let t0 = Instant::now();
    let mut took: Vec<Option<Duration>> = vec![None; apps.len()];
    while took.iter().any(Option::is_none) {
        for (i, a) in apps.iter_mut().enumerate() {
            if took[i].is_none() && cond(a) {
                took[i] = Some(t0.elapsed());
            }
        }
        assert!(
            t0.elapsed() < CONVERGE,
            "{what}: not converged on {:?}",
            apps.iter()
                .zip(&took)
                .filter(|(_, t)| t.is_none())
                .map(|(a, _)| a.name)
                .collect::<Vec<_>>()
        );
    }
    took.into_iter().map(Option::unwrap).collect()
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

const SIG4: &str = r#"{"inputs":[{"name":"x","dtype":"f32","shape":[-1,4]}]}"#;
const ROUTES_BATCH: &str = r#"[{"name":"null","model":"null","shard":"hbm2-batch"},{"name":"mlp","model":"mlp","version":"^1","shard":"hbm2-inference"}]"#;
const ROUTES_BACK: &str = r#"[{"name":"null","model":"null","shard":"hbm2-inference"},{"name":"mlp","model":"mlp","version":"^1","shard":"hbm2-inference"}]"#;

#[test]
fn fleet_of_three_on_a_nats_cluster() {
    let dir = std::env::temp_dir().join(format!("sluice-fleet-e2e-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let mut cluster = Cluster::start(&dir, 3);
    let urls = cluster.urls();
    let mut apps: Vec<Appliance> = ["a", "b", "c"]
        .into_iter()
        .map(|n| Appliance::start(n, fleet_config(&dir, n, &urls)))
        .collect();

    // Schema registered on a: before it, every engine answers unknown_schema
    // for its id; after it, every engine validates against it.
    let subject = format!("null-input-{}", std::process::id());
    for a in apps.iter_mut() {
        let e = a.call((999_999, 1), 4).expect_err("no such schema");
        assert_eq!(e.code(), Some(ErrorCode::UnknownSchema), "{}: {e}", a.name);
    }
    let t0 = Instant::now();
    let id = register(apps[0].d.admin, &subject, SIG4);
    let reg = t0.elapsed();
    let took = converge("schema validated", &mut apps, |a| {
        a.call((id, 1), 4).is_ok()
    });
    println!(
        "FLEET-E2E schema_change_to_first_validated_use_ms a={:.1} b={:.1} c={:.1} (after the register call returned; it took {:.1} ms on a)",
        ms(took[0]),
        ms(took[1]),
        ms(took[2]),
        ms(reg)
    );
    for a in apps.iter_mut() {
        // Validated, not just known: a wrong shape is refused by each engine.
        let e = a.call((id, 1), 8).expect_err("shape [1,8] against [-1,4]");
        assert_eq!(e.code(), Some(ErrorCode::SchemaMismatch), "{}: {e}", a.name);
    }

    // Route change on b moves the null model's traffic on every appliance.
    assert!(
        apps.iter_mut()
            .all(|a| a.routes_null_to("hbm2-inference", "hbm2-batch"))
    );
    put_routes(apps[1].d.admin, ROUTES_BATCH);
    let took = converge("route to hbm2-batch", &mut apps, |a| {
        a.routes_null_to("hbm2-batch", "hbm2-inference")
    });
    println!(
        "FLEET-E2E route_change_to_traffic_moved_ms a={:.1} b={:.1} c={:.1}",
        ms(took[0]),
        ms(took[1]),
        ms(took[2])
    );

    // One NATS node stops: writes and convergence go on.
    cluster.stop_node(0);
    put_routes(apps[2].d.admin, ROUTES_BACK);
    converge("route back with a node down", &mut apps, |a| {
        a.routes_null_to("hbm2-inference", "hbm2-batch")
    });
    let id2 = register(apps[0].d.admin, &format!("{subject}-2"), SIG4);
    converge("schema with a node down", &mut apps, |a| {
        a.call((id2, 1), 4).is_ok()
    });
    cluster.start_node(0);

    // An appliance that was down catches up when it returns.
    let c = apps.pop().unwrap();
    let (name, config) = (c.name, c.config.clone());
    drop(c);
    put_routes(apps[0].d.admin, ROUTES_BATCH);
    let id3 = register(apps[1].d.admin, &format!("{subject}-3"), SIG4);
    apps.push(Appliance::start(name, config));
    let mut back = apps.split_off(2);
    converge("returned appliance", &mut back, |a| {
        a.call((id3, 1), 4).is_ok() && a.routes_null_to("hbm2-batch", "hbm2-inference")
    });
    let _ = std::fs::remove_dir_all(&dir);
}
