/* test_gpu.c - GPU sources: declared lists (good and bad), "none", and "auto". */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

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

/* --- NVML: the fake libnvidia-ml.so.1 of tests/fake_nvml, its GPUs in a file --- */

static char fake_file[64];

static void fake_gpus(const char *text)
{
    char tmp[80];
    snprintf(tmp, sizeof(tmp), "%s.new", fake_file);
    FILE *f = fopen(tmp, "w");
    assert_non_null(f);
    fputs(text, f);
    assert_int_equal(fclose(f), 0);
    assert_int_equal(rename(tmp, fake_file), 0); /* the fake never reads half a file */
}

static int fake_setup(void **state)
{
    snprintf(fake_file, sizeof(fake_file), "/tmp/bramble-fake-nvml-%d", (int)getpid());
    setenv("FAKE_NVML_GPUS", fake_file, 1);
    setenv("BRAMBLE_NVML_LIBRARY", BR_FAKE_NVML, 1);
    return 0;
}

static int fake_teardown(void **state)
{
    unlink(fake_file);
    unsetenv("FAKE_NVML_GPUS");
    unsetenv("BRAMBLE_NVML_LIBRARY");
    return 0;
}

static json_t *live_entry(const br_gpus_t *g, int i)
{
    json_t *live = br_gpus_live_json(g);
    assert_non_null(live);
    json_t *e = json_incref(json_array_get(live, (size_t)i));
    json_decref(live);
    assert_non_null(e);
    return e;
}

static void test_nvml_figures(void **state)
{
    fake_gpus("# name | total | used | util | power | temp\n"
              "NVIDIA GeForce RTX 4090 | 24GiB | 1GiB | 12 | 85.5 | 41\n"
              "NVIDIA GeForce RTX 3090 | 24GiB | 0 | 0 | 30 | 35\n");
    br_gpus_t *g = new_ok("auto");
    assert_string_equal(br_gpus_source(g), "nvml");
    assert_string_equal(br_gpus_driver_version(g), "550.fake");
    assert_string_equal(br_gpus_cuda_version(g), "12.4");
    assert_int_equal(br_gpus_count(g), 2);
    const br_gpu_t *a = br_gpus_get(g, 0);
    assert_string_equal(a->model, "NVIDIA GeForce RTX 4090");
    assert_int_equal(a->vram_total, 24 * GIB);
    assert_int_equal(a->vram_free, 23 * GIB); /* read when found, before any refresh */
    assert_int_equal(a->vram_used, 1 * GIB);
    assert_int_equal(a->have,
                     BR_GPU_MEMORY | BR_GPU_UTIL | BR_GPU_POWER | BR_GPU_TEMP | BR_GPU_ECC);
    assert_int_equal(a->util, 12);
    assert_true(a->power_w == 85.5);
    assert_int_equal(a->temp_c, 41);
    json_t *e = live_entry(g, 1);
    assert_int_equal(json_integer_value(json_object_get(e, "index")), 1);
    assert_int_equal(json_integer_value(json_object_get(e, "vram_free")), 24 * GIB);
    assert_int_equal(json_integer_value(json_object_get(e, "vram_used")), 0);
    assert_int_equal(json_integer_value(json_object_get(e, "util")), 0);
    assert_true(json_number_value(json_object_get(e, "power_w")) == 30.0);
    assert_int_equal(json_integer_value(json_object_get(e, "temp_c")), 35);
    assert_int_equal(json_integer_value(json_object_get(e, "ecc_uncorrected")), 0);
    assert_int_equal(json_object_size(e), 7); /* no XID yet: none told */
    json_decref(e);
    int known = -1;
    assert_true(br_gpus_power(g, &known) == 115.5); /* 85.5 W + 30 W */
    assert_int_equal(known, 2);

    /* something outside bramble takes 22 GiB: the next refresh sees it */
    fake_gpus("NVIDIA GeForce RTX 4090 | 24GiB | 22GiB | 97 | 402.25 | 77\n"
              "NVIDIA GeForce RTX 3090 | 24GiB | 22GiB | 95 | 340 | 70\n");
    assert_int_equal(br_gpus_refresh(g), 0);
    assert_int_equal(a->vram_free, 2 * GIB);
    assert_int_equal(a->vram_used, 22 * GIB);
    assert_int_equal(a->util, 97);
    assert_true(a->power_w == 402.25);
    assert_int_equal(a->temp_c, 77);
    assert_int_equal(br_gpus_get(g, 1)->vram_free, 2 * GIB);
    assert_true(br_gpus_power(g, NULL) == 742.25);
    /* hello's form: index, model, total, free, and NVML's UUID */
    json_t *hello = br_gpus_to_json(g);
    assert_int_equal(json_object_size(json_array_get(hello, 0)), 5);
    assert_string_equal(json_string_value(json_object_get(json_array_get(hello, 1), "uuid")),
                        "GPU-fa4e0000-0000-0000-0000-000000000001");
    json_decref(hello);
    br_gpus_destroy(&g);
}

/* XID errors come as NVML events, each counted once, the last one's number kept;
 * uncorrected ECC errors are the driver's volatile count. */
