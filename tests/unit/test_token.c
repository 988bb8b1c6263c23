/* test_token.c - unit tests for join tokens (proto/token.c): encode, decode, hash. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cred.h"
#include "token.h"
#include "util.h"

#define NELEM(a) (sizeof(a) / sizeof((a)[0]))
#define SECRET "0123456789abcdef0123456789abcdef0123456789abcdef"

static char server_key[BR_KEY_LEN + 1];

static int setup(void **state)
{
    char sec[BR_KEY_LEN + 1];
    return sodium_init() < 0 || br_keypair(server_key, sec, NULL) < 0 ? -1 : 0;
}

/* "brt1." + base64url (no padding) of text, as br_token_encode makes it. */
static void make_token(char *out, size_t len, const char *text)
{
    size_t n = strlen(text);
    assert_true(
        5 + sodium_base64_ENCODED_LEN(n, sodium_base64_VARIANT_URLSAFE_NO_PADDING) <=
        len);
    memcpy(out, "brt1.", 5);
    sodium_bin2base64(out + 5, len - 5, (const unsigned char *)text, n,
                      sodium_base64_VARIANT_URLSAFE_NO_PADDING);
}

/* make_token of {"e": e, "k": k, "s": s} (+ extra members, a JSON fragment). */
static void make_fields(char *out, size_t len, const char *e, const char *k,
                        const char *s, const char *extra)
{
    char text[2048];
    snprintf(text, sizeof(text), "{\"e\":\"%s\",\"k\":\"%s\",\"s\":\"%s\"%s}", e, k, s,
             extra ? extra : "");
    make_token(out, len, text);
}

static void test_round_trip(void **state)
{
    static const char *endpoints[] = {"tcp://10.0.0.1:7700", "tcp://[::1]:7700",
                                      "tcp://coord.example.org:1",
                                      "ipc:///run/bramble \"quoted\" \\ sock"};
    for (size_t i = 0; i < NELEM(endpoints); i++) {
        br_token_t t, back;
        br_err_t err = {0};
        char text[BR_TOKEN_MAX];
        if (br_token_init(&t, endpoints[i], server_key, &err) != 0)
            fail_msg("init %s: %s", endpoints[i], err.text);
        assert_int_equal(strlen(t.secret), BR_TOKEN_SECRET_HEX);
        assert_int_equal(strspn(t.secret, "0123456789abcdef"), BR_TOKEN_SECRET_HEX);
        assert_string_equal(t.endpoint, endpoints[i]);
        assert_string_equal(t.server_key, server_key);
        assert_int_equal(br_token_encode(&t, text, sizeof(text), &err), 0);
        assert_int_equal(strncmp(text, "brt1.", 5), 0);
        /* one opaque word: safe to paste into a shell or a URL */
        size_t n = strlen(text);
        assert_int_equal(strspn(text + 5,
                                "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
                                "0123456789-_"),
                         n - 5);
        memset(&back, 'x', sizeof(back));
        if (br_token_decode(text, &back, &err) != 0)
            fail_msg("decode %s: %s", text, err.text);
        assert_string_equal(back.endpoint, t.endpoint);
        assert_string_equal(back.server_key, t.server_key);
        assert_string_equal(back.secret, t.secret);
    }
}

static void test_longest_endpoint(void **state)
{
    char ep[BR_ENDPOINT_MAX];
    memset(ep, 'h', sizeof(ep) - 1);
    ep[sizeof(ep) - 1] = '\0';
    br_token_t t, back;
    br_err_t err = {0};
    char text[BR_TOKEN_MAX];
    assert_int_equal(br_token_init(&t, ep, server_key, &err), 0);
    assert_int_equal(br_token_encode(&t, text, sizeof(text), &err), 0);
    assert_int_equal(br_token_decode(text, &back, &err), 0);
    assert_string_equal(back.endpoint, ep);
}

static void test_init_refusals(void **state)
{
    char ep[BR_ENDPOINT_MAX + 1];
    memset(ep, 'h', sizeof(ep) - 1);
    ep[sizeof(ep) - 1] = '\0';
    br_token_t t;
    br_err_t err = {0};
    assert_int_equal(br_token_init(&t, ep, server_key, &err), -1);
    assert_int_equal(err.errnum, EINVAL);
    assert_int_equal(br_token_init(&t, "tcp://x:1", "short", &err), -1);
    assert_int_equal(err.errnum, EINVAL);
    char bad[BR_KEY_LEN + 1];
    memcpy(bad, server_key, sizeof(bad));
    bad[3] = ' ';
    assert_int_equal(br_token_init(&t, "tcp://x:1", bad, &err), -1);
}

