//! Connection admission: the per-thread count (`connections_max`) and the
//! per-source count (`connections_per_source_max`, in a table of at most
//! `sources_max` addresses), both released by a drop guard so that a
//! connection task that panics or is cancelled still gives its place back.
//! At `connections_max` a new connection is not refused while another one
//! has no request in flight: the one idle longest is closed to make room
//! ([`Live::evict_idlest`]), so sockets that send nothing, or only part of
//! a request head, can never lock legitimate clients out; only requests
//! in flight (authenticated before their bodies are read) hold places.

pub mod body;
pub mod io;
pub mod timers;
pub mod tls;

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, Weak};

use crate::ctx::{Ctx, Stats};

use timers::Conn;

/// A thread's live connections, for eviction at `connections_max`.
/// Touched at accept only (a lock per accept, never per request).
#[derive(Debug)]
pub struct Live {
    conns: Mutex<Vec<Weak<Conn>>>,
    /// Entries kept before the closed ones are swept: twice the live cap.
    sweep_at: usize,
}

impl Live {
    /// For a thread of at most `connections_max` connections.
    pub fn new(connections_max: u32) -> Live {
        let cap = connections_max as usize;
        Live {
            conns: Mutex::new(Vec::with_capacity(2 * cap)),
            sweep_at: 2 * cap.max(1),
        }
    }

    /// Registers an admitted connection.
    pub fn add(&self, c: &Arc<Conn>) {
        let mut v = self.conns.lock().unwrap_or_else(|p| p.into_inner());
        if v.len() >= self.sweep_at {
            v.retain(|w| w.strong_count() > 0);
        }
        v.push(Arc::downgrade(c));
    }

    /// Tells the connection with no request in flight for the longest to
    /// close; whether there was one. O(connections) at the cap only.
    pub fn evict_idlest(&self) -> bool {
        let mut v = self.conns.lock().unwrap_or_else(|p| p.into_inner());
        v.retain(|w| w.strong_count() > 0);
        let idlest = v
            .iter()
            .filter_map(Weak::upgrade)
            .filter_map(|c| c.evictable_since().map(|t| (t, c)))
            .min_by_key(|(t, _)| *t);
        match idlest {
            Some((_, c)) => {
                c.evict();
                true
            }
            None => false,
        }
    }
}

/// Why a connection was refused at accept.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refused {
    /// `connections_max` on this thread.
    Thread,
    /// `connections_per_source_max` for its source.
    Source,
    /// `sources_max` distinct sources already tracked.
    Sources,
}

/// Open connections by source, across all threads.
#[derive(Debug)]
pub struct Sources {
    open: Mutex<HashMap<IpAddr, u32>>,
    per_source_max: u32,
    entries_max: usize,
}

/// The address a source is counted under: IPv4 (IPv4-mapped IPv6 too) as
/// is, other IPv6 by /64, the block one host is usually given.
pub fn source_key(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V4(_) => ip,
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => IpAddr::V6((u128::from(v6) & !((1u128 << 64) - 1)).into()),
        },
    }
}

impl Sources {
    /// A table of at most `entries_max` sources, `per_source_max` each.
    pub fn new(per_source_max: u32, entries_max: u32) -> Sources {
        Sources {
            open: Mutex::new(HashMap::new()),
            per_source_max,
            entries_max: entries_max as usize,
        }
    }

    fn admit(&self, key: IpAddr) -> Result<(), Refused> {
        let mut open = self.open.lock().unwrap_or_else(|p| p.into_inner());
        let full = open.len() >= self.entries_max;
        match open.get_mut(&key) {
            Some(n) if *n >= self.per_source_max => Err(Refused::Source),
            Some(n) => {
                *n += 1;
                Ok(())
            }
            None if full => Err(Refused::Sources),
            None => {
                open.insert(key, 1);
                Ok(())
            }
        }
    }

    fn release(&self, key: IpAddr) {
        let mut open = self.open.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(n) = open.get_mut(&key) {
            *n -= 1;
            if *n == 0 {
                // Entries live only while their source has a connection:
                // the table holds at most the open connections' sources.
                open.remove(&key);
            }
        }
    }

    /// Sources tracked now.
    pub fn len(&self) -> usize {
        self.open.lock().unwrap_or_else(|p| p.into_inner()).len()
    }

    /// Whether no source is tracked.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// A connection's place in both counts, given back on drop.
pub struct Admitted {
    ctx: Arc<Ctx>,
    conns: Arc<AtomicUsize>,
    key: IpAddr,
}

impl Drop for Admitted {
    fn drop(&mut self) {
        self.conns.fetch_sub(1, Ordering::Relaxed);
        self.ctx.sources.release(self.key);
    }
}

/// Takes a place for a connection from `peer` on a thread whose open
/// connections are `conns` (registered in `live`), or says (and counts)
/// why not. At `connections_max` the idlest connection is evicted to make
/// room; the count then runs over the cap until it has closed (by at most
/// the connections evicted and not yet gone, each evicted once).
pub fn admit(
    ctx: &Arc<Ctx>,
    conns: &Arc<AtomicUsize>,
    live: &Live,
    peer: IpAddr,
) -> Result<Admitted, Refused> {
    if conns.load(Ordering::Relaxed) >= ctx.cfg.connections_max as usize && !live.evict_idlest() {
        Stats::add(&ctx.stats.connections_refused, 1);
        return Err(Refused::Thread);
    }
    let key = source_key(peer);
    if let Err(r) = ctx.sources.admit(key) {
        let c = match r {
            Refused::Sources => &ctx.stats.refused_sources_full,
            _ => &ctx.stats.refused_per_source,
        };
        Stats::add(c, 1);
        return Err(r);
    }
    conns.fetch_add(1, Ordering::Relaxed);
    Ok(Admitted {
        ctx: Arc::clone(ctx),
        conns: Arc::clone(conns),
        key,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn per_source_and_table_bounds() {
        let s = Sources::new(2, 2);
        let a: IpAddr = "10.0.0.1".parse().unwrap_or(IpAddr::V4([0; 4].into()));
        let b: IpAddr = "10.0.0.2".parse().unwrap_or(IpAddr::V4([0; 4].into()));
        let c: IpAddr = "10.0.0.3".parse().unwrap_or(IpAddr::V4([0; 4].into()));
        assert_eq!(s.admit(a), Ok(()));
        assert_eq!(s.admit(a), Ok(()));
        assert_eq!(s.admit(a), Err(Refused::Source));
        assert_eq!(s.admit(b), Ok(()));
        assert_eq!(s.admit(c), Err(Refused::Sources));
        s.release(b);
        assert_eq!(s.len(), 1);
        assert_eq!(s.admit(c), Ok(()));
        s.release(a);
        s.release(a);
        s.release(c);
        assert!(s.is_empty());
    }

    #[test]
    fn ipv6_counts_by_slash_64() {
        let p = |s: &str| source_key(s.parse().unwrap_or(IpAddr::V4([0; 4].into())));
        assert_eq!(p("2001:db8:1:2:aaaa::1"), p("2001:db8:1:2:bbbb::2"));
        assert_ne!(p("2001:db8:1:2::1"), p("2001:db8:1:3::1"));
        assert_eq!(p("::ffff:10.0.0.1"), p("10.0.0.1"));
    }
}
