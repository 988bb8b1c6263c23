/* plan.c - the memory planner's formulas (Transformer Math 101, ZeRO, LoRA, QLoRA,
 * Korthikanti et al.), each one written out with its source in docs/planning.md. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "plan.h"

static const char *const mode_names[] = {"inference", "lora", "qlora", "full"};
static const char *const dtype_names[] = {"fp32", "fp16", "bf16", "int8", "int4"};
#define NMODES (sizeof(mode_names) / sizeof(mode_names[0]))
#define NDTYPES (sizeof(dtype_names) / sizeof(dtype_names[0]))

/* QLoRA base weights: 4-bit NF4 plus double-quantized constants, 8/64 + 32/(64*256)
 * bits per parameter (Dettmers et al. 2023, section 3). */
#define QLORA_BITS (4.0 + 8.0 / 64.0 + 32.0 / (64.0 * 256.0))
/* Activations per layer: 34 * s * b * h bytes with 2-byte activations (Korthikanti
 * et al. 2022, selective recomputation): 17 values of h per token per layer. */
#define ACT_VALUES 17.0
/* Adam: weights + gradients + optimizer states = 16 bytes per trained parameter. */
#define TRAIN_BYTES 16.0
/* Largest byte count a plan may hold (4 EiB). */
#define PLAN_MAX_BYTES 4611686018427387904.0

/* Totals over all GPUs before sharding. */
typedef struct {
    double w, g, o, act, kv;
} parts_t;

int br_plan_mode_parse(const char *s, br_plan_mode_t *mode)
{
    for (size_t i = 0; s && i < NMODES; i++)
        if (strcmp(s, mode_names[i]) == 0) {
            *mode = (br_plan_mode_t)i;
            return 0;
        }
    return -1;
}

int br_dtype_parse(const char *s, br_dtype_t *dtype)
{
    for (size_t i = 0; s && i < NDTYPES; i++)
        if (strcmp(s, dtype_names[i]) == 0) {
            *dtype = (br_dtype_t)i;
            return 0;
        }
    return -1;
}

const char *br_plan_mode_name(br_plan_mode_t mode)
{
    return (unsigned)mode < NMODES ? mode_names[mode] : "?";
}

const char *br_dtype_name(br_dtype_t dtype)
{
    return (unsigned)dtype < NDTYPES ? dtype_names[dtype] : "?";
}

double br_dtype_bytes(br_dtype_t dtype)
{
    static const double bytes[] = {4.0, 2.0, 2.0, 1.0, 0.5};
    return (unsigned)dtype < NDTYPES ? bytes[dtype] : 0.0;
}

static int fail(br_plan_field_t *field, br_plan_field_t which, br_err_t *err,
                const char *text)
{
    if (field)
        *field = which;
    return br_errf(err, EINVAL, "%s", text);
}

static int check_dtype(const br_plan_in_t *in, br_plan_field_t *field, br_err_t *err)
{
    if ((unsigned)in->dtype >= NDTYPES)
        return fail(field, BR_PLAN_F_DTYPE, err, "unknown dtype");
    int quant = in->dtype == BR_DTYPE_INT8 || in->dtype == BR_DTYPE_INT4;
    if (quant && in->mode == BR_PLAN_FULL)
        return fail(field, BR_PLAN_F_DTYPE, err,
                    "full training needs fp32, fp16 or bf16 (int8 and int4 are for "
                    "inference and lora; or use qlora)");
    if (quant && in->mode == BR_PLAN_QLORA)
        return fail(field, BR_PLAN_F_DTYPE, err,
                    "qlora keeps the base in 4-bit NF4; give the compute dtype: "
                    "fp32, fp16 or bf16");
    return 0;
}

static int check_shape(const br_plan_in_t *in, br_plan_field_t *field, br_err_t *err)
{
    if (in->seq_len < 0 || in->seq_len > BR_PLAN_MAX_SEQ)
        return fail(field, BR_PLAN_F_SEQ_LEN, err, "out of range");
    if (in->batch < 0 || in->batch > BR_PLAN_MAX_BATCH)
        return fail(field, BR_PLAN_F_BATCH, err, "out of range");
    if (in->seq_len && !in->batch)
        return fail(field, BR_PLAN_F_SEQ_LEN, err, "given without a batch size");
    if (in->batch && !in->seq_len)
        return fail(field, BR_PLAN_F_BATCH, err, "given without a sequence length");
    if (in->layers < 0 || in->layers > BR_PLAN_MAX_LAYERS)
        return fail(field, BR_PLAN_F_LAYERS, err, "out of range");
    if (in->hidden < 0 || in->hidden > BR_PLAN_MAX_HIDDEN)
        return fail(field, BR_PLAN_F_HIDDEN, err, "out of range");
    return 0;
}

int br_plan_check(const br_plan_in_t *in, br_plan_field_t *field, br_err_t *err)
{
    if (!isfinite(in->params) || in->params < 1.0 || in->params > 1e16)
        return fail(field, BR_PLAN_F_PARAMS, err, "must be from 1 to 1e16 parameters");
    if ((unsigned)in->mode >= NMODES)
        return fail(field, BR_PLAN_F_MODE, err, "unknown mode");
    if (in->gpus < 1 || in->gpus > BR_PLAN_MAX_GPUS)
        return fail(field, BR_PLAN_F_GPUS, err, "must be from 1 to 65536");
    if (in->zero < 0 || in->zero > 3)
        return fail(field, BR_PLAN_F_ZERO, err, "must be a ZeRO stage from 0 to 3");
    if (in->zero && in->mode == BR_PLAN_INFERENCE)
        return fail(field, BR_PLAN_F_ZERO, err,
                    "ZeRO stages are for training (lora, qlora, full); inference "
                    "splits the weights over the GPUs");
    if (check_dtype(in, field, err) < 0)
        return -1;
    return check_shape(in, field, err);
}

