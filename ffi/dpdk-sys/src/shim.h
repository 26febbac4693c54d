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

#endif
