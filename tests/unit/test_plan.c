/* test_plan.c - the memory planner (proto/plan.c) against hand-computed values. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <string.h>

#include "plan.h"

#define GIB (1ULL << 30)

static br_plan_in_t in_of(double params, br_plan_mode_t mode, br_dtype_t dtype,
                          int gpus, int zero)
{
    br_plan_in_t in = {
        .params = params, .mode = mode, .dtype = dtype, .gpus = gpus, .zero = zero};
    return in;
}

static br_plan_mem_t plan_ok(const br_plan_in_t *in)
{
    br_plan_mem_t m;
    br_err_t err = {0};
    br_plan_field_t f;
    assert_int_equal(br_plan_compute(in, &m, &f, &err), 0);
    assert_int_equal(m.overhead, GIB);
    assert_int_equal(m.total, m.weights + m.gradients + m.optimizer + m.activations +
                                  m.kv_cache + m.overhead);
    return m;
}

/* weights, gradients and optimizer states of a plan, in bytes per GPU */
static void expect_states(br_plan_in_t in, double w, double g, double o)
{
    br_plan_mem_t m = plan_ok(&in);
    assert_int_equal(m.weights, (uint64_t)w);
    assert_int_equal(m.gradients, (uint64_t)g);
    assert_int_equal(m.optimizer, (uint64_t)o);
}

static uint64_t states_sum(br_plan_in_t in)
{
    br_plan_mem_t m = plan_ok(&in);
    return m.weights + m.gradients + m.optimizer;
}

static void test_inference_8b_bf16(void **state)
{
    br_plan_in_t in = in_of(8e9, BR_PLAN_INFERENCE, BR_DTYPE_BF16, 1, 0);
    br_plan_mem_t m = plan_ok(&in);
    assert_int_equal(m.weights, 16000000000ULL);
    assert_int_equal(m.gradients + m.optimizer + m.activations + m.kv_cache, 0);
    assert_int_equal(m.total, 16000000000ULL + GIB);
}

static void test_inference_dtypes(void **state)
{
    static const struct {
        double params;
        br_dtype_t dtype;
        uint64_t weights;
    } cases[] = {
        {8e9, BR_DTYPE_FP32, 32000000000ULL},   {8e9, BR_DTYPE_FP16, 16000000000ULL},
        {8e9, BR_DTYPE_INT8, 8000000000ULL},    {8e9, BR_DTYPE_INT4, 4000000000ULL},
        {70e9, BR_DTYPE_BF16, 140000000000ULL}, {70e9, BR_DTYPE_INT8, 70000000000ULL},
        {70e9, BR_DTYPE_INT4, 35000000000ULL},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        br_plan_in_t in =
            in_of(cases[i].params, BR_PLAN_INFERENCE, cases[i].dtype, 1, 0);
        assert_int_equal(plan_ok(&in).weights, cases[i].weights);
    }
}

static void test_inference_tensor_parallel(void **state)
{
    /* 70B bf16 over 2 GPUs: 140e9 / 2 each */
    br_plan_in_t in = in_of(70e9, BR_PLAN_INFERENCE, BR_DTYPE_BF16, 2, 0);
    assert_int_equal(plan_ok(&in).weights, 70000000000ULL);
}

static void test_full_8b_one_gpu(void **state)
{
    /* mixed-precision Adam: 2 + 2 + 12 = 16 bytes/param; every stage on 1 GPU */
    for (int z = 0; z <= 3; z++) {
        br_plan_in_t in = in_of(8e9, BR_PLAN_FULL, BR_DTYPE_BF16, 1, z);
        expect_states(in, 16e9, 16e9, 96e9);
        assert_int_equal(states_sum(in), 128000000000ULL);
    }
}

static void test_full_8b_eight_gpus(void **state)
{
    const double p = 8e9;
    br_plan_in_t in = in_of(p, BR_PLAN_FULL, BR_DTYPE_BF16, 8, 0);
    assert_int_equal(states_sum(in), (uint64_t)(16 * p));
    in.zero = 1; /* 2 + 2 + 12/8 */
    expect_states(in, 2 * p, 2 * p, 12 * p / 8);
    assert_int_equal(states_sum(in), 44000000000ULL);
    in.zero = 2; /* 2 + (2 + 12)/8 */
    expect_states(in, 2 * p, 2 * p / 8, 12 * p / 8);
    assert_int_equal(states_sum(in), 30000000000ULL);
    in.zero = 3; /* 16/8 */
    expect_states(in, 2 * p / 8, 2 * p / 8, 12 * p / 8);
    assert_int_equal(states_sum(in), 16000000000ULL);
}

