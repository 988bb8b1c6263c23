/* test_conf.c - our small YAML files (proto/conf.c): parse, refuse, save, load. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <ftw.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <zmq.h>

#include "conf.h"
#include "util.h"

#define NELEM(a) (sizeof(a) / sizeof((a)[0]))

static char tmpdir[] = "/tmp/test_conf.XXXXXX";

static int rm_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    return remove(path);
}

static int setup(void **state)
{
    umask(022);
    return mkdtemp(tmpdir) ? 0 : -1;
}

static int teardown(void **state)
{
    return nftw(tmpdir, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
}

static void under(char *buf, size_t len, const char *rel)
{
    snprintf(buf, len, "%s/%s", tmpdir, rel);
}

static json_t *parse(const char *text, br_err_t *err)
{
    return br_conf_parse(text, strlen(text), err);
}

/* 1 when got equals want, else prints both and returns 0. */
static int same_json(const json_t *got, const json_t *want, const char *what)
{
    if (json_equal(got, want))
        return 1;
    char *g = json_dumps(got, JSON_SORT_KEYS | JSON_ENCODE_ANY);
    char *w = json_dumps(want, JSON_SORT_KEYS | JSON_ENCODE_ANY);
    print_error("%s:\n  got  %s\n  want %s\n", what, g ? g : "(null)",
                w ? w : "(null)");
    free(g);
    free(w);
    return 0;
}

/* ---- parsing ---- */

static const struct {
    const char *yaml, *json;
} good_cases[] = {
    {"a: b\n", "{\"a\": \"b\"}"},
    {"a: b", "{\"a\": \"b\"}"},
    {"a: 1\nb: true\nc: 1.5\nd: null\n",
     "{\"a\": \"1\", \"b\": \"true\", \"c\": \"1.5\", \"d\": \"null\"}"},
    {"a:\n", "{\"a\": \"\"}"},
    {"{}", "{}"},
    {"# comment\na: b # trailing\n\n", "{\"a\": \"b\"}"},
    {"a: 'x: y'\nb: \"q\\\"t\"\nc: 'it''s'\n",
     "{\"a\": \"x: y\", \"b\": \"q\\\"t\", \"c\": \"it's\"}"},
    {"outer:\n  inner: x\n  more:\n    deep: y\n",
     "{\"outer\": {\"inner\": \"x\", \"more\": {\"deep\": \"y\"}}}"},
    {"m: {k: v, k2: v2}\n", "{\"m\": {\"k\": \"v\", \"k2\": \"v2\"}}"},
    {"list: [a, b]\nblock:\n  - x\n  - y\n",
     "{\"list\": [\"a\", \"b\"], \"block\": [\"x\", \"y\"]}"},
    {"items:\n  - name: a\n    n: 1\n  - name: b\n",
     "{\"items\": [{\"name\": \"a\", \"n\": \"1\"}, {\"name\": \"b\"}]}"},
    {"nest: [[a], [b, [c]]]\n", "{\"nest\": [[\"a\"], [\"b\", [\"c\"]]]}"},
    {"e: []\nf: {}\n", "{\"e\": [], \"f\": {}}"},
    {"---\na: b\n...\n", "{\"a\": \"b\"}"},
    {"a: !!str 5\n", "{\"a\": \"5\"}"},
    {"text: |\n  two\n  lines\n", "{\"text\": \"two\\nlines\\n\"}"},
    {"u: caf\xc3\xa9\n", "{\"u\": \"caf\\u00e9\"}"},
    {"deep: {a: {b: {c: {d: x}}}}\n",
     "{\"deep\": {\"a\": {\"b\": {\"c\": {\"d\": \"x\"}}}}}"},
};

static void test_parse_good(void **state)
{
    for (size_t i = 0; i < NELEM(good_cases); i++) {
        br_err_t err = {0};
        json_t *got = parse(good_cases[i].yaml, &err);
        if (!got)
            fail_msg("case %zu refused: %s", i, err.text);
        json_error_t jerr;
        json_t *want = json_loads(good_cases[i].json, 0, &jerr);
        assert_non_null(want);
        int ok = same_json(got, want, good_cases[i].yaml);
        json_decref(got);
        json_decref(want);
        assert_true(ok);
    }
}

