//! Ethernet, ARP, IPv4 and UDP as the DPDK transport sees them: pure, safe
//! functions over byte slices, so every rule is unit-tested without DPDK.
//!
//! The appliance owns one IPv4 address and one UDP port. Everything else
//! that reaches the port is garbage, classified by [`Drop`] and counted.

use std::net::{Ipv4Addr, SocketAddrV4};

/// Ethernet header bytes (no VLAN tag).
pub const ETH_HDR_LEN: usize = 14;
/// IPv4 header bytes without options.
pub const IPV4_HDR_LEN: usize = 20;
/// UDP header bytes.
pub const UDP_HDR_LEN: usize = 8;
/// Headers in front of a Sluice frame on transmit.
pub const HDRS_LEN: usize = ETH_HDR_LEN + IPV4_HDR_LEN + UDP_HDR_LEN;
/// ARP packet for IPv4 over Ethernet, after the Ethernet header.
pub const ARP_LEN: usize = 28;
/// Shortest Ethernet frame without FCS; shorter ones are padded.
pub const ETH_FRAME_MIN_LEN: usize = 60;

const ETHERTYPE_IPV4: u16 = 0x0800;
const ETHERTYPE_ARP: u16 = 0x0806;
const IPPROTO_UDP: u8 = 17;
const ARP_REQUEST: u16 = 1;
const ARP_REPLY: u16 = 2;
/// TTL of replies.
const TTL: u8 = 64;

/// A MAC address.
pub type Mac = [u8; 6];
/// The broadcast MAC.
pub const BROADCAST: Mac = [0xff; 6];

/// Why a received packet was dropped. The discriminant indexes counters.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum Drop {
    /// Shorter than the headers it claims.
    Runt = 0,
    /// Neither IPv4 nor ARP (IPv6, VLAN, LLDP, ...).
    Ethertype = 1,
    /// Unicast to another MAC.
    NotOurMac = 2,
    /// Bad IPv4 version, header length or total length.
    BadIpv4 = 3,
    /// IPv4 header checksum wrong.
    Ipv4Checksum = 4,
    /// IPv4 to another address.
    NotOurIp = 5,
    /// IPv4 but not UDP.
    NotUdp = 6,
    /// A non-first IPv4 fragment while reassembly is off (`dpdk.rx_slots = 0`).
    Fragment = 7,
    /// UDP to another port.
    WrongPort = 8,
    /// UDP length field inconsistent with the IPv4 packet.
    BadUdp = 9,
    /// UDP to our port without the Sluice magic.
    NotSluice = 10,
    /// ARP that is malformed or not about our address.
    Arp = 11,
    /// Received in several mbufs but not a Sluice frame.
    MultiSegment = 12,
    /// An IPv4 fragment whose end lies past the largest IPv4 datagram
    /// (65,535 bytes: the "ping of death"), or a first fragment announcing
    /// a UDP datagram that large.
    FragOversize = 13,
    /// An IPv4 fragment that no sender makes: empty, a middle fragment
    /// whose length is not a multiple of 8, or a first fragment too short
    /// to hold the UDP header and the Sluice magic (tiny-fragment attack).
    FragMalformed = 14,
}

impl Drop {
    /// Number of reasons.
    pub const COUNT: usize = 15;
    /// Every reason, in counter order.
    pub const ALL: [Drop; Drop::COUNT] = [
        Drop::Runt,
        Drop::Ethertype,
        Drop::NotOurMac,
        Drop::BadIpv4,
        Drop::Ipv4Checksum,
        Drop::NotOurIp,
        Drop::NotUdp,
        Drop::Fragment,
        Drop::WrongPort,
        Drop::BadUdp,
        Drop::NotSluice,
        Drop::Arp,
        Drop::MultiSegment,
        Drop::FragOversize,
        Drop::FragMalformed,
    ];