static void test_full_70b_eight_gpus(void **state)
{
    static const uint64_t want[] = {1120000000000ULL, 385000000000ULL, 262500000000ULL,
                                    140000000000ULL};
    for (int z = 0; z <= 3; z++)
        assert_int_equal(states_sum(in_of(70e9, BR_PLAN_FULL, BR_DTYPE_FP16, 8, z)),
                         want[z]);
}

static void test_full_zero_paper_example(void **state)
{
    /* ZeRO paper, figure 1: 7.5B parameters, 64 GPUs: 120, 31.4, 16.6, 1.9 GB */
    static const uint64_t want[] = {120000000000ULL, 31406250000ULL, 16640625000ULL,
                                    1875000000ULL};
    for (int z = 0; z <= 3; z++)
        assert_int_equal(states_sum(in_of(7.5e9, BR_PLAN_FULL, BR_DTYPE_BF16, 64, z)),
                         want[z]);
}

static void test_full_fp32(void **state)
{
    /* fp32 Adam: 4 weights + 4 gradients + 8 (momentum, variance) */
    expect_states(in_of(8e9, BR_PLAN_FULL, BR_DTYPE_FP32, 1, 0), 32e9, 32e9, 64e9);
}

static void test_zero_shards_round_up(void **state)
{
    /* 1000 params, mixed precision, ZeRO-3 on 3 GPUs: ceil(2000/3), ceil(12000/3) */
    expect_states(in_of(1000, BR_PLAN_FULL, BR_DTYPE_BF16, 3, 3), 667, 667, 4000);
}

static void test_lora(void **state)
{
    /* adapters: 1% of params with 16 B/param; frozen base in dtype */
    expect_states(in_of(8e9, BR_PLAN_LORA, BR_DTYPE_BF16, 1, 0), 16e9 + 160e6, 160e6,
                  960e6);
    expect_states(in_of(8e9, BR_PLAN_LORA, BR_DTYPE_INT8, 1, 0), 8e9 + 160e6, 160e6,
                  960e6);
    expect_states(in_of(8e9, BR_PLAN_LORA, BR_DTYPE_FP32, 1, 0), 32e9 + 320e6, 320e6,
                  640e6);
    expect_states(in_of(70e9, BR_PLAN_LORA, BR_DTYPE_BF16, 1, 0), 141.4e9, 1.4e9,
                  8.4e9);
    /* ZeRO-2 over 4 GPUs shards the adapters' gradients and optimizer states */
    expect_states(in_of(8e9, BR_PLAN_LORA, BR_DTYPE_BF16, 4, 2), 16e9 + 160e6, 40e6,
                  240e6);
}

static void test_qlora(void **state)
{
    /* NF4 + double quantization: 4 + 8/64 + 32/(64*256) = 4.126953125 bits/param */
    expect_states(in_of(8e9, BR_PLAN_QLORA, BR_DTYPE_BF16, 1, 0), 4126953125.0 + 160e6,
                  160e6, 960e6);
    /* 70e9 * 4.126953125 / 8 = 36110839843.75, + 1.4e9 adapters, rounded up */
    expect_states(in_of(70e9, BR_PLAN_QLORA, BR_DTYPE_BF16, 1, 0), 37510839844.0, 1.4e9,
                  8.4e9);
}

