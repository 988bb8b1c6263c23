/* test_api.c - the coordinator's handler table and the message tables of
 * proto/PROTOCOL.md name the same messages, so the two cannot drift apart; a
 * checkpoint's manifest is checked as PROTOCOL.md says. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <errno.h>

#include "api.h"
#include "manifest_check.h"

#define MAX_TYPES 128

/* The message types in the tables of the sections that describe messages the
 * coordinator receives: "Messages from any known key", "Agent → coordinator",
 * "CLI → coordinator". A row begins "| `type`" (or "| `a` / `b`"). */
static int documented(char types[][64], int max)
{
    FILE *f = fopen(BR_SOURCE_DIR "/proto/PROTOCOL.md", "r");
    assert_non_null(f);
    char line[8192];
    int in = 0, n = 0;
    while (fgets(line, sizeof(line), f)) {
        if (strncmp(line, "## ", 3) == 0)
            in = strstr(line, "Messages from any known key") ||
                 strstr(line, "Agent \xe2\x86\x92 coordinator") ||
                 strstr(line, "CLI \xe2\x86\x92 coordinator");
        if (!in || strncmp(line, "| `", 3) != 0)
            continue;
        /* every `type` in the first cell ("`node.drain` / `node.undrain`") */
        char *cell_end = strchr(line + 2, '|');
        assert_non_null(cell_end);
        *cell_end = '\0';
        for (const char *p = strchr(line, '`'); p; p = strchr(p, '`')) {
            const char *start = p + 1, *end = strchr(start, '`');
            assert_non_null(end);
            assert_true(n < max && (size_t)(end - start) < 64);
            memcpy(types[n], start, (size_t)(end - start));
            types[n][end - start] = '\0';
            n++;
            p = end + 1;
        }
    }
    fclose(f);
    return n;
}

static int listed(char types[][64], int n, const char *type)
{
    for (int i = 0; i < n; i++)
        if (strcmp(types[i], type) == 0)
            return 1;
    return 0;
}

static void test_handlers_match_protocol(void **state)
{
    (void)state;
    char doc[MAX_TYPES][64];
    int ndoc = documented(doc, MAX_TYPES);
    assert_true(ndoc > 20);
    int nhandled = 0;
    for (size_t i = 0; br_api_type(i); i++, nhandled++) {
        if (!listed(doc, ndoc, br_api_type(i)))
            fail_msg("the coordinator handles '%s', which proto/PROTOCOL.md does not list",
                     br_api_type(i));
    }
    for (int k = 0; k < ndoc; k++) {
        int found = 0;
        for (size_t i = 0; br_api_type(i) && !found; i++)
            found = strcmp(br_api_type(i), doc[k]) == 0;
        if (!found)
            fail_msg("proto/PROTOCOL.md lists '%s', which the coordinator does not handle",
                     doc[k]);
    }
    assert_int_equal(nhandled, ndoc);
}

#define H1 "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
#define OK_ENTRY "{\"path\": \"a/b.bin\", \"size\": 3, \"mode\": 420, \"hash\": \"" H1 "\"}"
#define HEAD "\"hash\": \"" H1 "\", \"root\": \"dir\", \"bytes\": 3, "