    /// Metric-style name.
    pub fn name(self) -> &'static str {
        match self {
            Drop::Runt => "runt",
            Drop::Ethertype => "ethertype",
            Drop::NotOurMac => "not_our_mac",
            Drop::BadIpv4 => "bad_ipv4",
            Drop::Ipv4Checksum => "ipv4_checksum",
            Drop::NotOurIp => "not_our_ip",
            Drop::NotUdp => "not_udp",
            Drop::Fragment => "fragment",
            Drop::WrongPort => "wrong_port",
            Drop::BadUdp => "bad_udp",
            Drop::NotSluice => "not_sluice",
            Drop::Arp => "arp",
            Drop::MultiSegment => "multi_segment",
            Drop::FragOversize => "frag_oversize",
            Drop::FragMalformed => "frag_malformed",
        }
    }
}

/// Who we are on the wire.
#[derive(Debug, Clone, Copy)]
pub struct Local {
    /// Port MAC.
    pub mac: Mac,
    /// Appliance address.
    pub ip: Ipv4Addr,
    /// Sluice UDP port.
    pub udp_port: u16,
}

/// What a received packet is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Packet {
    /// A UDP datagram to our port that starts with the Sluice magic.
    Sluice {
        /// Sender MAC (the next hop for the reply).
        src_mac: Mac,
        /// Sender address.
        src: SocketAddrV4,
        /// Offset of the UDP payload in the packet.
        off: usize,
        /// Payload bytes present in this packet (its first segment).
        len: usize,
        /// Payload bytes of the whole UDP datagram.
        datagram_len: usize,
        /// Only the first part of the datagram is here (first IPv4 fragment,
        /// or a datagram that continues in further segments).
        truncated: bool,
    },
    /// An IPv4 fragment to our address that passed the stateless checks:
    /// for reassembly.
    Fragment {
        /// IPv4 header bytes.
        ihl: usize,
        /// The first fragment (offset 0), which holds the UDP header: what
        /// it says, checked like an unfragmented datagram's.
        first: Option<FirstFragment>,
    },
    /// An ARP request for our address: answer it.
    ArpRequest {
        /// Asker MAC.
        sender_mac: Mac,
        /// Asker address.
        sender_ip: Ipv4Addr,
    },
    /// An ARP reply or announcement: learn it.
    ArpLearn {
        /// Sender MAC.
        sender_mac: Mac,
        /// Sender address.
        sender_ip: Ipv4Addr,
    },
    /// Garbage, with the reason.
    Drop(Drop),
}

/// What the first fragment of a datagram to our Sluice port carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FirstFragment {
    /// Sender MAC.
    pub src_mac: Mac,
    /// Sender address and UDP port.
    pub src: SocketAddrV4,
    /// Offset of the UDP payload in the packet.
    pub off: usize,
    /// Payload bytes in this fragment.
    pub len: usize,
    /// Payload bytes of the whole UDP datagram.
    pub datagram_len: usize,
}

/// The largest IPv4 datagram, header included.
pub const IPV4_DATAGRAM_MAX: usize = 65_535;
/// The largest UDP payload IPv4 can carry (65,535 - 20 - 8).
pub const UDP_PAYLOAD_MAX: usize = IPV4_DATAGRAM_MAX - IPV4_HDR_LEN - UDP_HDR_LEN;
/// IPv4 flags: don't fragment, more fragments; and the offset mask.
const IPV4_DF: u16 = 0x4000;
const IPV4_MF: u16 = 0x2000;
const IPV4_OFFSET_MASK: u16 = 0x1fff;

fn be16(b: &[u8], at: usize) -> u16 {
    u16::from_be_bytes([b[at], b[at + 1]])
}

fn mac_at(b: &[u8], at: usize) -> Mac {
    let mut m = [0u8; 6];
    m.copy_from_slice(&b[at..at + 6]);
    m
}

fn ip_at(b: &[u8], at: usize) -> Ipv4Addr {
    Ipv4Addr::new(b[at], b[at + 1], b[at + 2], b[at + 3])
}

/// Classifies one received Ethernet frame (the first segment's bytes).
pub fn classify(pkt: &[u8], local: &Local) -> Packet {
    if pkt.len() < ETH_HDR_LEN {
        return Packet::Drop(Drop::Runt);
    }
    let dst = mac_at(pkt, 0);
    let src_mac = mac_at(pkt, 6);
    match be16(pkt, 12) {
        ETHERTYPE_ARP => classify_arp(&pkt[ETH_HDR_LEN..], local),
        ETHERTYPE_IPV4 => {
            if dst != local.mac {
                return Packet::Drop(Drop::NotOurMac);
            }
            classify_ipv4(pkt, src_mac, local)
        }
        _ => Packet::Drop(Drop::Ethertype),
    }
}