static void test_kv_cache(void **state)
{
    /* 2 x layers x hidden x seq_len x batch x 2 bytes */
    br_plan_in_t in = in_of(8e9, BR_PLAN_INFERENCE, BR_DTYPE_BF16, 1, 0);
    in.seq_len = 4096;
    in.batch = 1;
    in.layers = 32;
    in.hidden = 4096;
    br_plan_mem_t m = plan_ok(&in);
    assert_int_equal(m.kv_cache, 2147483648ULL);
    assert_int_equal(m.activations, 0);
    in.dtype = BR_DTYPE_INT4; /* the cache stays 16-bit */
    assert_int_equal(plan_ok(&in).kv_cache, 2147483648ULL);
    in.dtype = BR_DTYPE_FP32;
    assert_int_equal(plan_ok(&in).kv_cache, 4294967296ULL);
    in.dtype = BR_DTYPE_BF16;
    in.gpus = 2; /* tensor parallel: weights and cache split */
    m = plan_ok(&in);
    assert_int_equal(m.kv_cache, 1073741824ULL);
    assert_int_equal(m.weights, 8000000000ULL);
    in.gpus = 1;
    in.batch = 8;
    in.seq_len = 8192;
    assert_int_equal(plan_ok(&in).kv_cache, 2ULL * 32 * 4096 * 8192 * 8 * 2);
}

static void test_activations(void **state)
{
    /* 34 x s x b x h x L bytes (16-bit), derived shape 34 layers x 4352 */
    br_plan_in_t in = in_of(8e9, BR_PLAN_FULL, BR_DTYPE_BF16, 8, 0);
    in.seq_len = 2048;
    in.batch = 1;
    for (int z = 0; z <= 3; z++) { /* not sharded by ZeRO */
        in.zero = z;
        br_plan_mem_t m = plan_ok(&in);
        assert_int_equal(m.activations, 10303307776ULL);
        assert_int_equal(m.kv_cache, 0);
    }
    in.dtype = BR_DTYPE_FP32;
    assert_int_equal(plan_ok(&in).activations, 20606615552ULL);
    br_plan_in_t q = in_of(70e9, BR_PLAN_QLORA, BR_DTYPE_BF16, 1, 0);
    q.seq_len = 4096;
    q.batch = 2;
    q.layers = 80;
    q.hidden = 8192;
    assert_int_equal(plan_ok(&q).activations, 34ULL * 4096 * 2 * 8192 * 80);
}

static void test_shape(void **state)
{
    long l, h;
    br_plan_in_t in = in_of(8e9, BR_PLAN_FULL, BR_DTYPE_BF16, 1, 0);
    br_plan_shape(&in, &l, &h); /* cbrt(8e9 / 196608) = 34.4 */
    assert_int_equal(l, 34);
    assert_int_equal(h, 4352);
    in.params = 70e9; /* cbrt(70e9 / 196608) = 70.9 */
    br_plan_shape(&in, &l, &h);
    assert_int_equal(l, 71);
    assert_int_equal(h, 9088);
    in.params = 8e9;
    in.layers = 32; /* sqrt(8e9 / 384) = 4564 -> 36 x 128 */
    br_plan_shape(&in, &l, &h);
    assert_int_equal(l, 32);
    assert_int_equal(h, 4608);
    in.layers = 0;
    in.hidden = 4096; /* 8e9 / (12 x 4096^2) = 39.7 */
    br_plan_shape(&in, &l, &h);
    assert_int_equal(l, 40);
    assert_int_equal(h, 4096);
    in.params = 1; /* tiny models still have one layer */
    in.hidden = 0;
    br_plan_shape(&in, &l, &h);
    assert_int_equal(l, 1);
    assert_int_equal(h, 128);
}

static void expect_bad(br_plan_in_t in, br_plan_field_t field)
{
    br_plan_mem_t m;
    br_err_t err = {0};
    br_plan_field_t f = (br_plan_field_t)-1;
    assert_int_equal(br_plan_compute(&in, &m, &f, &err), -1);
    assert_int_equal(f, field);
    assert_true(strlen(err.text) > 0);
}