static void test_encode_small_buffer(void **state)
{
    br_token_t t;
    br_err_t err = {0};
    assert_int_equal(br_token_init(&t, "tcp://10.0.0.1:7700", server_key, &err), 0);
    char big[BR_TOKEN_MAX], small[40];
    assert_int_equal(br_token_encode(&t, big, sizeof(big), &err), 0);
    assert_int_equal(br_token_encode(&t, small, sizeof(small), &err), -1);
    assert_int_equal(err.errnum, ENAMETOOLONG);
    /* exactly enough room (the text and its NUL) is enough */
    size_t need = strlen(big) + 1;
    char *exact = malloc(need);
    assert_non_null(exact);
    int rc = br_token_encode(&t, exact, need, &err);
    int same = rc == 0 && strcmp(exact, big) == 0;
    free(exact);
    assert_true(same);
}

static void test_two_inits_differ(void **state)
{
    br_token_t a, b;
    assert_int_equal(br_token_init(&a, "tcp://x:1", server_key, NULL), 0);
    assert_int_equal(br_token_init(&b, "tcp://x:1", server_key, NULL), 0);
    assert_string_not_equal(a.secret, b.secret);
    char ta[BR_TOKEN_MAX], tb[BR_TOKEN_MAX];
    assert_int_equal(br_token_encode(&a, ta, sizeof(ta), NULL), 0);
    assert_int_equal(br_token_encode(&b, tb, sizeof(tb), NULL), 0);
    assert_string_not_equal(ta, tb);
}

/* ---- refusals ---- */

typedef struct {
    const char *name;
    void (*make)(char *out, size_t len); /* builds the token text */
    const char *needle;                  /* after "malformed token: " */
} bad_case_t;