static long clamp_long(double v, long max)
{
    if (!(v >= 1.0))
        return 1;
    return v > (double)max ? max : lround(v);
}

void br_plan_shape(const br_plan_in_t *in, long *layers, long *hidden)
{
    long l = in->layers, h = in->hidden;
    double p = in->params, a = BR_PLAN_ASPECT;
    if (!l && !h) {
        l = clamp_long(cbrt(p / (12.0 * a * a)), BR_PLAN_MAX_LAYERS);
        h = BR_PLAN_ASPECT * l;
    } else if (!h) {
        h = BR_PLAN_ASPECT * clamp_long(sqrt(p / (12.0 * (double)l)) / a,
                                        BR_PLAN_MAX_HIDDEN / BR_PLAN_ASPECT);
    } else if (!l) {
        l = clamp_long(p / (12.0 * (double)h * (double)h), BR_PLAN_MAX_LAYERS);
    }
    *layers = l;
    *hidden = h;
}

/* Bytes of activations and KV cache values: 4 for fp32, else 2 (int8/int4 weights
 * compute and cache in 16 bits). */
static double compute_bytes(br_dtype_t dtype)
{
    return dtype == BR_DTYPE_FP32 ? 4.0 : 2.0;
}

/* Training activations (all modes but inference) or the KV cache (inference). */
static void add_tokens(const br_plan_in_t *in, parts_t *p)
{
    if (!in->seq_len)
        return;
    long layers, hidden;
    br_plan_shape(in, &layers, &hidden);
    double sbhl =
        (double)in->seq_len * (double)in->batch * (double)hidden * (double)layers;
    double b = compute_bytes(in->dtype);
    if (in->mode == BR_PLAN_INFERENCE)
        p->kv = 2.0 * sbhl * b;
    else
        p->act = ACT_VALUES * b * sbhl;
}

/* Trained parameters: weights, gradients and Adam states. Mixed precision: 2 + 2 +
 * 12 (fp32 master copy, momentum, variance); fp32: 4 + 4 + 8. */
static void add_trained(double n, br_dtype_t dtype, parts_t *p)
{
    double wb = dtype == BR_DTYPE_FP32 ? 4.0 : 2.0;
    p->w += n * wb;
    p->g += n * wb;
    p->o += n * (TRAIN_BYTES - 2.0 * wb);
}

static void totals(const br_plan_in_t *in, double params, parts_t *p)
{
    double adapters = ceil(params / BR_PLAN_LORA_DIV);
    memset(p, 0, sizeof(*p));
    switch (in->mode) {
    case BR_PLAN_INFERENCE:
        p->w = params * br_dtype_bytes(in->dtype);
        break;
    case BR_PLAN_LORA:
        p->w = params * br_dtype_bytes(in->dtype);
        add_trained(adapters, in->dtype, p);
        break;
    case BR_PLAN_QLORA:
        p->w = params * QLORA_BITS / 8.0;
        add_trained(adapters, in->dtype, p);
        break;
    case BR_PLAN_FULL:
        add_trained(params, in->dtype, p);
        break;
    }
    add_tokens(in, p);
}

/* ZeRO stage k shards optimizer states (k >= 1), gradients (k >= 2) and parameters
 * (k = 3) over the GPUs; inference splits weights and KV cache (tensor parallel). */
static void shard(const br_plan_in_t *in, parts_t *p)
{
    double n = in->gpus;
    int infer = in->mode == BR_PLAN_INFERENCE;
    if (in->zero >= 1)
        p->o /= n;
    if (in->zero >= 2)
        p->g /= n;
    if (in->zero >= 3 || infer)
        p->w /= n;
    if (infer)
        p->kv /= n;
}

int br_plan_compute(const br_plan_in_t *in, br_plan_mem_t *mem, br_plan_field_t *field,
                    br_err_t *err)
{
    if (br_plan_check(in, field, err) < 0)
        return -1;
    parts_t p;
    totals(in, round(in->params), &p);
    shard(in, &p);
    double sum = p.w + p.g + p.o + p.act + p.kv + (double)BR_PLAN_OVERHEAD;
    if (sum >= PLAN_MAX_BYTES)
        return fail(field, BR_PLAN_F_SEQ_LEN, err,
                    "too large to plan (over 4 EiB per GPU)");
    memset(mem, 0, sizeof(*mem));
    mem->weights = (uint64_t)ceil(p.w);
    mem->gradients = (uint64_t)ceil(p.g);
    mem->optimizer = (uint64_t)ceil(p.o);
    mem->activations = (uint64_t)ceil(p.act);
    mem->kv_cache = (uint64_t)ceil(p.kv);
    mem->overhead = BR_PLAN_OVERHEAD;
    mem->total = mem->weights + mem->gradients + mem->optimizer + mem->activations +
                 mem->kv_cache + mem->overhead;
    return 0;
}

const char *br_plan_strategy(const br_plan_in_t *in, char *buf, size_t len)
{
    const char *mode = br_plan_mode_name(in->mode);
    if (in->mode == BR_PLAN_INFERENCE)
        snprintf(buf, len, "%s", in->gpus > 1 ? "tensor-parallel" : "inference");
    else if (in->mode == BR_PLAN_FULL && !in->zero)
        snprintf(buf, len, "ddp");
    else if (in->mode == BR_PLAN_FULL)
        snprintf(buf, len, "zero-%d", in->zero);
    else if (in->zero)
        snprintf(buf, len, "%s-zero-%d", mode, in->zero);
    else
        snprintf(buf, len, "%s", mode);
    return buf;
}
