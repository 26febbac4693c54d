/* Out-of-line wrappers for DPDK's static inline functions and macros, which
 * bindgen cannot bind. Kept tiny: one call per burst or per mbuf. */
#ifndef SLUICE_DPDK_SHIM_H
#define SLUICE_DPDK_SHIM_H

#include <stdint.h>

struct rte_mbuf;
struct rte_mempool;

/* What the transport needs to know about a received mbuf, in one call. */
struct sl_mbuf_view {
    uint8_t *data;     /* rte_pktmbuf_mtod */
    uint8_t *buf_addr; /* start of the data room */
    uint32_t pkt_len;  /* all segments */
    uint16_t data_len; /* first segment */
    uint16_t data_off;
    uint16_t buf_len;
    uint16_t nb_segs;
    uint64_t ol_flags;
};

uint16_t sl_rx_burst(uint16_t port, uint16_t queue, struct rte_mbuf **pkts, uint16_t n);
uint16_t sl_tx_burst(uint16_t port, uint16_t queue, struct rte_mbuf **pkts, uint16_t n);
struct rte_mbuf *sl_pktmbuf_alloc(struct rte_mempool *mp);
/* 0 on success, the whole bulk or nothing. */
int sl_pktmbuf_alloc_bulk(struct rte_mempool *mp, struct rte_mbuf **pkts, unsigned n);
/* Frees a whole chain (every segment). */
void sl_pktmbuf_free(struct rte_mbuf *m);
void sl_mbuf_view(const struct rte_mbuf *m, struct sl_mbuf_view *out);
/* Sets the data offset and a single-segment length of a fresh mbuf;
 * returns the data pointer, or NULL if it does not fit the data room. */
uint8_t *sl_mbuf_set_data(struct rte_mbuf *m, uint16_t data_off, uint16_t len);
/* Asks the NIC for IPv4 header and UDP checksums (l2/l3 lengths set). */
void sl_mbuf_tx_offload_ipv4_udp(struct rte_mbuf *m, uint8_t l2_len, uint8_t l3_len);
int sl_errno(void);
unsigned sl_lcore_id(void);
/* sizeof(struct rte_mbuf): the data room starts after it and the private area. */
unsigned sl_mbuf_struct_size(void);
unsigned sl_pktmbuf_headroom(void);

/* RTE_ETH_TX_OFFLOAD_IPV4_CKSUM | RTE_ETH_TX_OFFLOAD_UDP_CKSUM (macros bindgen cannot evaluate). */
uint64_t sl_tx_offload_ipv4_udp_cksum(void);
/* RTE_ETH_RSS_IP | RTE_ETH_RSS_UDP. */
uint64_t sl_rss_hf_ip_udp(void);
/* 1 if the link is up, 0 if down, negative errno; speed in Mbit/s. */
int sl_link_status(uint16_t port, uint32_t *speed_mbps);

/* ---- Large frames: slot buffers, IPv4 reassembly and fragmentation ---- */

struct rte_ip_frag_tbl;
struct rte_ip_frag_death_row;
struct rte_memzone;

/* Fixed-size buffers reserved at start-up, where frames larger than one
 * mbuf are made contiguous (receive) or written in place (transmit). They
 * sit in IOVA-contiguous memzones of at most 512 KiB (a NIC addresses a
 * slot by zone IOVA + offset): slot i is slot i % per_zone of zone
 * i / per_zone. A transmit slot attached to mbufs as an external
 * buffer carries its own shared info; its `released` flag is set by the
 * free callback once the last mbuf referring to it is freed. */
#define SL_SLOT_ZONES_MAX 1024
struct sl_slots {
    uint8_t *zone_base[SL_SLOT_ZONES_MAX];
    uint64_t zone_iova[SL_SLOT_ZONES_MAX];
    const struct rte_memzone *zone[SL_SLOT_ZONES_MAX];
    uint32_t zones;
    uint32_t per_zone;
    uint32_t count;
    uint32_t stride;   /* bytes per slot, a multiple of 64 */
    void *shinfo;      /* count struct rte_mbuf_ext_shared_info */
    uint32_t *released;
    const struct rte_memzone *mz_meta;
};

