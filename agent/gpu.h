/* gpu.h - the GPUs of this node, behind one narrow interface: NVML loaded with dlopen
 * at run time ("auto"), none ("none"), or declared by hand ("MODEL:VRAM,..."), so the
 * same agent binary runs on a GPU box and on a Raspberry Pi. */
#ifndef BRAMBLE_GPU_H
#define BRAMBLE_GPU_H

#include <jansson.h>
#include <stdint.h>

#include "err.h"

typedef struct br_gpus br_gpus_t;

/* Which of a GPU's live figures the last refresh could read (br_gpu_t.have). */
enum {
    BR_GPU_MEMORY = 1 << 0, /* vram_free and vram_used */
    BR_GPU_UTIL = 1 << 1,
    BR_GPU_POWER = 1 << 2,
    BR_GPU_TEMP = 1 << 3,
    BR_GPU_ECC = 1 << 4, /* ecc_uncorrected */
};

typedef struct {
    int index;           /* 0..n-1, the CUDA_VISIBLE_DEVICES index */
    char model[96];      /* "NVIDIA H200", "RTX 4090" */
    char uuid[96];       /* NVML's "GPU-8f3c..."; "" when not known (declared GPUs) */
    uint64_t vram_total; /* bytes */
    uint64_t vram_free;  /* bytes */
    /* Live figures, NVML only, valid where have says so. */
    unsigned have;
    uint64_t vram_used; /* bytes, by every process on the GPU */
    int util;           /* percent of the last sample period the GPU was busy */
    double power_w;     /* watts */
    int temp_c;         /* degrees Celsius, the GPU die */
    uint64_t ecc_uncorrected; /* volatile count of uncorrected ECC errors */
    /* XID errors (NVML's critical-error events) since the agent started: how many,
     * and the last one's number; kept across refreshes */
    uint64_t xid_count;
    unsigned long long xid_last;
} br_gpu_t;

/* spec: "auto" (NVML when libnvidia-ml.so.1 loads and finds devices, else none),
 * "none", or a list "RTX 4090:24GiB,RTX 3090:24GiB" (declared, vram_free = total).
 * A malformed list is an error naming the bad entry. */
br_gpus_t *br_gpus_new(const char *spec, br_err_t *err);
void br_gpus_destroy(br_gpus_t **gpus);

int br_gpus_count(const br_gpus_t *gpus);
const br_gpu_t *br_gpus_get(const br_gpus_t *gpus, int i);

/* "nvml", "declared" or "none". */
const char *br_gpus_source(const br_gpus_t *gpus);
/* NVML driver and CUDA versions ("" when not from NVML). */
const char *br_gpus_driver_version(const br_gpus_t *gpus);
const char *br_gpus_cuda_version(const br_gpus_t *gpus);

/* Re-read the live figures from NVML: memory, utilisation, power, temperature,
 * uncorrected ECC errors, and the XID events that came since (a no-op for
 * declared GPUs and "none"; a driver without events or ECC counts leaves them out). A figure NVML cannot give (call missing from
 * the library, NVML_ERROR_NOT_SUPPORTED, any other error) is left out of have;
 * -1 with errno EIO when some GPU's memory could not be read. Each figure is one
 * NVML call per GPU; NVML answers from the driver, but on a wedged GPU a call may
 * block in the kernel for as long as the driver takes (docs/gpus.md). */
int br_gpus_refresh(br_gpus_t *gpus);

/* The GPUs' total draw in watts as the last refresh read it, and in *known (may be
 * NULL) how many GPUs it could read it of: those without BR_GPU_POWER count 0 W. */
double br_gpus_power(const br_gpus_t *gpus, int *known);

/* [{"index","model","vram_total","vram_free"}...]. New reference. */
json_t *br_gpus_to_json(const br_gpus_t *gpus);

/* The live figures for node.heartbeat: [{"index", "vram_free"?, "vram_used"?,
 * "util"?, "power_w"?, "temp_c"?, "ecc_uncorrected"?, "xid_count"?, "xid_last"?}...],
 * each figure only when have holds it (XIDs once there was one); NULL
 * when the GPUs are not NVML's (declared or none: nothing live to tell). New
 * reference. */
json_t *br_gpus_live_json(const br_gpus_t *gpus);

#endif