static void mk_empty(char *o, size_t l)
{
    br_strlcpy(o, "", l);
}
static void mk_no_prefix(char *o, size_t l)
{
    char t[BR_TOKEN_MAX];
    make_fields(t, sizeof(t), "tcp://x:1", server_key, SECRET, NULL);
    br_strlcpy(o, t + 5, l);
}
static void mk_prefix_v2(char *o, size_t l)
{
    make_fields(o, l, "tcp://x:1", server_key, SECRET, NULL);
    o[3] = '2';
}
static void mk_prefix_upper(char *o, size_t l)
{
    make_fields(o, l, "tcp://x:1", server_key, SECRET, NULL);
    memcpy(o, "BRT1", 4);
}
static void mk_prefix_late(char *o, size_t l)
{
    char t[BR_TOKEN_MAX];
    make_fields(t, sizeof(t), "tcp://x:1", server_key, SECRET, NULL);
    snprintf(o, l, " %s", t);
}
static void mk_too_long(char *o, size_t l)
{
    make_fields(o, l, "tcp://x:1", server_key, SECRET, NULL);
    size_t n = strlen(o);
    memset(o + n, 'A', BR_TOKEN_MAX + 1 - n);
    o[BR_TOKEN_MAX + 1] = '\0';
}
static void mk_b64_bang(char *o, size_t l)
{
    br_strlcpy(o, "brt1.!!!!", l);
}
static void mk_b64_padding(char *o, size_t l)
{
    make_token(o, l, "{\"e\":\"x\"}xx");
    strcat(o, "==");
}
static void mk_b64_std_alphabet(char *o, size_t l)
{
    make_fields(o, l, "tcp://x:1", server_key, SECRET, NULL);
    o[10] = '+';
}
static void mk_b64_space(char *o, size_t l)
{
    make_fields(o, l, "tcp://x:1", server_key, SECRET, NULL);
    o[12] = ' ';
}
static void mk_b64_one_char(char *o, size_t l)
{
    br_strlcpy(o, "brt1.a", l);
}
static void mk_only_prefix(char *o, size_t l)
{
    br_strlcpy(o, "brt1.", l);
}
static void mk_cut(char *o, size_t l, size_t cut)
{
    make_fields(o, l, "tcp://x:1", server_key, SECRET, NULL);
    o[strlen(o) - cut] = '\0';
}
static void mk_cut1(char *o, size_t l)
{
    mk_cut(o, l, 1);
}
static void mk_cut2(char *o, size_t l)
{
    mk_cut(o, l, 2);
}
static void mk_cut3(char *o, size_t l)
{
    mk_cut(o, l, 3);
}
static void mk_cut4(char *o, size_t l)
{
    mk_cut(o, l, 4);
}
static void mk_cut_half(char *o, size_t l)
{
    make_fields(o, l, "tcp://x:1", server_key, SECRET, NULL);
    o[strlen(o) / 2] = '\0';
}
static void mk_extra_key(char *o, size_t l)
{
    make_fields(o, l, "tcp://x:1", server_key, SECRET, ",\"x\":\"y\"");
}
static void mk_missing_key(char *o, size_t l)
{
    char text[256];
    snprintf(text, sizeof(text), "{\"e\":\"tcp://x:1\",\"k\":\"%s\"}", server_key);
    make_token(o, l, text);
}
static void mk_dup_key(char *o, size_t l)
{
    make_fields(o, l, "tcp://x:1", server_key, SECRET, ",\"e\":\"tcp://y:1\"");
}
static void mk_wrong_type(char *o, size_t l)
{
    char text[256];
    snprintf(text, sizeof(text), "{\"e\":7,\"k\":\"%s\",\"s\":\"%s\"}", server_key,
             SECRET);
    make_token(o, l, text);
}
static void mk_array(char *o, size_t l)
{
    make_token(o, l, "[\"tcp://x:1\"]");
}
static void mk_not_json(char *o, size_t l)
{
    make_token(o, l, "e=tcp://x:1");
}
static void mk_bad_key_short(char *o, size_t l)
{
    char k[BR_KEY_LEN + 1];
    memcpy(k, server_key, sizeof(k));
    k[39] = '\0';
    make_fields(o, l, "tcp://x:1", k, SECRET, NULL);
}
static void mk_bad_key_char(char *o, size_t l)
{
    char k[BR_KEY_LEN + 1];
    memcpy(k, server_key, sizeof(k));
    k[0] = '~';
    make_fields(o, l, "tcp://x:1", k, SECRET, NULL);
}
static void mk_bad_key_empty(char *o, size_t l)
{
    make_fields(o, l, "tcp://x:1", "", SECRET, NULL);
}
static void mk_secret_short(char *o, size_t l)
{
    make_fields(o, l, "tcp://x:1", server_key, &SECRET[1], NULL);
}
static void mk_secret_long(char *o, size_t l)
{
    make_fields(o, l, "tcp://x:1", server_key, SECRET "0", NULL);
}
static void mk_secret_upper(char *o, size_t l)
{
    make_fields(o, l, "tcp://x:1", server_key,
                "0123456789ABCDEF0123456789abcdef0123456789abcdef", NULL);
}
static void mk_secret_not_hex(char *o, size_t l)
{
    make_fields(o, l, "tcp://x:1", server_key,
                "0123456789abcdeg0123456789abcdef0123456789abcdef", NULL);
}
static void mk_secret_empty(char *o, size_t l)
{
    make_fields(o, l, "tcp://x:1", server_key, "", NULL);
}
static void mk_endpoint_long(char *o, size_t l)
{
    char ep[BR_ENDPOINT_MAX + 1];
    memset(ep, 'h', BR_ENDPOINT_MAX);
    ep[BR_ENDPOINT_MAX] = '\0';
    make_fields(o, l, ep, server_key, SECRET, NULL);
}
static void mk_endpoint_empty(char *o, size_t l)
{
    make_fields(o, l, "", server_key, SECRET, NULL);
}

static const bad_case_t bad_cases[] = {
    {"empty", mk_empty, "should start with 'brt1.'"},
    {"no prefix", mk_no_prefix, "should start with 'brt1.'"},
    {"prefix brt2", mk_prefix_v2, "should start with 'brt1.'"},
    {"prefix upper case", mk_prefix_upper, "should start with 'brt1.'"},
    {"prefix after a space", mk_prefix_late, "should start with 'brt1.'"},
    {"longer than BR_TOKEN_MAX", mk_too_long, ""},
    {"base64 bangs", mk_b64_bang, "not base64url"},
    {"base64 padding", mk_b64_padding, "not base64url"},
    {"base64 standard alphabet", mk_b64_std_alphabet, "not base64url"},
    {"base64 space", mk_b64_space, "not base64url"},
    {"base64 one char", mk_b64_one_char, "not base64url"},
    {"only the prefix", mk_only_prefix, ""},
    {"truncated by 1", mk_cut1, ""},
    {"truncated by 2", mk_cut2, ""},
    {"truncated by 3", mk_cut3, ""},
    {"truncated by 4", mk_cut4, ""},
    {"truncated by half", mk_cut_half, ""},
    {"extra JSON key", mk_extra_key, "unreadable contents"},
    {"missing JSON key", mk_missing_key, "unreadable contents"},
    {"duplicate JSON key", mk_dup_key, "unreadable contents"},
    {"wrong JSON type", mk_wrong_type, "unreadable contents"},
    {"JSON array", mk_array, "unreadable contents"},
    {"not JSON", mk_not_json, "unreadable contents"},
    {"key 39 chars", mk_bad_key_short, "bad coordinator key"},
    {"key bad char", mk_bad_key_char, "bad coordinator key"},
    {"key empty", mk_bad_key_empty, "bad coordinator key"},
    {"secret 47 hex", mk_secret_short, "bad secret"},
    {"secret 49 hex", mk_secret_long, "bad secret"},
    {"secret upper case", mk_secret_upper, "bad secret"},
    {"secret not hex", mk_secret_not_hex, "bad secret"},
    {"secret empty", mk_secret_empty, "bad secret"},
    {"endpoint too long", mk_endpoint_long, "bad endpoint"},
    {"endpoint empty", mk_endpoint_empty, "bad endpoint"},
};