static const struct {
    const char *name, *yaml, *needle;
    int errnum;
} bad_cases[] = {
    {"sequence root", "- a\n- b\n", "expected a mapping", EINVAL},
    {"scalar root", "hello\n", "expected a mapping", EINVAL},
    {"flow sequence root", "[a]", "expected a mapping", EINVAL},
    {"empty", "", "empty document", EINVAL},
    {"only a comment", "# nothing\n", "empty document", EINVAL},
    {"duplicate key", "a: 1\nb: 2\na: 3\n", "duplicate key 'a'", EINVAL},
    {"duplicate nested key", "o:\n  k: 1\n  k: 2\n", "duplicate key 'k'", EINVAL},
    {"duplicate line", "a: 1\nb: 2\na: 3\n", "line 3", EINVAL},
    {"alias", "a: &x foo\nb: *x\n", "alias", EINVAL},
    {"alias in sequence", "a: &x foo\nb: [*x]\n", "alias", EINVAL},
    {"alias as key", "a: &x foo\n*x : b\n", "keys must be plain words", EINVAL},
    {"mapping key", "? {a: b}\n: c\n", "keys must be plain words", EINVAL},
    {"sequence key", "? [a]\n: c\n", "keys must be plain words", EINVAL},
    {"unclosed flow", "a: [b\n", "line", EINVAL},
    {"bad indentation", "a: b\n  c: d\n", "line 2", EINVAL},
    {"too deep mapping",
     "a: {a: {a: {a: {a: {a: {a: {a: {a: {a: {a: {a: x}}}}}}}}}}}\n",
     "nested too deeply", EINVAL},
    {"too deep sequence", "a: [[[[[[[[[[[[[[[[x]]]]]]]]]]]]]]]]\n", "nested too deeply",
     EINVAL},
    {"too deep mixed", "a:\n - b:\n   - c:\n     - d:\n       - e:\n         - f: x\n",
     "nested too deeply", EINVAL},
};

static void run_bad_case(void **state)
{
    const __typeof__(bad_cases[0]) *c = *state;
    br_err_t err = {0};
    json_t *got = parse(c->yaml, &err);
    if (got) {
        char *g = json_dumps(got, JSON_SORT_KEYS);
        print_error("accepted as %s\n", g);
        free(g);
        json_decref(got);
        fail();
    }
    assert_int_equal(err.errnum, c->errnum);
    if (!strstr(err.text, c->needle))
        fail_msg("error '%s' lacks '%s'", err.text, c->needle);
}

static void test_depth_limit(void **state)
{
    /* nesting that is refused is refused at some finite depth, and a moderately deep
     * file is fine: find the boundary and check it is sane (>= 5, < 20) */
    int limit = -1;
    for (int depth = 1; depth < 30; depth++) {
        char text[512] = "a: ";
        for (int i = 0; i < depth; i++)
            strcat(text, "{a: ");
        strcat(text, "x");
        for (int i = 0; i < depth; i++)
            strcat(text, "}");
        br_err_t err = {0};
        json_t *j = parse(text, &err);
        if (!j) {
            assert_non_null(strstr(err.text, "nested too deeply"));
            limit = depth;
            break;
        }
        json_decref(j);
    }
    assert_true(limit >= 5 && limit < 20);
}

static void test_size_limit(void **state)
{
    size_t n = BR_CONF_MAX_BYTES;
    char *text = malloc(n + 2);
    assert_non_null(text);
    /* "a: b\n" then a comment filling up to exactly the limit */
    memset(text, 'c', n + 1);
    memcpy(text, "a: b\n#", 6);
    text[n - 1] = '\n';
    text[n + 1] = '\0';
    br_err_t err = {0};
    json_t *j = br_conf_parse(text, n, &err);
    if (!j)
        fail_msg("%zu bytes refused: %s", n, err.text);
    assert_string_equal(br_conf_str(j, "a"), "b");
    json_decref(j);
    text[n] = '\n';
    assert_null(br_conf_parse(text, n + 1, &err));
    assert_int_equal(err.errnum, EFBIG);
    assert_non_null(strstr(err.text, "larger than"));
    /* the same through a file */
    char path[512];
    under(path, sizeof(path), "big.yaml");
    assert_int_equal(br_write_file(path, text, n + 1, 0600, &err), 0);
    memset(&err, 0, sizeof(err));
    assert_null(br_conf_load(path, &err));
    assert_int_equal(err.errnum, EFBIG);
    assert_non_null(strstr(err.text, path));
    free(text);
}