static void test_bad_input(void **state)
{
    br_plan_in_t ok = in_of(8e9, BR_PLAN_FULL, BR_DTYPE_BF16, 1, 0), in;
    in = ok, in.params = 0;
    expect_bad(in, BR_PLAN_F_PARAMS);
    in = ok, in.params = 1e17;
    expect_bad(in, BR_PLAN_F_PARAMS);
    in = ok, in.mode = (br_plan_mode_t)9;
    expect_bad(in, BR_PLAN_F_MODE);
    in = ok, in.dtype = BR_DTYPE_INT8;
    expect_bad(in, BR_PLAN_F_DTYPE);
    in = ok, in.mode = BR_PLAN_QLORA, in.dtype = BR_DTYPE_INT4;
    expect_bad(in, BR_PLAN_F_DTYPE);
    in = ok, in.gpus = 0;
    expect_bad(in, BR_PLAN_F_GPUS);
    in = ok, in.zero = 4;
    expect_bad(in, BR_PLAN_F_ZERO);
    in = ok, in.zero = -1;
    expect_bad(in, BR_PLAN_F_ZERO);
    in = ok, in.mode = BR_PLAN_INFERENCE, in.zero = 1;
    expect_bad(in, BR_PLAN_F_ZERO);
    in = ok, in.seq_len = 2048;
    expect_bad(in, BR_PLAN_F_SEQ_LEN);
    in = ok, in.batch = 2;
    expect_bad(in, BR_PLAN_F_BATCH);
    in = ok, in.layers = -1;
    expect_bad(in, BR_PLAN_F_LAYERS);
    in = ok, in.hidden = BR_PLAN_MAX_HIDDEN + 1;
    expect_bad(in, BR_PLAN_F_HIDDEN);
    in = ok, in.seq_len = BR_PLAN_MAX_SEQ, in.batch = BR_PLAN_MAX_BATCH;
    in.layers = BR_PLAN_MAX_LAYERS, in.hidden = BR_PLAN_MAX_HIDDEN;
    expect_bad(in, BR_PLAN_F_SEQ_LEN); /* over 4 EiB */
    /* int8 and int4 are fine for inference and lora */
    plan_ok((br_plan_in_t[]){in_of(8e9, BR_PLAN_LORA, BR_DTYPE_INT4, 1, 0)});
}

static void test_names(void **state)
{
    br_plan_mode_t mode;
    br_dtype_t dtype;
    char buf[32];
    assert_int_equal(br_plan_mode_parse("qlora", &mode), 0);
    assert_int_equal(mode, BR_PLAN_QLORA);
    assert_string_equal(br_plan_mode_name(mode), "qlora");
    assert_int_equal(br_plan_mode_parse("QLoRA", &mode), -1);
    assert_int_equal(br_plan_mode_parse(NULL, &mode), -1);
    assert_int_equal(br_dtype_parse("int4", &dtype), 0);
    assert_string_equal(br_dtype_name(dtype), "int4");
    assert_true(br_dtype_bytes(dtype) == 0.5);
    assert_int_equal(br_dtype_parse("fp8", &dtype), -1);
    br_plan_in_t in = in_of(8e9, BR_PLAN_FULL, BR_DTYPE_BF16, 8, 0);
    assert_string_equal(br_plan_strategy(&in, buf, sizeof(buf)), "ddp");
    in.zero = 2;
    assert_string_equal(br_plan_strategy(&in, buf, sizeof(buf)), "zero-2");
    in.mode = BR_PLAN_QLORA;
    assert_string_equal(br_plan_strategy(&in, buf, sizeof(buf)), "qlora-zero-2");
    in.zero = 0;
    in.mode = BR_PLAN_LORA;
    assert_string_equal(br_plan_strategy(&in, buf, sizeof(buf)), "lora");
    in.mode = BR_PLAN_INFERENCE;
    assert_string_equal(br_plan_strategy(&in, buf, sizeof(buf)), "tensor-parallel");
    in.gpus = 1;
    assert_string_equal(br_plan_strategy(&in, buf, sizeof(buf)), "inference");
}

int main(void)
{
    static const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_inference_8b_bf16),
        cmocka_unit_test(test_inference_dtypes),
        cmocka_unit_test(test_inference_tensor_parallel),
        cmocka_unit_test(test_full_8b_one_gpu),
        cmocka_unit_test(test_full_8b_eight_gpus),
        cmocka_unit_test(test_full_70b_eight_gpus),
        cmocka_unit_test(test_full_zero_paper_example),
        cmocka_unit_test(test_full_fp32),
        cmocka_unit_test(test_zero_shards_round_up),
        cmocka_unit_test(test_lora),
        cmocka_unit_test(test_qlora),
        cmocka_unit_test(test_kv_cache),
        cmocka_unit_test(test_activations),
        cmocka_unit_test(test_shape),
        cmocka_unit_test(test_bad_input),
        cmocka_unit_test(test_names),
    };
    return cmocka_run_group_tests_name("plan", tests, NULL, NULL);
}
