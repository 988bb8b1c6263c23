/* gpulive.h - the GPUs' live figures that agents send in node.heartbeat (free and
 * used VRAM, utilisation, power, temperature, XID and uncorrected ECC errors):
 * checked, kept in the node's info in memory (no store write per heartbeat: the
 * info is saved when something else changes), shown on /metrics as per-GPU gauges
 * (docs/metrics.md), and a new hardware fault said so that node life can make the
 * node unhealthy. */
#ifndef BRAMBLE_GPULIVE_H
#define BRAMBLE_GPULIVE_H

#include <jansson.h>

#include "err.h"
#include "metrics.h"
#include "nodes.h"

/* Free VRAM that grows by less than this is not worth rerunning the scheduler for
 * (NVML's free figure moves a little all the time). */
#define BR_GPULIVE_RESCHED (64ULL << 20)

/* Check a heartbeat's "gpus": an array of at most BR_NODE_MAX_GPUS objects
 * {"index": int, "vram_free"?: bytes, "vram_used"?: bytes, "util"?: 0..100,
 * "power_w"?: number >= 0, "temp_c"?: int, "ecc_uncorrected"?, "xid_count"?,
 * "xid_last"?: ints >= 0}, nothing else. Otherwise -1 with
 * EPROTO and a message naming 'gpus' (the agent then sends its heartbeats without
 * them, as it does to a coordinator that predates the field). */
int br_gpulive_check(json_t *gpus, br_err_t *err);

enum { BR_GPULIVE_ROSE = 1, BR_GPULIVE_FAULT = 2 };

/* Take checked figures into n's info: each GPU's vram_used, util, power_w,
 * temp_c and error counts as sent (a figure not sent is removed: it is not known
 * now), and its vram_free as the scheduler counts it: NVML's free VRAM plus what
 * bramble's sharing jobs reserved on that GPU (their memory is in NVML's used
 * figure, and the scheduler subtracts their reservations itself), at most
 * vram_total. An entry for a GPU the node did not report in its hello is ignored.
 * Returns BR_GPULIVE_ROSE when some GPU has at least BR_GPULIVE_RESCHED more VRAM
 * to spare than before (pending jobs may fit now), and BR_GPULIVE_FAULT, with
 * fault (len bytes) saying which GPU and what, when a GPU shows a new hardware
 * fault: an XID other than those a program causes itself (13, 31, 43, 45, 68,
 * 69), or more uncorrected ECC errors than the info held. */
int br_gpulive_take(br_node_t *n, json_t *gpus, char *fault, size_t len);

/* The per-GPU gauges of the connected nodes (not lost, heard from since this
 * coordinator started): bramble_gpu_memory_total_bytes,
 * bramble_gpu_memory_used_bytes, bramble_gpu_utilization_ratio,
 * bramble_gpu_power_watts, bramble_gpu_temperature_celsius,
 * bramble_gpu_xid_errors, bramble_gpu_ecc_uncorrected_errors; labels node, gpu,
 * model. A figure the agent did not send is left out. */
void br_gpulive_page(br_metrics_t *m, br_nodes_t *nodes);

#endif
