//! Frame authentication: HMAC-SHA256 over the header, truncated to 128 bits.
//!
//! The tag covers every header byte except the tag field itself: the fixed
//! header, the routing strings, the extension headers and the tensor table
//! (names, dtypes, shapes, offsets, lengths). Tensor data is not covered, so
//! the check costs the same for any payload size. The body of a negotiate
//! request is covered too (at most 263 bytes): it names the subject asked
//! for. The FORWARDED flag is read as zero: a relaying appliance sets it
//! without the tenant key.

use sha2::digest::consts::U64;
use sha2::digest::generic_array::GenericArray;
use sha2::{Digest, Sha256};

use crate::Frame;

/// SHA-256's block length: HMAC's key length after padding.
const SHA256_BLOCK_LEN: usize = 64;

/// SHA-256's initial hash value (FIPS 180-4, 5.3.3).
const SHA256_IV: [u32; 8] = [
    0x6a09_e667,
    0xbb67_ae85,
    0x3c6e_f372,
    0xa54f_f53a,
    0x510e_527f,
    0x9b05_688c,
    0x1f83_d9ab,
    0x5be0_cd19,
];

/// Length of the authentication tag on the wire.
pub const AUTH_TAG_LEN: usize = 16;

/// One SHA-256 compression (sha2 picks SHA-NI when the CPU has it).
fn compress(state: &mut [u32; 8], block: &[u8]) {
    debug_assert_eq!(block.len(), SHA256_BLOCK_LEN);
    let b = GenericArray::<u8, U64>::from_slice(block);
    sha2::compress256(state, core::slice::from_ref(b));
}

/// The inner hash of one tag: the pre-keyed state, a block of pending
/// bytes, and the message length so far.
struct Inner {
    state: [u32; 8],
    buf: [u8; SHA256_BLOCK_LEN],
    fill: usize,
    len: u64,
}

impl Inner {
    fn update(&mut self, mut d: &[u8]) {
        self.len += d.len() as u64;
        if self.fill > 0 {
            let n = (SHA256_BLOCK_LEN - self.fill).min(d.len());
            self.buf[self.fill..self.fill + n].copy_from_slice(&d[..n]);
            self.fill += n;
            d = &d[n..];
            if self.fill < SHA256_BLOCK_LEN {
                return;
            }
            compress(&mut self.state, &self.buf);
            self.fill = 0;
        }
        let mut blocks = d.chunks_exact(SHA256_BLOCK_LEN);
        for b in &mut blocks {
            compress(&mut self.state, b);
        }
        let rest = blocks.remainder();
        self.buf[..rest.len()].copy_from_slice(rest);
        self.fill = rest.len();
    }

    /// Pads the inner hash, then runs the one outer block from `outer`.
    fn finish(mut self, outer: &[u32; 8]) -> [u8; 32] {
        // The length counts the pre-keyed ipad block too.
        let bits = (self.len + SHA256_BLOCK_LEN as u64) * 8;
        self.buf[self.fill] = 0x80;
        self.buf[self.fill + 1..].fill(0);
        if self.fill >= SHA256_BLOCK_LEN - 8 {
            compress(&mut self.state, &self.buf);
            self.buf = [0; SHA256_BLOCK_LEN];
        }
        self.buf[56..].copy_from_slice(&bits.to_be_bytes());
        compress(&mut self.state, &self.buf);
        let mut block = [0u8; SHA256_BLOCK_LEN];
        for (i, w) in self.state.iter().enumerate() {
            block[4 * i..4 * i + 4].copy_from_slice(&w.to_be_bytes());
        }
        block[32] = 0x80;
        // The opad block and the 32-byte inner digest.
        block[56..].copy_from_slice(&((SHA256_BLOCK_LEN as u64 + 32) * 8).to_be_bytes());
        let mut st = *outer;
        compress(&mut st, &block);
        let mut out = [0u8; 32];
        for (i, w) in st.iter().enumerate() {
            out[4 * i..4 * i + 4].copy_from_slice(&w.to_be_bytes());
        }
        out
    }
}

/// Compares in constant time (every byte is read, no early exit).
fn ct_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    let diff = a.iter().zip(b).fold(0u8, |d, (x, y)| d | (x ^ y));
    core::hint::black_box(diff) == 0
}

/// A tenant's key as HMAC-SHA256's two pre-keyed states (RFC 2104): the
/// hash state after the `key ^ ipad` block and after the `key ^ opad`
/// block, computed once when the tenant table is built. A tag then costs
/// the covered bytes' blocks plus one outer block, with no allocation.
#[derive(Clone)]
pub struct TenantKey {
    inner: [u32; 8],
    outer: [u32; 8],
}

impl core::fmt::Debug for TenantKey {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str("TenantKey(..)")
    }
}

