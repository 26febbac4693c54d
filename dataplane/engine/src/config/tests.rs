//! Config parsing and validation: every refusal names its key and line.

use super::*;

fn err(text: &str) -> ConfigError {
    Config::parse(text, PathBuf::from("/tmp")).expect_err("config must be refused")
}

#[test]
fn the_shipped_configs_parse() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../cfg");
    let mut n = 0;
    for entry in std::fs::read_dir(&root).unwrap() {
        let p = entry.unwrap().path();
        if p.extension().is_some_and(|e| e == "toml") {
            Config::load(&p).unwrap_or_else(|e| panic!("{e}"));
            n += 1;
        }
    }
    assert!(n >= 1);
}

#[test]
fn unknown_keys_name_the_line() {
    let e = err("[engine]\nworkers = [0]\nspeed = 3\n");
    assert_eq!(e.line, Some(3), "{e}");
    assert!(e.to_string().contains("speed"), "{e}");
    let e = err("[[shards]]\nname = \"s\"\nqueue = 3\n");
    assert_eq!(e.line, Some(3), "{e}");
}

#[test]
fn range_errors_name_line_and_key() {
    let e = err("[engine]\nworkers = [0]\nrx_burst_max = 9999\n");
    assert_eq!(
        (e.line, e.key.as_str()),
        (Some(3), "engine.rx_burst_max"),
        "{e}"
    );
    let e = err("[engine]\nworkers = [0]\n[io_uring]\nrx_buffers = 100\n");
    assert_eq!(
        (e.line, e.key.as_str()),
        (Some(4), "io_uring.rx_buffers"),
        "{e}"
    );
    assert!(e.message.contains("power of two"));
    let e = err("[engine]\nworkers = [4096]\n");
    assert_eq!(e.key, "engine.workers[0]");
    assert!(e.message.contains("does not exist"), "{e}");
    let e = err("[io_uring]\nlisten = \"nowhere\"\n");
    assert_eq!((e.line, e.key.as_str()), (Some(2), "io_uring.listen"));
}

#[test]
fn cross_references_are_checked() {
    let e = err("[[shards]]\nname = \"a\"\n[[routes]]\nname = \"r\"\nshard = \"b\"\n");
    assert_eq!(
        (e.line, e.key.as_str()),
        (Some(5), "routes[0].shard"),
        "{e}"
    );
    let e = err("[[shards]]\nname = \"a\"\n[[shards]]\nname = \"a\"\n");
    assert_eq!(e.key, "shards[1].name");
    let e = err(
        "[[routes]]\nname = \"r\"\nversion = \"^x\"\nshard = \"a\"\n[[shards]]\nname = \"a\"\n",
    );
    assert_eq!(
        (e.line, e.key.as_str()),
        (Some(3), "routes[0].version"),
        "{e}"
    );
    let e = err("[[tenants]]\nname = \"t\"\nid = 1\nkey = \"hex:00\"\n");
    assert!(e.message.contains("at least 16 bytes"), "{e}");
    let e = err("[[models]]\nname = \"m\"\nversion = \"1\"\n");
    assert_eq!(e.key, "models[0].path", "{e}");
    let e = err("[[models]]\nname = \"m\"\nversion = \"1\"\nkind = \"null\"\naliases = [\"1\"]\n");
    assert!(e.message.contains("already names"), "{e}");
}

#[test]
fn batching_keys_are_checked_with_their_line() {
    let shard = |extra: &str| format!("[[shards]]\nname = \"s\"\nqueue_depth = 64\n{extra}");
    let cfg = Config::parse(
        &shard("batch_max = 32\nbatch_delay_us = 500\n"),
        "/tmp".into(),
    )
    .unwrap();
    assert_eq!(
        (cfg.shards[0].batch_max, cfg.shards[0].batch_delay_us),
        (32, 500)
    );
    let cfg = Config::parse(&shard(""), "/tmp".into()).unwrap();
    assert_eq!(
        (cfg.shards[0].batch_max, cfg.shards[0].batch_delay_us),
        (1, 0)
    );
    let e = err(&shard("batch_max = 0\n"));
    assert_eq!(
        (e.line, e.key.as_str()),
        (Some(4), "shards[0].batch_max"),
        "{e}"
    );
    let e = err(&shard("batch_max = 257\n"));
    assert!(e.message.contains("out of range 1..=256"), "{e}");
    let e = err(&shard("batch_max = 128\n"));
    assert!(e.message.contains("above queue_depth (64)"), "{e}");
    let e = err(&shard("batch_delay_us = 100\n"));
    assert_eq!(
        (e.line, e.key.as_str()),
        (Some(4), "shards[0].batch_delay_us"),
        "{e}"
    );
    assert!(e.message.contains("needs batch_max above 1"), "{e}");
    let e = err(&shard("batch_max = 4\nbatch_delay_us = 1000001\n"));
    assert_eq!(
        (e.line, e.key.as_str()),
        (Some(5), "shards[0].batch_delay_us"),
        "{e}"
    );
    let model = |extra: &str| {
        format!("[[models]]\nname = \"m\"\nversion = \"1\"\npath = \"m.onnx\"\n{extra}")
    };
    let cfg = Config::parse(
        &model("batch_max = 8\nbatch_delay_us = 200\n"),
        "/tmp".into(),
    )
    .unwrap();
    assert_eq!(
        (cfg.models[0].batch_max, cfg.models[0].batch_delay_us),
        (Some(8), Some(200))
    );
    let e = err(&model("batch_delay_us = 200\n"));
    assert_eq!(
        (e.line, e.key.as_str()),
        (Some(5), "models[0].batch_delay_us"),
        "{e}"
    );
    let e = err(&model("batch_max = 300\n"));
    assert_eq!(
        (e.line, e.key.as_str()),
        (Some(5), "models[0].batch_max"),
        "{e}"
    );
    let e = err("[[models]]\nname = \"n\"\nversion = \"1\"\nkind = \"null\"\nbatch_max = 4\n");
    assert_eq!(
        (e.line, e.key.as_str()),
        (Some(5), "models[0].batch_max"),
        "{e}"
    );
    assert!(e.message.contains("only onnx models batch"), "{e}");
    // Unset keys stay out of the JSON the control plane round-trips.
    let cfg = Config::parse(&format!("{}{}", shard(""), model("")), "/tmp".into()).unwrap();
    let j = serde_json::to_string(&cfg.shards[0]).unwrap()
        + &serde_json::to_string(&cfg.models[0]).unwrap();
    assert!(!j.contains("batch"), "{j}");
}

