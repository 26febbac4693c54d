/* USDT probes of the Sluice engine (provider "sluice"). Each probe has a
 * semaphore: the tracer increments it while attached, and the engine tests
 * it before it builds the probe's arguments, so a probe costs one load and
 * a branch when nobody traces. Without sys/sdt.h the functions are empty
 * and the semaphores stay 0. */
#include <stdint.h>

#ifdef SLUICE_HAVE_SDT
#define _SDT_HAS_SEMAPHORES 1
#include <sys/sdt.h>
#define SEM(name) unsigned short sluice_##name##_semaphore __attribute__((unused)) __attribute__((section(".probes")))
#else
#define SEM(name) unsigned short sluice_##name##_semaphore
#define DTRACE_PROBE1(p, n, a)
#define DTRACE_PROBE2(p, n, a, b)
#define DTRACE_PROBE3(p, n, a, b, c)
#define DTRACE_PROBE4(p, n, a, b, c, d)
#endif

SEM(parse);
SEM(auth);
SEM(validate);
SEM(route);
SEM(admit);
SEM(infer_start);
SEM(infer_end);
SEM(send);
SEM(pool_alloc);
SEM(pool_free);
SEM(error);

/* A frame parsed: request id, tenant, frame length. */
void sl_probe_parse(uint64_t rid, uint32_t tenant, uint32_t len) { DTRACE_PROBE3(sluice, parse, rid, tenant, len); }
/* Authenticated (or not: ok 0): request id, tenant, ok. */
void sl_probe_auth(uint64_t rid, uint32_t tenant, uint32_t ok) { DTRACE_PROBE3(sluice, auth, rid, tenant, ok); }
/* Validated against schema id (0: none). */
void sl_probe_validate(uint64_t rid, uint32_t schema_id) { DTRACE_PROBE2(sluice, validate, rid, schema_id); }
/* Routed to shard (65535: forwarded or refused before a shard). */
void sl_probe_route(uint64_t rid, uint32_t shard) { DTRACE_PROBE2(sluice, route, rid, shard); }
/* Admitted into the shard's queue at this depth. */
void sl_probe_admit(uint64_t rid, uint32_t shard, uint32_t depth) { DTRACE_PROBE3(sluice, admit, rid, shard, depth); }
/* The model starts / ends (code 0: a response). */
void sl_probe_infer_start(uint64_t rid, uint32_t shard) { DTRACE_PROBE2(sluice, infer_start, rid, shard); }
void sl_probe_infer_end(uint64_t rid, uint32_t shard, uint32_t code) { DTRACE_PROBE3(sluice, infer_end, rid, shard, code); }
/* A burst of answers handed to the transport: frames, bytes. */
void sl_probe_send(uint32_t frames, uint64_t bytes) { DTRACE_PROBE2(sluice, send, frames, bytes); }
/* A transmit buffer taken / returned: buffer index. */
void sl_probe_pool_alloc(uint32_t buf) { DTRACE_PROBE1(sluice, pool_alloc, buf); }
void sl_probe_pool_free(uint32_t buf) { DTRACE_PROBE1(sluice, pool_free, buf); }
/* An error frame: request id, tenant, wire error code. */
void sl_probe_error(uint64_t rid, uint32_t tenant, uint32_t code) { DTRACE_PROBE3(sluice, error, rid, tenant, code); }
