//! A 64-byte aligned byte region, allocated once.

/// `len` zero bytes whose first byte is at a multiple of 64.
pub(crate) struct Aligned {
    // Drop order: the only field that owns memory; the region is an index
    // range into it.
    mem: Vec<u8>,
    start: usize,
    len: usize,
}

impl Aligned {
    pub(crate) fn new(len: usize) -> Aligned {
        let align = sluice_wire::TENSOR_ALIGN;
        let mem = vec![0u8; len + align];
        let start = mem.as_ptr().align_offset(align).min(align);
        Aligned { mem, start, len }
    }

    pub(crate) fn bytes_mut(&mut self) -> &mut [u8] {
        &mut self.mem[self.start..self.start + self.len]
    }
}