fn classify_arp(a: &[u8], local: &Local) -> Packet {
    if a.len() < ARP_LEN {
        return Packet::Drop(Drop::Runt);
    }
    // Ethernet hardware, IPv4 protocol, 6- and 4-byte addresses.
    if be16(a, 0) != 1 || be16(a, 2) != ETHERTYPE_IPV4 || a[4] != 6 || a[5] != 4 {
        return Packet::Drop(Drop::Arp);
    }
    let sender_mac = mac_at(a, 8);
    let sender_ip = ip_at(a, 14);
    let target_ip = ip_at(a, 24);
    match be16(a, 6) {
        ARP_REQUEST if target_ip == local.ip && !sender_ip.is_unspecified() => Packet::ArpRequest {
            sender_mac,
            sender_ip,
        },
        // Replies to us, and gratuitous announcements, refresh the table.
        ARP_REPLY | ARP_REQUEST
            if sender_ip != local.ip && !sender_ip.is_unspecified() && sender_mac != BROADCAST =>
        {
            Packet::ArpLearn {
                sender_mac,
                sender_ip,
            }
        }
        _ => Packet::Drop(Drop::Arp),
    }
}

fn classify_ipv4(pkt: &[u8], src_mac: Mac, local: &Local) -> Packet {
    let ip = &pkt[ETH_HDR_LEN..];
    if ip.len() < IPV4_HDR_LEN {
        return Packet::Drop(Drop::Runt);
    }
    let ihl = (ip[0] & 0x0f) as usize * 4;
    let total = be16(ip, 2) as usize;
    if ip[0] >> 4 != 4 || ihl < IPV4_HDR_LEN || total < ihl || ip.len() < ihl {
        return Packet::Drop(Drop::BadIpv4);
    }
    if checksum(0, &ip[..ihl]) != 0 {
        return Packet::Drop(Drop::Ipv4Checksum);
    }
    if ip_at(ip, 16) != local.ip {
        return Packet::Drop(Drop::NotOurIp);
    }
    if ip[9] != IPPROTO_UDP {
        return Packet::Drop(Drop::NotUdp);
    }
    let frag = be16(ip, 6);
    let more_fragments = frag & IPV4_MF != 0;
    let offset = (frag & IPV4_OFFSET_MASK) as usize * 8;
    if more_fragments || offset != 0 {
        return classify_fragment(ip, ihl, total, offset, more_fragments, src_mac, local);
    }
    classify_udp(ip, ihl, total, src_mac, local)
}

/// Stateless checks of one IPv4 fragment (the reassembly itself, with its
/// overlap and duplicate checks, is librte_ip_frag's).
fn classify_fragment(
    ip: &[u8],
    ihl: usize,
    total: usize,
    offset: usize,
    more_fragments: bool,
    src_mac: Mac,
    local: &Local,
) -> Packet {
    let payload = total - ihl;
    if payload == 0 || (more_fragments && !payload.is_multiple_of(8)) {
        return Packet::Drop(Drop::FragMalformed);
    }
    if ihl + offset + payload > IPV4_DATAGRAM_MAX {
        return Packet::Drop(Drop::FragOversize);
    }
    if offset != 0 {
        return Packet::Fragment { ihl, first: None };
    }
    // The first fragment carries the UDP header and the frame's start.
    let present = total.min(ip.len());
    if present < ihl + UDP_HDR_LEN + sluice_wire::MAGIC.len() {
        return Packet::Drop(Drop::FragMalformed);
    }
    let udp = &ip[ihl..present];
    if be16(udp, 2) != local.udp_port {
        return Packet::Drop(Drop::WrongPort);
    }
    let udp_len = be16(udp, 4) as usize;
    if udp_len <= payload {
        // A datagram no larger than its first fragment.
        return Packet::Drop(Drop::BadUdp);
    }
    if ihl + udp_len > IPV4_DATAGRAM_MAX {
        return Packet::Drop(Drop::FragOversize);
    }
    let body = &udp[UDP_HDR_LEN..];
    if !sluice_wire::Frame::new_unchecked(body).has_magic() {
        return Packet::Drop(Drop::NotSluice);
    }
    Packet::Fragment {
        ihl,
        first: Some(FirstFragment {
            src_mac,
            src: SocketAddrV4::new(ip_at(ip, 12), be16(udp, 0)),
            off: ETH_HDR_LEN + ihl + UDP_HDR_LEN,
            len: body.len(),
            datagram_len: udp_len - UDP_HDR_LEN,
        }),
    }
}