static void test_load_errors(void **state)
{
    char path[512];
    br_err_t err = {0};
    under(path, sizeof(path), "missing.yaml");
    assert_null(br_conf_load(path, &err));
    assert_int_equal(err.errnum, ENOENT);
    assert_non_null(strstr(err.text, path));
    /* a parse error names the file, then the line */
    under(path, sizeof(path), "dup.yaml");
    const char *text = "a: 1\na: 2\n";
    assert_int_equal(br_write_file(path, text, strlen(text), 0600, &err), 0);
    assert_null(br_conf_load(path, &err));
    assert_int_equal(err.errnum, EINVAL);
    assert_int_equal(strncmp(err.text, path, strlen(path)), 0);
    assert_non_null(strstr(err.text, ": line 2: duplicate key 'a'"));
}

static void test_conf_str(void **state)
{
    json_t *j = parse("s: text\nm: {k: v}\nl: [x]\n", NULL);
    assert_non_null(j);
    assert_string_equal(br_conf_str(j, "s"), "text");
    assert_null(br_conf_str(j, "m"));
    assert_null(br_conf_str(j, "l"));
    assert_null(br_conf_str(j, "missing"));
    json_decref(j);
}

/* ---- save, then load ---- */

/* Save obj with mode, check the mode, load it back and compare with want (obj when
 * NULL). Returns 1 when all is well, else prints why and returns 0 (no assertion
 * here, so the caller frees its objects before failing: no leaks on failure). */
static int round_trip(const json_t *obj, const json_t *want, const char *rel,
                      mode_t mode)
{
    char path[512];
    br_err_t err = {0};
    under(path, sizeof(path), rel);
    if (br_conf_save(path, obj, mode, &err) != 0) {
        print_error("save %s: %s\n", path, err.text);
        return 0;
    }
    struct stat st;
    if (stat(path, &st) != 0 || (st.st_mode & 0777) != mode) {
        print_error("%s: mode %03o, expected %03o\n", path, st.st_mode & 0777, mode);
        return 0;
    }
    json_t *back = br_conf_load(path, &err);
    int ok = back && same_json(back, want ? want : obj, rel);
    if (!back)
        print_error("load %s: %s\n", path, err.text);
    if (!ok) {
        char *text = br_read_file(path, BR_CONF_MAX_BYTES, NULL, NULL);
        print_error("file as written:\n%s", text ? text : "(unreadable)\n");
        free(text);
    }
    json_decref(back);
    return ok;
}

static void test_save_strings(void **state)
{
    char pub[41], sec[41];
    assert_int_equal(zmq_curve_keypair(pub, sec), 0);
    static const char *values[] = {
        "plain",
        "it's",
        "''",
        "say \"hi\"",
        "a: b",
        "a:b",
        "key: value: more",
        "# not a comment",
        "x #y",
        "x#y",
        "  leading spaces",
        "trailing spaces  ",
        "   ",
        "",
        "\ttab",
        "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ.-:+=^!/"
        "*?&<>()[]{}@"
        "%$#",
        "- dash",
        "-",
        "[not, a, list]",
        "{not: a map}",
        "true",
        "null",
        "~",
        "123",
        "0x1f",
        "1e3",
        "caf\xc3\xa9",
        "%percent",
        "@at",
        "`backtick",
        "!tag",
        "&anchor",
        "*alias",
        "|",
        ">",
        "\\back\\slash",
        "---",
        "...",
        "? question",
        "tcp://10.0.0.1:7700",
    };
    json_t *obj = json_object();
    json_t *arr = json_array();
    for (size_t i = 0; i < NELEM(values); i++) {
        char key[16];
        snprintf(key, sizeof(key), "k%zu", i);
        json_object_set_new(obj, key, json_string(values[i]));
        json_array_append_new(arr, json_string(values[i]));
    }
    json_object_set_new(obj, "public_key", json_string(pub));
    json_object_set_new(obj, "secret_key", json_string(sec));
    json_object_set_new(obj, "list", arr);
    json_object_set_new(
        obj, "nested",
        json_pack("{s:{s:s, s:[s, s]}}", "inner", "q", "'x'", "l", "#a", " b"));
    int ok = round_trip(obj, NULL, "strings.yaml", 0600);
    json_decref(obj);
    assert_true(ok);
}

