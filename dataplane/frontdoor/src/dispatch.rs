//! Each front-door thread's end of the ingress rings, kept in a thread
//! local: the thread runs a current-thread runtime, so every task that
//! touches it runs on it, and the port needs no lock. A drainer task
//! sleeps on the thread's eventfd and hands each answer to the request
//! waiting for it.

use std::cell::RefCell;
use std::os::fd::{AsRawFd, RawFd};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use sluice_engine::tables::Tables;
use sluice_engine::transport::ingress::{Answer, Credit, Done, Filling, IngressPort, SubmitError};
use sluice_wire::ErrorCode;
use tokio::io::Interest;
use tokio::io::unix::AsyncFd;
use tokio::sync::{mpsc, oneshot};

use crate::errors::Refusal;
use crate::semantic::Semantic;

/// Most token frames queued for one stream's reader. When the queue is
/// full the worker does not get the last frame's region back (its credit
/// is held) until the reader takes one: a slow reader holds its stream
/// back, never the front door's memory.
pub const STREAM_FRAMES_QUEUED_MAX: usize = 16;

/// What a token stream's request gets back, in order: its frames (each
/// copied once out of the reply slot, at most [`STREAM_FRAMES_QUEUED_MAX`]
/// queued), then the slot (empty once the stream ended; an error frame
/// when the OPEN was refused).
#[derive(Debug)]
pub enum StreamMsg {
    /// A token frame.
    Frame(Vec<u8>),
    /// The slot came back: the stream is over.
    End(Done),
}

/// Who waits for a slot's answer.
enum Waiter {
    One(oneshot::Sender<Done>),
    Stream {
        tx: mpsc::Sender<StreamMsg>,
        worker: usize,
        /// The last frame's credit is held: the queue was full.
        held: bool,
    },
}

struct Local {
    port: IngressPort,
    waiting: Vec<Option<Waiter>>,
    next_rid: u64,
    /// Names this thread in its signed frames: `next_rid` is its counter
    /// (docs/wire.md, "Replay windows"). Random per install, since the
    /// counter starts again at the same place.
    sender_id: u64,
}

thread_local! {
    static LOCAL: RefCell<Option<Local>> = const { RefCell::new(None) };
}

/// Installs this thread's port.
pub fn install(port: IngressPort) {
    let slots = port.pool().slots() as usize;
    let thread = port.thread() as u64;
    LOCAL.with(|l| {
        *l.borrow_mut() = Some(Local {
            port,
            waiting: (0..slots).map(|_| None).collect(),
            next_rid: thread << 48,
            sender_id: random_sender_id(),
        })
    });
}

/// The sender id of this thread's frames (`None` off a front-door thread).
pub fn sender_id() -> Option<u64> {
    LOCAL.with(|l| l.borrow().as_ref().map(|l| l.sender_id))
}

/// A random sender id, not 0 (the std hasher's keys come from the OS).
fn random_sender_id() -> u64 {
    use std::hash::{BuildHasher, RandomState};
    RandomState::new().hash_one(std::time::SystemTime::now()) | 1
}

/// Removes this thread's port (at shutdown).
pub fn uninstall() {
    LOCAL.with(|l| l.borrow_mut().take());
}

fn with<R>(f: impl FnOnce(&mut Local) -> R) -> Result<R, Refusal> {
    LOCAL.with(|l| match l.borrow_mut().as_mut() {
        Some(local) => Ok(f(local)),
        None => Err(Refusal::code(
            ErrorCode::ShuttingDown,
            "front door is stopping",
        )),
    })
}

/// A free slot and a fresh request id.
pub fn alloc() -> Result<(Filling, u64), Refusal> {
    with(|l| {
        l.next_rid += 1;
        l.port.alloc().map(|f| (f, l.next_rid))
    })?
    .ok_or_else(|| {
        Refusal::code(
            ErrorCode::Busy,
            "every front-door slot is in flight (frontdoor.slots)",
        )
    })
}

/// Hands a built frame to worker `w`; resolves with its answer.
pub fn submit(f: Filling, len: usize, w: usize) -> Result<oneshot::Receiver<Done>, Refusal> {
    let slot = f.slot() as usize;
    with(|l| {
        let (tx, rx) = oneshot::channel();
        match l.port.submit(f, len, w) {
            Ok(()) => {
                l.waiting[slot] = Some(Waiter::One(tx));
                Ok(rx)
            }
            Err(SubmitError::NoWorker(_)) => {
                Err(Refusal::code(ErrorCode::Internal, "no such worker"))
            }
            Err(SubmitError::Full(_)) => Err(Refusal::code(ErrorCode::Busy, "worker ring full")),
        }
    })?
}

