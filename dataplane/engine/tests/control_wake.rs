//! A sleeping io_uring worker is woken by the control side's eventfd
//! (issue 22 item 5): its `wait` returns when the fd is written, not when
//! its timeout ends; a transport that polls no eventfd gets no control
//! wake, so the worker keeps its sleep bound. How fast an apply reaches
//! idle workers is measured in perf/scaling (`--apply`), not here.
#![cfg_attr(test, allow(clippy::unwrap_used, clippy::expect_used))]

use std::sync::Arc;
use std::time::{Duration, Instant};

use sluice_engine::config::{HugepageMode, UringCfg};
use sluice_engine::transport::Transport;
use sluice_engine::transport::ingress::{Sources, Wake};
use sluice_engine::transport::mem::MemTransport;
use sluice_engine::transport::uring::UringTransport;

/// Far longer than any wake-up: reaching it means the fd did not wake.
const TIMEOUT: Duration = Duration::from_secs(30);

#[test]
fn a_write_to_the_control_eventfd_ends_a_sleep_on_the_ring() {
    let cfg = UringCfg {
        listen: "127.0.0.1:0".into(),
        rx_buffers: 64,
        tx_buffers: 64,
        buffer_size: 4096,
        ..UringCfg::default()
    };
    let t = UringTransport::new("127.0.0.1:0".parse().unwrap(), &cfg, HugepageMode::Off)
        .expect("transport starts");
    let wake = Arc::new(Wake::new().unwrap());
    let mut s = Sources::new(t, None, Some(Arc::clone(&wake)));
    let k = s.control_wake().expect("io_uring polls the eventfd");
    assert!(Arc::ptr_eq(&k, &wake));
    for round in 0..3 {
        // The control side writes once the sleeper has raised its flag (or
        // later: the eventfd stays readable until the ring reads it).
        k.prepare_sleep();
        let writer = {
            let k = Arc::clone(&k);
            std::thread::spawn(move || {
                std::thread::sleep(Duration::from_millis(20));
                k.notify();
            })
        };
        let t0 = Instant::now();
        s.wait(TIMEOUT);
        k.awake();
        writer.join().unwrap();
        assert!(
            t0.elapsed() < TIMEOUT / 2,
            "round {round}: the sleep ran to its timeout"
        );
        // The ring's next poll reads the eventfd (and re-arms its poll).
        let mut rx = vec![Default::default(); 8];
        s.rx_burst(&mut rx);
    }
}

#[test]
fn a_transport_that_polls_no_eventfd_gets_no_control_wake() {
    let (t, _port) = MemTransport::new(8, 8, 4096);
    let s = Sources::new(t, None, Some(Arc::new(Wake::new().unwrap())));
    assert!(s.control_wake().is_none());
}
