/* gpu.h - the GPUs of this node, behind one narrow interface: NVML loaded with dlopen
 * at run time ("auto"), none ("none"), or declared by hand ("MODEL:VRAM,..."), so the
 * same agent binary runs on a GPU box and on a Raspberry Pi. */
#ifndef BRAMBLE_GPU_H
#define BRAMBLE_GPU_H

#include <jansson.h>
#include <stdint.h>

#include "err.h"

typedef struct br_gpus br_gpus_t;

typedef struct {
    int index;           /* 0..n-1, the CUDA_VISIBLE_DEVICES index */
    char model[96];      /* "NVIDIA H200", "RTX 4090" */
    uint64_t vram_total; /* bytes */
    uint64_t vram_free;  /* bytes */
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

/* Re-read free VRAM from NVML (no-op for declared GPUs). */
int br_gpus_refresh(br_gpus_t *gpus);

/* [{"index","model","vram_total","vram_free"}...]. New reference. */
json_t *br_gpus_to_json(const br_gpus_t *gpus);

#endif
