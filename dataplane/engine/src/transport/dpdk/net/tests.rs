//! Frame classification, ARP and reply building, without DPDK.

use super::*;

const OUR_MAC: Mac = [0x02, 0, 0, 0, 0, 1];
const PEER_MAC: Mac = [0x02, 0, 0, 0, 0, 2];

fn local() -> Local {
    Local {
        mac: OUR_MAC,
        ip: Ipv4Addr::new(10, 99, 0, 1),
        udp_port: 7070,
    }
}

/// A request as a peer kernel would send it, built with `build_udp`
/// from the peer's point of view.
fn request(payload: &[u8]) -> Vec<u8> {
    let peer = Local {
        mac: PEER_MAC,
        ip: Ipv4Addr::new(10, 99, 0, 2),
        udp_port: 40000,
    };
    let mut pkt = vec![0u8; HDRS_LEN + payload.len()];
    pkt[HDRS_LEN..].copy_from_slice(payload);
    let dst = SocketAddrV4::new(Ipv4Addr::new(10, 99, 0, 1), 7070);
    let n = build_udp(
        &mut pkt,
        payload.len(),
        &peer,
        OUR_MAC,
        dst,
        7,
        TxChecksum::Software,
    )
    .unwrap();
    assert_eq!(n, pkt.len());
    pkt
}

fn sluice_payload(n: usize) -> Vec<u8> {
    let mut p = vec![0xabu8; n.max(4)];
    p[..4].copy_from_slice(&sluice_wire::MAGIC);
    p
}

#[test]
fn ipv4_checksum_matches_the_textbook_example() {
    let hdr = [
        0x45, 0x00, 0x00, 0x73, 0x00, 0x00, 0x40, 0x00, 0x40, 0x11, 0x00, 0x00, 0xc0, 0xa8, 0x00,
        0x01, 0xc0, 0xa8, 0x00, 0xc7,
    ];
    assert_eq!(checksum(0, &hdr), 0xb861);
    let mut with = hdr;
    with[10..12].copy_from_slice(&0xb861u16.to_be_bytes());
    assert_eq!(checksum(0, &with), 0);
}

#[test]
fn odd_lengths_pad_with_zero() {
    assert_eq!(checksum(0, &[0x12, 0x34, 0x56]), !(0x1234u16 + 0x5600));
}

