//! A 64-byte aligned buffer allocated once (the rebuilt request frame of an
//! instance), without unsafe code: a little longer than asked, used from
//! its first aligned byte.

/// Alignment of tensor data on the wire and in buffers.
pub const ALIGN: usize = 64;

/// A fixed buffer whose slice starts 64-byte aligned.
#[derive(Debug, Default)]
pub struct AlignedBuf {
    mem: Vec<u8>,
    start: usize,
    len: usize,
}

impl AlignedBuf {
    /// `len` usable bytes.
    pub fn new(len: usize) -> AlignedBuf {
        let mem = vec![0u8; len + ALIGN];
        let start = mem.as_ptr().align_offset(ALIGN);
        AlignedBuf { mem, start, len }
    }

    /// Usable length.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether empty (only while moved out during a host call).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The aligned bytes.
    pub fn as_slice(&self) -> &[u8] {
        &self.mem[self.start..self.start + self.len]
    }

    /// The aligned bytes, writable.
    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        &mut self.mem[self.start..self.start + self.len]
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn aligned() {
        for n in [0, 1, 100, 4096] {
            let b = super::AlignedBuf::new(n);
            assert_eq!(b.as_slice().as_ptr() as usize % super::ALIGN, 0);
            assert_eq!(b.as_slice().len(), n);
        }
    }
}
