/* Large frames: slot buffers (memzone, external mbuf buffers), IPv4
 * reassembly and fragmentation with librte_ip_frag. Compiled with the same
 * RTE_LIBRTE_IP_FRAG_MAX_FRAG as the librte_ip_frag it is linked with (see
 * build.rs): the death row's layout depends on it. */
#include <string.h>

#include <rte_cycles.h>
#include <rte_errno.h>
#include <rte_ethdev.h>
#include <rte_ip.h>
#include <rte_ip_frag.h>
#include <rte_malloc.h>
#include <rte_mbuf.h>
#include <rte_memzone.h>

#include "shim.h"

#ifndef SL_IP_FRAG_BUILT
#define SL_IP_FRAG_BUILT 0
#endif

/* Zones of at most 512 KiB: IOVA-contiguous zones that big fit inside one
 * 2 MiB hugepage, so EAL never needs physically adjacent pages for them. */
#define SL_ZONE_BYTES (512u << 10)

void sl_slots_destroy(struct sl_slots *s)
{
    uint32_t z;

    if (s == NULL)
        return;
    for (z = 0; z < s->zones; z++)
        rte_memzone_free(s->zone[z]);
    if (s->mz_meta != NULL)
        rte_memzone_free(s->mz_meta);
    rte_free(s);
}

struct sl_slots *sl_slots_create(const char *name, uint32_t count, uint32_t stride, int socket)
{
    char zname[RTE_MEMZONE_NAMESIZE];
    struct sl_slots *s;
    uint32_t z, per_zone, zones;
    size_t meta;

    if (count == 0 || stride == 0 || stride % 64 != 0 || stride > SL_ZONE_BYTES) {
        rte_errno = EINVAL;
        return NULL;
    }
    per_zone = SL_ZONE_BYTES / stride;
    zones = (count + per_zone - 1) / per_zone;
    if (zones > SL_SLOT_ZONES_MAX) {
        rte_errno = E2BIG;
        return NULL;
    }
    s = rte_zmalloc_socket("sl_slots", sizeof(*s), RTE_CACHE_LINE_SIZE, socket);
    if (s == NULL)
        return NULL;
    s->per_zone = per_zone;
    s->count = count;
    s->stride = stride;
    for (z = 0; z < zones; z++) {
        uint32_t left = count - z * per_zone;
        uint32_t n = left < per_zone ? left : per_zone;
        const struct rte_memzone *mz;

        snprintf(zname, sizeof(zname), "%s_%u", name, z);
        mz = rte_memzone_reserve_aligned(zname, (size_t)n * stride, socket,
                                         RTE_MEMZONE_IOVA_CONTIG, RTE_CACHE_LINE_SIZE);
        if (mz == NULL) {
            int e = rte_errno;
            sl_slots_destroy(s);
            rte_errno = e;
            return NULL;
        }
        s->zone[z] = mz;
        s->zone_base[z] = mz->addr;
        s->zone_iova[z] = mz->iova;
        s->zones = z + 1;
    }
    meta = (size_t)count * (sizeof(struct rte_mbuf_ext_shared_info) + sizeof(uint32_t));
    snprintf(zname, sizeof(zname), "%s_m", name);
    s->mz_meta = rte_memzone_reserve_aligned(zname, meta, socket, 0, RTE_CACHE_LINE_SIZE);
    if (s->mz_meta == NULL) {
        int e = rte_errno;
        sl_slots_destroy(s);
        rte_errno = e;
        return NULL;
    }
    memset(s->mz_meta->addr, 0, meta);
    s->shinfo = s->mz_meta->addr;
    s->released = (uint32_t *)((struct rte_mbuf_ext_shared_info *)s->shinfo + count);
    return s;
}

static uint8_t *slot_addr(const struct sl_slots *s, uint32_t i)
{
    return s->zone_base[i / s->per_zone] + (size_t)(i % s->per_zone) * s->stride;
}

static uint64_t slot_iova(const struct sl_slots *s, uint32_t i)
{
    return s->zone_iova[i / s->per_zone] + (uint64_t)(i % s->per_zone) * s->stride;
}

uint8_t *sl_slot_addr(const struct sl_slots *s, uint32_t i)
{
    return i < s->count ? slot_addr(s, i) : NULL;
}

/* Runs when the last mbuf referring to a slot is freed: by the worker, by
 * the PMD after sending, or at port close. */
static void sl_slot_release_cb(void *addr, void *opaque)
{
    (void)addr;
    __atomic_store_n((uint32_t *)opaque, 1, __ATOMIC_RELEASE);
}

int sl_slot_attach(struct sl_slots *s, uint32_t i, struct rte_mbuf *m, uint32_t off, uint32_t len)
{
    struct rte_mbuf_ext_shared_info *sh;

    if (i >= s->count || len == 0 || len > UINT16_MAX || (uint64_t)off + len > s->stride)
        return -1;
    sh = (struct rte_mbuf_ext_shared_info *)s->shinfo + i;
    sh->free_cb = sl_slot_release_cb;
    sh->fcb_opaque = &s->released[i];
    rte_mbuf_ext_refcnt_set(sh, 1);
    __atomic_store_n(&s->released[i], 0, __ATOMIC_RELAXED);
    rte_pktmbuf_attach_extbuf(m, slot_addr(s, i) + off, slot_iova(s, i) + off, (uint16_t)len, sh);
    m->data_off = 0;
    m->data_len = (uint16_t)len;
    m->pkt_len = len;
    return 0;
}