/// The UDP datagram in an unfragmented (or reassembled) IPv4 packet.
fn classify_udp(ip: &[u8], ihl: usize, total: usize, src_mac: Mac, local: &Local) -> Packet {
    // Bytes of this IP packet actually here: Ethernet pads short frames,
    // and a multi-segment packet shows only its first segment.
    let present = total.min(ip.len());
    if present < ihl + UDP_HDR_LEN {
        return Packet::Drop(Drop::Runt);
    }
    let udp = &ip[ihl..present];
    if be16(udp, 2) != local.udp_port {
        return Packet::Drop(Drop::WrongPort);
    }
    let udp_len = be16(udp, 4) as usize;
    if udp_len < UDP_HDR_LEN || udp_len != total - ihl {
        return Packet::Drop(Drop::BadUdp);
    }
    let payload = &udp[UDP_HDR_LEN..];
    if !sluice_wire::Frame::new_unchecked(payload).has_magic() {
        return Packet::Drop(Drop::NotSluice);
    }
    let want = udp_len - UDP_HDR_LEN;
    let len = payload.len().min(want);
    Packet::Sluice {
        src_mac,
        src: SocketAddrV4::new(ip_at(ip, 12), be16(udp, 0)),
        off: ETH_HDR_LEN + ihl + UDP_HDR_LEN,
        len,
        datagram_len: want,
        truncated: len < want,
    }
}

/// Classifies a datagram librte_ip_frag reassembled: `first` is the first
/// segment of the chain (Ethernet and IPv4 headers of the first fragment,
/// whose checksum was verified on arrival; the library rewrote the total
/// length and zeroed the checksum), `pkt_len` the whole chain's length.
pub fn classify_reassembled(first: &[u8], pkt_len: usize, local: &Local) -> Packet {
    if first.len() < ETH_HDR_LEN + IPV4_HDR_LEN {
        return Packet::Drop(Drop::Runt);
    }
    let src_mac = mac_at(first, 6);
    let ip = &first[ETH_HDR_LEN..];
    let ihl = (ip[0] & 0x0f) as usize * 4;
    let total = be16(ip, 2) as usize;
    if ihl < IPV4_HDR_LEN || ip.len() < ihl || total < ihl || ETH_HDR_LEN + total > pkt_len {
        return Packet::Drop(Drop::BadIpv4);
    }
    classify_udp(ip, ihl, total, src_mac, local)
}

/// Clears "don't fragment" in a packet built by [`build_udp`] (software
/// checksums) and fixes its IPv4 header checksum: for replies that leave
/// as fragments.
pub fn allow_fragments(pkt: &mut [u8]) {
    if pkt.len() < ETH_HDR_LEN + IPV4_HDR_LEN {
        return;
    }
    let ip = &mut pkt[ETH_HDR_LEN..ETH_HDR_LEN + IPV4_HDR_LEN];
    let flags = u16::from_be_bytes([ip[6], ip[7]]) & !IPV4_DF;
    ip[6..8].copy_from_slice(&flags.to_be_bytes());
    ip[10..12].fill(0);
    let c = checksum(0, ip);
    ip[10..12].copy_from_slice(&c.to_be_bytes());
}

/// Internet checksum over `data`, continuing from a partial sum; returns
/// the complemented 16-bit result (0 means a block that includes its
/// checksum verifies).
pub fn checksum(start: u32, data: &[u8]) -> u16 {
    !fold(sum_words(start as u64, data))
}

