/* test_ckptdir.c - ${BRAMBLE_JOB_ID} in a checkpoint dir. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "ckptdir.h"

static void test_expand(void **state)
{
    (void)state;
    static const struct {
        const char *in, *out;
    } cases[] = {
        {"/ckpt/${BRAMBLE_JOB_ID}", "/ckpt/42"},
        {"/ckpt/$BRAMBLE_JOB_ID/x", "/ckpt/42/x"},
        {"/ckpt/run-$BRAMBLE_JOB_ID", "/ckpt/run-42"},
        {"/a/${BRAMBLE_JOB_ID}-${BRAMBLE_JOB_ID}", "/a/42-42"},
        {"/a/$BRAMBLE_JOB_IDX", "/a/$BRAMBLE_JOB_IDX"}, /* another name */
        {"/a/${BRAMBLE_JOB}", "/a/${BRAMBLE_JOB}"},
        {"/a/$HOME", "/a/$HOME"},
        {"/plain", "/plain"},
        {"/a/$", "/a/$"},
    };
    char out[64];
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        assert_int_equal(br_ckptdir_expand(cases[i].in, 42, out, sizeof(out)), 0);
        assert_string_equal(out, cases[i].out);
    }
    char tiny[8];
    assert_int_equal(br_ckptdir_expand("/${BRAMBLE_JOB_ID}/xyz", 123456, tiny,
                                       sizeof(tiny)),
                     -1);
    assert_int_equal(errno, EOVERFLOW);
}

static void test_section(void **state)
{
    (void)state;
    json_t *spec = json_pack("{s:{s:s, s:s}}", "checkpoint", "dir", "/c/${BRAMBLE_JOB_ID}",
                             "pattern", "checkpoint-*");
    json_t *s = br_ckptdir_section(spec, 7);
    assert_string_equal(json_string_value(json_object_get(s, "dir")), "/c/7");
    assert_string_equal(json_string_value(json_object_get(s, "pattern")), "checkpoint-*");
    /* the spec itself is left as written */
    assert_string_equal(
        json_string_value(json_object_get(json_object_get(spec, "checkpoint"), "dir")),
        "/c/${BRAMBLE_JOB_ID}");
    json_decref(s);
    json_decref(spec);
    json_t *none = json_pack("{s:n}", "checkpoint");
    assert_null(br_ckptdir_section(none, 7));
    json_decref(none);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_expand),
        cmocka_unit_test(test_section),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
