//! testpmd floods the port from the peer namespace while requests are
//! served.

use super::*;

/// testpmd in the peer namespace, killed (SIGINT, then SIGKILL) on drop.
struct Generator(std::process::Child);

impl Generator {
    /// txonly flood of 64-byte UDP 10.99.0.2:9000 -> 10.99.0.1:9000 from an
    /// AF_PACKET vdev on the peer end (the peer kernel still gets replies).
    fn testpmd(log: &std::path::Path) -> Generator {
        let ns = env("SLUICE_NETNS", "sluice-dpdk");
        let if1 = env("SLUICE_IF1", "sldpdk1");
        let mac0 = std::fs::read_to_string(format!(
            "/sys/class/net/{}/address",
            env("SLUICE_IF0", "sldpdk0")
        ))
        .unwrap();
        let out = std::fs::File::create(log).unwrap();
        let child = Command::new("ip")
            .args([
                "netns",
                "exec",
                &ns,
                "dpdk-testpmd",
                "--lcores=0@0,1@0",
                "--no-pci",
                "--no-huge",
                "-m",
                "256",
            ])
            .args([
                "--file-prefix=sl-e2e-gen",
                &format!("--vdev=net_af_packet1,iface={if1}"),
                "--",
            ])
            .args([
                "--total-num-mbufs=8192",
                "--forward-mode=txonly",
                "--tx-ip=10.99.0.2,10.99.0.1",
            ])
            .args([
                "--tx-udp=9000,9000",
                &format!("--eth-peer=0,{}", mac0.trim()),
                "--stats-period=1",
            ])
            .stdout(out.try_clone().unwrap())
            .stderr(out)
            .spawn()
            .expect("dpdk-testpmd runs (apt-get install dpdk-dev)");
        Generator(child)
    }

    fn stop(&mut self) {
        // SAFETY: plain kill(2) on our own child's pid.
        unsafe { libc::kill(self.0.id() as i32, libc::SIGINT) };
        let deadline = Instant::now() + Duration::from_secs(5);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.0.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

impl Drop for Generator {
    fn drop(&mut self) {
        self.stop();
    }
}

/// testpmd floods the port with garbage while real requests keep being
/// answered; the garbage is counted and dropped, nothing crashes, no mbuf
/// leaks.
#[test]
fn testpmd_flood_while_serving() {
    isolated("flood::testpmd_flood_while_serving", || {
        let vdev = format!("net_af_xdp0,iface={}", env("SLUICE_IF0", "sldpdk0"));
        let mut engine =
            Engine::new(config(&vdev, "sl-e2e-flood"), EngineOptions::default()).unwrap();
        engine.start().expect("DPDK engine starts");
        let to = engine.local_addr().unwrap();
        let ns = env("SLUICE_NETNS", "sluice-dpdk");
        assert!(
            Command::new("ip")
                .args(["-n", &ns, "neigh", "flush", "all"])
                .status()
                .unwrap()
                .success()
        );
        let sock = peer_socket();
        sock.set_read_timeout(Some(Duration::from_millis(200)))
            .unwrap();
        let mut frame = vec![0u8; 4096];
        let n = build(
            &Req {
                id: 1,
                model: "null",
                version: "1",
                ..Req::default()
            },
            &mut frame,
        );
        assert_eq!(
            answer_kind(&roundtrip(&sock, to, &frame[..n])).0,
            Kind::Response
        );
        let idle = dpdk::stats().pool_in_use.unwrap();

        let log = std::env::temp_dir().join("sluice-e2e-testpmd.log");
        let mut generator = Generator::testpmd(&log);
        // testpmd's own EAL start takes seconds on a busy host.
        let s = wait_stats_for(Duration::from_secs(30), |s| {
            s.drops[Garbage::WrongPort as usize] >= 1000
        });
        assert!(
            s.drops[Garbage::WrongPort as usize] >= 1000,
            "the flood arrives: {s:?}\n{}",
            std::fs::read_to_string(&log).unwrap_or_default()
        );
        let before = dpdk::stats().total();
        let start = Instant::now();
        let (mut ok, mut lost) = (0u64, 0u64);
        let mut buf = vec![0u8; 70_000];
        let mut id = 10u64;
        while start.elapsed() < Duration::from_secs(3) {
            id += 1;
            let k = build(
                &Req {
                    id,
                    model: "null",
                    version: "1",
                    ..Req::default()
                },
                &mut frame,
            );
            sock.send_to(&frame[..k], to).unwrap();
            // Skip stale answers of requests that timed out earlier.
            loop {
                match sock.recv_from(&mut buf) {
                    Ok((m, _))
                        if Frame::new_checked(&buf[..m]).map(|f| f.request_id()) == Ok(id) =>
                    {
                        ok += 1;
                        break;
                    }
                    Ok(_) => continue,
                    Err(_) => {
                        lost += 1;
                        break;
                    }
                }
            }
        }
        let secs = start.elapsed().as_secs_f64();
        let after = dpdk::stats().total();
        generator.stop();
        let flood =
            after.drops[Garbage::WrongPort as usize] - before.drops[Garbage::WrongPort as usize];
        eprintln!(
            "under flood: {ok} answered, {lost} lost in {secs:.1} s ({:.0} req/s); appliance counted {:.0} pkt/s, dropped {:.0} garbage pkt/s",
            ok as f64 / secs,
            (after.rx_packets - before.rx_packets) as f64 / secs,
            flood as f64 / secs
        );
        eprintln!("port: {:?}", dpdk::stats().port);
        assert!(
            ok >= 50,
            "requests answered under the flood: {ok} ok, {lost} lost"
        );
        assert!(
            flood >= 1000,
            "garbage kept arriving and was counted: {flood}"
        );
        assert_eq!(after.tx_invalid + after.tx_no_neighbour, 0, "{after:?}");

        std::thread::sleep(Duration::from_millis(200));
        let in_use = dpdk::stats().pool_in_use.unwrap();
        assert!(
            in_use <= idle + TX_RECLAIM_SLACK,
            "mbufs in use {in_use}, idle {idle}: leak under flood"
        );
        engine.stop(Duration::from_millis(50));
        let r = dpdk::last_stop_report().unwrap();
        assert!(
            r.eal_cleaned && r.mbufs_missing <= idle + TX_RECLAIM_SLACK,
            "{r:?}"
        );
    });
}