/* NULL with rte_errno set when a memzone cannot be reserved. */
struct sl_slots *sl_slots_create(const char *name, uint32_t count, uint32_t stride, int socket);
void sl_slots_destroy(struct sl_slots *s);
/* Start of slot i (NULL out of range). */
uint8_t *sl_slot_addr(const struct sl_slots *s, uint32_t i);
/* Makes m (fresh, direct, refcnt 1) refer to bytes [off, off + len) of slot i
 * as an external buffer; 0, or -1 when the range is outside the slot. */
int sl_slot_attach(struct sl_slots *s, uint32_t i, struct rte_mbuf *m, uint32_t off, uint32_t len);
/* 1 (and clears the flag) if every mbuf attached to slot i has been freed. */
uint32_t sl_slot_take_released(struct sl_slots *s, uint32_t i);

/* RTE_LIBRTE_IP_FRAG_MAX_FRAG of the librte_ip_frag linked in. */
unsigned sl_ip_frag_max_frag(void);
/* 1 when librte_ip_frag was built from source by dpdk-sys, 0 for the system one. */
unsigned sl_ip_frag_built(void);
/* A table for `entries` datagrams in reassembly (buckets of 16). */
struct rte_ip_frag_tbl *sl_frag_table_create(uint32_t entries, uint64_t max_cycles, int socket);
void sl_frag_table_destroy(struct rte_ip_frag_tbl *t);
struct rte_ip_frag_death_row *sl_death_row_create(int socket);
void sl_death_row_destroy(struct rte_ip_frag_death_row *dr);
uint32_t sl_death_row_count(const struct rte_ip_frag_death_row *dr);
uint32_t sl_death_row_capacity(void);
struct rte_mbuf *sl_death_row_at(const struct rte_ip_frag_death_row *dr, uint32_t i);
/* Frees every mbuf on the death row (rte_ip_frag_free_death_row). */
void sl_death_row_free(struct rte_ip_frag_death_row *dr);
/* rte_ipv4_frag_reassemble_packet with l2_len/l3_len set on m: the whole
 * datagram as an mbuf chain, or NULL (held in the table, or put on the
 * death row). */
struct rte_mbuf *sl_ipv4_reassemble(struct rte_ip_frag_tbl *t, struct rte_ip_frag_death_row *dr,
                                    struct rte_mbuf *m, uint64_t tms, uint8_t l2_len, uint8_t l3_len);
/* rte_ip_frag_table_del_expired_entries. */
void sl_frag_expire(struct rte_ip_frag_tbl *t, struct rte_ip_frag_death_row *dr, uint64_t tms);
/* rte_ipv4_fragment_packet (zero copy: indirect mbufs) and
 * rte_ipv4_fragment_copy_nonseg_packet (copies into direct mbufs). */
int sl_ipv4_fragment(struct rte_mbuf *in, struct rte_mbuf **out, uint16_t n, uint16_t mtu,
                     struct rte_mempool *direct, struct rte_mempool *indirect);
int sl_ipv4_fragment_copy(struct rte_mbuf *in, struct rte_mbuf **out, uint16_t n, uint16_t mtu,
                          struct rte_mempool *direct);
/* Prepends a 14-byte Ethernet header to a fragment and fills its IPv4
 * header checksum; 0, or -1 without headroom. */
int sl_frag_finish(struct rte_mbuf *f, const uint8_t *eth);
/* rte_pktmbuf_chain: 0, or negative errno. */
int sl_mbuf_chain(struct rte_mbuf *head, struct rte_mbuf *tail);
/* Copies len bytes at offset off of a (possibly chained) mbuf to dst;
 * returns len, or 0 when the mbuf is shorter. */
uint32_t sl_mbuf_copy_out(const struct rte_mbuf *m, uint32_t off, uint32_t len, uint8_t *dst);
uint64_t sl_tsc(void);
uint64_t sl_tsc_hz(void);
/* RTE_ETH_RX_OFFLOAD_SCATTER and RTE_ETH_TX_OFFLOAD_MULTI_SEGS. */
uint64_t sl_rx_offload_scatter(void);
uint64_t sl_tx_offload_multi_segs(void);

#endif
