//! `NativeClient`: the Rust client behind the Python `Client` and
//! `AsyncClient`.
//!
//! Frames are built while attached to the interpreter (the builder reads the
//! input arrays in place); waiting for answers happens detached, so other
//! Python threads run meanwhile. One client serves one thread at a time:
//! a second thread that calls in while the first waits gets
//! `ClientBusyError` rather than a deadlock.

use std::collections::HashMap;
use std::net::{SocketAddr, ToSocketAddrs};
use std::sync::{Mutex, MutexGuard, TryLockError};
use std::time::Duration;

use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyList, PyTuple};
use sluice_client::{
    Answer, Client, ClientConfig, ClientError, Endpoints, PollMode, Response, SchemaType,
    TransportMode,
};

use crate::array::CopyStats;
use crate::errors;
use crate::request::{Options, Prepared};
use crate::response;

/// Most answers one `poll` or one detached receive hands back.
const POLL_BATCH_MAX: usize = 256;

/// The Rust client, which carries UDP, TCP or both (its `TransportMode`).
struct Link(Client);

impl Link {
    fn client(&mut self) -> &mut Client {
        &mut self.0
    }
}

/// The first address `addr` resolves to.
fn resolve(addr: &str) -> Result<SocketAddr, ClientError> {
    addr.to_socket_addrs()?.next().ok_or_else(|| {
        ClientError::Io(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            format!("{addr} resolves to no address"),
        ))
    })
}

/// Opens the client: `udp` on `addr`; `tcp` on `tcp_addr` (else `addr`);
/// `auto` on UDP `addr` and, with `tcp_addr`, TCP there for the frames a
/// datagram cannot carry.
fn open(
    mode: TransportMode,
    addr: &str,
    tcp_addr: Option<&str>,
    cfg: ClientConfig,
) -> Result<Client, ClientError> {
    let cfg = ClientConfig {
        transport: mode,
        ..cfg
    };
    let ep = match mode {
        TransportMode::Udp => Endpoints {
            udp: Some(resolve(addr)?),
            tcp: None,
        },
        TransportMode::Tcp => Endpoints {
            udp: None,
            tcp: Some(resolve(tcp_addr.unwrap_or(addr))?),
        },
        TransportMode::Auto => Endpoints {
            udp: Some(resolve(addr)?),
            tcp: tcp_addr.map(resolve).transpose()?,
        },
    };
    Client::connect_endpoints(ep, cfg)
}

/// The native client. Python's `sluice.Client` and `sluice.AsyncClient`
/// wrap it; use those.
#[pyclass(module = "sluice._native", name = "NativeClient")]
pub struct NativeClient {
    inner: Mutex<Option<Link>>,
    copies: CopyStats,
    timeout: Duration,
}

fn seconds(py: Python<'_>, what: &str, s: f64) -> PyResult<Duration> {
    if !s.is_finite() || s <= 0.0 {
        return Err(errors::invalid_msg(
            py,
            &format!("{what} must be a positive number of seconds"),
        ));
    }
    Ok(Duration::from_secs_f64(s))
}

/// Request arguments read from an `InferRequest` (attributes) or a
/// `(model, version, inputs)` tuple.
fn request_from<'py>(
    py: Python<'py>,
    obj: &Bound<'py, PyAny>,
    copies: &CopyStats,
) -> PyResult<(Prepared<'py>, Option<f64>)> {
    if let Ok(t) = obj.cast::<PyTuple>() {
        let (model, version, inputs): (String, String, Bound<'py, PyAny>) =
            t.extract().map_err(|_| {
                errors::invalid_msg(
                    py,
                    "a request is an InferRequest or a (model, version, inputs) tuple",
                )
            })?;
        let p = Prepared::new(py, model, version, &inputs, Options::default(), copies)?;
        return Ok((p, None));
    }
    let get = |name: &str| -> PyResult<Option<Bound<'py, PyAny>>> {
        let v = obj.getattr(name)?;
        Ok((!v.is_none()).then_some(v))
    };
    let opts = Options {
        adapter: get("adapter")?.map(|v| v.extract()).transpose()?,
        intent: get("intent")?.map(|v| v.extract()).transpose()?,
        deadline: get("deadline")?,
        trace: get("trace")?,
        schema: get("schema")?,
        section: get("section")?,
        extensions: get("extensions")?,
        token_count: get("token_count")?
            .map(|v| v.extract())
            .transpose()?
            .unwrap_or(0),
    };
    let timeout = get("timeout")?.map(|v| v.extract()).transpose()?;
    let p = Prepared::new(
        py,
        obj.getattr("model")?.extract()?,
        obj.getattr("version")?.extract()?,
        &obj.getattr("inputs")?,
        opts,
        copies,
    )?;
    Ok((p, timeout))
}

