//! The UDP sockets of the io_uring transport and the kernel structures
//! its receives and sends carry: SO_REUSEPORT binding, SO_RXQ_OVFL and its
//! control message, socket addresses in `sockaddr_storage`, and the
//! classic BPF program that steers signed frames to a worker by tag.
#![allow(unsafe_code)]

use std::io;
use std::mem::size_of;
use std::net::{SocketAddr, SocketAddrV4, SocketAddrV6, UdpSocket};
use std::os::fd::AsRawFd;

pub(super) fn bind_reuseport(addr: SocketAddr) -> io::Result<UdpSocket> {
    let domain = if addr.is_ipv4() {
        socket2::Domain::IPV4
    } else {
        socket2::Domain::IPV6
    };
    let s = socket2::Socket::new(domain, socket2::Type::DGRAM, Some(socket2::Protocol::UDP))?;
    s.set_reuse_address(true)?;
    s.set_reuse_port(true)?;
    // Generous kernel buffers: bursts from pipelined clients must not drop.
    let _ = s.set_recv_buffer_size(8 << 20);
    let _ = s.set_send_buffer_size(8 << 20);
    s.bind(&addr.into())?;
    Ok(s.into())
}

/// Asks the kernel to report the socket's drop count with each datagram.
pub(super) fn enable_rxq_ovfl(s: &UdpSocket) -> io::Result<()> {
    let on: libc::c_int = 1;
    // SAFETY: setsockopt on our own socket with a c_int option value of the
    // size given.
    let r = unsafe {
        libc::setsockopt(
            s.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_RXQ_OVFL,
            (&on as *const libc::c_int).cast(),
            size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if r == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// The SO_RXQ_OVFL value among the control messages in `c` (the kernel's
/// `cmsghdr` layout: length as usize, level, type, then the data at the
/// aligned header size), if there is one.
// The offsets below are those of a 64-bit `cmsghdr`.
const _: () = assert!(size_of::<libc::cmsghdr>() == 16);

pub(super) fn rxq_ovfl(c: &[u8]) -> Option<u32> {
    const HDR: usize = size_of::<libc::cmsghdr>();
    const ALIGN: usize = size_of::<usize>();
    let mut at = 0;
    while at + HDR <= c.len() {
        let mut len = [0u8; size_of::<usize>()];
        len.copy_from_slice(&c[at..at + ALIGN]);
        let len = usize::from_ne_bytes(len);
        let level = i32::from_ne_bytes([c[at + 8], c[at + 9], c[at + 10], c[at + 11]]);
        let kind = i32::from_ne_bytes([c[at + 12], c[at + 13], c[at + 14], c[at + 15]]);
        if len < HDR || at + len > c.len() {
            return None;
        }
        if level == libc::SOL_SOCKET && kind == libc::SO_RXQ_OVFL && len >= HDR + 4 {
            let d = &c[at + HDR..at + HDR + 4];
            return Some(u32::from_ne_bytes([d[0], d[1], d[2], d[3]]));
        }
        at += len.div_ceil(ALIGN) * ALIGN;
    }
    None
}

pub(in crate::transport) fn write_sockaddr(
    a: &SocketAddr,
    out: &mut libc::sockaddr_storage,
) -> libc::socklen_t {
    let bytes: &mut [u8; size_of::<libc::sockaddr_storage>()] =
        // SAFETY: sockaddr_storage is plain old data of exactly this size.
        unsafe { &mut *(out as *mut libc::sockaddr_storage).cast() };
    bytes.fill(0);
    match a {
        SocketAddr::V4(v4) => {
            bytes[0..2].copy_from_slice(&(libc::AF_INET as u16).to_ne_bytes());
            bytes[2..4].copy_from_slice(&v4.port().to_be_bytes());
            bytes[4..8].copy_from_slice(&v4.ip().octets());
            size_of::<libc::sockaddr_in>() as libc::socklen_t
        }
        SocketAddr::V6(v6) => {
            bytes[0..2].copy_from_slice(&(libc::AF_INET6 as u16).to_ne_bytes());
            bytes[2..4].copy_from_slice(&v6.port().to_be_bytes());
            bytes[4..8].copy_from_slice(&v6.flowinfo().to_be_bytes());
            bytes[8..24].copy_from_slice(&v6.ip().octets());
            bytes[24..28].copy_from_slice(&v6.scope_id().to_ne_bytes());
            size_of::<libc::sockaddr_in6>() as libc::socklen_t
        }
    }
}

pub(in crate::transport) fn read_sockaddr(b: &[u8], len: u32) -> Option<SocketAddr> {
    if len < 4 || b.len() < len as usize {
        return None;
    }
    let family = u16::from_ne_bytes([b[0], b[1]]) as i32;
    let port = u16::from_be_bytes([b[2], b[3]]);
    match family {
        libc::AF_INET if len >= 8 => {
            let ip = std::net::Ipv4Addr::new(b[4], b[5], b[6], b[7]);
            Some(SocketAddr::V4(SocketAddrV4::new(ip, port)))
        }
        libc::AF_INET6 if len >= 28 => {
            let mut o = [0u8; 16];
            o.copy_from_slice(&b[8..24]);
            let flow = u32::from_be_bytes([b[4], b[5], b[6], b[7]]);
            let scope = u32::from_ne_bytes([b[24], b[25], b[26], b[27]]);
            Some(SocketAddr::V6(SocketAddrV6::new(
                o.into(),
                port,
                flow,
                scope,
            )))
        }
        _ => None,
    }
}

/// Classic BPF opcodes (linux/bpf_common.h): class | size | mode | op
/// (BPF_LD, BPF_W, BPF_ABS's 0x20 aside, the zero values are left out).
mod op {
    pub const LD_B_ABS: u16 = 0x10 | 0x20;
    pub const LD_W_ABS: u16 = 0x20;
    pub const LD_B_IND: u16 = 0x10 | 0x40;
    pub const LD_W_IND: u16 = 0x40;
    pub const LD_MEM: u16 = 0x60;
    pub const ST: u16 = 0x02;
    pub const TAX: u16 = 0x07;
    pub const ADD_K: u16 = 0x04;
    pub const ADD_X: u16 = 0x04 | 0x08;
    pub const SUB_K: u16 = 0x04 | 0x10;
    pub const MOD_K: u16 = 0x04 | 0x90;
    pub const JA: u16 = 0x05;
    pub const JEQ_K: u16 = 0x05 | 0x10;
    pub const JSET_K: u16 = 0x05 | 0x40;
    pub const RET_K: u16 = 0x06;
    pub const RET_A: u16 = 0x06 | 0x10;
}

/// Out of range for the group: the kernel falls back to its flow hash.
const FLOW_HASH: u32 = u32::MAX;

/// The reuseport program for a group of `group` workers (docs/wire.md
/// "Which worker holds a stream"): a frame that carries a `sluice-stream`
/// extension header goes to worker `(stream_id & 0xff) mod group` (the
/// id's low byte), so every frame of a stream, from any address, meets
/// the worker that holds its state; else, with `by_tag`, a signed frame
/// goes to `tag[0..4] mod group` (all copies of a frame meet one replay
/// table); else the kernel's flow hash. The extension headers are walked
/// as the wire says (after the routing strings; up to the wire's 16), by
/// indirect loads from X. A load past the datagram's end ends the program
/// with 0 (the first worker), which answers the malformed frame.
pub(super) fn steer_program(group: u32, by_tag: bool) -> Vec<libc::sock_filter> {
    use op::*;
    let group = group.max(1);
    let i = |code, jt, jf, k| libc::sock_filter { code, jt, jf, k };
    let word = |b: &[u8]| u32::from_be_bytes([b[0], b[1], b[2], b[3]]);
    let key = sluice_wire::STREAM_EXT_KEY.as_bytes();
    assert_eq!(key.len(), 13, "the matcher below compares 13 key bytes");
    let ext_max = sluice_wire::limits::EXT_COUNT_MAX;
    // Fixed-header offsets (docs/wire.md "Fixed header").
    let mut p = vec![
        i(LD_B_ABS, 0, 0, 77), // A = ext_count
        i(ST, 0, 0, 0),        // M[0] = extensions left
        i(JEQ_K, 0, 1, 0),     // none:
        i(JA, 0, 0, 0),        //   -> not a stream (patched)
        i(LD_B_ABS, 0, 0, 73), // X = 96 + the routing strings' lengths
        i(TAX, 0, 0, 0),
        i(LD_B_ABS, 0, 0, 74),
        i(ADD_X, 0, 0, 0),
        i(TAX, 0, 0, 0),
        i(LD_B_ABS, 0, 0, 75),
        i(ADD_X, 0, 0, 0),
        i(TAX, 0, 0, 0),
        i(LD_B_ABS, 0, 0, 76),
        i(ADD_X, 0, 0, 0),
        i(ADD_K, 0, 0, sluice_wire::FIXED_HEADER_LEN as u32),
        i(TAX, 0, 0, 0),
    ];
    // Jumps to patch: (index, to_found).
    let mut far = vec![(3usize, false)];
    for _ in 0..ext_max {
        // key_len 13, value_len 24, key "sluice-stream": found. Each
        // failed compare jumps to the block's skip part, 13 - k ahead.
        let checks = [
            (LD_B_IND, 0, 13),
            (LD_B_IND, 1, sluice_wire::STREAM_EXT_LEN as u32),
            (LD_W_IND, 2, word(&key[0..4])),
            (LD_W_IND, 6, word(&key[4..8])),
            (LD_W_IND, 10, word(&key[8..12])),
            (LD_B_IND, 14, u32::from(key[12])),
        ];
        for (k, (code, at, v)) in checks.iter().enumerate() {
            p.push(i(*code, 0, 0, *at));
            let skip = (2 * (checks.len() - k) - 1) as u8;
            p.push(i(JEQ_K, 0, skip, *v));
        }
        far.push((p.len(), true));
        p.push(i(JA, 0, 0, 0)); // -> found (patched)
        // Skip: one extension less; none left: not a stream.
        p.push(i(LD_MEM, 0, 0, 0));
        p.push(i(SUB_K, 0, 0, 1));
        p.push(i(ST, 0, 0, 0));
        p.push(i(JEQ_K, 0, 1, 0));
        far.push((p.len(), false));
        p.push(i(JA, 0, 0, 0)); // -> not a stream (patched)
        // X += 2 + key_len + value_len.
        p.push(i(LD_B_IND, 0, 0, 1));
        p.push(i(ADD_K, 0, 0, 2));
        p.push(i(ST, 0, 0, 1));
        p.push(i(LD_B_IND, 0, 0, 0));
        p.push(i(ADD_X, 0, 0, 0));
        p.push(i(TAX, 0, 0, 0));
        p.push(i(LD_MEM, 0, 0, 1));
        p.push(i(ADD_X, 0, 0, 0));
        p.push(i(TAX, 0, 0, 0));
    }
    // More than the wire allows: not a stream (the parse refuses it).
    far.push((p.len(), false));
    p.push(i(JA, 0, 0, 0));
    let found = p.len();
    // The stream id's low byte (the first: little-endian), after the
    // 2-byte lengths and the key: sequential and random ids both spread.
    p.push(i(LD_B_IND, 0, 0, 2 + 13));
    p.push(i(MOD_K, 0, 0, group));
    p.push(i(RET_A, 0, 0, 0));
    let not_stream = p.len();
    if by_tag {
        p.push(i(LD_B_ABS, 0, 0, 6)); // A = low byte of flags
        p.push(i(
            JSET_K,
            1,
            0,
            u32::from(sluice_wire::flags::AUTHENTICATED),
        ));
        p.push(i(RET_K, 0, 0, FLOW_HASH)); // unsigned: flow hash
        p.push(i(LD_W_ABS, 0, 0, 80)); // A = tag[0..4]
        p.push(i(MOD_K, 0, 0, group));
        p.push(i(RET_A, 0, 0, 0));
    } else {
        p.push(i(RET_K, 0, 0, FLOW_HASH));
    }
    for (at, to_found) in far {
        let to = if to_found { found } else { not_stream };
        p[at].k = (to - at - 1) as u32;
    }
    p
}

/// Attaches [`steer_program`] to the SO_REUSEPORT group of `socket` (the
/// same program from every worker; the last one set stays).
pub(super) fn steer(socket: &UdpSocket, group: u32, by_tag: bool) -> io::Result<()> {
    let mut prog = steer_program(group, by_tag);
    let fprog = libc::sock_fprog {
        len: prog.len() as u16,
        filter: prog.as_mut_ptr(),
    };
    // SAFETY: `fprog` points at `prog`, both alive for the call; the
    // kernel copies the program before it returns.
    let rc = unsafe {
        libc::setsockopt(
            socket.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_ATTACH_REUSEPORT_CBPF,
            (&fprog as *const libc::sock_fprog).cast(),
            size_of::<libc::sock_fprog>() as libc::socklen_t,
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use sluice_wire::{ExtRepr, FrameRepr, Kind, StreamHeader, stream_flags};

    /// Runs a classic BPF program over `pkt` as the kernel does for the
    /// ops the steering program uses (a load past the end returns 0).
    fn run(prog: &[libc::sock_filter], pkt: &[u8]) -> u32 {
        use op::*;
        let (mut a, mut x, mut m) = (0u32, 0u32, [0u32; 16]);
        let mut pc = 0usize;
        let byte = |at: usize| pkt.get(at).map(|&b| u32::from(b));
        let word = |at: usize| {
            pkt.get(at..at + 4)
                .map(|b| u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
        };
        loop {
            let f = prog[pc];
            pc += 1;
            let k = f.k;
            let load = match f.code {
                LD_B_ABS => Some(byte(k as usize)),
                LD_W_ABS => Some(word(k as usize)),
                LD_B_IND => Some(byte((x + k) as usize)),
                LD_W_IND => Some(word((x + k) as usize)),
                _ => None,
            };
            if let Some(v) = load {
                match v {
                    Some(v) => a = v,
                    None => return 0,
                }
                continue;
            }
            match f.code {
                LD_MEM => a = m[k as usize],
                ST => m[k as usize] = a,
                TAX => x = a,
                ADD_K => a = a.wrapping_add(k),
                ADD_X => a = a.wrapping_add(x),
                SUB_K => a = a.wrapping_sub(k),
                MOD_K => a %= k,
                JA => pc += k as usize,
                JEQ_K => pc += usize::from(if a == k { f.jt } else { f.jf }),
                JSET_K => pc += usize::from(if a & k != 0 { f.jt } else { f.jf }),
                RET_K => return k,
                RET_A => return a,
                c => panic!("op {c:#x} not in the steering program"),
            }
        }
    }

    fn frame(
        stream_id: Option<u64>,
        before: &[ExtRepr<'_>],
        adapter: &str,
        signed: bool,
    ) -> Vec<u8> {
        let sh = StreamHeader {
            stream_id: stream_id.unwrap_or(1),
            seq: 3,
            flags: stream_flags::CONTINUE,
            ..StreamHeader::default()
        }
        .to_bytes();
        let mut ext: Vec<ExtRepr<'_>> = before.to_vec();
        if stream_id.is_some() {
            ext.push(ExtRepr::stream(&sh));
        }
        let repr = FrameRepr {
            kind: Kind::Request,
            request_id: 9,
            tenant_id: 7,
            model: "decoder",
            model_version: "1.0.0",
            adapter,
            intent: "chat",
            extensions: &ext,
            ..FrameRepr::default()
        };
        let mut buf = vec![0u8; 4096];
        let n = repr.emit(&mut buf).unwrap().frame_len;
        buf.truncate(n);
        if signed {
            buf[6] |= sluice_wire::flags::AUTHENTICATED as u8;
            buf[80..84].copy_from_slice(&[0, 0, 0, 5]);
        }
        buf
    }

    #[test]
    fn stream_frames_go_to_the_worker_of_their_id() {
        let other = [ExtRepr {
            key: "x-note",
            value: b"hello",
        }];
        let almost = [ExtRepr {
            key: "sluice-streaX",
            value: &[0u8; 24],
        }];
        for group in [2u32, 3, 4] {
            for by_tag in [false, true] {
                let prog = steer_program(group, by_tag);
                assert!(prog.len() <= 4096, "classic BPF holds 4096 instructions");
                for id in [1u64, 2, 3, 0x1234_5678_9abc, u64::MAX] {
                    let low = (id & 0xff) as u32;
                    for before in [&[][..], &other[..], &almost[..]] {
                        for adapter in ["", "lora-7"] {
                            for signed in [false, true] {
                                let f = frame(Some(id), before, adapter, signed);
                                assert_eq!(run(&prog, &f), low % group, "id {id}");
                            }
                        }
                    }
                }
                // Not a stream frame: the tag (signed, by_tag) or the
                // kernel's flow hash.
                for before in [&[][..], &other[..], &almost[..]] {
                    assert_eq!(run(&prog, &frame(None, before, "", false)), FLOW_HASH);
                    let signed = run(&prog, &frame(None, before, "", true));
                    assert_eq!(signed, if by_tag { 5 % group } else { FLOW_HASH });
                }
                // A datagram too short for its header: worker 0 answers it.
                assert_eq!(run(&prog, &[0u8; 20]), 0);
            }
        }
    }
}
