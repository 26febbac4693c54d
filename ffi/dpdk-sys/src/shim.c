#include <rte_errno.h>
#include <rte_ethdev.h>
#include <rte_lcore.h>
#include <rte_mbuf.h>

#include "shim.h"

uint16_t sl_rx_burst(uint16_t port, uint16_t queue, struct rte_mbuf **pkts, uint16_t n)
{
    return rte_eth_rx_burst(port, queue, pkts, n);
}

uint16_t sl_tx_burst(uint16_t port, uint16_t queue, struct rte_mbuf **pkts, uint16_t n)
{
    return rte_eth_tx_burst(port, queue, pkts, n);
}

struct rte_mbuf *sl_pktmbuf_alloc(struct rte_mempool *mp)
{
    return rte_pktmbuf_alloc(mp);
}

int sl_pktmbuf_alloc_bulk(struct rte_mempool *mp, struct rte_mbuf **pkts, unsigned n)
{
    return rte_pktmbuf_alloc_bulk(mp, pkts, n);
}

void sl_pktmbuf_free(struct rte_mbuf *m)
{
    rte_pktmbuf_free(m);
}

void sl_mbuf_view(const struct rte_mbuf *m, struct sl_mbuf_view *out)
{
    out->data = rte_pktmbuf_mtod(m, uint8_t *);
    out->buf_addr = (uint8_t *)m->buf_addr;
    out->pkt_len = m->pkt_len;
    out->data_len = m->data_len;
    out->data_off = m->data_off;
    out->buf_len = m->buf_len;
    out->nb_segs = m->nb_segs;
    out->ol_flags = m->ol_flags;
}

uint8_t *sl_mbuf_set_data(struct rte_mbuf *m, uint16_t data_off, uint16_t len)
{
    if ((uint32_t)data_off + len > m->buf_len)
        return NULL;
    m->data_off = data_off;
    m->data_len = len;
    m->pkt_len = len;
    m->nb_segs = 1;
    m->next = NULL;
    return (uint8_t *)m->buf_addr + data_off;
}

void sl_mbuf_tx_offload_ipv4_udp(struct rte_mbuf *m, uint8_t l2_len, uint8_t l3_len)
{
    m->l2_len = l2_len;
    m->l3_len = l3_len;
    m->ol_flags |= RTE_MBUF_F_TX_IPV4 | RTE_MBUF_F_TX_IP_CKSUM | RTE_MBUF_F_TX_UDP_CKSUM;
}

int sl_errno(void)
{
    return rte_errno;
}

unsigned sl_lcore_id(void)
{
    return rte_lcore_id();
}

unsigned sl_mbuf_struct_size(void)
{
    return sizeof(struct rte_mbuf);
}

unsigned sl_pktmbuf_headroom(void)
{
    return RTE_PKTMBUF_HEADROOM;
}

uint64_t sl_tx_offload_ipv4_udp_cksum(void)
{
    return RTE_ETH_TX_OFFLOAD_IPV4_CKSUM | RTE_ETH_TX_OFFLOAD_UDP_CKSUM;
}

uint64_t sl_rss_hf_ip_udp(void)
{
    return RTE_ETH_RSS_IP | RTE_ETH_RSS_UDP;
}

int sl_link_status(uint16_t port, uint32_t *speed_mbps)
{
    struct rte_eth_link link;
    int r = rte_eth_link_get_nowait(port, &link);
    if (r < 0)
        return r;
    *speed_mbps = link.link_speed;
    return link.link_status == RTE_ETH_LINK_UP ? 1 : 0;
}