uint32_t sl_slot_take_released(struct sl_slots *s, uint32_t i)
{
    if (i >= s->count)
        return 0;
    return __atomic_exchange_n(&s->released[i], 0, __ATOMIC_ACQUIRE);
}

unsigned sl_ip_frag_max_frag(void)
{
    return RTE_LIBRTE_IP_FRAG_MAX_FRAG;
}

unsigned sl_ip_frag_built(void)
{
    return SL_IP_FRAG_BUILT;
}

struct rte_ip_frag_tbl *sl_frag_table_create(uint32_t entries, uint64_t max_cycles, int socket)
{
    const uint32_t bucket_entries = 16;
    uint32_t buckets = (entries + bucket_entries - 1) / bucket_entries;

    return rte_ip_frag_table_create(buckets, bucket_entries, entries, max_cycles, socket);
}

void sl_frag_table_destroy(struct rte_ip_frag_tbl *t)
{
    rte_ip_frag_table_destroy(t);
}

struct rte_ip_frag_death_row *sl_death_row_create(int socket)
{
    return rte_zmalloc_socket("sl_death_row", sizeof(struct rte_ip_frag_death_row),
                              RTE_CACHE_LINE_SIZE, socket);
}

void sl_death_row_destroy(struct rte_ip_frag_death_row *dr)
{
    rte_free(dr);
}

uint32_t sl_death_row_count(const struct rte_ip_frag_death_row *dr)
{
    return dr->cnt;
}

uint32_t sl_death_row_capacity(void)
{
    return RTE_IP_FRAG_DEATH_ROW_MBUF_LEN;
}

struct rte_mbuf *sl_death_row_at(const struct rte_ip_frag_death_row *dr, uint32_t i)
{
    return i < dr->cnt ? dr->row[i] : NULL;
}

void sl_death_row_free(struct rte_ip_frag_death_row *dr)
{
    rte_ip_frag_free_death_row(dr, 0);
}

struct rte_mbuf *sl_ipv4_reassemble(struct rte_ip_frag_tbl *t, struct rte_ip_frag_death_row *dr,
                                    struct rte_mbuf *m, uint64_t tms, uint8_t l2_len, uint8_t l3_len)
{
    m->l2_len = l2_len;
    m->l3_len = l3_len;
    return rte_ipv4_frag_reassemble_packet(
        t, dr, m, tms, rte_pktmbuf_mtod_offset(m, struct rte_ipv4_hdr *, l2_len));
}

void sl_frag_expire(struct rte_ip_frag_tbl *t, struct rte_ip_frag_death_row *dr, uint64_t tms)
{
    rte_ip_frag_table_del_expired_entries(t, dr, tms);
}

int sl_ipv4_fragment(struct rte_mbuf *in, struct rte_mbuf **out, uint16_t n, uint16_t mtu,
                     struct rte_mempool *direct, struct rte_mempool *indirect)
{
    return rte_ipv4_fragment_packet(in, out, n, mtu, direct, indirect);
}

int sl_ipv4_fragment_copy(struct rte_mbuf *in, struct rte_mbuf **out, uint16_t n, uint16_t mtu,
                          struct rte_mempool *direct)
{
    return rte_ipv4_fragment_copy_nonseg_packet(in, out, n, mtu, direct);
}

int sl_frag_finish(struct rte_mbuf *f, const uint8_t *eth)
{
    uint8_t *p = (uint8_t *)rte_pktmbuf_prepend(f, RTE_ETHER_HDR_LEN);
    struct rte_ipv4_hdr *ip;

    if (p == NULL)
        return -1;
    memcpy(p, eth, RTE_ETHER_HDR_LEN);
    ip = (struct rte_ipv4_hdr *)(p + RTE_ETHER_HDR_LEN);
    ip->hdr_checksum = 0;
    ip->hdr_checksum = rte_ipv4_cksum(ip);
    return 0;
}

int sl_mbuf_chain(struct rte_mbuf *head, struct rte_mbuf *tail)
{
    return rte_pktmbuf_chain(head, tail);
}

uint32_t sl_mbuf_copy_out(const struct rte_mbuf *m, uint32_t off, uint32_t len, uint8_t *dst)
{
    const void *p;

    if ((uint64_t)off + len > m->pkt_len)
        return 0;
    p = rte_pktmbuf_read(m, off, len, dst);
    if (p == NULL)
        return 0;
    if (p != dst)
        memcpy(dst, p, len);
    return len;
}

uint64_t sl_tsc(void)
{
    return rte_rdtsc();
}

uint64_t sl_tsc_hz(void)
{
    return rte_get_tsc_hz();
}

uint64_t sl_rx_offload_scatter(void)
{
    return RTE_ETH_RX_OFFLOAD_SCATTER;
}

uint64_t sl_tx_offload_multi_segs(void)
{
    return RTE_ETH_TX_OFFLOAD_MULTI_SEGS;
}
