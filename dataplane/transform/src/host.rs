//! What the host keeps per instance and the functions a module may call:
//! `log`, `output-bytes-max`, `emit-section`, `emit-tensors`. The `emit-*`
//! functions copy what the module hands back straight from its memory into
//! the rebuilt request frame: the one copy of the output.

use std::time::Instant;

use sluice_wire::limits::{EXT_COUNT_MAX, RANK_MAX, TENSOR_COUNT_MAX, TENSOR_NAME_LEN_MAX};
use sluice_wire::{DType, ExtRepr, Frame, FrameRepr, SECTION_TENSOR_NAME, TensorRepr};
use wasmtime::component::{Linker, WasmList, WasmStr};
use wasmtime::{ResourceLimiter, StoreContextMut};

use crate::abi::{self, ErrorCode, Level, TensorView};
use crate::buf::AlignedBuf;
use crate::limits::{LOG_LINE_LEN_MAX, Limits};

/// Refuses memory growth past the limit and remembers that it did, so a
/// trap that follows is reported as out of memory.
#[derive(Debug)]
pub(crate) struct Limiter {
    pub memory_bytes_max: usize,
    pub oom: bool,
}

impl ResourceLimiter for Limiter {
    fn memory_growing(
        &mut self,
        _current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        if desired > self.memory_bytes_max {
            self.oom = true;
            wasmtime::bail!("memory limit of {} bytes reached", self.memory_bytes_max);
        }
        Ok(true)
    }

    fn table_growing(
        &mut self,
        _current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        Ok(desired <= 65_536)
    }
}

/// One output tensor's description, copied out of the module's memory
/// (metadata only: bounded by the wire limits).
#[derive(Debug, Clone, Copy)]
pub(crate) struct OutMeta {
    pub name: [u8; TENSOR_NAME_LEN_MAX],
    pub name_len: u8,
    pub dtype: DType,
    pub dims: [u64; RANK_MAX],
    pub rank: u8,
}

impl OutMeta {
    const EMPTY: OutMeta = OutMeta {
        name: [0; TENSOR_NAME_LEN_MAX],
        name_len: 0,
        dtype: DType::U8,
        dims: [0; RANK_MAX],
        rank: 0,
    };

    pub fn name(&self) -> &str {
        // Checked to be a token (ASCII) when it was copied in.
        std::str::from_utf8(&self.name[..self.name_len as usize]).unwrap_or("_")
    }

    pub fn dims(&self) -> &[u64] {
        &self.dims[..self.rank as usize]
    }
}

/// What the call in progress expects back.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Plan {
    /// No call in progress.
    Idle,
    /// A section, written at `off` of the frame buffer (the section is the
    /// last tensor of the rebuilt frame, so its offset does not depend on
    /// its length).
    Section { off: usize, cap: usize },
    /// Tensors; a section of `section_len` bytes rides after them.
    Tensors { section_len: Option<u64> },
}

/// What the module handed back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Emitted {
    Nothing,
    Section {
        len: usize,
    },
    Tensors {
        n: usize,
    },
    /// It broke the protocol (named for the status).
    Bad(&'static str),
}

/// Per-instance host state.
pub(crate) struct HostState {
    pub limiter: Limiter,
    pub frame: AlignedBuf,
    pub plan: Plan,
    pub emitted: Emitted,
    pub outs: [OutMeta; TENSOR_COUNT_MAX],
    /// The header of the request being transformed, for laying out the
    /// rebuilt frame inside `emit-tensors`.
    pub header: Box<HeaderCopy>,
    pub output_bytes_max: u32,
    log_window: Instant,
    log_lines: u32,
    log_lines_per_s: u32,
    /// Lines dropped by the rate limit.
    pub log_dropped: u64,
    /// Bytes copied out of the module (counted for the caller).
    pub copied: u64,
}

