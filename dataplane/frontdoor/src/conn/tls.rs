//! TLS on the front door's listeners (rustls, ring): the certificate and
//! key come from `frontdoor.tls_cert` / `tls_key`, and are loaded again
//! whenever either file changes (checked every `tls_reload_ms` on a thread
//! of their own): new connections get the new pair, open ones keep theirs.
//! A pair that fails to load leaves the one in use, logged and counted.
//! ALPN offers `h2` and `http/1.1` (gRPC: `h2`).

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, SystemTime};

use arc_swap::ArcSwap;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;

/// Largest certificate or key file read, bytes.
pub const PEM_BYTES_MAX: u64 = 1 << 20;

/// TLS counters.
#[derive(Debug, Default)]
pub struct TlsStats {
    /// Handshakes completed.
    pub handshakes: AtomicU64,
    /// Handshakes that failed or timed out (the connection is closed).
    pub handshake_failures: AtomicU64,
    /// Certificate pairs loaded after the first.
    pub reloads: AtomicU64,
    /// Changed pairs that could not be loaded (the old one stays).
    pub reload_failures: AtomicU64,
}

/// The certificate in use, swapped whole on reload.
#[derive(Debug)]
pub struct Certs {
    cert: PathBuf,
    key: PathBuf,
    current: ArcSwap<CertifiedKey>,
    /// The files' modification times when last loaded.
    seen: std::sync::Mutex<(Option<SystemTime>, Option<SystemTime>)>,
    /// Counters.
    pub stats: TlsStats,
}

impl ResolvesServerCert for Certs {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(self.current.load_full())
    }
}

fn read_bounded(p: &Path) -> Result<Vec<u8>, String> {
    let meta = std::fs::metadata(p).map_err(|e| format!("{}: {e}", p.display()))?;
    if meta.len() > PEM_BYTES_MAX {
        return Err(format!(
            "{}: larger than {PEM_BYTES_MAX} bytes",
            p.display()
        ));
    }
    std::fs::read(p).map_err(|e| format!("{}: {e}", p.display()))
}

fn mtime(p: &Path) -> Option<SystemTime> {
    std::fs::metadata(p).and_then(|m| m.modified()).ok()
}

/// Loads a certificate chain and its key.
pub fn load(cert: &Path, key: &Path) -> Result<CertifiedKey, String> {
    let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(&read_bounded(cert)?)
        .collect::<Result<_, _>>()
        .map_err(|e| format!("{}: {e}", cert.display()))?;
    if chain.is_empty() {
        return Err(format!("{}: no certificate in it", cert.display()));
    }
    let k = PrivateKeyDer::from_pem_slice(&read_bounded(key)?)
        .map_err(|e| format!("{}: {e}", key.display()))?;
    let signing = rustls::crypto::ring::sign::any_supported_type(&k)
        .map_err(|e| format!("{}: {e}", key.display()))?;
    let ck = CertifiedKey::new(chain, signing);
    ck.keys_match()
        .map_err(|e| format!("{} does not match {}: {e}", key.display(), cert.display()))?;
    Ok(ck)
}

impl Certs {
    /// Loads the pair; an error names the file.
    pub fn new(cert: PathBuf, key: PathBuf) -> Result<Arc<Certs>, String> {
        let ck = load(&cert, &key)?;
        let seen = (mtime(&cert), mtime(&key));
        Ok(Arc::new(Certs {
            cert,
            key,
            current: ArcSwap::from_pointee(ck),
            seen: std::sync::Mutex::new(seen),
            stats: TlsStats::default(),
        }))
    }

    /// Loads the pair again when either file changed; whether it did.
    pub fn reload_if_changed(&self) -> bool {
        let now = (mtime(&self.cert), mtime(&self.key));
        let Ok(mut seen) = self.seen.lock() else {
            return false;
        };
        if *seen == now {
            return false;
        }
        *seen = now;
        match load(&self.cert, &self.key) {
            Ok(ck) => {
                self.current.store(Arc::new(ck));
                self.stats.reloads.fetch_add(1, Ordering::Relaxed);
                log::info!(
                    "front door: TLS certificate {} loaded again",
                    self.cert.display()
                );
                true
            }
            Err(e) => {
                self.stats.reload_failures.fetch_add(1, Ordering::Relaxed);
                log::warn!("front door: TLS certificate not reloaded (the old one stays): {e}");
                false
            }
        }
    }

    /// The acceptor for a listener (`h2` only for gRPC).
    pub fn acceptor(self: &Arc<Self>, grpc: bool) -> Result<tokio_rustls::TlsAcceptor, String> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut cfg = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| format!("TLS: {e}"))?
            .with_no_client_auth()
            .with_cert_resolver(Arc::clone(self) as Arc<dyn ResolvesServerCert>);
        cfg.alpn_protocols = if grpc {
            vec![b"h2".to_vec()]
        } else {
            vec![b"h2".to_vec(), b"http/1.1".to_vec()]
        };
        Ok(tokio_rustls::TlsAcceptor::from(Arc::new(cfg)))
    }

    /// Counters, for status.
    pub fn to_json(&self) -> serde_json::Value {
        let g = |c: &AtomicU64| c.load(Ordering::Relaxed);
        serde_json::json!({
            "tls_handshakes": g(&self.stats.handshakes),
            "tls_handshake_failures": g(&self.stats.handshake_failures),
            "tls_reloads": g(&self.stats.reloads),
            "tls_reload_failures": g(&self.stats.reload_failures),
        })
    }
}

/// Checks the files every `every` until dropped.
#[derive(Debug)]
pub struct Reloader {
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Reloader {
    /// Starts checking `certs` every `every`.
    pub fn start(certs: Arc<Certs>, every: Duration) -> Result<Reloader, String> {
        let stop = Arc::new(AtomicBool::new(false));
        let s = Arc::clone(&stop);
        let thread = std::thread::Builder::new()
            .name("sluice-tls".into())
            .spawn(move || {
                // Sleeps in short steps so that a stop is seen quickly.
                let step = Duration::from_millis(50).min(every);
                let mut waited = Duration::ZERO;
                while !s.load(Ordering::Acquire) {
                    std::thread::sleep(step);
                    waited += step;
                    if waited >= every {
                        waited = Duration::ZERO;
                        certs.reload_if_changed();
                    }
                }
            })
            .map_err(|e| format!("TLS reload thread: {e}"))?;
        Ok(Reloader {
            stop,
            thread: Some(thread),
        })
    }
}

impl Drop for Reloader {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}