/// One blocking receive, then whatever else is ready, up to `max`.
fn receive_batch(client: &mut Client, max: usize) -> Result<Vec<Answer>, ClientError> {
    let mut got = vec![client.recv()?];
    while got.len() < max {
        match client.try_recv()? {
            Some(a) => got.push(a),
            None => break,
        }
    }
    Ok(got)
}

impl NativeClient {
    fn lock(&self, py: Python<'_>) -> PyResult<MutexGuard<'_, Option<Link>>> {
        match self.inner.try_lock() {
            Ok(g) => Ok(g),
            // Nothing panics while holding the lock; if it ever did, the
            // client's state is still consistent between calls.
            Err(TryLockError::Poisoned(p)) => Ok(p.into_inner()),
            Err(TryLockError::WouldBlock) => Err(errors::make(
                py,
                "busy",
                None,
                "this client is in use by another thread; use one client per thread (or AsyncClient)",
                false,
                None,
            )),
        }
    }

    fn closed_error(py: Python<'_>) -> PyErr {
        errors::make(py, "closed", None, "the client is closed", false, None)
    }

    fn send_one(
        &self,
        py: Python<'_>,
        client: &mut Client,
        p: &Prepared<'_>,
        timeout: Option<f64>,
    ) -> PyResult<u64> {
        let t = timeout.map(|t| seconds(py, "timeout", t)).transpose()?;
        if let Some(t) = t {
            client.set_timeout(t);
        }
        let r = client.send(&p.request());
        if t.is_some() {
            client.set_timeout(self.timeout);
        }
        r.map_err(|e| errors::client_error(py, e))
    }

    fn answer_object<'py>(
        &self,
        py: Python<'py>,
        res: Result<Response, ClientError>,
        full: bool,
    ) -> PyResult<Bound<'py, PyAny>> {
        let resp = res.map_err(|e| errors::client_error(py, e))?;
        if full {
            Ok(
                Py::new(py, response::response_obj(py, resp, &self.copies)?)?
                    .into_bound(py)
                    .into_any(),
            )
        } else {
            Ok(response::outputs(py, resp, &self.copies)?.into_any())
        }
    }
}