fn sum_words(mut acc: u64, data: &[u8]) -> u64 {
    let mut chunks = data.chunks_exact(4);
    for c in &mut chunks {
        acc += u32::from_be_bytes([c[0], c[1], c[2], c[3]]) as u64;
    }
    let rest = chunks.remainder();
    let mut i = 0;
    while i + 1 < rest.len() {
        acc += be16(rest, i) as u64;
        i += 2;
    }
    if i < rest.len() {
        acc += (rest[i] as u64) << 8;
    }
    acc
}

fn fold(mut acc: u64) -> u16 {
    while acc >> 16 != 0 {
        acc = (acc & 0xffff) + (acc >> 16);
    }
    acc as u16
}

fn pseudo_header_sum(src: Ipv4Addr, dst: Ipv4Addr, udp_len: u16) -> u64 {
    let s = src.octets();
    let d = dst.octets();
    u16::from_be_bytes([s[0], s[1]]) as u64
        + u16::from_be_bytes([s[2], s[3]]) as u64
        + u16::from_be_bytes([d[0], d[1]]) as u64
        + u16::from_be_bytes([d[2], d[3]]) as u64
        + IPPROTO_UDP as u64
        + udp_len as u64
}

/// How the UDP (and IPv4 header) checksums of a reply are produced.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TxChecksum {
    /// Computed here, in full.
    Software,
    /// The NIC computes both; the UDP field holds the pseudo-header sum and
    /// the IPv4 field zero, as offloading NICs expect.
    Offload,
}

/// Why a reply could not be built.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BuildError {
    /// The buffer is shorter than headers plus payload.
    Short,
    /// The datagram does not fit IPv4's 16-bit length.
    TooLong,
}

/// Writes Ethernet, IPv4 and UDP headers in front of a `payload_len`-byte
/// payload already at `pkt[HDRS_LEN..]`; returns the packet length.
pub fn build_udp(
    pkt: &mut [u8],
    payload_len: usize,
    local: &Local,
    dst_mac: Mac,
    dst: SocketAddrV4,
    ip_id: u16,
    mode: TxChecksum,
) -> Result<usize, BuildError> {
    let total = HDRS_LEN + payload_len;
    if pkt.len() < total {
        return Err(BuildError::Short);
    }
    let ip_total = IPV4_HDR_LEN + UDP_HDR_LEN + payload_len;
    if ip_total > u16::MAX as usize {
        return Err(BuildError::TooLong);
    }
    let udp_len = (UDP_HDR_LEN + payload_len) as u16;
    pkt[0..6].copy_from_slice(&dst_mac);
    pkt[6..12].copy_from_slice(&local.mac);
    pkt[12..14].copy_from_slice(&ETHERTYPE_IPV4.to_be_bytes());
    let ip = &mut pkt[ETH_HDR_LEN..ETH_HDR_LEN + IPV4_HDR_LEN];
    ip[0] = 0x45;
    ip[1] = 0;
    ip[2..4].copy_from_slice(&(ip_total as u16).to_be_bytes());
    ip[4..6].copy_from_slice(&ip_id.to_be_bytes());
    // Don't fragment; replies sent as fragments clear it (allow_fragments).
    ip[6..8].copy_from_slice(&IPV4_DF.to_be_bytes());
    ip[8] = TTL;
    ip[9] = IPPROTO_UDP;
    ip[10..12].copy_from_slice(&[0, 0]);
    ip[12..16].copy_from_slice(&local.ip.octets());
    ip[16..20].copy_from_slice(&dst.ip().octets());
    if mode == TxChecksum::Software {
        let c = checksum(0, ip);
        ip[10..12].copy_from_slice(&c.to_be_bytes());
    }
    let udp = &mut pkt[ETH_HDR_LEN + IPV4_HDR_LEN..total];
    udp[0..2].copy_from_slice(&local.udp_port.to_be_bytes());
    udp[2..4].copy_from_slice(&dst.port().to_be_bytes());
    udp[4..6].copy_from_slice(&udp_len.to_be_bytes());
    udp[6..8].copy_from_slice(&[0, 0]);
    let pseudo = pseudo_header_sum(local.ip, *dst.ip(), udp_len);
    let field = match mode {
        TxChecksum::Software => software_udp_field(pseudo, udp),
        TxChecksum::Offload => fold(pseudo),
    };
    udp[6..8].copy_from_slice(&field.to_be_bytes());
    Ok(total)
}