static void test_check_manifest(void **state)
{
    (void)state;
    static const struct {
        const char *json;
        int ok;
    } cases[] = {
        {"{" HEAD "\"files\": 1, \"entries\": [" OK_ENTRY "]}", 1},
        {"{" HEAD "\"files\": 0, \"entries\": []}", 1},
        {"{" HEAD "\"files\": 2, \"entries\": [" OK_ENTRY "], \"truncated\": true}", 1},
        /* a truncated one names the whole listing its writer keeps; only it does */
        {"{" HEAD "\"files\": 2, \"entries\": [" OK_ENTRY "], \"truncated\": true, "
         "\"listing\": {\"hash\": \"" H1 "\", \"size\": 300}}", 1},
        {"{" HEAD "\"files\": 1, \"entries\": [" OK_ENTRY "], "
         "\"listing\": {\"hash\": \"" H1 "\", \"size\": 300}}", 0},
        {"{" HEAD "\"files\": 2, \"entries\": [" OK_ENTRY "], \"truncated\": true, "
         "\"listing\": {\"hash\": \"xyz\", \"size\": 300}}", 0},
        {"{" HEAD "\"files\": 2, \"entries\": [" OK_ENTRY "], \"truncated\": true, "
         "\"listing\": {\"hash\": \"" H1 "\", \"size\": 300, \"x\": 1}}", 0},
        {"{" HEAD "\"files\": 1, \"entries\": [{\"path\": \"l\", \"size\": 3, "
         "\"mode\": 511, \"link\": \"/etc/passwd\"}]}", 1},
        {"{\"hash\": \"" H1 "\", \"root\": \"file\", \"bytes\": 3, \"files\": 1, "
         "\"entries\": [" OK_ENTRY "]}", 1},
        /* fewer listed than counted, without saying so; more listed than counted */
        {"{" HEAD "\"files\": 2, \"entries\": [" OK_ENTRY "]}", 0},
        {"{" HEAD "\"files\": 0, \"entries\": [" OK_ENTRY "]}", 0},
        /* bad hashes, root, counts, unknown fields */
        {"{\"hash\": \"ABC\", \"root\": \"dir\", \"bytes\": 0, \"files\": 0, "
         "\"entries\": []}", 0},
        {"{" HEAD "\"files\": -1, \"entries\": []}", 0},
        {"{\"hash\": \"" H1 "\", \"root\": \"fifo\", \"bytes\": 0, \"files\": 0, "
         "\"entries\": []}", 0},
        {"{\"hash\": \"" H1 "\", \"root\": \"file\", \"bytes\": 0, \"files\": 0, "
         "\"entries\": []}", 0},
        {"{" HEAD "\"files\": 0, \"entries\": [], \"extra\": 1}", 0},
        {"{" HEAD "\"files\": 0, \"entries\": {}}", 0},
        /* paths that would leave the checkpoint, or name nothing */
        {"{" HEAD "\"files\": 1, \"entries\": [{\"path\": \"../x\", \"size\": 1, "
         "\"mode\": 420, \"hash\": \"" H1 "\"}]}", 0},
        {"{" HEAD "\"files\": 1, \"entries\": [{\"path\": \"a/../../x\", \"size\": 1, "
         "\"mode\": 420, \"hash\": \"" H1 "\"}]}", 0},
        {"{" HEAD "\"files\": 1, \"entries\": [{\"path\": \"/etc/passwd\", "
         "\"size\": 1, \"mode\": 420, \"hash\": \"" H1 "\"}]}", 0},
        {"{" HEAD "\"files\": 1, \"entries\": [{\"path\": \"\", \"size\": 1, "
         "\"mode\": 420, \"hash\": \"" H1 "\"}]}", 0},
        {"{" HEAD "\"files\": 1, \"entries\": [{\"path\": \"a//b\", \"size\": 1, "
         "\"mode\": 420, \"hash\": \"" H1 "\"}]}", 0},
        {"{" HEAD "\"files\": 1, \"entries\": [{\"path\": \"./a\", \"size\": 1, "
         "\"mode\": 420, \"hash\": \"" H1 "\"}]}", 0},
        {"{" HEAD "\"files\": 1, \"entries\": [{\"path\": \"a/\", \"size\": 1, "
         "\"mode\": 420, \"hash\": \"" H1 "\"}]}", 0},
        /* an entry with both a hash and a link, or neither; bad mode, size */
        {"{" HEAD "\"files\": 1, \"entries\": [{\"path\": \"a\", \"size\": 1, "
         "\"mode\": 420, \"hash\": \"" H1 "\", \"link\": \"b\"}]}", 0},
        {"{" HEAD "\"files\": 1, \"entries\": [{\"path\": \"a\", \"size\": 1, "
         "\"mode\": 420}]}", 0},
        {"{" HEAD "\"files\": 1, \"entries\": [{\"path\": \"a\", \"size\": 1, "
         "\"mode\": 4096, \"hash\": \"" H1 "\"}]}", 0},
        {"{" HEAD "\"files\": 1, \"entries\": [{\"path\": \"a\", \"size\": -1, "
         "\"mode\": 420, \"hash\": \"" H1 "\"}]}", 0},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        json_error_t je;
        json_t *m = json_loads(cases[i].json, 0, &je);
        if (!m)
            fail_msg("case %zu: %s", i, je.text);
        br_err_t err = {0};
        int rc = br_api_check_manifest(m, &err);
        if (rc != (cases[i].ok ? 0 : -1))
            fail_msg("case %zu (%s): got %d (%s)", i, cases[i].json, rc, err.text);
        if (!cases[i].ok)
            assert_int_equal(err.errnum, EPROTO);
        json_decref(m);
    }
}

/* A tree that becomes files on a machine keeps its links inside: relative, never
 * climbing above its top, and nothing listed below a link; the refusal names the
 * entry. A name longer than NAME_MAX is no path at all. */
static void test_tree_links(void **state)
{
    (void)state;
    static const struct {
        const char *entries;
        const char *says; /* NULL: fine */
    } cases[] = {
        {"[{\"path\": \"a\", \"link\": \"b\"}, {\"path\": \"b\"}]", NULL},
        {"[{\"path\": \"d/l\", \"link\": \"../x\"}]", NULL},
        {"[{\"path\": \"d/e/l\", \"link\": \"./../../x/../y\"}]", NULL},
        {"[{\"path\": \"l\", \"link\": \"/etc/passwd\"}]",
         "l: a link out of the tree (to /etc/passwd)"},
        {"[{\"path\": \"l\", \"link\": \"../up\"}]", "l: a link out of the tree (to ../up)"},
        {"[{\"path\": \"d/l\", \"link\": \"x/../../../y\"}]",
         "d/l: a link out of the tree (to x/../../../y)"},
        {"[{\"path\": \"l\", \"link\": \"\"}]", "l: a link out of the tree (to )"},
        {"[{\"path\": \"a\", \"link\": \"b\"}, {\"path\": \"a-b\"}, "
         "{\"path\": \"a/x\"}]", "a/x: inside a, which is a link"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        json_t *m = json_pack("{s:o}", "entries", json_loads(cases[i].entries, 0, NULL));
        br_err_t err = {0};
        int rc = br_manifest_tree_links_ok(m, &err);
        if (rc != (cases[i].says ? -1 : 0))
            fail_msg("case %zu: got %d (%s)", i, rc, err.text);
        if (cases[i].says) {
            assert_int_equal(err.errnum, EPROTO);
            assert_string_equal(err.text, cases[i].says);
        }
        json_decref(m);
    }
    char name[300];
    memset(name, 'n', 256);
    name[256] = 0;
    assert_false(br_manifest_path_ok(name));
    name[255] = 0;
    assert_true(br_manifest_path_ok(name));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_handlers_match_protocol),
        cmocka_unit_test(test_check_manifest),
        cmocka_unit_test(test_tree_links),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