#[test]
fn built_packet_verifies_and_classifies_as_sluice() {
    let payload = sluice_payload(101);
    let pkt = request(&payload);
    // IPv4 header checksum verifies.
    assert_eq!(
        checksum(0, &pkt[ETH_HDR_LEN..ETH_HDR_LEN + IPV4_HDR_LEN]),
        0
    );
    // UDP checksum over pseudo header + datagram verifies.
    let udp = &pkt[ETH_HDR_LEN + IPV4_HDR_LEN..];
    let pseudo = pseudo_header_sum(
        Ipv4Addr::new(10, 99, 0, 2),
        Ipv4Addr::new(10, 99, 0, 1),
        udp.len() as u16,
    );
    assert_eq!(!fold(sum_words(pseudo, udp)), 0);
    match classify(&pkt, &local()) {
        Packet::Sluice {
            src_mac,
            src,
            off,
            len,
            datagram_len,
            truncated,
        } => {
            assert_eq!(datagram_len, len);
            assert_eq!(src_mac, PEER_MAC);
            assert_eq!(src, "10.99.0.2:40000".parse().unwrap());
            assert_eq!(off, HDRS_LEN);
            assert_eq!(len, payload.len());
            assert!(!truncated);
            assert_eq!(&pkt[off..off + len], &payload[..]);
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn ethernet_padding_is_not_payload() {
    let payload = sluice_payload(6);
    let mut pkt = request(&payload);
    pkt.resize(ETH_FRAME_MIN_LEN, 0);
    assert!(matches!(
        classify(&pkt, &local()),
        Packet::Sluice {
            len: 6,
            truncated: false,
            ..
        }
    ));
}

#[test]
fn garbage_is_classified_by_reason() {
    let l = local();
    let good = request(&sluice_payload(32));
    let mut cases: Vec<(Vec<u8>, Drop)> = Vec::new();
    cases.push((good[..10].to_vec(), Drop::Runt));
    let mut v6 = good.clone();
    v6[12..14].copy_from_slice(&0x86ddu16.to_be_bytes());
    cases.push((v6, Drop::Ethertype));
    let mut other_mac = good.clone();
    other_mac[0] = 0x04;
    cases.push((other_mac, Drop::NotOurMac));
    let mut bad_ver = good.clone();
    bad_ver[ETH_HDR_LEN] = 0x65;
    cases.push((bad_ver, Drop::BadIpv4));
    let mut bad_sum = good.clone();
    bad_sum[ETH_HDR_LEN + 10] ^= 1;
    cases.push((bad_sum, Drop::Ipv4Checksum));
    let mut other_ip = good.clone();
    other_ip[ETH_HDR_LEN + 19] = 9;
    fix_ip(&mut other_ip);
    cases.push((other_ip, Drop::NotOurIp));
    let mut tcp = good.clone();
    tcp[ETH_HDR_LEN + 9] = 6;
    fix_ip(&mut tcp);
    cases.push((tcp, Drop::NotUdp));
    let mut port = good.clone();
    port[ETH_HDR_LEN + IPV4_HDR_LEN + 3] ^= 1;
    cases.push((port, Drop::WrongPort));
    let mut udp_len = good.clone();
    udp_len[ETH_HDR_LEN + IPV4_HDR_LEN + 5] ^= 4;
    cases.push((udp_len, Drop::BadUdp));
    let mut magic = good.clone();
    magic[HDRS_LEN] = b'X';
    cases.push((magic, Drop::NotSluice));
    // testpmd txonly: UDP 9000 -> 9000, payload of zeros.
    let mut txonly = vec![0u8; 64];
    txonly[..6].copy_from_slice(&OUR_MAC);
    let peer = Local {
        mac: PEER_MAC,
        ip: Ipv4Addr::new(10, 99, 0, 2),
        udp_port: 9000,
    };
    build_udp(
        &mut txonly,
        22,
        &peer,
        OUR_MAC,
        "10.99.0.1:9000".parse().unwrap(),
        1,
        TxChecksum::Software,
    )
    .unwrap();
    cases.push((txonly, Drop::WrongPort));
    for (pkt, want) in cases {
        assert_eq!(classify(&pkt, &l), Packet::Drop(want), "{want:?}");
    }
}

fn fix_ip(pkt: &mut [u8]) {
    pkt[ETH_HDR_LEN + 10..ETH_HDR_LEN + 12].fill(0);
    let c = checksum(0, &pkt[ETH_HDR_LEN..ETH_HDR_LEN + IPV4_HDR_LEN]);
    pkt[ETH_HDR_LEN + 10..ETH_HDR_LEN + 12].copy_from_slice(&c.to_be_bytes());
}

/// An IPv4 fragment of `payload` at byte `offset` of a datagram, as a
/// peer kernel sends it (the UDP header, if any, is part of `payload`).
fn fragment(payload: &[u8], offset: usize, more: bool) -> Vec<u8> {
    let mut pkt = request(&sluice_payload(8));
    pkt.truncate(ETH_HDR_LEN + IPV4_HDR_LEN);
    pkt.extend_from_slice(payload);
    let total = (IPV4_HDR_LEN + payload.len()) as u16;
    pkt[ETH_HDR_LEN + 2..ETH_HDR_LEN + 4].copy_from_slice(&total.to_be_bytes());
    let flags = (offset / 8) as u16 | if more { IPV4_MF } else { 0 };
    pkt[ETH_HDR_LEN + 6..ETH_HDR_LEN + 8].copy_from_slice(&flags.to_be_bytes());
    fix_ip(&mut pkt);
    pkt
}

/// The UDP header and first bytes of a `datagram`-byte Sluice datagram.
fn udp_start(datagram: usize, body: usize) -> Vec<u8> {
    let mut u = vec![0u8; UDP_HDR_LEN];
    u[0..2].copy_from_slice(&40000u16.to_be_bytes());
    u[2..4].copy_from_slice(&7070u16.to_be_bytes());
    u[4..6].copy_from_slice(&((UDP_HDR_LEN + datagram) as u16).to_be_bytes());
    u.extend_from_slice(&sluice_payload(body));
    u
}

#[test]
fn first_fragment_carries_the_datagram_length() {
    let pkt = fragment(&udp_start(3000, 1472), 0, true);
    match classify(&pkt, &local()) {
        Packet::Fragment {
            ihl: IPV4_HDR_LEN,
            first: Some(f),
        } => {
            assert_eq!((f.len, f.datagram_len, f.off), (1472, 3000, HDRS_LEN));
            assert_eq!(f.src, "10.99.0.2:40000".parse().unwrap());
            assert_eq!(f.src_mac, PEER_MAC);
        }
        other => panic!("{other:?}"),
    }
    // A later fragment has no UDP header: for the reassembly as it is.
    let later = fragment(&[0xab; 1480], 1480, true);
    assert_eq!(
        classify(&later, &local()),
        Packet::Fragment {
            ihl: IPV4_HDR_LEN,
            first: None
        }
    );
    let last = fragment(&[0xab; 48], 2960, false);
    assert!(matches!(
        classify(&last, &local()),
        Packet::Fragment { first: None, .. }
    ));
}

#[test]
fn bad_fragments_are_classified_by_reason() {
    let l = local();
    let cases = [
        // The ping of death: the end lies past 65,535.
        (fragment(&[0; 1480], 65_528, true), Drop::FragOversize),
        (fragment(&[0; 16], 65_512, false), Drop::FragOversize),
        // A first fragment announcing a datagram IPv4 cannot carry.
        (
            fragment(&udp_start(65_510, 1000), 0, true),
            Drop::FragOversize,
        ),
        // A middle fragment of odd length, an empty one.
        (fragment(&[0; 1001], 1480, true), Drop::FragMalformed),
        (fragment(&[], 1480, false), Drop::FragMalformed),
        // A tiny first fragment: not even the UDP header and magic.
        (
            fragment(&udp_start(3000, 4)[..8], 0, true),
            Drop::FragMalformed,
        ),
        // First fragments are checked like datagrams.
        (
            {
                let mut u = udp_start(3000, 1472);
                u[3] ^= 1;
                fragment(&u, 0, true)
            },
            Drop::WrongPort,
        ),
        (
            {
                let mut u = udp_start(3000, 1472);
                u[UDP_HDR_LEN] = b'X';
                fragment(&u, 0, true)
            },
            Drop::NotSluice,
        ),
        (fragment(&udp_start(1000, 1472), 0, true), Drop::BadUdp),
    ];
    for (pkt, want) in cases {
        assert_eq!(classify(&pkt, &l), Packet::Drop(want), "{want:?}");
    }
}

#[test]
fn a_reassembled_datagram_classifies_without_its_checksum() {
    let payload = sluice_payload(5000);
    let mut pkt = request(&payload);
    // librte_ip_frag rewrites the total length and zeroes the checksum.
    pkt[ETH_HDR_LEN + 10..ETH_HDR_LEN + 12].fill(0);
    let first = &pkt[..2048];
    assert!(matches!(
        classify_reassembled(first, pkt.len(), &local()),
        Packet::Sluice {
            len: 2006,
            datagram_len: 5000,
            truncated: true,
            off: HDRS_LEN,
            ..
        }
    ));
    // A chain shorter than its header says is refused.
    assert_eq!(
        classify_reassembled(first, pkt.len() - 1, &local()),
        Packet::Drop(Drop::BadIpv4)
    );
}

#[test]
fn allow_fragments_clears_df_and_keeps_the_checksum_right() {
    let mut pkt = request(&sluice_payload(64));
    assert_eq!(be16(&pkt, ETH_HDR_LEN + 6), IPV4_DF);
    allow_fragments(&mut pkt);
    assert_eq!(be16(&pkt, ETH_HDR_LEN + 6), 0);
    assert_eq!(
        checksum(0, &pkt[ETH_HDR_LEN..ETH_HDR_LEN + IPV4_HDR_LEN]),
        0
    );
}

#[test]
fn only_the_first_segment_present_means_truncated() {
    let pkt = request(&sluice_payload(1000));
    // The PMD put the rest in a second segment.
    let first = &pkt[..HDRS_LEN + 200];
    assert!(matches!(
        classify(first, &local()),
        Packet::Sluice {
            len: 200,
            truncated: true,
            ..
        }
    ));
}

fn arp(oper: u16, sender_ip: [u8; 4], target_ip: [u8; 4]) -> Vec<u8> {
    let mut p = vec![0u8; ETH_FRAME_MIN_LEN];
    p[..6].copy_from_slice(&BROADCAST);
    p[6..12].copy_from_slice(&PEER_MAC);
    p[12..14].copy_from_slice(&ETHERTYPE_ARP.to_be_bytes());
    let a = &mut p[ETH_HDR_LEN..];
    a[0..2].copy_from_slice(&1u16.to_be_bytes());
    a[2..4].copy_from_slice(&ETHERTYPE_IPV4.to_be_bytes());
    a[4] = 6;
    a[5] = 4;
    a[6..8].copy_from_slice(&oper.to_be_bytes());
    a[8..14].copy_from_slice(&PEER_MAC);
    a[14..18].copy_from_slice(&sender_ip);
    a[24..28].copy_from_slice(&target_ip);
    p
}

#[test]
fn arp_for_us_is_answered_in_place() {
    let l = local();
    let mut p = arp(1, [10, 99, 0, 2], [10, 99, 0, 1]);
    let Packet::ArpRequest {
        sender_mac,
        sender_ip,
    } = classify(&p, &l)
    else {
        panic!()
    };
    assert_eq!(
        (sender_mac, sender_ip),
        (PEER_MAC, Ipv4Addr::new(10, 99, 0, 2))
    );
    let n = arp_reply_in_place(&mut p, &l, sender_mac, sender_ip).unwrap();
    assert_eq!(n, ETH_FRAME_MIN_LEN);
    assert_eq!(&p[..6], &PEER_MAC);
    assert_eq!(&p[6..12], &OUR_MAC);
    assert_eq!(be16(&p, ETH_HDR_LEN + 6), ARP_REPLY);
    assert_eq!(&p[ETH_HDR_LEN + 8..ETH_HDR_LEN + 14], &OUR_MAC);
    assert_eq!(&p[ETH_HDR_LEN + 14..ETH_HDR_LEN + 18], &[10, 99, 0, 1]);
    assert_eq!(&p[ETH_HDR_LEN + 18..ETH_HDR_LEN + 24], &PEER_MAC);
    assert_eq!(&p[ETH_HDR_LEN + 24..ETH_HDR_LEN + 28], &[10, 99, 0, 2]);
    // Our own reply, seen again, is not answered.
    assert!(!matches!(classify(&p, &l), Packet::ArpRequest { .. }));
}

#[test]
fn arp_for_others_learns_or_drops() {
    let l = local();
    assert!(matches!(
        classify(&arp(1, [10, 99, 0, 2], [10, 99, 0, 3]), &l),
        Packet::ArpLearn { .. }
    ));
    assert!(matches!(
        classify(&arp(2, [10, 99, 0, 5], [10, 99, 0, 1]), &l),
        Packet::ArpLearn { .. }
    ));
    assert_eq!(
        classify(&arp(1, [0, 0, 0, 0], [10, 99, 0, 1]), &l),
        Packet::Drop(Drop::Arp)
    );
    assert_eq!(
        classify(&arp(9, [10, 99, 0, 2], [10, 99, 0, 1]), &l),
        Packet::Drop(Drop::Arp)
    );
    assert_eq!(
        classify(&arp(1, [10, 99, 0, 2], [10, 99, 0, 1])[..30], &l),
        Packet::Drop(Drop::Runt)
    );
}

#[test]
fn offload_mode_leaves_pseudo_header_sum_and_zero_ip_checksum() {
    let mut pkt = vec![0u8; HDRS_LEN + 10];
    let dst: SocketAddrV4 = "10.99.0.2:5555".parse().unwrap();
    build_udp(
        &mut pkt,
        10,
        &local(),
        PEER_MAC,
        dst,
        1,
        TxChecksum::Offload,
    )
    .unwrap();
    assert_eq!(be16(&pkt, ETH_HDR_LEN + 10), 0);
    let want = fold(pseudo_header_sum(local().ip, *dst.ip(), 18));
    assert_eq!(be16(&pkt, ETH_HDR_LEN + IPV4_HDR_LEN + 6), want);
}

#[test]
fn build_refuses_short_buffers_and_giant_payloads() {
    let dst: SocketAddrV4 = "10.99.0.2:5555".parse().unwrap();
    let mut small = vec![0u8; HDRS_LEN + 3];
    assert_eq!(
        build_udp(
            &mut small,
            4,
            &local(),
            PEER_MAC,
            dst,
            1,
            TxChecksum::Software
        ),
        Err(BuildError::Short)
    );
    let mut big = vec![0u8; HDRS_LEN + 70_000];
    assert_eq!(
        build_udp(
            &mut big,
            70_000,
            &local(),
            PEER_MAC,
            dst,
            1,
            TxChecksum::Software
        ),
        Err(BuildError::TooLong)
    );
}

#[test]
fn neighbours_learn_refresh_and_survive_collisions() {
    let mut n = Neighbours::new(8);
    assert_eq!(n.lookup(Ipv4Addr::new(10, 99, 0, 2)), None);
    n.learn(Ipv4Addr::new(10, 99, 0, 2), PEER_MAC);
    assert_eq!(n.lookup(Ipv4Addr::new(10, 99, 0, 2)), Some(PEER_MAC));
    n.learn(Ipv4Addr::new(10, 99, 0, 2), OUR_MAC);
    assert_eq!(n.lookup(Ipv4Addr::new(10, 99, 0, 2)), Some(OUR_MAC));
    n.learn(Ipv4Addr::UNSPECIFIED, PEER_MAC);
    assert_eq!(n.lookup(Ipv4Addr::UNSPECIFIED), None);
    // Far more addresses than slots: lookups return the right MAC or nothing.
    for i in 0..1000u32 {
        let ip = Ipv4Addr::from(0x0a63_0000 + i);
        n.learn(ip, [0, 0, 0, 0, (i >> 8) as u8, i as u8]);
        assert_eq!(n.lookup(ip), Some([0, 0, 0, 0, (i >> 8) as u8, i as u8]));
    }
    for i in 0..1000u32 {
        if let Some(m) = n.lookup(Ipv4Addr::from(0x0a63_0000 + i)) {
            assert_eq!(m, [0, 0, 0, 0, (i >> 8) as u8, i as u8]);
        }
    }
}

#[test]
fn tx_skip_aligns_the_frame() {
    for addr in (0..256).map(|a| 0x1000 + a) {
        let s = tx_skip(addr, 64);
        assert!(s < 64);
        assert_eq!((addr + s + HDRS_LEN) % 64, 0);
    }
}
