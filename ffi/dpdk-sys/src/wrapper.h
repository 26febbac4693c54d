/* Everything bindgen sees: the DPDK headers the engine uses, and the shim. */
#include <rte_eal.h>
#include <rte_errno.h>
#include <rte_lcore.h>
#include <rte_ethdev.h>
#include <rte_mbuf.h>
#include <rte_mempool.h>
#include <rte_version.h>
#include "shim.h"
