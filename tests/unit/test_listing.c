/* test_listing.c - whole manifests kept beside a truncated report (agent/listing.c)
 * and their checks (proto/manifest_check.c): a manifest too big for a report is
 * reported cut, with the hash and length of its whole text; the whole one read
 * back is the one built; a damaged, foreign or missing listing is refused. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <ftw.h>
#include <limits.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "err.h"
#include "listing.h"
#include "manifest.h"
#include "manifest_check.h"
#include "util.h"

#define H1 "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"

typedef struct {
    char root[64];
    char dir[PATH_MAX]; /* root/manifests */
    br_listings_t *l;
} fix_t;

static int rm_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    return remove(path);
}

static int setup(void **state)
{
    fix_t *f = calloc(1, sizeof(*f));
    br_err_t err;
    snprintf(f->root, sizeof(f->root), "/tmp/test_listing.XXXXXX");
    if (!f || !mkdtemp(f->root))
        return -1;
    snprintf(f->dir, sizeof(f->dir), "%s/manifests", f->root);
    if (!(f->l = br_listings_new(f->dir, &err)))
        return -1;
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    fix_t *f = *state;
    br_listings_destroy(&f->l);
    nftw(f->root, rm_entry, 8, FTW_DEPTH | FTW_PHYS);
    free(f);
    return 0;
}

/* A whole manifest of n files with long names, hashed as manifest_check.h says. */
static json_t *manifest_of(int n)
{
    crypto_generichash_state hs;
    unsigned char h[BR_MANIFEST_HASH_LEN];
    char hex[2 * BR_MANIFEST_HASH_LEN + 1], path[200];
    json_t *entries = json_array();
    br_manifest_hash_begin(&hs, "dir");
    for (int i = 0; i < n; i++) {
        snprintf(path, sizeof(path), "shard-%05d-%0120d.bin", i, 0);
        br_manifest_hash_entry(&hs, path, 0, 0644, 1, H1);
        json_array_append_new(entries, json_pack("{s:s, s:i, s:i, s:s}", "path", path,
                                                 "size", 1, "mode", 0644, "hash", H1));
    }
    crypto_generichash_final(&hs, h, sizeof(h));
    sodium_bin2hex(hex, sizeof(hex), h, sizeof(h));
    return json_pack("{s:s, s:s, s:i, s:i, s:o}", "hash", hex, "root", "dir", "files", n,
                     "bytes", n, "entries", entries);
}

/* Small enough: reported as it is, and nothing is kept. */
static void test_small_reported_whole(void **state)
{
    fix_t *f = *state;
    json_t *m = manifest_of(10);
    br_err_t err;
    json_t *r = br_listings_report(f->l, m, &err);
    assert_ptr_equal(r, m);
    assert_int_equal(err.errnum, 0);
    json_t *w = br_listings_whole(f->dir, r, NULL, 0, &err);
    assert_ptr_equal(w, m);
    json_decref(w);
    json_decref(r);
    json_decref(m);
}

/* Too big: the report lists what fits and names the listing; the whole manifest
 * read back is the one built, and it is served from the file named. */