static void test_save_shapes(void **state)
{
    json_t *obj =
        json_pack("{s:{}, s:[], s:[{s:s, s:s}, {s:[s]}, [s, s]], s:{s:{s:{s:s}}}}",
                  "empty_map", "empty_list", "items", "name", "a", "port", "x", "more",
                  "y", "pairs", "p", "q", "deep", "a", "b", "c", "leaf");
    assert_non_null(obj);
    int ok = round_trip(obj, NULL, "shapes.yaml", 0644);
    json_decref(obj);
    assert_true(ok);
    /* non-strings are written as YAML scalars and come back as strings */
    obj = json_pack("{s:i, s:I, s:b, s:b, s:f, s:n}", "int", 42, "big",
                    (json_int_t)1234567890123LL, "yes", 1, "no", 0, "real", 0.5, "nil");
    json_t *want =
        json_pack("{s:s, s:s, s:s, s:s, s:s, s:s}", "int", "42", "big", "1234567890123",
                  "yes", "true", "no", "false", "real", "0.5", "nil", "null");
    ok = round_trip(obj, want, "scalars.yaml", 0600);
    json_decref(want);
    json_decref(obj);
    assert_true(ok);
}

/* A value with line breaks must come back as it was written. */
static void test_save_newlines(void **state)
{
    json_t *obj = json_pack("{s:s, s:s, s:s}", "two", "line one\nline two", "end",
                            "ends\n", "blank", "a\n\nb");
    int ok = round_trip(obj, NULL, "newlines.yaml", 0600);
    json_decref(obj);
    assert_true(ok);
}

/* Keys are written as well as values: odd keys must survive too. */
static void test_save_keys(void **state)
{
    static const char *keys[] = {
        "with space", "dotted.key", "dash-key", "under_score", "k: v",
        "#hash",      "-lead",      "it's",     "[x]",         "true",
    };
    json_t *obj = json_object();
    for (size_t i = 0; i < NELEM(keys); i++)
        json_object_set_new(obj, keys[i], json_string("v"));
    json_object_set_new(obj, "labels",
                        json_pack("{s:s, s:s}", "site: a", "1", "#b", "2"));
    int ok = round_trip(obj, NULL, "keys.yaml", 0600);
    json_decref(obj);
    assert_true(ok);
}

static void test_save_errors(void **state)
{
    char path[512];
    br_err_t err = {0};
    under(path, sizeof(path), "no/dir/x.yaml");
    json_t *obj = json_pack("{s:s}", "a", "b");
    assert_int_equal(br_conf_save(path, obj, 0600, &err), -1);
    assert_int_equal(err.errnum, ENOENT);
    assert_non_null(strstr(err.text, "no/dir/x.yaml"));
    json_decref(obj);
}

int main(void)
{
    static const struct CMUnitTest fixed[] = {
        cmocka_unit_test(test_parse_good),  cmocka_unit_test(test_depth_limit),
        cmocka_unit_test(test_size_limit),  cmocka_unit_test(test_load_errors),
        cmocka_unit_test(test_conf_str),    cmocka_unit_test(test_save_strings),
        cmocka_unit_test(test_save_shapes), cmocka_unit_test(test_save_newlines),
        cmocka_unit_test(test_save_keys),   cmocka_unit_test(test_save_errors),
    };
    size_t nfixed = NELEM(fixed), nbad = NELEM(bad_cases);
    struct CMUnitTest *tests = calloc(nfixed + nbad, sizeof(*tests));
    if (!tests)
        return 1;
    memcpy(tests, fixed, sizeof(fixed));
    for (size_t i = 0; i < nbad; i++)
        tests[nfixed + i] = (struct CMUnitTest){.name = bad_cases[i].name,
                                                .test_func = run_bad_case,
                                                .initial_state = (void *)&bad_cases[i]};
    int rc = _cmocka_run_group_tests("conf", tests, nfixed + nbad, setup, teardown);
    free(tests);
    return rc;
}
