/* test_gpu.c - GPU sources: declared lists (good and bad), "none", and "auto". */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "gpu.h"

#define GIB (1024ULL * 1024 * 1024)

static br_gpus_t *new_ok(const char *spec)
{
    br_err_t err = {0};
    br_gpus_t *g = br_gpus_new(spec, &err);
    if (!g)
        print_error("br_gpus_new(%s): %s\n", spec, err.text);
    assert_non_null(g);
    return g;
}

static void assert_bad(const char *spec, const char *want)
{
    br_err_t err = {0};
    br_gpus_t *g = br_gpus_new(spec, &err);
    assert_null(g);
    assert_int_equal(err.errnum, EINVAL);
    if (!strstr(err.text, want))
        fail_msg("spec '%s': error '%s' lacks '%s'", spec, err.text, want);
}

static void test_declared(void **state)
{
    br_gpus_t *g = new_ok("RTX 4090:24GiB,RTX 3090:24GiB");
    assert_string_equal(br_gpus_source(g), "declared");
    assert_int_equal(br_gpus_count(g), 2);
    const br_gpu_t *a = br_gpus_get(g, 0), *b = br_gpus_get(g, 1);
    assert_int_equal(a->index, 0);
    assert_string_equal(a->model, "RTX 4090");
    assert_int_equal(a->vram_total, 24 * GIB);
    assert_int_equal(a->vram_free, 24 * GIB);
    assert_int_equal(b->index, 1);
    assert_string_equal(b->model, "RTX 3090");
    assert_null(br_gpus_get(g, 2));
    assert_null(br_gpus_get(g, -1));
    assert_string_equal(br_gpus_driver_version(g), "");
    assert_string_equal(br_gpus_cuda_version(g), "");
    assert_int_equal(br_gpus_refresh(g), 0);
    assert_int_equal(br_gpus_get(g, 0)->vram_free, 24 * GIB);
    br_gpus_destroy(&g);
    assert_null(g);
}

static void test_declared_spacing_and_colons(void **state)
{
    br_gpus_t *g = new_ok(" A100 80GB : 80GiB , Weird:Model:512MiB,Pi:1GB");
    assert_int_equal(br_gpus_count(g), 3);
    assert_string_equal(br_gpus_get(g, 0)->model, "A100 80GB");
    assert_int_equal(br_gpus_get(g, 0)->vram_total, 80 * GIB);
    assert_string_equal(br_gpus_get(g, 1)->model, "Weird:Model");
    assert_int_equal(br_gpus_get(g, 1)->vram_total, 512ULL * 1024 * 1024);
    assert_int_equal(br_gpus_get(g, 2)->vram_total, 1000000000ULL);
    br_gpus_destroy(&g);
}

static void test_declared_bad(void **state)
{
    assert_bad("RTX 4090", "--gpus: entry 'RTX 4090' needs MODEL:VRAM");
    assert_bad("RTX 4090:24GiB,RTX 3090", "--gpus: entry 'RTX 3090' needs MODEL:VRAM");
    assert_bad(":24GiB", "--gpus: entry ':24GiB' needs MODEL:VRAM");
    assert_bad("RTX 4090:", "--gpus: entry 'RTX 4090:' needs MODEL:VRAM");
    assert_bad("RTX 4090:lots", "--gpus: entry 'RTX 4090:lots': bad size 'lots'");
    assert_bad("RTX 4090:0", "--gpus: entry 'RTX 4090:0' has no VRAM");
    assert_bad("A:1GiB,,B:2GiB", "--gpus: empty entry");
    assert_bad("A:1GiB,", "--gpus: empty entry");
    assert_bad("", "--gpus: empty");
    char longname[200];
    memset(longname, 'x', 150);
    strcpy(longname + 150, ":1GiB");
    assert_bad(longname, "model name too long");
}

static void test_none(void **state)
{
    br_gpus_t *g = new_ok("none");
    assert_string_equal(br_gpus_source(g), "none");
    assert_int_equal(br_gpus_count(g), 0);
    assert_null(br_gpus_get(g, 0));
    json_t *j = br_gpus_to_json(g);
    assert_true(json_is_array(j));
    assert_int_equal(json_array_size(j), 0);
    json_decref(j);
    br_gpus_destroy(&g);
    br_gpus_destroy(&g);
    br_gpus_destroy(NULL);
}

static void test_json(void **state)
{
    br_gpus_t *g = new_ok("RTX 4090:24GiB,Pi GPU:512MiB");
    json_t *j = br_gpus_to_json(g);
    assert_int_equal(json_array_size(j), 2);
    json_t *e = json_array_get(j, 1);
    assert_int_equal(json_integer_value(json_object_get(e, "index")), 1);
    assert_string_equal(json_string_value(json_object_get(e, "model")), "Pi GPU");
    assert_int_equal(json_integer_value(json_object_get(e, "vram_total")), 512 << 20);
    assert_int_equal(json_integer_value(json_object_get(e, "vram_free")), 512 << 20);
    json_decref(j);
    br_gpus_destroy(&g);
}

/* "auto": NVML when present (then at least one GPU), else source "none", no GPUs. */
static void test_auto(void **state)
{
    br_gpus_t *g = new_ok("auto");
    if (strcmp(br_gpus_source(g), "nvml") == 0) {
        assert_true(br_gpus_count(g) > 0);
        assert_true(br_gpus_get(g, 0)->vram_total > 0);
        assert_int_equal(br_gpus_refresh(g), 0);
    } else {
        assert_string_equal(br_gpus_source(g), "none");
        assert_int_equal(br_gpus_count(g), 0);
        assert_string_equal(br_gpus_driver_version(g), "");
        assert_string_equal(br_gpus_cuda_version(g), "");
    }
    br_gpus_destroy(&g);
}

/* A library that is missing, or loads but is not NVML, means no GPUs, not an error. */
static void test_auto_without_nvml(void **state)
{
    const char *libs[] = {"/nonexistent/libnvidia-ml.so.1", "libm.so.6"};
    for (size_t i = 0; i < sizeof(libs) / sizeof(libs[0]); i++) {
        setenv("BRAMBLE_NVML_LIBRARY", libs[i], 1);
        br_gpus_t *g = new_ok("auto");
        assert_string_equal(br_gpus_source(g), "none");
        assert_int_equal(br_gpus_count(g), 0);
        assert_int_equal(br_gpus_refresh(g), 0);
        br_gpus_destroy(&g);
    }
    unsetenv("BRAMBLE_NVML_LIBRARY");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_declared),
        cmocka_unit_test(test_declared_spacing_and_colons),
        cmocka_unit_test(test_declared_bad),
        cmocka_unit_test(test_none),
        cmocka_unit_test(test_json),
        cmocka_unit_test(test_auto),
        cmocka_unit_test(test_auto_without_nvml),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