impl TenantKey {
    /// Keys a MAC; any key length is accepted (HMAC hashes long keys).
    pub fn new(key: &[u8]) -> TenantKey {
        // HMAC hashes a key longer than the block and pads a shorter one
        // with zeros to the block.
        let mut block = [0u8; SHA256_BLOCK_LEN];
        if key.len() > SHA256_BLOCK_LEN {
            block[..32].copy_from_slice(&Sha256::digest(key));
        } else {
            block[..key.len()].copy_from_slice(key);
        }
        let pad = |x: u8| {
            let mut b = block;
            b.iter_mut().for_each(|v| *v ^= x);
            let mut st = SHA256_IV;
            compress(&mut st, &b);
            st
        };
        TenantKey {
            inner: pad(0x36),
            outer: pad(0x5c),
        }
    }

    fn start(&self) -> Inner {
        Inner {
            state: self.inner,
            buf: [0; SHA256_BLOCK_LEN],
            fill: 0,
            len: 0,
        }
    }

    fn keyed<B: AsRef<[u8]>>(&self, frame: &Frame<B>) -> [u8; 32] {
        let (a, b) = frame.auth_covered();
        let mut mac = self.start();
        // Bytes 6..8 are the flags; FORWARDED is masked out of the MAC.
        let flags = u16::from_le_bytes([a[6], a[7]]) & !crate::flags::FORWARDED;
        mac.update(&a[..6]);
        mac.update(&flags.to_le_bytes());
        mac.update(&a[8..]);
        mac.update(b);
        if frame.kind() == crate::Kind::NegotiateRequest {
            // Bounded by the body check: 8 + SUBJECT_LEN_MAX bytes.
            mac.update(frame.payload());
        }
        mac.finish(&self.outer)
    }

    /// Computes the tag of a checked frame.
    pub fn tag<B: AsRef<[u8]>>(&self, frame: &Frame<B>) -> [u8; AUTH_TAG_LEN] {
        let full = self.keyed(frame);
        let mut tag = [0u8; AUTH_TAG_LEN];
        tag.copy_from_slice(&full[..AUTH_TAG_LEN]);
        tag
    }

    /// Verifies the tag of a checked frame in constant time.
    pub fn verify<B: AsRef<[u8]>>(&self, frame: &Frame<B>) -> bool {
        ct_eq(&self.keyed(frame)[..AUTH_TAG_LEN], frame.auth_tag())
    }

    /// Verifies, in constant time, an HMAC-SHA256 over `msg` with this key
    /// (all 32 bytes): how the HTTP and gRPC front door checks a
    /// `Sluice-HMAC` request signature.
    pub fn verify_message(&self, msg: &[u8], tag: &[u8]) -> bool {
        ct_eq(&self.sign_message(msg), tag)
    }

    /// HMAC-SHA256 over `msg` with this key (what a client of the front
    /// door signs; see `verify_message`).
    pub fn sign_message(&self, msg: &[u8]) -> [u8; 32] {
        let mut mac = self.start();
        mac.update(msg);
        mac.finish(&self.outer)
    }

    /// Signs a frame in place: sets the AUTHENTICATED flag, then the tag.
    pub fn sign<B: AsRef<[u8]> + AsMut<[u8]>>(&self, frame: &mut Frame<B>) {
        frame.set_flags(frame.flags() | crate::flags::AUTHENTICATED);
        let tag = self.tag(frame);
        frame.set_auth_tag(&tag);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use hmac::{Hmac, Mac};

    /// The pre-keyed states give RFC 2104's HMAC-SHA256 (the hmac crate as
    /// the reference) for keys shorter than, equal to and longer than the
    /// block, and for messages around every padding boundary.
    #[test]
    fn prekeyed_states_match_hmac_for_every_key_and_message_length() {
        for len in [0usize, 1, 16, 32, 63, 64, 65, 128, 300] {
            let key: std::vec::Vec<u8> = (0..len).map(|i| (i * 7 + 3).to_le_bytes()[0]).collect();
            let ours = TenantKey::new(&key);
            for m in [
                0usize, 1, 54, 55, 56, 63, 64, 65, 118, 119, 120, 128, 200, 1000,
            ] {
                let msg: std::vec::Vec<u8> =
                    (0..m).map(|i| (i * 13 + 1).to_le_bytes()[0]).collect();
                let mut reference = <Hmac<Sha256> as Mac>::new_from_slice(&key).unwrap();
                reference.update(&msg);
                let want: [u8; 32] = reference.finalize().into_bytes().into();
                assert_eq!(
                    ours.sign_message(&msg),
                    want,
                    "key {len} bytes, message {m}"
                );
                assert!(ours.verify_message(&msg, &want));
                // Fed in uneven pieces, the same.
                let mut inner = ours.start();
                for piece in msg.chunks(7) {
                    inner.update(piece);
                }
                assert_eq!(inner.finish(&ours.outer), want);
            }
        }
    }
}
