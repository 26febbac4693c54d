//! Frame authentication: HMAC-SHA256 over the header, truncated to 128 bits.
//!
//! The tag covers every header byte except the tag field itself: the fixed
//! header, the routing strings, the extension headers and the tensor table
//! (names, dtypes, shapes, offsets, lengths). Tensor data is not covered, so
//! the check costs the same for any payload size. The body of a negotiate
//! request is covered too (at most 263 bytes): it names the subject asked
//! for. The FORWARDED flag is read as zero: a relaying appliance sets it
//! without the tenant key.

use hmac::digest::KeyInit;
use hmac::{Hmac, Mac};
use sha2::{Digest, Sha256};

use crate::Frame;

/// SHA-256's block length: HMAC's key length after padding.
const SHA256_BLOCK_LEN: usize = 64;

/// Length of the authentication tag on the wire.
pub const AUTH_TAG_LEN: usize = 16;

/// A tenant's key, keyed once so that each tag costs two compression
/// rounds plus the header, with no allocation.
#[derive(Clone)]
pub struct TenantKey {
    mac: Hmac<Sha256>,
}

impl core::fmt::Debug for TenantKey {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str("TenantKey(..)")
    }
}

impl TenantKey {
    /// Keys a MAC; any key length is accepted (HMAC hashes long keys).
    pub fn new(key: &[u8]) -> TenantKey {
        // HMAC (RFC 2104) hashes a key longer than the hash's block and pads
        // a shorter one with zeros to the block: doing that here gives the
        // same MAC through the infallible, block-sized constructor.
        let mut block = [0u8; SHA256_BLOCK_LEN];
        if key.len() > SHA256_BLOCK_LEN {
            block[..32].copy_from_slice(&Sha256::digest(key));
        } else {
            block[..key.len()].copy_from_slice(key);
        }
        let mac = <Hmac<Sha256> as KeyInit>::new(&block.into());
        TenantKey { mac }
    }

    fn keyed<B: AsRef<[u8]>>(&self, frame: &Frame<B>) -> Hmac<Sha256> {
        let (a, b) = frame.auth_covered();
        let mut mac = self.mac.clone();
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
        mac
    }

    /// Computes the tag of a checked frame.
    pub fn tag<B: AsRef<[u8]>>(&self, frame: &Frame<B>) -> [u8; AUTH_TAG_LEN] {
        let full = self.keyed(frame).finalize().into_bytes();
        let mut tag = [0u8; AUTH_TAG_LEN];
        tag.copy_from_slice(&full[..AUTH_TAG_LEN]);
        tag
    }

    /// Verifies the tag of a checked frame in constant time.
    pub fn verify<B: AsRef<[u8]>>(&self, frame: &Frame<B>) -> bool {
        self.keyed(frame)
            .verify_truncated_left(frame.auth_tag())
            .is_ok()
    }

    /// Verifies, in constant time, an HMAC-SHA256 over `msg` with this key
    /// (all 32 bytes): how the HTTP and gRPC front door checks a
    /// `Sluice-HMAC` request signature.
    pub fn verify_message(&self, msg: &[u8], tag: &[u8]) -> bool {
        let mut mac = self.mac.clone();
        mac.update(msg);
        mac.verify_slice(tag).is_ok()
    }

    /// HMAC-SHA256 over `msg` with this key (what a client of the front
    /// door signs; see `verify_message`).
    pub fn sign_message(&self, msg: &[u8]) -> [u8; 32] {
        let mut mac = self.mac.clone();
        mac.update(msg);
        mac.finalize().into_bytes().into()
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

    /// The block-padded key gives the same MAC as HMAC's own key handling,
    /// for keys shorter than, equal to and longer than the block.
    #[test]
    fn padded_key_matches_hmac_for_every_key_length() {
        for len in [0usize, 1, 16, 32, 63, 64, 65, 128, 300] {
            let key: std::vec::Vec<u8> = (0..len).map(|i| (i * 7 + 3).to_le_bytes()[0]).collect();
            let mut ours = TenantKey::new(&key).mac;
            let mut reference = <Hmac<Sha256> as Mac>::new_from_slice(&key).unwrap();
            ours.update(b"the same message");
            reference.update(b"the same message");
            assert_eq!(
                ours.finalize().into_bytes(),
                reference.finalize().into_bytes(),
                "key of {len} bytes"
            );
        }
    }
}