static void test_nvml_xid_and_ecc(void **state)
{
    (void)state;
    fake_gpus("A | 24GiB | 0 | 0 | 30 | 35 |    | 0\n"
              "B | 24GiB | 0 | 0 | 30 | 35 |    | 0\n");
    br_gpus_t *g = new_ok("auto");
    assert_int_equal(br_gpus_refresh(g), 0);
    assert_int_equal(br_gpus_get(g, 1)->xid_count, 0);
    fake_gpus("A | 24GiB | 0 | 0 | 30 | 35 |       | 0\n"
              "B | 24GiB | 0 | 0 | 30 | 35 | 48,79 | 2\n");
    assert_int_equal(br_gpus_refresh(g), 0);
    const br_gpu_t *b = br_gpus_get(g, 1);
    assert_int_equal(b->xid_count, 2);
    assert_int_equal(b->xid_last, 79);
    assert_int_equal(b->ecc_uncorrected, 2);
    assert_int_equal(br_gpus_get(g, 0)->xid_count, 0);
    assert_int_equal(br_gpus_refresh(g), 0); /* told once: no more */
    assert_int_equal(b->xid_count, 2);
    json_t *e = live_entry(g, 1);
    assert_int_equal(json_integer_value(json_object_get(e, "xid_count")), 2);
    assert_int_equal(json_integer_value(json_object_get(e, "xid_last")), 79);
    assert_int_equal(json_integer_value(json_object_get(e, "ecc_uncorrected")), 2);
    json_decref(e);
    e = live_entry(g, 0);
    assert_null(json_object_get(e, "xid_count"));
    json_decref(e);
    br_gpus_destroy(&g);
}

/* A figure the GPU does not support (NVML_ERROR_NOT_SUPPORTED) is left out, the
 * others stay; memory that cannot be read keeps the last free figure and says so. */
static void test_nvml_unsupported(void **state)
{
    fake_gpus("Old GPU | 8GiB | 2GiB | - | - | 50 | | -\n");
    br_gpus_t *g = new_ok("auto");
    const br_gpu_t *a = br_gpus_get(g, 0);
    assert_int_equal(a->have, BR_GPU_MEMORY | BR_GPU_TEMP);
    json_t *e = live_entry(g, 0);
    assert_null(json_object_get(e, "util"));
    assert_null(json_object_get(e, "power_w"));
    assert_int_equal(json_integer_value(json_object_get(e, "temp_c")), 50);
    assert_int_equal(json_integer_value(json_object_get(e, "vram_free")), 6 * GIB);
    json_decref(e);
    int known = -1;
    assert_true(br_gpus_power(g, &known) == 0); /* no power figure: counts 0 W */
    assert_int_equal(known, 0);
    fake_gpus("Old GPU | - | - | 5 | 20 | - | | -\n");
    assert_int_equal(br_gpus_refresh(g), -1);
    assert_int_equal(errno, EIO);
    assert_int_equal(a->have, BR_GPU_UTIL | BR_GPU_POWER);
    assert_int_equal(a->vram_free, 6 * GIB);
    e = live_entry(g, 0);
    assert_null(json_object_get(e, "vram_free"));
    assert_null(json_object_get(e, "vram_used"));
    assert_int_equal(json_integer_value(json_object_get(e, "util")), 5);
    json_decref(e);
    /* the GPU falls off the bus: no figure at all, the index stays */
    fake_gpus("# nothing\n");
    assert_int_equal(br_gpus_refresh(g), -1);
    assert_int_equal(a->have, 0);
    e = live_entry(g, 0);
    assert_int_equal(json_object_size(e), 1);
    json_decref(e);
    br_gpus_destroy(&g);
}

/* Declared GPUs and "none" have nothing live to tell. */
static void test_live_declared(void **state)
{
    br_gpus_t *g = new_ok("RTX 4090:24GiB");
    assert_null(br_gpus_live_json(g));
    int known = -1;
    assert_true(br_gpus_power(g, &known) == 0); /* declared: no power to read */
    assert_int_equal(known, 0);
    br_gpus_destroy(&g);
    g = new_ok("none");
    assert_null(br_gpus_live_json(g));
    br_gpus_destroy(&g);
    assert_null(br_gpus_live_json(NULL));
    assert_true(br_gpus_power(NULL, NULL) == 0);
}

/* What one refresh of two GPUs costs the agent's loop: five NVML calls a GPU. With
 * the fake each call reads its file; real NVML answers from the driver. */
static void test_nvml_refresh_cost(void **state)
{
    fake_gpus("A | 24GiB | 1GiB | 1 | 2 | 3\nB | 24GiB | 1GiB | 1 | 2 | 3\n");
    br_gpus_t *g = new_ok("auto");
    enum { ROUNDS = 200 };
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (int i = 0; i < ROUNDS; i++)
        assert_int_equal(br_gpus_refresh(g), 0);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double us = ((double)(t1.tv_sec - t0.tv_sec) * 1e6 +
                 (double)(t1.tv_nsec - t0.tv_nsec) / 1e3) / ROUNDS;
    print_message("one refresh of 2 GPUs with the fake NVML: %.1f us\n", us);
    assert_true(us < 50000); /* far below a heartbeat, even under ASan on a busy box */
    br_gpus_destroy(&g);
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
        cmocka_unit_test_setup_teardown(test_nvml_figures, fake_setup, fake_teardown),
        cmocka_unit_test_setup_teardown(test_nvml_unsupported, fake_setup, fake_teardown),
        cmocka_unit_test_setup_teardown(test_nvml_xid_and_ecc, fake_setup, fake_teardown),
        cmocka_unit_test(test_live_declared),
        cmocka_unit_test_setup_teardown(test_nvml_refresh_cost, fake_setup, fake_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