static void test_big_cut_and_kept(void **state)
{
    fix_t *f = *state;
    enum { N = 3000 };
    json_t *m = manifest_of(N);
    br_err_t err;
    json_t *r = br_listings_report(f->l, m, &err);
    assert_non_null(r);
    assert_int_equal(err.errnum, 0);
    assert_true(json_is_true(json_object_get(r, "truncated")));
    size_t listed = json_array_size(json_object_get(r, "entries"));
    assert_true(listed > 100 && listed < N);
    char *text = json_dumps(json_object_get(r, "entries"), JSON_COMPACT);
    assert_true(strlen(text) <= BR_MANIFEST_LIST_MAX);
    free(text);
    assert_int_equal(br_manifest_verify(r, &err), -1); /* not whole */
    assert_int_equal(err.errnum, ENOTSUP);

    const char *lhash;
    int64_t lsize;
    assert_int_equal(br_manifest_listing(r, &lhash, &lsize, &err), 1);
    char *whole_text = json_dumps(m, JSON_COMPACT);
    assert_int_equal(lsize, (int64_t)strlen(whole_text));
    unsigned char h[BR_MANIFEST_HASH_LEN];
    char hex[2 * BR_MANIFEST_HASH_LEN + 1];
    crypto_generichash(h, sizeof(h), (unsigned char *)whole_text, strlen(whole_text),
                       NULL, 0);
    sodium_bin2hex(hex, sizeof(hex), h, sizeof(h));
    assert_string_equal(lhash, hex);
    free(whole_text);

    char file[PATH_MAX], want[PATH_MAX];
    json_t *w = br_listings_whole(f->dir, r, file, sizeof(file), &err);
    if (!w)
        fail_msg("%s", err.text);
    assert_true(json_equal(w, m));
    br_listings_path(f->dir, json_string_value(json_object_get(m, "hash")), want,
                     sizeof(want));
    assert_string_equal(file, want);
    json_decref(w);
    json_decref(r);
    json_decref(m);
}

/* A listing kept here that no longer matches its hash is refused and removed; one
 * not kept is ENOENT; a truncated manifest naming none is ENOTSUP. */
static void test_damaged_missing_unnamed(void **state)
{
    fix_t *f = *state;
    json_t *m = manifest_of(3000);
    br_err_t err;
    json_t *r = br_listings_report(f->l, m, &err);
    char file[PATH_MAX];
    br_listings_path(f->dir, json_string_value(json_object_get(m, "hash")), file,
                     sizeof(file));
    FILE *fp = fopen(file, "r+");
    assert_non_null(fp);
    fseek(fp, 100, SEEK_SET);
    fputc('X', fp);
    fclose(fp);
    assert_null(br_listings_whole(f->dir, r, NULL, 0, &err));
    assert_int_equal(err.errnum, EBADMSG);
    assert_int_equal(access(file, F_OK), -1);
    assert_null(br_listings_whole(f->dir, r, NULL, 0, &err));
    assert_int_equal(err.errnum, ENOENT);
    json_object_set_new(r, "hash", json_string("../../etc/passwd")); /* names a file */
    assert_null(br_listings_whole(f->dir, r, NULL, 0, &err));
    assert_int_equal(err.errnum, ENOTSUP);
    json_object_del(r, "listing");
    assert_null(br_listings_whole(f->dir, r, NULL, 0, &err));
    assert_int_equal(err.errnum, ENOTSUP);
    json_decref(r);
    json_decref(m);
}

/* A listing whose text is whole and valid but of another checkpoint (or one that
 * adds up differently) does not stand for this summary. */
static void test_from_listing_must_match(void **state)
{
    (void)state;
    json_t *m = manifest_of(5), *other = manifest_of(6);
    char *text = json_dumps(other, JSON_COMPACT);
    br_err_t err;
    assert_null(br_manifest_from_listing(m, text, strlen(text), &err));
    assert_int_equal(err.errnum, EPROTO);
    free(text);
    text = json_dumps(m, JSON_COMPACT);
    json_t *w = br_manifest_from_listing(m, text, strlen(text), &err);
    assert_non_null(w);
    assert_true(json_equal(w, m));
    json_decref(w);
    assert_null(br_manifest_from_listing(m, text, strlen(text) - 1, &err)); /* cut */
    assert_int_equal(err.errnum, EPROTO);
    free(text);
    json_decref(m);
    json_decref(other);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_small_reported_whole, setup, teardown),
        cmocka_unit_test_setup_teardown(test_big_cut_and_kept, setup, teardown),
        cmocka_unit_test_setup_teardown(test_damaged_missing_unnamed, setup, teardown),
        cmocka_unit_test(test_from_listing_must_match),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