#[pymethods]
impl NativeClient {
    #[new]
    #[pyo3(signature = (addr, tenant=0, key=None, transport="udp", timeout=1.0, poll="block", outstanding_max=4096, schema_cache_max=1024, tcp_addr=None))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        addr: &str,
        tenant: u32,
        key: Option<Vec<u8>>,
        transport: &str,
        timeout: f64,
        poll: &str,
        outstanding_max: usize,
        schema_cache_max: usize,
        tcp_addr: Option<String>,
    ) -> PyResult<Self> {
        let timeout = seconds(py, "timeout", timeout)?;
        let poll = match poll {
            "block" => PollMode::Block,
            "spin" => PollMode::Spin,
            other => {
                return Err(errors::invalid_msg(
                    py,
                    &format!("poll must be \"block\" or \"spin\", not {other:?}"),
                ));
            }
        };
        let mode = match transport {
            "udp" => TransportMode::Udp,
            "tcp" => TransportMode::Tcp,
            "auto" => TransportMode::Auto,
            other => {
                return Err(errors::invalid_msg(
                    py,
                    &format!("transport must be \"udp\", \"tcp\" or \"auto\", not {other:?}"),
                ));
            }
        };
        if outstanding_max == 0 {
            return Err(errors::invalid_msg(
                py,
                "outstanding_max must be at least 1",
            ));
        }
        let cfg = ClientConfig {
            tenant_id: tenant,
            key,
            timeout,
            retries_max: 0,
            poll,
            outstanding_max,
            schema_cache_max,
            ..ClientConfig::default()
        };
        let addr = addr.to_owned();
        let client = py
            .detach(move || open(mode, &addr, tcp_addr.as_deref(), cfg))
            .map_err(|e| errors::client_error(py, e))?;
        Ok(NativeClient {
            inner: Mutex::new(Some(Link(client))),
            copies: CopyStats::default(),
            timeout,
        })
    }

    /// Sends one request without waiting; returns its request id.
    #[pyo3(signature = (model, version, inputs, *, adapter=None, intent=None, deadline=None, trace=None, schema=None, section=None, extensions=None, token_count=0, timeout=None))]
    #[allow(clippy::too_many_arguments)]
    fn send<'py>(
        &self,
        py: Python<'py>,
        model: String,
        version: String,
        inputs: Bound<'py, PyAny>,
        adapter: Option<String>,
        intent: Option<String>,
        deadline: Option<Bound<'py, PyAny>>,
        trace: Option<Bound<'py, PyAny>>,
        schema: Option<Bound<'py, PyAny>>,
        section: Option<Bound<'py, PyAny>>,
        extensions: Option<Bound<'py, PyAny>>,
        token_count: u32,
        timeout: Option<f64>,
    ) -> PyResult<u64> {
        let opts = Options {
            adapter,
            intent,
            deadline,
            trace,
            schema,
            section,
            extensions,
            token_count,
        };
        let p = Prepared::new(py, model, version, &inputs, opts, &self.copies)?;
        let mut g = self.lock(py)?;
        let client = g.as_mut().ok_or_else(|| Self::closed_error(py))?.client();
        self.send_one(py, client, &p, timeout)
    }

    /// Keeps the frames of `request_id` (a token stream's OPEN, right
    /// after `send`) for `recv_followed`, the first one included.
    fn follow(&self, py: Python<'_>, request_id: u64) -> PyResult<()> {
        let mut g = self.lock(py)?;
        let client = g.as_mut().ok_or_else(|| Self::closed_error(py))?.client();
        client
            .follow(request_id)
            .map_err(|e| errors::client_error(py, e))
    }

    /// Stops following `request_id`; frames kept for it are dropped.
    fn unfollow(&self, py: Python<'_>, request_id: u64) -> PyResult<()> {
        let mut g = self.lock(py)?;
        if let Some(l) = g.as_mut() {
            l.client().unfollow(request_id);
        }
        Ok(())
    }

    /// The next frame of followed `request_id` as a `Response`, waiting up
    /// to `timeout` seconds (0: only what has arrived); `None` when none
    /// came. An error frame raises its `ServerError`.
    fn recv_followed<'py>(
        &self,
        py: Python<'py>,
        request_id: u64,
        timeout: f64,
    ) -> PyResult<Option<Bound<'py, PyAny>>> {
        if !timeout.is_finite() || timeout < 0.0 {
            return Err(errors::invalid_msg(
                py,
                "timeout must be a non-negative number of seconds",
            ));
        }
        let wait = Duration::from_secs_f64(timeout);
        let mut g = self.lock(py)?;
        let client = g.as_mut().ok_or_else(|| Self::closed_error(py))?.client();
        let res = py.detach(|| client.recv_followed(request_id, wait));
        drop(g);
        match res {
            Ok(None) => Ok(None),
            Ok(Some(r)) => self.answer_object(py, Ok(r), true).map(Some),
            Err(e) => Err(errors::client_error(py, e)),
        }
    }

    /// Sends one request and waits for its answer: the outputs (a dict of
    /// arrays), or with `full` a `Response` carrying the metadata too.
    #[pyo3(signature = (model, version, inputs, *, adapter=None, intent=None, deadline=None, trace=None, schema=None, section=None, extensions=None, token_count=0, timeout=None, full=false))]
    #[allow(clippy::too_many_arguments)]
    fn infer<'py>(
        &self,
        py: Python<'py>,
        model: String,
        version: String,
        inputs: Bound<'py, PyAny>,
        adapter: Option<String>,
        intent: Option<String>,
        deadline: Option<Bound<'py, PyAny>>,
        trace: Option<Bound<'py, PyAny>>,
        schema: Option<Bound<'py, PyAny>>,
        section: Option<Bound<'py, PyAny>>,
        extensions: Option<Bound<'py, PyAny>>,
        token_count: u32,
        timeout: Option<f64>,
        full: bool,
    ) -> PyResult<Bound<'py, PyAny>> {
        let opts = Options {
            adapter,
            intent,
            deadline,
            trace,
            schema,
            section,
            extensions,
            token_count,
        };
        let p = Prepared::new(py, model, version, &inputs, opts, &self.copies)?;
        let mut g = self.lock(py)?;
        let client = g.as_mut().ok_or_else(|| Self::closed_error(py))?.client();
        let id = self.send_one(py, client, &p, timeout)?;
        drop(p);
        let res = py.detach(|| {
            loop {
                match client.recv() {
                    Ok((got, res)) if got == id => return Ok(res),
                    // An answer or timeout of a request a caller gave up on.
                    Ok(_) => continue,
                    Err(e) => return Err(e),
                }
            }
        });
        drop(g);
        let res = res.map_err(|e| errors::client_error(py, e))?;
        self.answer_object(py, res, full)
    }

    /// Sends `requests` keeping up to `window` in flight; returns their
    /// outputs in order. With `return_exceptions` a failed request's slot
    /// holds its exception; otherwise the first failure (in order) is raised
    /// once every request has been answered or has timed out.
    #[pyo3(signature = (requests, window=32, return_exceptions=false))]
    fn infer_many<'py>(
        &self,
        py: Python<'py>,
        requests: Vec<Bound<'py, PyAny>>,
        window: usize,
        return_exceptions: bool,
    ) -> PyResult<Bound<'py, PyList>> {
        if window == 0 {
            return Err(errors::invalid_msg(py, "window must be at least 1"));
        }
        let n = requests.len();
        let mut results: Vec<Option<PyResult<Bound<'py, PyAny>>>> = (0..n).map(|_| None).collect();
        let mut g = self.lock(py)?;
        let client = g.as_mut().ok_or_else(|| Self::closed_error(py))?.client();
        let window = window.min(client.config().outstanding_max);
        let mut ids: HashMap<u64, usize> = HashMap::with_capacity(window);
        let (mut next, mut done) = (0usize, 0usize);
        while done < n {
            while ids.len() < window && next < n {
                let sent = request_from(py, &requests[next], &self.copies)
                    .and_then(|(p, t)| self.send_one(py, client, &p, t));
                match sent {
                    Ok(id) => {
                        ids.insert(id, next);
                    }
                    Err(e) => {
                        results[next] = Some(Err(e));
                        done += 1;
                    }
                }
                next += 1;
            }
            if ids.is_empty() {
                continue;
            }
            let batch = py
                .detach(|| receive_batch(client, POLL_BATCH_MAX))
                .map_err(|e| errors::client_error(py, e))?;
            for (id, res) in batch {
                if let Some(i) = ids.remove(&id) {
                    results[i] = Some(self.answer_object(py, res, false));
                    done += 1;
                }
            }
        }
        drop(g);
        let out = PyList::empty(py);
        let mut first_err = None;
        for r in results {
            match r {
                Some(Ok(v)) => out.append(v)?,
                Some(Err(e)) => {
                    if return_exceptions {
                        out.append(e.into_value(py))?;
                    } else if first_err.is_none() {
                        first_err = Some(e);
                    }
                }
                None => out.append(py.None())?,
            }
        }
        match first_err {
            Some(e) => Err(e),
            None => Ok(out),
        }
    }

    /// Answers that are ready now (never blocks): `(request_id, outputs,
    /// None)` or `(request_id, None, exception)`, at most `max`.
    #[pyo3(signature = (max=POLL_BATCH_MAX))]
    fn poll<'py>(&self, py: Python<'py>, max: usize) -> PyResult<Bound<'py, PyList>> {
        let out = PyList::empty(py);
        let mut g = self.lock(py)?;
        let client = g.as_mut().ok_or_else(|| Self::closed_error(py))?.client();
        for _ in 0..max {
            let Some((id, res)) = client.try_recv().map_err(|e| errors::client_error(py, e))?
            else {
                break;
            };
            match self.answer_object(py, res, false) {
                Ok(v) => out.append((id, v, py.None()))?,
                Err(e) => out.append((id, py.None(), e.into_value(py)))?,
            }
        }
        Ok(out)
    }

    /// In-band schema negotiation (cached per subject and hint for the ttl
    /// the appliance gives).
    #[pyo3(signature = (subject, version_hint=0))]
    fn negotiate<'py>(
        &self,
        py: Python<'py>,
        subject: String,
        version_hint: u32,
    ) -> PyResult<Bound<'py, PyDict>> {
        let mut g = self.lock(py)?;
        let client = g.as_mut().ok_or_else(|| Self::closed_error(py))?.client();
        let s = py
            .detach(|| client.negotiate(&subject, version_hint))
            .map_err(|e| errors::client_error(py, e))?;
        drop(g);
        let d = PyDict::new(py);
        d.set_item("schema_id", s.schema_id)?;
        d.set_item("version", s.version)?;
        d.set_item("ttl", s.ttl.as_secs_f64())?;
        let kind = match s.schema_type {
            SchemaType::Avro => "AVRO",
            SchemaType::Protobuf => "PROTOBUF",
            SchemaType::Json => "JSON",
            SchemaType::Tensor => "TENSOR",
        };
        d.set_item("schema_type", kind)?;
        d.set_item("schema", PyBytes::new(py, &s.bytes))?;
        Ok(d)
    }

    /// Round trip of a ping, in seconds.
    fn ping(&self, py: Python<'_>) -> PyResult<f64> {
        let mut g = self.lock(py)?;
        let client = g.as_mut().ok_or_else(|| Self::closed_error(py))?.client();
        py.detach(|| client.ping())
            .map(|d| d.as_secs_f64())
            .map_err(|e| errors::client_error(py, e))
    }

    /// The socket's file descriptor (for event loops).
    fn fileno(&self, py: Python<'_>) -> PyResult<i32> {
        use std::os::fd::AsRawFd;
        let mut g = self.lock(py)?;
        let client = g.as_mut().ok_or_else(|| Self::closed_error(py))?.client();
        Ok(client.socket().as_raw_fd())
    }

    /// `(fd, reconnects)` of the TCP connection while one is open, else
    /// None. A reconnect may reuse the number of the closed descriptor;
    /// the reconnect count tells the two apart (event loops re-register).
    fn tcp_fileno(&self, py: Python<'_>) -> PyResult<Option<(i32, u64)>> {
        use std::os::fd::AsRawFd;
        let mut g = self.lock(py)?;
        let client = g.as_mut().ok_or_else(|| Self::closed_error(py))?.client();
        let n = client.stats().tcp_reconnects;
        Ok(client.tcp_stream().map(|s| (s.as_raw_fd(), n)))
    }

    /// Answers already read and waiting to be taken (a TCP write that was
    /// pushed back reads answers meanwhile: no socket readiness tells of
    /// them).
    fn ready(&self, py: Python<'_>) -> PyResult<bool> {
        let mut g = self.lock(py)?;
        let client = g.as_mut().ok_or_else(|| Self::closed_error(py))?.client();
        Ok(client.has_ready())
    }

    /// `(host, port)` of the local socket.
    fn local_addr(&self, py: Python<'_>) -> PyResult<(String, u16)> {
        let mut g = self.lock(py)?;
        let client = g.as_mut().ok_or_else(|| Self::closed_error(py))?.client();
        let a = client
            .local_addr()
            .map_err(|e| errors::client_error(py, e))?;
        Ok((a.ip().to_string(), a.port()))
    }

    /// `(host, port)` of the appliance.
    fn server_addr(&self, py: Python<'_>) -> PyResult<(String, u16)> {
        let mut g = self.lock(py)?;
        let client = g.as_mut().ok_or_else(|| Self::closed_error(py))?.client();
        let a = client.server_addr();
        Ok((a.ip().to_string(), a.port()))
    }

    /// Requests sent and not yet answered or timed out.
    fn outstanding(&self, py: Python<'_>) -> PyResult<usize> {
        let mut g = self.lock(py)?;
        let client = g.as_mut().ok_or_else(|| Self::closed_error(py))?.client();
        Ok(client.outstanding())
    }

    /// Counters: the Rust client's and the binding's copies.
    fn stats<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let d = PyDict::new(py);
        {
            let mut g = self.lock(py)?;
            if let Some(t) = g.as_mut() {
                let s = t.client().stats();
                for (k, v) in [
                    ("sent", s.sent),
                    ("received", s.received),
                    ("stale", s.stale),
                    ("malformed", s.malformed),
                    ("bad_tag", s.bad_tag),
                    ("timeouts", s.timeouts),
                    ("retries", s.retries),
                    ("schema_cache_hits", s.schema_cache_hits),
                    ("tcp_sent", s.tcp_sent),
                    ("tcp_reconnects", s.tcp_reconnects),
                    ("connection_losses", s.connection_losses),
                    // Copies the Rust client made out of its receive
                    // buffers (every datagram; small TCP answers).
                    ("answers_copied", s.answers_copied),
                    ("answer_bytes_copied", s.answer_bytes_copied),
                ] {
                    d.set_item(k, v)?;
                }
            }
        }
        for (k, v) in self.copies.pairs() {
            d.set_item(k, v)?;
        }
        Ok(d)
    }

    /// Closes the sockets. Further calls fail with `ClientClosedError`.
    fn close(&self, py: Python<'_>) -> PyResult<()> {
        let mut g = self.lock(py)?;
        *g = None;
        Ok(())
    }

    /// The sender id the client names in its signed frames (docs/wire.md,
    /// "Replay windows").
    #[getter]
    fn sender_id(&self, py: Python<'_>) -> PyResult<u64> {
        let mut g = self.lock(py)?;
        let l = g.as_mut().ok_or_else(|| Self::closed_error(py))?;
        Ok(l.client().sender_id())
    }

    /// Whether `close` was called.
    #[getter]
    fn closed(&self, py: Python<'_>) -> PyResult<bool> {
        Ok(self.lock(py)?.is_none())
    }
}