/// The request's routing strings and extension headers, copied (header
/// bytes only, at most `HEADER_LEN_MAX`), so that the frame laid out inside
/// `emit-tensors` is the frame emitted after the call.
pub(crate) struct HeaderCopy {
    buf: [u8; sluice_wire::limits::HEADER_LEN_MAX],
    /// (start, len) of model, model version, adapter, intent.
    strings: [(u16, u16); 4],
    /// (key start, key len, value start, value len).
    exts: [(u16, u16, u16, u16); EXT_COUNT_MAX],
    ext_n: usize,
}

impl HeaderCopy {
    const EMPTY: HeaderCopy = HeaderCopy {
        buf: [0; sluice_wire::limits::HEADER_LEN_MAX],
        strings: [(0, 0); 4],
        exts: [(0, 0, 0, 0); EXT_COUNT_MAX],
        ext_n: 0,
    };

    /// Copies the header parts of a checked request frame (they fit: the
    /// request's own header is at most `HEADER_LEN_MAX`).
    pub fn set(&mut self, req: &Frame<&[u8]>) {
        let mut at = 0usize;
        let mut put = |buf: &mut [u8], b: &[u8]| {
            let n = b.len().min(buf.len() - at);
            buf[at..at + n].copy_from_slice(&b[..n]);
            let span = (at as u16, n as u16);
            at += n;
            span
        };
        let parts = [
            req.model(),
            req.model_version(),
            req.adapter(),
            req.intent(),
        ];
        for (i, p) in parts.iter().enumerate() {
            self.strings[i] = put(&mut self.buf, p.as_bytes());
        }
        self.ext_n = 0;
        for (slot, e) in self.exts.iter_mut().zip(req.extensions()) {
            let k = put(&mut self.buf, e.key.as_bytes());
            let v = put(&mut self.buf, e.value);
            *slot = (k.0, k.1, v.0, v.1);
            self.ext_n += 1;
        }
    }

    fn str_at(&self, start: u16, len: u16) -> &str {
        let (s, n) = (start as usize, len as usize);
        std::str::from_utf8(&self.buf[s..s + n]).unwrap_or("")
    }

    /// The extension headers, into `out`; returns how many.
    pub fn exts<'a>(&'a self, out: &mut [ExtRepr<'a>; EXT_COUNT_MAX]) -> usize {
        for (o, &(ks, kl, vs, vl)) in out.iter_mut().zip(&self.exts[..self.ext_n]) {
            *o = ExtRepr {
                key: self.str_at(ks, kl),
                value: &self.buf[vs as usize..vs as usize + vl as usize],
            };
        }
        self.ext_n
    }

    /// A request frame with this header and these tensors.
    pub fn repr<'a>(
        &'a self,
        exts: &'a [ExtRepr<'a>],
        tensors: &'a [TensorRepr<'a>],
    ) -> FrameRepr<'a> {
        let s = |i: usize| self.str_at(self.strings[i].0, self.strings[i].1);
        FrameRepr {
            model: s(0),
            model_version: s(1),
            adapter: s(2),
            intent: s(3),
            extensions: exts,
            tensors,
            ..FrameRepr::default()
        }
    }
}

/// An empty extension, to fill fixed arrays.
pub(crate) const NO_EXT: ExtRepr<'static> = ExtRepr {
    key: "_",
    value: &[],
};

impl HostState {
    pub fn new(limits: &Limits) -> HostState {
        HostState {
            limiter: Limiter {
                memory_bytes_max: limits.memory_bytes_max,
                oom: false,
            },
            frame: AlignedBuf::new(limits.frame_bytes_max),
            plan: Plan::Idle,
            emitted: Emitted::Nothing,
            outs: [OutMeta::EMPTY; TENSOR_COUNT_MAX],
            header: Box::new(HeaderCopy::EMPTY),
            output_bytes_max: limits.output_bytes_max,
            log_window: Instant::now(),
            log_lines: 0,
            log_lines_per_s: limits.log_lines_per_s,
            log_dropped: 0,
            copied: 0,
        }
    }
}