fn software_udp_field(pseudo: u64, udp: &[u8]) -> u16 {
    match !fold(sum_words(pseudo, udp)) {
        0 => 0xffff,
        c => c,
    }
}

/// Turns an ARP request (the whole frame in `pkt`, at least
/// [`ETH_FRAME_MIN_LEN`] bytes) into our reply, in place; returns its length.
pub fn arp_reply_in_place(
    pkt: &mut [u8],
    local: &Local,
    asker_mac: Mac,
    asker_ip: Ipv4Addr,
) -> Option<usize> {
    if pkt.len() < ETH_FRAME_MIN_LEN {
        return None;
    }
    pkt[0..6].copy_from_slice(&asker_mac);
    pkt[6..12].copy_from_slice(&local.mac);
    pkt[12..14].copy_from_slice(&ETHERTYPE_ARP.to_be_bytes());
    let a = &mut pkt[ETH_HDR_LEN..ETH_HDR_LEN + ARP_LEN];
    a[0..2].copy_from_slice(&1u16.to_be_bytes());
    a[2..4].copy_from_slice(&ETHERTYPE_IPV4.to_be_bytes());
    a[4] = 6;
    a[5] = 4;
    a[6..8].copy_from_slice(&ARP_REPLY.to_be_bytes());
    a[8..14].copy_from_slice(&local.mac);
    a[14..18].copy_from_slice(&local.ip.octets());
    a[18..24].copy_from_slice(&asker_mac);
    a[24..28].copy_from_slice(&asker_ip.octets());
    pkt[ETH_HDR_LEN + ARP_LEN..ETH_FRAME_MIN_LEN].fill(0);
    Some(ETH_FRAME_MIN_LEN)
}

/// IPv4 to MAC, learned from traffic: a fixed-size, open-addressed cache
/// allocated once. A full probe window overwrites its first slot.
#[derive(Debug)]
pub struct Neighbours {
    ips: Box<[u32]>,
    macs: Box<[Mac]>,
    mask: usize,
}

const PROBE_MAX: usize = 8;

impl Neighbours {
    /// A table of `slots` entries (rounded up to a power of two).
    pub fn new(slots: usize) -> Neighbours {
        let n = slots.max(PROBE_MAX).next_power_of_two();
        Neighbours {
            ips: vec![0; n].into_boxed_slice(),
            macs: vec![[0; 6]; n].into_boxed_slice(),
            mask: n - 1,
        }
    }

    fn home(&self, ip: u32) -> usize {
        // Fibonacci hashing spreads consecutive addresses.
        (ip.wrapping_mul(0x9E37_79B9) >> 7) as usize & self.mask
    }

    /// Records or refreshes `ip`. 0.0.0.0 is never stored (it marks empty).
    pub fn learn(&mut self, ip: Ipv4Addr, mac: Mac) {
        let key = u32::from(ip);
        if key == 0 {
            return;
        }
        let h = self.home(key);
        let mut empty = None;
        for k in 0..PROBE_MAX {
            let i = (h + k) & self.mask;
            if self.ips[i] == key {
                self.macs[i] = mac;
                return;
            }
            if self.ips[i] == 0 && empty.is_none() {
                empty = Some(i);
            }
        }
        let i = empty.unwrap_or(h);
        self.ips[i] = key;
        self.macs[i] = mac;
    }

    /// The MAC of `ip`, if known.
    pub fn lookup(&self, ip: Ipv4Addr) -> Option<Mac> {
        let key = u32::from(ip);
        if key == 0 {
            return None;
        }
        let h = self.home(key);
        (0..PROBE_MAX)
            .map(|k| (h + k) & self.mask)
            .find(|&i| self.ips[i] == key)
            .map(|i| self.macs[i])
    }
}

/// Bytes to skip at `addr` so that `addr + skip + HDRS_LEN` is a multiple of
/// `align` (a power of two): where to start a transmit packet so its Sluice
/// frame is aligned.
pub fn tx_skip(addr: usize, align: usize) -> usize {
    (align - (addr + HDRS_LEN) % align) % align
}

#[cfg(test)]
mod tests;