/// Hands a token stream's `OPEN` to worker `w`; its frames and then its
/// slot arrive on the receiver. Returns the slot too, for [`credit`].
pub fn submit_stream(
    f: Filling,
    len: usize,
    w: usize,
) -> Result<(mpsc::Receiver<StreamMsg>, u32), Refusal> {
    let slot = f.slot();
    with(|l| {
        // One place more than the frames: the end always fits.
        let (tx, rx) = mpsc::channel(STREAM_FRAMES_QUEUED_MAX + 1);
        match l.port.submit(f, len, w) {
            Ok(()) => {
                l.waiting[slot as usize] = Some(Waiter::Stream {
                    tx,
                    worker: w,
                    held: false,
                });
                Ok((rx, slot))
            }
            Err(SubmitError::NoWorker(_)) => {
                Err(Refusal::code(ErrorCode::Internal, "no such worker"))
            }
            Err(SubmitError::Full(_)) => Err(Refusal::code(ErrorCode::Busy, "worker ring full")),
        }
    })?
}

/// The reader of the stream in `slot` took a frame (or went away): gives
/// the worker its region back if it was held.
pub fn credit(slot: u32) {
    let _ = with(|l| {
        if let Some(Some(Waiter::Stream { held, worker, .. })) = l.waiting.get_mut(slot as usize)
            && *held
        {
            *held = false;
            l.port.credit(*worker, slot);
        }
    });
}

/// Picks the worker for a request: one serving the shard its route names
/// (round robin among them), else any. The worker decides everything
/// again (route, tenant, admission); this only spreads the load.
pub fn pick_worker(tables: &Tables, sem: &Semantic, workers: usize, rr: &AtomicUsize) -> usize {
    let n = rr.fetch_add(1, Ordering::Relaxed);
    let workers = workers.max(1);
    let mask = tables
        .models
        .resolve(&sem.model, &sem.version)
        .and_then(|m| {
            let key = sluice_engine::route::RouteKey {
                model: &sem.model,
                version: &m.version,
                adapter: &sem.adapter,
                intent: &sem.intent,
                tenant: &sem.tenant.name,
                json: None,
            };
            tables.routes.find(&key).map(|r| r.shard)
        })
        .and_then(|s| tables.shards.get(s))
        .map_or(u64::MAX, |s| s.worker_mask);
    let usable = |w: usize| w < 64 && mask & (1 << w) != 0;
    let count = (0..workers).filter(|&w| usable(w)).count();
    if count == 0 {
        return n % workers;
    }
    (0..workers)
        .filter(|&w| usable(w))
        .nth(n % count)
        .unwrap_or(0)
}

/// The eventfd, kept open by the `Wake` it belongs to for as long as the
/// registration lives.
struct Fd(Arc<sluice_engine::transport::ingress::Wake>);

impl AsRawFd for Fd {
    fn as_raw_fd(&self) -> RawFd {
        self.0.fd()
    }
}

/// Hands answers to their requests until the port is uninstalled.
pub async fn drain(wake: Arc<sluice_engine::transport::ingress::Wake>) {
    // tokio deprecates the safe constructor because a raw fd could be
    // closed while registered; `Fd` owns the Wake that owns the fd, so it
    // cannot be here.
    #[allow(deprecated)]
    let registered = AsyncFd::with_interest(Fd(Arc::clone(&wake)), Interest::READABLE);
    let Ok(afd) = registered else {
        log::error!("front door: cannot watch the answer eventfd");
        return;
    };
    loop {
        wake.prepare_sleep();
        let got = with(|l| {
            let Local { port, waiting, .. } = l;
            port.drain_credited(|a| match a {
                Answer::Done(done) => {
                    let slot = done.slot() as usize;
                    // A request whose client went away drops its receiver:
                    // the answer is dropped here and its slot is free.
                    match waiting.get_mut(slot).and_then(Option::take) {
                        Some(Waiter::One(tx)) => {
                            let _ = tx.send(done);
                        }
                        Some(Waiter::Stream { tx, .. }) => {
                            // The place kept for the end: cannot be full.
                            let _ = tx.try_send(StreamMsg::End(done));
                        }
                        None => {}
                    }
                    Credit::Now
                }
                Answer::Part(p) => {
                    // The one copy of a token frame: the worker writes the
                    // next one into the same region.
                    let Some(Some(Waiter::Stream { tx, held, .. })) =
                        waiting.get_mut(p.slot() as usize)
                    else {
                        return Credit::Now;
                    };
                    // A frame comes only after the last one's credit, and a
                    // credit is held while the queue is full: this fits.
                    if tx.try_send(StreamMsg::Frame(p.reply().to_vec())).is_err() {
                        // The reader is gone: let the stream run to its end.
                        return Credit::Now;
                    }
                    if tx.capacity() <= 1 {
                        *held = true;
                        return Credit::Later;
                    }
                    Credit::Now
                }
            })
        });
        let Ok(n) = got else { return };
        if n > 0 {
            wake.awake();
            tokio::task::yield_now().await;
            continue;
        }
        match afd.readable().await {
            Ok(mut g) => {
                wake.clear();
                g.clear_ready();
            }
            Err(_) => return,
        }
        wake.awake();
    }
}