fn log_line(cx: &mut StoreContextMut<'_, HostState>, level: Level, msg: &WasmStr) {
    let st = cx.data_mut();
    if st.log_window.elapsed().as_secs() >= 1 {
        st.log_window = Instant::now();
        st.log_lines = 0;
    }
    if st.log_lines >= st.log_lines_per_s {
        st.log_dropped += 1;
        return;
    }
    st.log_lines += 1;
    let Ok(text) = msg.to_str(&*cx) else {
        return;
    };
    let mut end = text.len().min(LOG_LINE_LEN_MAX);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    let text = &text[..end];
    match level {
        Level::Error => log::error!(target: "sluice::transform", "{text}"),
        Level::Warn => log::warn!(target: "sluice::transform", "{text}"),
        Level::Info => log::info!(target: "sluice::transform", "{text}"),
        Level::Debug => log::debug!(target: "sluice::transform", "{text}"),
    }
}

fn emit_section(
    cx: &mut StoreContextMut<'_, HostState>,
    bytes: &WasmList<u8>,
) -> Result<(), ErrorCode> {
    let st = cx.data();
    let Plan::Section { off, cap } = st.plan else {
        cx.data_mut().emitted = Emitted::Bad("emit-section for a tensors input");
        return Err(ErrorCode::Internal);
    };
    if st.emitted != Emitted::Nothing {
        cx.data_mut().emitted = Emitted::Bad("emitted twice");
        return Err(ErrorCode::Internal);
    }
    let len = bytes.len();
    if len > cap || len > st.output_bytes_max as usize {
        return Err(ErrorCode::OutputTooLarge);
    }
    // The buffer is moved out while the module's memory is borrowed.
    let mut frame = std::mem::take(&mut cx.data_mut().frame);
    let src = bytes.as_le_slice(&*cx);
    frame.as_mut_slice()[off..off + len].copy_from_slice(src);
    let st = cx.data_mut();
    st.frame = frame;
    st.copied += len as u64;
    st.emitted = Emitted::Section { len };
    Ok(())
}

