//! Pings a Sluice server and prints the round-trip times.
//!
//! cargo run -p sluice-client --example ping -- [ADDR] [COUNT]

use std::time::Duration;

use sluice_client::{Client, ClientConfig, PollMode};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let addr = args.next().unwrap_or_else(|| "127.0.0.1:7070".into());
    let count: u32 = args.next().map_or(Ok(5), |c| c.parse())?;
    let cfg = ClientConfig {
        timeout: Duration::from_secs(1),
        poll: PollMode::Spin,
        ..ClientConfig::default()
    };
    let mut client = Client::connect(addr.as_str(), cfg)?;
    for i in 0..count {
        match client.ping() {
            Ok(rtt) => println!(
                "pong from {addr}: seq={i} time={:.1} µs",
                rtt.as_secs_f64() * 1e6
            ),
            Err(e) => println!("no pong from {addr}: seq={i}: {e}"),
        }
    }
    Ok(())
}