static void run_bad_case(void **state)
{
    const bad_case_t *c = *state;
    char text[BR_TOKEN_MAX + 64];
    c->make(text, sizeof(text));
    br_token_t t;
    br_err_t err = {0};
    if (br_token_decode(text, &t, &err) != -1)
        fail_msg("'%s' accepted", text);
    assert_int_equal(err.errnum, EINVAL);
    if (strncmp(err.text, "malformed token: ", 17) != 0 || !strstr(err.text, c->needle))
        fail_msg("error '%s' is not \"malformed token: ...%s...\"", err.text,
                 c->needle);
}

static void test_decode_null(void **state)
{
    br_token_t t;
    br_err_t err = {0};
    assert_int_equal(br_token_decode(NULL, &t, &err), -1);
    assert_int_equal(strncmp(err.text, "malformed token: ", 17), 0);
}

/* ---- hashes ---- */

static void test_hash(void **state)
{
    static const struct {
        const char *secret, *hash;
    } vectors[] = {
        /* BLAKE2b-256 reference values */
        {"", "0e5751c026e543b2e8ab2eb06099daa1d1e5df47778f7787faab45cdf12fe3a8"},
        {"abc", "bddd813c634239723171ef3fee98579b94964e3bb1cb3e427262c8c068d52319"},
    };
    for (size_t i = 0; i < NELEM(vectors); i++) {
        char hash[BR_TOKEN_HASH_HEX + 1], id[BR_TOKEN_ID_LEN + 1];
        br_token_hash(vectors[i].secret, hash, id);
        assert_string_equal(hash, vectors[i].hash);
        assert_int_equal(strlen(id), BR_TOKEN_ID_LEN);
        assert_memory_equal(id, vectors[i].hash, BR_TOKEN_ID_LEN);
    }
    /* stable, 64 lower-case hex, id its 12-char prefix; id may be NULL */
    br_token_t t;
    assert_int_equal(br_token_init(&t, "tcp://x:1", server_key, NULL), 0);
    char h1[BR_TOKEN_HASH_HEX + 1], h2[BR_TOKEN_HASH_HEX + 1], id[BR_TOKEN_ID_LEN + 1];
    br_token_hash(t.secret, h1, id);
    br_token_hash(t.secret, h2, NULL);
    assert_string_equal(h1, h2);
    assert_int_equal(strlen(h1), BR_TOKEN_HASH_HEX);
    assert_int_equal(strspn(h1, "0123456789abcdef"), BR_TOKEN_HASH_HEX);
    assert_int_equal(strlen(id), BR_TOKEN_ID_LEN);
    assert_int_equal(strncmp(id, h1, BR_TOKEN_ID_LEN), 0);
    /* the hash is of the secret only, and differs between secrets */
    br_token_t u;
    assert_int_equal(br_token_init(&u, "tcp://x:1", server_key, NULL), 0);
    char h3[BR_TOKEN_HASH_HEX + 1];
    br_token_hash(u.secret, h3, NULL);
    assert_string_not_equal(h1, h3);
    assert_string_not_equal(h1, t.secret);
}

int main(void)
{
    static const struct CMUnitTest fixed[] = {
        cmocka_unit_test(test_round_trip),
        cmocka_unit_test(test_longest_endpoint),
        cmocka_unit_test(test_init_refusals),
        cmocka_unit_test(test_encode_small_buffer),
        cmocka_unit_test(test_two_inits_differ),
        cmocka_unit_test(test_decode_null),
        cmocka_unit_test(test_hash),
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
    int rc = _cmocka_run_group_tests("token", tests, nfixed + nbad, setup, NULL);
    free(tests);
    return rc;
}