fn emit_tensors(
    cx: &mut StoreContextMut<'_, HostState>,
    list: &WasmList<TensorView>,
) -> Result<(), ErrorCode> {
    let Plan::Tensors { section_len } = cx.data().plan else {
        cx.data_mut().emitted = Emitted::Bad("emit-tensors for a section input");
        return Err(ErrorCode::Internal);
    };
    if cx.data().emitted != Emitted::Nothing {
        cx.data_mut().emitted = Emitted::Bad("emitted twice");
        return Err(ErrorCode::Internal);
    }
    let n = list.len();
    let room = TENSOR_COUNT_MAX - usize::from(section_len.is_some());
    if n > room {
        cx.data_mut().emitted = Emitted::Bad("more tensors than a frame carries");
        return Err(ErrorCode::OutputTooLarge);
    }
    // Lift the views (no allocation: each is a pointer and a length into
    // the module's memory) and copy their metadata.
    let mut views: [Option<TensorView>; TENSOR_COUNT_MAX] = Default::default();
    let Ok(iter) = list.iter(&mut *cx) else {
        return Err(ErrorCode::Internal);
    };
    for (slot, v) in views.iter_mut().zip(iter) {
        match v {
            Ok(v) => *slot = Some(v),
            Err(_) => return Err(ErrorCode::Internal),
        }
    }
    let mut outs = [OutMeta::EMPTY; TENSOR_COUNT_MAX];
    let mut total = 0usize;
    for (o, v) in outs.iter_mut().zip(views.iter().take(n).flatten()) {
        let bad = |why| Err(why);
        let meta = (|| {
            let name = v
                .name
                .to_str(&*cx)
                .map_err(|_| "a tensor name is not UTF-8")?;
            if name.is_empty()
                || name.len() > TENSOR_NAME_LEN_MAX
                || !name.bytes().all(|b| b.is_ascii_graphic())
                || name == SECTION_TENSOR_NAME
            {
                return bad("a tensor name is not a wire token");
            }
            let dtype = DType::from_u8(v.dtype).ok_or("an unknown dtype")?;
            let shape = v.shape.as_le_slice(&*cx);
            if shape.len() > RANK_MAX {
                return bad("a tensor of rank above 8");
            }
            let mut m = OutMeta::EMPTY;
            m.name[..name.len()].copy_from_slice(name.as_bytes());
            m.name_len = name.len() as u8;
            m.dtype = dtype;
            m.rank = shape.len() as u8;
            for (d, s) in m.dims.iter_mut().zip(shape) {
                *d = u64::from_le(*s);
            }
            let len = dtype.byte_len(m.dims()).ok_or("a tensor shape overflows")?;
            if len != v.data.len() {
                return bad("tensor data length differs from its shape");
            }
            Ok(m)
        })();
        match meta {
            Ok(m) => {
                total += v.data.len();
                *o = m;
            }
            Err(why) => {
                cx.data_mut().emitted = Emitted::Bad(why);
                return Err(ErrorCode::Internal);
            }
        }
    }
    if total > cx.data().output_bytes_max as usize {
        return Err(ErrorCode::OutputTooLarge);
    }
    // Lay the rebuilt frame out: the outputs, then the section.
    let section_dims = [section_len.unwrap_or(0)];
    let empty = TensorRepr {
        name: "_",
        dtype: DType::U8,
        dims: &[],
        data: None,
    };
    let mut reprs = [empty; TENSOR_COUNT_MAX];
    for (r, o) in reprs.iter_mut().zip(&outs[..n]) {
        *r = TensorRepr {
            name: o.name(),
            dtype: o.dtype,
            dims: o.dims(),
            data: None,
        };
    }
    let mut count = n;
    if section_len.is_some() {
        reprs[n] = TensorRepr {
            name: SECTION_TENSOR_NAME,
            dtype: DType::U8,
            dims: &section_dims,
            data: None,
        };
        count += 1;
    }
    let st = cx.data();
    let mut exts = [NO_EXT; EXT_COUNT_MAX];
    let ext_n = st.header.exts(&mut exts);
    let layout = match st.header.repr(&exts[..ext_n], &reprs[..count]).layout() {
        Ok(l) if l.frame_len <= st.frame.len() => l,
        Ok(_) | Err(sluice_wire::Error::TooLarge | sluice_wire::Error::SizeOverflow) => {
            return Err(ErrorCode::OutputTooLarge);
        }
        Err(_) => {
            cx.data_mut().emitted = Emitted::Bad("tensors the wire format refuses");
            return Err(ErrorCode::Internal);
        }
    };
    let mut frame = std::mem::take(&mut cx.data_mut().frame);
    let dst = frame.as_mut_slice();
    for (i, v) in views.iter().take(n).flatten().enumerate() {
        let src = v.data.as_le_slice(&*cx);
        let off = layout.tensor_offsets[i];
        dst[off..off + src.len()].copy_from_slice(src);
    }
    let st = cx.data_mut();
    st.frame = frame;
    st.outs = outs;
    st.copied += total as u64;
    st.emitted = Emitted::Tensors { n };
    Ok(())
}

/// Defines the world's imports.
pub(crate) fn define(linker: &mut Linker<HostState>) -> wasmtime::Result<()> {
    // The types interface holds only types: an empty instance satisfies it.
    linker.instance(&abi::interface_name(abi::TYPES_INTERFACE))?;
    let mut host = linker.instance(&abi::interface_name(abi::HOST_INTERFACE))?;
    host.func_wrap(
        "log",
        |mut cx: StoreContextMut<'_, HostState>, (level, msg): (Level, WasmStr)| {
            log_line(&mut cx, level, &msg);
            Ok(())
        },
    )?;
    host.func_wrap(
        "output-bytes-max",
        |cx: StoreContextMut<'_, HostState>, (): ()| Ok((cx.data().output_bytes_max,)),
    )?;
    host.func_wrap(
        "emit-section",
        |mut cx: StoreContextMut<'_, HostState>, (bytes,): (WasmList<u8>,)| {
            Ok((emit_section(&mut cx, &bytes),))
        },
    )?;
    host.func_wrap(
        "emit-tensors",
        |mut cx: StoreContextMut<'_, HostState>, (list,): (WasmList<TensorView>,)| {
            Ok((emit_tensors(&mut cx, &list),))
        },
    )?;
    Ok(())
}