#[test]
fn syntax_errors_name_the_line() {
    let e = err("[engine]\nworkers = [0\n");
    assert!(e.line.is_some(), "{e}");
}

#[test]
fn errors_display_file_line_key() {
    let dir = std::env::temp_dir().join(format!("sluice-cfg-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let p = dir.join("bad.toml");
    std::fs::write(&p, "[engine]\nworkers = [0]\nspin_us = 5000000\n").unwrap();
    let e = Config::load(&p).unwrap_err();
    assert_eq!(
        e.to_string(),
        format!(
            "{}:3: engine.spin_us: 5000000 is out of range 0..=1000000",
            p.display()
        )
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn tcp_keys_are_checked_with_line_and_key() {
    let e = err("[io_uring]\ntcp_listen = \"here\"\n");
    assert_eq!(
        (e.line, e.key.as_str()),
        (Some(2), "io_uring.tcp_listen"),
        "{e}"
    );
    let e = err(
        "[io_uring]\ntcp_slots = [\n  { size = 65536, count = 4 },\n  { size = 65536, count = 4 },\n]\n",
    );
    assert_eq!(e.key, "io_uring.tcp_slots[1].size", "{e}");
    assert!(e.message.contains("smallest first"), "{e}");
    let e = err("[io_uring]\ntcp_slots = [{ size = 5000, count = 4 }]\n");
    assert!(e.message.contains("multiple of 4096"), "{e}");
    let e =
        err("[io_uring]\ntcp_slots = [{ size = 65536, count = 4 }]\ntcp_frame_len_max = 65537\n");
    assert_eq!(
        (e.line, e.key.as_str()),
        (Some(3), "io_uring.tcp_frame_len_max"),
        "{e}"
    );
    let e = err("[io_uring]\ntcp_slots = [{ size = 268435456, count = 64 }]\n");
    assert!(e.message.contains("exceed"), "{e}");
    let e = err("[io_uring]\ntcp_send_zc = \"maybe\"\n");
    assert_eq!(e.line, Some(2), "{e}");
    let e = err("[[peers]]\nname = \"b\"\naddress = \"10.0.0.2:7070\"\ntcp_address = \"b\"\n");
    assert_eq!(
        (e.line, e.key.as_str()),
        (Some(4), "peers[0].tcp_address"),
        "{e}"
    );
    for (text, key) in [
        ("tcp_send_timeout_ms = 5", "io_uring.tcp_send_timeout_ms"),
        ("tcp_frame_timeout_ms = 0", "io_uring.tcp_frame_timeout_ms"),
        (
            "tcp_connections_per_source_max = 0",
            "io_uring.tcp_connections_per_source_max",
        ),
        (
            "tcp_large_slots_per_source_pct = 101",
            "io_uring.tcp_large_slots_per_source_pct",
        ),
        (
            "tcp_large_slots_per_tenant_pct = 0",
            "io_uring.tcp_large_slots_per_tenant_pct",
        ),
        (
            "tcp_verified_reserve_pct = 95",
            "io_uring.tcp_verified_reserve_pct",
        ),
    ] {
        let e = err(&format!("[io_uring]\n{text}\n"));
        assert_eq!((e.line, e.key.as_str()), (Some(2), key), "{e}");
    }
    // The defaults are valid and 0 means the largest slot.
    let ok = Config::parse(
        "[io_uring]\ntcp_listen = \"127.0.0.1:0\"\n",
        PathBuf::from("/tmp"),
    )
    .unwrap();
    assert_eq!(ok.io_uring.tcp_frame_len_limit(), (16 << 20) + (64 << 10));
    assert_eq!(
        ok.tcp_listen_addr().unwrap(),
        Some("127.0.0.1:0".parse().unwrap())
    );
}
