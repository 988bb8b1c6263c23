/* plan.h - the memory planner: GPU memory per GPU for inference, LoRA, QLoRA or full
 * training of a model of a given size (formulas and sources: docs/planning.md). */
#ifndef BRAMBLE_PLAN_H
#define BRAMBLE_PLAN_H

#include <stddef.h>
#include <stdint.h>

#include "err.h"

typedef enum {
    BR_PLAN_INFERENCE = 0,
    BR_PLAN_LORA,
    BR_PLAN_QLORA,
    BR_PLAN_FULL,
} br_plan_mode_t;

typedef enum {
    BR_DTYPE_FP32 = 0,
    BR_DTYPE_FP16,
    BR_DTYPE_BF16,
    BR_DTYPE_INT8,
    BR_DTYPE_INT4,
} br_dtype_t;

/* Fixed allowance per GPU for the CUDA context, library workspaces and allocator
 * slack (docs/planning.md, "Overhead"). */
#define BR_PLAN_OVERHEAD (1ULL << 30)
/* LoRA/QLoRA: trainable adapter parameters = params / BR_PLAN_LORA_DIV (1%). */
#define BR_PLAN_LORA_DIV 100
/* Derived shape: hidden = BR_PLAN_ASPECT x layers, params = 12 x layers x hidden^2. */
#define BR_PLAN_ASPECT 128
/* Bounds of the inputs (larger ones are refused). */
#define BR_PLAN_MAX_GPUS 65536
#define BR_PLAN_MAX_SEQ (1L << 24)
#define BR_PLAN_MAX_BATCH 1000000L
#define BR_PLAN_MAX_LAYERS 100000L
#define BR_PLAN_MAX_HIDDEN 1000000L

typedef struct {
    double params; /* parameter count, >= 1 (e.g. 8e9) */
    br_plan_mode_t mode;
    br_dtype_t dtype;    /* weights (inference, lora) or compute dtype (qlora, full) */
    int gpus;            /* >= 1: ZeRO shards / tensor-parallel ways */
    int zero;            /* ZeRO stage 0..3; training modes only */
    long seq_len, batch; /* both 0: no activations / KV cache; else both > 0 */
    long layers, hidden; /* 0: derived from params (br_plan_shape) */
} br_plan_in_t;

/* Bytes per GPU; total is the sum of the others. */
typedef struct {
    uint64_t weights, gradients, optimizer, activations, kv_cache, overhead, total;
} br_plan_mem_t;

/* Which input a failed br_plan_check / br_plan_compute is about. */
typedef enum {
    BR_PLAN_F_PARAMS = 0,
    BR_PLAN_F_MODE,
    BR_PLAN_F_DTYPE,
    BR_PLAN_F_GPUS,
    BR_PLAN_F_ZERO,
    BR_PLAN_F_SEQ_LEN,
    BR_PLAN_F_BATCH,
    BR_PLAN_F_LAYERS,
    BR_PLAN_F_HIDDEN,
} br_plan_field_t;

/* "inference", "lora", "qlora", "full" and "fp32", "fp16", "bf16", "int8", "int4".
 * The parsers return 0, or -1 for an unknown name. */
int br_plan_mode_parse(const char *s, br_plan_mode_t *mode);
int br_dtype_parse(const char *s, br_dtype_t *dtype);
const char *br_plan_mode_name(br_plan_mode_t mode);
const char *br_dtype_name(br_dtype_t dtype);

/* Bytes of one value: fp32 4, fp16/bf16 2, int8 1, int4 0.5. */
double br_dtype_bytes(br_dtype_t dtype);

/* Is in a plan that can be computed? On error, err says why (without naming the
 * field: callers name it as --flag or model.key) and *field says which. */
int br_plan_check(const br_plan_in_t *in, br_plan_field_t *field, br_err_t *err);

/* The layer count and hidden size used for activations and KV cache: in->layers
 * and in->hidden where given, else derived from params (docs/planning.md). */
void br_plan_shape(const br_plan_in_t *in, long *layers, long *hidden);

/* Memory per GPU of in (in->zero is the ZeRO stage of training). Checks in first. */
int br_plan_compute(const br_plan_in_t *in, br_plan_mem_t *mem, br_plan_field_t *field,
                    br_err_t *err);

/* The strategy's name: "inference" (1 GPU), "tensor-parallel" (inference on more),
 * "ddp" / "zero-1".."zero-3" (full), "lora" / "lora-zero-K", "qlora" /
 * "qlora-zero-K". */
const char *br_plan_strategy(const br_plan_in_t *in, char *buf, size_t len);

#endif
