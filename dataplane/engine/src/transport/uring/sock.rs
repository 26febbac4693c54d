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

/// Makes the kernel hand every signed frame to the worker chosen by its
/// tag, whatever address it comes from: a classic BPF program on the
/// SO_REUSEPORT group (the same program from every worker; the last one
/// set stays) returns `tag[0..4] mod group`, so all copies of a frame
/// meet the same worker's replay table (docs/wire.md, "What holds
/// across workers"). Frames without the AUTHENTICATED flag, and
/// datagrams too short to carry a tag, keep the kernel's flow hash.
pub(super) fn steer_by_tag(socket: &UdpSocket, group: u32) -> io::Result<()> {
    // Classic BPF opcodes (linux/bpf_common.h): class | size | mode
    // (BPF_LD and BPF_W are 0). A reuseport program sees the UDP
    // payload at offset 0.
    const LD_B_ABS: u16 = 0x10 | 0x20;
    const LD_W_ABS: u16 = 0x20;
    const JSET_K: u16 = 0x05 | 0x40;
    const MOD_K: u16 = 0x04 | 0x90;
    const RET_K: u16 = 0x06;
    const RET_A: u16 = 0x06 | 0x10;
    /// Out of range for the group: the kernel falls back to its hash.
    const FLOW_HASH: u32 = u32::MAX;
    let op = |code, jt, jf, k| libc::sock_filter { code, jt, jf, k };
    let mut prog = [
        op(LD_B_ABS, 0, 0, 6), // A = low byte of flags
        op(JSET_K, 1, 0, u32::from(sluice_wire::flags::AUTHENTICATED)), // signed?
        op(RET_K, 0, 0, FLOW_HASH), // no: flow hash
        op(LD_W_ABS, 0, 0, 80), // A = tag[0..4]
        op(MOD_K, 0, 0, group.max(1)), // A %= workers
        op(RET_A, 0, 0, 0),    // that socket
    ];
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
