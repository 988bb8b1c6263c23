/* test_content.c - the coordinator's content store on real files, and the data set
 * rows and references of the SQL store that decide what it keeps. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <limits.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "content.h"
#include "contentw.h"
#include "manifest_check.h"
#include "mfbuild.h"
#include "msg.h"
#include <poll.h>
#include "store.h"
#include "util.h"

static char tmpdir[] = "/tmp/test_content.XXXXXX";
static int serial;

static int rm_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
    return remove(path);
}

static int group_setup(void **state)
{
    return sodium_init() < 0 || !mkdtemp(tmpdir) ? -1 : 0;
}

static int group_teardown(void **state)
{
    return nftw(tmpdir, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
}

/* A fresh store directory for one test. */
static void fresh_dir(char *dir)
{
    snprintf(dir, PATH_MAX, "%s/s%d", tmpdir, ++serial);
}

static br_content_t *open_ok(const char *dir, uint64_t quota)
{
    br_err_t err = {0};
    br_content_t *c = br_content_open(dir, quota, &err);
    if (!c)
        print_error("open %s: %s\n", dir, err.text);
    assert_non_null(c);
    return c;
}

static void hash_hex(const void *data, size_t len, char hex[65])
{
    unsigned char h[32];
    crypto_generichash(h, sizeof(h), data, len, NULL, 0);
    sodium_bin2hex(hex, 65, h, sizeof(h));
}

/* n bytes of a pattern that differs with seed. */
static unsigned char *bytes(size_t n, unsigned seed)
{
    unsigned char *b = malloc(n ? n : 1);
    assert_non_null(b);
    for (size_t i = 0; i < n; i++)
        b[i] = (unsigned char)((i * 131 + seed * 7 + (i >> 9)) & 0xff);
    return b;
}

/* Send all of data to the store in chunks of chunk bytes, from offset from. */
static void send_all(br_content_t *c, const char *hash, const unsigned char *data,
                     size_t len, size_t from, size_t chunk)
{
    size_t off = from;
    int whole = 0;
    while (!whole) {
        size_t k = len - off < chunk ? len - off : chunk;
        int64_t held = -1;
        br_err_t err = {0};
        int rc = br_content_write(c, hash, 0, (int64_t)len, (int64_t)off, data + off, k, &held,
                                  &whole, &err);
        if (rc < 0)
            print_error("write at %zu: %s\n", off, err.text);
        assert_int_equal(rc, 0);
        off += k;
        assert_int_equal(held, (int64_t)off);
    }
    assert_int_equal(off, len);
}

static void object_bytes_are(const char *dir, const char *hash, const unsigned char *data,
                             size_t len)
{
    char path[PATH_MAX + 200];
    snprintf(path, sizeof(path), "%s/objects/%.2s/%s", dir, hash, hash);
    br_err_t err = {0};
    size_t got = 0;
    char *text = br_read_file(path, len + 1, &got, &err);
    assert_non_null(text);
    assert_int_equal(got, len);
    assert_memory_equal(text, data, len);
    free(text);
}

/* Knowing a content's hash is not holding it: a user (who != 0) whose own upload has
 * not sent every byte of a content the store holds writes their own partial, and is
 * told whole only once those bytes hash to its name; then they have proved it (a
 * day), their copy is let go, and the store's stays as it was. The shared partial
 * (who 0: a node, the admin) is told whole at once, as before. */
static void test_a_user_proves_a_content_by_sending_it(void **state)
{
    (void)state;
    char dir[PATH_MAX], hash[65];
    fresh_dir(dir);
    br_content_t *c = open_ok(dir, 0);
    size_t len = 2 * BR_CONTENT_CHUNK + 5;
    unsigned char *data = bytes(len, 9), *wrong = bytes(len, 10);
    hash_hex(data, len, hash);
    int64_t held;
    int whole;
    br_err_t err = {0};
    send_all(c, hash, data, len, 0, BR_CONTENT_CHUNK); /* (shared: who 0) */
    assert_int_equal(br_content_has(c, hash), 1);
    uint64_t used = br_content_used(c);
    assert_false(br_content_proved(c, hash, 7));
    /* user 7 knows the hash: not whole for them, their own partial grows */
    assert_int_equal(br_content_write(c, hash, 7, (int64_t)len, 0, data, BR_CONTENT_CHUNK,
                                      &held, &whole, &err), 0);
    assert_int_equal(whole, 0);
    assert_int_equal(held, BR_CONTENT_CHUNK);
    assert_int_equal(br_content_partial(c, hash, 7), BR_CONTENT_CHUNK);
    assert_int_equal(br_content_partial(c, hash, 0), 0);
    /* other bytes under its name: refused, nothing proved, their partial gone */
    assert_int_equal(br_content_write(c, hash, 7, (int64_t)len, BR_CONTENT_CHUNK,
                                      wrong + BR_CONTENT_CHUNK, len - BR_CONTENT_CHUNK, &held,
                                      &whole, &err), -1);
    assert_int_equal(err.errnum, EBADMSG);
    assert_false(br_content_proved(c, hash, 7));
    assert_int_equal(br_content_partial(c, hash, 7), 0);
    /* every byte, right: whole, proved for 7 alone, the store's copy as it was */
    for (size_t off = 0; off < len; off += BR_CONTENT_CHUNK) {
        size_t k = len - off < BR_CONTENT_CHUNK ? len - off : BR_CONTENT_CHUNK;
        assert_int_equal(br_content_write(c, hash, 7, (int64_t)len, (int64_t)off, data + off,
                                          k, &held, &whole, &err), 0);
    }
    assert_int_equal(whole, 1);
    assert_true(br_content_proved(c, hash, 7));
    assert_false(br_content_proved(c, hash, 8));
    assert_int_equal(br_content_partial(c, hash, 7), 0);
    assert_int_equal(br_content_used(c), used);
    object_bytes_are(dir, hash, data, len);
    /* proved: whole at once for 7 now; user 8 still has to send it */
    assert_int_equal(br_content_write(c, hash, 7, (int64_t)len, 0, data, 1, &held, &whole,
                                      &err), 0);
    assert_int_equal(whole, 1);
    assert_int_equal(br_content_write(c, hash, 8, (int64_t)len, 0, data, 1, &held, &whole,
                                      &err), 0);
    assert_int_equal(whole, 0);
    /* a user's upload of a content the store lacks puts it in place, proved */
    char other[65];
    unsigned char *fresh = bytes(100, 11);
    hash_hex(fresh, 100, other);
    assert_int_equal(br_content_write(c, other, 8, 100, 0, fresh, 100, &held, &whole, &err), 0);
    assert_int_equal(whole, 1);
    assert_int_equal(br_content_has(c, other), 1);
    assert_true(br_content_proved(c, other, 8));
    object_bytes_are(dir, other, fresh, 100);
    free(data);
    free(wrong);
    free(fresh);
    br_content_destroy(&c);
}

/* A content sent in chunks is whole only after its last one, and is then exactly
 * its bytes under objects/, counted in the store's use. */
static void test_whole_after_last_chunk(void **state)
{
    char dir[PATH_MAX], hash[65];
    fresh_dir(dir);
    br_content_t *c = open_ok(dir, 0);
    size_t len = 3 * BR_CONTENT_CHUNK + 17;
    unsigned char *data = bytes(len, 1);
    hash_hex(data, len, hash);
    assert_int_equal(br_content_has(c, hash), 0);
    int64_t held;
    int whole;
    br_err_t err = {0};
    assert_int_equal(br_content_write(c, hash, 0, (int64_t)len, 0, data, BR_CONTENT_CHUNK,
                                      &held, &whole, &err), 0);
    assert_int_equal(whole, 0);
    assert_int_equal(br_content_has(c, hash), 0); /* a partial never counts */
    assert_int_equal(br_content_partial(c, hash, 0), BR_CONTENT_CHUNK);
    send_all(c, hash, data, len, BR_CONTENT_CHUNK, BR_CONTENT_CHUNK);
    assert_int_equal(br_content_has(c, hash), 1);
    assert_int_equal(br_content_partial(c, hash, 0), 0);
    assert_int_equal(br_content_used(c), len);
    object_bytes_are(dir, hash, data, len);
    /* sending it again is a no-op that says it is whole */
    assert_int_equal(br_content_write(c, hash, 0, (int64_t)len, 0, data, 10, &held, &whole, &err),
                     0);
    assert_int_equal(whole, 1);
    assert_int_equal(held, (int64_t)len);
    assert_int_equal(br_content_used(c), len);
    /* an empty file is whole at once */
    char empty[65];
    hash_hex("", 0, empty);
    assert_int_equal(br_content_write(c, empty, 0, 0, 0, "", 0, &held, &whole, &err), 0);
    assert_int_equal(whole, 1);
    assert_int_equal(br_content_has(c, empty), 1);
    br_content_destroy(&c);
    /* reopened, the store adds up what it holds */
    c = open_ok(dir, 0);
    assert_int_equal(br_content_used(c), len);
    assert_int_equal(br_content_has(c, hash), 1);
    br_content_destroy(&c);
    free(data);
}

/* An upload cut off goes on from what is held, also after a restart; a chunk at
 * another offset is refused and says what is held. */
static void test_resume_after_restart(void **state)
{
    char dir[PATH_MAX], hash[65];
    fresh_dir(dir);
    br_content_t *c = open_ok(dir, 0);
    size_t len = 2 * BR_CONTENT_CHUNK + 5;
    unsigned char *data = bytes(len, 2);
    hash_hex(data, len, hash);
    int64_t held;
    int whole;
    br_err_t err = {0};
    assert_int_equal(br_content_write(c, hash, 0, (int64_t)len, 0, data, BR_CONTENT_CHUNK,
                                      &held, &whole, &err), 0);
    /* a chunk past what is held */
    assert_int_equal(br_content_write(c, hash, 0, (int64_t)len, 2 * BR_CONTENT_CHUNK,
                                      data + 2 * BR_CONTENT_CHUNK, 5, &held, &whole, &err),
                     -1);
    assert_int_equal(err.errnum, ERANGE);
    assert_int_equal(held, BR_CONTENT_CHUNK);
    br_content_destroy(&c);
    c = open_ok(dir, 0);
    assert_int_equal(br_content_used(c), BR_CONTENT_CHUNK);
    assert_int_equal(br_content_partial(c, hash, 0), BR_CONTENT_CHUNK);
    send_all(c, hash, data, len, BR_CONTENT_CHUNK, 100000);
    object_bytes_are(dir, hash, data, len);
    assert_int_equal(br_content_used(c), len);
    br_content_destroy(&c);
    free(data);
}

/* Bytes that do not hash to their name never count: the partial is dropped and the
 * use given back. */
static void test_wrong_bytes_refused(void **state)
{
    char dir[PATH_MAX], hash[65];
    fresh_dir(dir);
    br_content_t *c = open_ok(dir, 0);
    size_t len = 1000;
    unsigned char *data = bytes(len, 3);
    hash_hex(data, len, hash);
    data[500] ^= 1;
    int64_t held;
    int whole = 1;
    br_err_t err = {0};
    assert_int_equal(br_content_write(c, hash, 0, (int64_t)len, 0, data, len, &held, &whole,
                                      &err), -1);
    assert_int_equal(err.errnum, EBADMSG);
    assert_int_equal(whole, 0);
    assert_int_equal(br_content_has(c, hash), 0);
    assert_int_equal(br_content_partial(c, hash, 0), 0);
    assert_int_equal(br_content_used(c), 0);
    /* then the right bytes go in from the start */
    data[500] ^= 1;
    send_all(c, hash, data, len, 0, len);
    assert_int_equal(br_content_has(c, hash), 1);
    /* a name that is not a hash, and bytes past the size */
    assert_int_equal(br_content_write(c, "../etc/passwd", 0, 4, 0, "abcd", 4, &held, &whole,
                                      &err), -1);
    assert_int_equal(err.errnum, EINVAL);
    char other[65];
    hash_hex("x", 1, other);
    assert_int_equal(br_content_write(c, other, 0, 1, 0, "xy", 2, &held, &whole, &err), -1);
    assert_int_equal(err.errnum, EINVAL);
    br_content_destroy(&c);
    free(data);
}

/* Past --store-quota a write is refused (EDQUOT, naming the flag) and adds nothing. */
static void test_quota(void **state)
{
    char dir[PATH_MAX], a[65], b[65];
    fresh_dir(dir);
    br_content_t *c = open_ok(dir, 1500);
    unsigned char *da = bytes(1000, 4), *db = bytes(1000, 5);
    hash_hex(da, 1000, a);
    hash_hex(db, 1000, b);
    send_all(c, a, da, 1000, 0, 1000);
    int64_t held;
    int whole;
    br_err_t err = {0};
    assert_int_equal(br_content_write(c, b, 0, 1000, 0, db, 400, &held, &whole, &err), 0);
    assert_int_equal(br_content_write(c, b, 0, 1000, 400, db + 400, 600, &held, &whole, &err),
                     -1);
    assert_int_equal(err.errnum, EDQUOT);
    assert_non_null(strstr(err.text, "--store-quota"));
    assert_int_equal(br_content_used(c), 1400);
    assert_int_equal(br_content_partial(c, b, 0), 400);
    br_content_destroy(&c);
    free(da);
    free(db);
}

static br_store_t *store_ok(const char *dir, int64_t *alice, int64_t *bob)
{
    char path[PATH_MAX + 16];
    snprintf(path, sizeof(path), "%s.db", dir);
    br_err_t err = {0};
    br_store_t *s = br_store_open(path, &err);
    assert_non_null(s);
    assert_int_equal(br_store_key_add(s, "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA",
                                      BR_PRINCIPAL_USER, "alice", &err), 0);
    assert_int_equal(br_store_key_add(s, "BBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBB",
                                      BR_PRINCIPAL_USER, "bob", &err), 0);
    br_principal_t kind;
    char name[64];
    assert_int_equal(br_store_key_who(s, "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA", &kind,
                                      name, sizeof(name), alice, &err), 0);
    assert_int_equal(br_store_key_who(s, "BBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBB", &kind,
                                      name, sizeof(name), bob, &err), 0);
    return s;
}

/* A manifest of the given contents (paths f0, f1, ...), its hash made up: the store
 * trusts the API to have verified it. */
static json_t *manifest_of(const char *mhash, char hashes[][65], const int64_t *sizes,
                           int n)
{
    json_t *entries = json_array();
    int64_t total = 0;
    for (int i = 0; i < n; i++) {
        char path[16];
        snprintf(path, sizeof(path), "f%d", i);
        json_array_append_new(entries, json_pack("{s:s, s:s, s:i, s:I, s:s}", "path", path,
                                                 "type", "f", "mode", 0644,
                                                 "size", (json_int_t)sizes[i], "hash",
                                                 hashes[i]));
        total += sizes[i];
    }
    return json_pack("{s:s, s:s, s:i, s:I, s:o}", "hash", mhash, "root", "dir", "files", n,
                     "bytes", (json_int_t)total, "entries", entries);
}

/* Versions and tags of a data set: "vN" when none is given, a tag names one version
 * for good, and each user's names are their own. */
static void test_data_versions_and_tags(void **state)
{
    char dir[PATH_MAX];
    fresh_dir(dir);
    int64_t alice, bob;
    br_store_t *s = store_ok(dir, &alice, &bob);
    char h[1][65];
    hash_hex("one", 3, h[0]);
    int64_t sz[1] = {3};
    json_t *m = manifest_of("aa", h, sz, 1);
    br_err_t err = {0};
    json_t *r1 = br_store_data_add(s, alice, "llama", NULL, m, NULL, 0, NULL, &err);
    assert_non_null(r1);
    assert_string_equal(json_string_value(json_object_get(r1, "tag")), "v1");
    json_t *r2 = br_store_data_add(s, alice, "llama", "fp16", m, NULL, 1, NULL, &err);
    assert_non_null(r2);
    assert_int_equal(json_integer_value(json_object_get(r2, "version")), 2);
    assert_null(br_store_data_add(s, alice, "llama", "fp16", m, NULL, 0, NULL, &err));
    assert_int_equal(err.errnum, EEXIST);
    assert_non_null(strstr(err.text, "llama:fp16"));
    json_t *r3 = br_store_data_add(s, bob, "llama", "fp16", m, NULL, 0, NULL, &err);
    assert_non_null(r3); /* bob's llama is another data set */
    assert_int_equal(json_integer_value(json_object_get(r3, "version")), 1);
    json_t *list = br_store_data_list(s, &err);
    assert_int_equal(json_array_size(list), 3);
    json_t *first = json_array_get(list, 0);
    assert_string_equal(json_string_value(json_object_get(first, "owner")), "alice");
    assert_string_equal(json_string_value(json_object_get(first, "tag")), "v1");
    assert_int_equal(json_integer_value(json_object_get(first, "bytes")), 3);
    assert_true(json_is_true(json_object_get(json_array_get(list, 1), "public")));
    json_decref(list);
    json_decref(r1);
    json_decref(r2);
    json_decref(r3);
    json_decref(m);
    br_store_destroy(&s);
}

/* Images: one per name and architecture; their contents referred to as image:ID
 * (the archive and the listing), removed with the image. */
static void test_images_by_name_and_arch(void **state)
{
    (void)state;
    char dir[PATH_MAX];
    fresh_dir(dir);
    int64_t alice, bob;
    br_store_t *s = store_ok(dir, &alice, &bob);
    char h[1][65], lh[65];
    hash_hex("archive", 7, h[0]);
    hash_hex("listing", 7, lh);
    int64_t sz[1] = {7};
    json_t *m = manifest_of("ab", h, sz, 1), *listing = json_pack("{s:s, s:i}", "hash", lh,
                                                                  "size", 40);
    json_t *img = json_pack("{s:s, s:s, s:s, s:s, s:s, s:s, s:i}", "name", "bb:1", "arch",
                            "amd64", "variant", "", "os", "linux", "format", "docker-archive",
                            "image_id", "cafe", "layers", 1);
    br_err_t err = {0};
    json_t *r1 = br_store_image_add(s, alice, img, m, listing, &err);
    assert_non_null(r1);
    assert_null(br_store_image_add(s, bob, img, m, listing, &err));
    assert_int_equal(err.errnum, EEXIST);
    assert_non_null(strstr(err.text, "bb:1 has an image for amd64 already"));
    json_object_set_new(img, "arch", json_string("arm64"));
    json_object_set_new(img, "variant", json_string("v8"));
    json_t *r2 = br_store_image_add(s, bob, img, m, listing, &err);
    assert_non_null(r2);
    json_t *list = br_store_image_list(s, &err);
    assert_int_equal(json_array_size(list), 2);
    json_t *first = json_array_get(list, 0);
    assert_string_equal(json_string_value(json_object_get(first, "arch")), "amd64");
    assert_string_equal(json_string_value(json_object_get(first, "owner")), "alice");
    assert_string_equal(json_string_value(json_object_get(first, "variant")), "");
    assert_string_equal(json_string_value(json_object_get(json_object_get(first, "listing"),
                                                          "hash")), lh);
    assert_int_equal(br_store_content_refs(s, h[0], &err), 2);
    assert_int_equal(br_store_content_refs(s, lh, &err), 2);
    json_t *hashes = NULL;
    assert_int_equal(br_store_image_remove(s, json_integer_value(json_object_get(r1, "id")),
                                           &hashes, &err), 0);
    assert_int_equal(json_array_size(hashes), 2);
    assert_int_equal(br_store_content_refs(s, h[0], &err), 1);
    json_decref(list);
    list = br_store_image_list(s, &err);
    assert_int_equal(json_array_size(list), 1);
    json_decref(list);
    json_decref(hashes);
    json_decref(r1);
    json_decref(r2);
    json_decref(img);
    json_decref(listing);
    json_decref(m);
    br_store_destroy(&s);
}

/* What the sweep removes: only contents and manifests nothing refers to any more,
 * and only those doubted. */
static void test_sweep_keeps_referenced(void **state)
{
    char dir[PATH_MAX];
    fresh_dir(dir);
    int64_t alice, bob;
    br_store_t *s = store_ok(dir, &alice, &bob);
    br_content_t *c = open_ok(dir, 0);
    char h[2][65];
    unsigned char *d0 = bytes(300, 6), *d1 = bytes(500, 7);
    hash_hex(d0, 300, h[0]);
    hash_hex(d1, 500, h[1]);
    send_all(c, h[0], d0, 300, 0, 300);
    send_all(c, h[1], d1, 500, 0, 500);
    int64_t sz[2] = {300, 500};
    char mh1[65], mh2[65];
    hash_hex("m1", 2, mh1);
    hash_hex("m2", 2, mh2);
    json_t *m1 = manifest_of(mh1, h, sz, 2), *m2 = manifest_of(mh2, h, sz, 1);
    br_err_t err = {0};
    assert_int_equal(br_content_put_manifest(c, m1, &err), 0);
    assert_int_equal(br_content_put_manifest(c, m2, &err), 0);
    json_t *a = br_store_data_add(s, alice, "set", NULL, m1, NULL, 0, NULL, &err);
    json_t *b = br_store_data_add(s, bob, "set", NULL, m2, NULL, 0, NULL, &err);
    assert_non_null(a);
    assert_non_null(b);
    assert_int_equal(br_store_content_refs(s, h[0], &err), 2);
    assert_int_equal(br_store_content_user_has(s, bob, h[1], &err), 0);
    assert_int_equal(br_store_content_user_has(s, alice, h[1], &err), 1);
    assert_int_equal(br_store_content_user_bytes(s, alice, &err), 800);
    assert_int_equal(br_store_content_user_bytes(s, bob, &err), 300);
    uint64_t before = br_content_used(c);
    /* alice's set goes: h[1] and m1 are no longer held, h[0] is bob's too */
    json_t *hashes = NULL;
    assert_int_equal(br_store_data_remove(s, json_integer_value(json_object_get(a, "id")),
                                          &hashes, &err), 0);
    assert_int_equal(json_array_size(hashes), 2);
    size_t i;
    json_t *v;
    json_array_foreach(hashes, i, v)
        br_content_doubt(c, json_string_value(v), 0);
    br_content_doubt(c, mh1, 1);
    br_content_doubt(c, mh2, 1);
    assert_int_equal(br_content_sweep(c, s), 2);
    assert_int_equal(br_content_has(c, h[0]), 1);
    assert_int_equal(br_content_has(c, h[1]), 0);
    assert_null(br_content_get_manifest(c, mh1, &err));
    assert_int_equal(err.errnum, ENOENT);
    json_t *back = br_content_get_manifest(c, mh2, &err);
    assert_non_null(back);
    assert_true(json_equal(back, m2));
    assert_true(br_content_used(c) < before - 500 + 1);
    assert_int_equal(br_store_content_user_bytes(s, alice, &err), 0);
    /* a sweep with nothing doubted removes nothing */
    assert_int_equal(br_content_sweep(c, s), 0);
    json_decref(back);
    json_decref(hashes);
    json_decref(a);
    json_decref(b);
    json_decref(m1);
    json_decref(m2);
    free(d0);
    free(d1);
    br_content_destroy(&c);
    br_store_destroy(&s);
}

/* The writer thread (contentw.h): chunks answered in the order they came, each once
 * it is written; a wrong offset answered with its error; the content whole after. */
static void test_writer_answers_in_order(void **state)
{
    (void)state;
    char dir[PATH_MAX], hex[65];
    fresh_dir(dir);
    br_content_t *c = open_ok(dir, 0);
    br_err_t err = {0};
    br_contentw_t *w = br_contentw_new(c, &err);
    assert_non_null(w);
    size_t len = BR_CONTENT_CHUNK + 100;
    unsigned char *data = malloc(len);
    for (size_t i = 0; i < len; i++)
        data[i] = (unsigned char)(i * 7);
    hash_hex(data, len, hex);
    br_msg_t *req = br_msg_new(BR_MSG_REQUEST, "content.put", 1);
    int64_t offs[3] = {0, 5 /* not what it holds */, BR_CONTENT_CHUNK};
    size_t lens[3] = {BR_CONTENT_CHUNK, 10, 100};
    for (int k = 0; k < 3; k++)
        assert_int_equal(br_contentw_put(w, br_msg_reply(req), hex, 0, (int64_t)len, offs[k],
                                         data + offs[k], lens[k], &err), 0);
    for (int k = 0; k < 3; k++) {
        br_msg_t *a = NULL;
        json_t *listing = NULL;
        char lh[80];
        for (int tries = 0; !(a = br_contentw_take(w, &listing, lh, sizeof(lh))) && tries < 500;
             tries++) {
            struct pollfd p = {br_contentw_fd(w), POLLIN, 0};
            poll(&p, 1, 10);
        }
        assert_non_null(a);
        assert_null(listing); /* (bytes, not a manifest's text) */
        json_t *b = br_msg_body(a);
        if (k == 1) {
            assert_int_equal(json_integer_value(json_object_get(b, "errnum")), ERANGE);
        } else {
            assert_int_equal(json_integer_value(json_object_get(b, "held")),
                             k == 0 ? BR_CONTENT_CHUNK : (json_int_t)len);
            assert_int_equal(json_is_true(json_object_get(b, "whole")), k == 2);
        }
        br_msg_destroy(&a);
    }
    assert_true(br_content_has(c, hex));
    json_t *listing;
    char lh[80];
    assert_null(br_contentw_take(w, &listing, lh, sizeof(lh)));
    br_msg_destroy(&req);
    free(data);
    br_contentw_destroy(&w);
    assert_null(w);
    br_content_destroy(&c);
}

/* Take the writer's next answer (waiting for it), and the listing it parsed. */
static br_msg_t *take_one(br_contentw_t *w, json_t **listing, char *lh, size_t lhlen)
{
    br_msg_t *a = NULL;
    for (int tries = 0; !(a = br_contentw_take(w, listing, lh, lhlen)) && tries < 500;
         tries++) {
        struct pollfd p = {br_contentw_fd(w), POLLIN, 0};
        poll(&p, 1, 10);
    }
    assert_non_null(a);
    return a;
}

/* A manifest's listing made whole by the writer comes back parsed with its answer,
 * so the loop need not parse it; text that looks like one but does not verify, and a
 * listing still partial, do not. */
static void test_writer_parses_a_listing_it_makes_whole(void **state)
{
    (void)state;
    char dir[PATH_MAX], hex[65], lh[80];
    fresh_dir(dir);
    br_content_t *c = open_ok(dir, 0);
    br_err_t err = {0};
    br_contentw_t *w = br_contentw_new(c, &err);
    assert_non_null(w);
    br_mfbuild_t *b = br_mfbuild_new(NULL, &err);
    char path[PATH_MAX + 16];
    snprintf(path, sizeof(path), "%s/a.txt", tmpdir);
    FILE *f = fopen(path, "w");
    fputs("hello\n", f);
    fclose(f);
    int fd = open(path, O_RDONLY);
    struct stat st;
    fstat(fd, &st);
    assert_int_equal(br_mfbuild_file(b, fd, &st, "a.txt", NULL, &err), 0);
    close(fd);
    json_t *m = br_mfbuild_json(b, "dir", &err);
    assert_non_null(m);
    char *text = json_dumps(m, JSON_COMPACT);
    size_t len = strlen(text);
    hash_hex(text, len, hex);
    br_msg_t *req = br_msg_new(BR_MSG_REQUEST, "content.put", 1);
    /* in two chunks: the first leaves it partial, the second makes it whole */
    assert_int_equal(br_contentw_put(w, br_msg_reply(req), hex, 0, (int64_t)len, 0, text, 10,
                                     &err), 0);
    assert_int_equal(br_contentw_put(w, br_msg_reply(req), hex, 0, (int64_t)len, 10,
                                     text + 10, len - 10, &err), 0);
    json_t *listing = NULL;
    br_msg_t *a = take_one(w, &listing, lh, sizeof(lh));
    assert_null(listing);
    br_msg_destroy(&a);
    a = take_one(w, &listing, lh, sizeof(lh));
    assert_non_null(listing);
    assert_string_equal(lh, hex);
    assert_true(json_equal(listing, m));
    json_t *sum = br_manifest_summary(listing);
    assert_true(json_equal(json_object_get(sum, "hash"), json_object_get(m, "hash")));
    json_decref(sum);
    json_decref(listing);
    br_msg_destroy(&a);
    /* begins as a listing does, but is none */
    const char *fake = "{\"hash\":\"00\",\"entries\":5}";
    hash_hex(fake, strlen(fake), hex);
    assert_int_equal(br_contentw_put(w, br_msg_reply(req), hex, 0, (int64_t)strlen(fake), 0,
                                     fake, strlen(fake), &err), 0);
    a = take_one(w, &listing, lh, sizeof(lh));
    assert_null(listing);
    assert_true(json_is_true(json_object_get(br_msg_body(a), "whole")));
    br_msg_destroy(&a);
    br_msg_destroy(&req);
    free(text);
    json_decref(m);
    br_mfbuild_destroy(&b);
    br_contentw_destroy(&w);
    br_content_destroy(&c);
}

/* A look at the store (br_contentw_look) is made after the chunks queued before it:
 * it finds the file they made whole held and a partial's bytes counted; handed to
 * its seen() by br_contentw_take before the answers of chunks queued after it; one
 * never made (the writer stopped) is handed back marked dropped. */
static int looks_seen, looks_dropped;

static void look_seen(br_contentw_look_t *look, void *arg)
{
    br_contentw_look_t **keep = arg;
    looks_seen++;
    looks_dropped += look->dropped;
    if (keep && !look->dropped)
        *keep = look; /* the test reads it */
    else
        br_contentw_look_free(&look);
}

static void test_writer_looks_after_the_chunks_before(void **state)
{
    (void)state;
    char dir[PATH_MAX], whole[65], part[65], lh[80];
    fresh_dir(dir);
    br_content_t *c = open_ok(dir, 0);
    br_err_t err = {0};
    br_contentw_t *w = br_contentw_new(c, &err);
    assert_non_null(w);
    const char *a = "all of it", *b = "only the first part of this one";
    hash_hex(a, strlen(a), whole);
    hash_hex(b, strlen(b), part);
    br_msg_t *req = br_msg_new(BR_MSG_REQUEST, "content.put", 1);
    assert_int_equal(br_contentw_put(w, br_msg_reply(req), whole, 7, (int64_t)strlen(a), 0, a,
                                     strlen(a), &err), 0);
    assert_int_equal(br_contentw_put(w, br_msg_reply(req), part, 7, (int64_t)strlen(b), 0, b,
                                     10, &err), 0);
    /* user 8 sent 4 bytes of the content user 7 stored whole: a partial of their own,
     * which their chunks go on from */
    assert_int_equal(br_contentw_put(w, br_msg_reply(req), whole, 8, (int64_t)strlen(a), 0, a,
                                     4, &err), 0);
    br_contentw_look_t *got = NULL, *got8 = NULL;
    looks_seen = looks_dropped = 0;
    br_contentw_look_t *l = br_contentw_look_new(3, 7, look_seen, &got);
    assert_non_null(l);
    snprintf(l->hash[0], sizeof(l->hash[0]), "%s", whole);
    snprintf(l->hash[1], sizeof(l->hash[1]), "%s", part);
    snprintf(l->hash[2], sizeof(l->hash[2]), "not a hash");
    assert_int_equal(br_contentw_look(w, l, &err), 0);
    br_contentw_look_t *l8 = br_contentw_look_new(1, 8, look_seen, &got8);
    assert_non_null(l8);
    snprintf(l8->hash[0], sizeof(l8->hash[0]), "%s", whole);
    assert_int_equal(br_contentw_look(w, l8, &err), 0);
    /* a chunk after it: its answer comes after the look was seen */
    assert_int_equal(br_contentw_put(w, br_msg_reply(req), part, 7, (int64_t)strlen(b), 10,
                                     b + 10, strlen(b) - 10, &err), 0);
    json_t *listing = NULL;
    for (int k = 0; k < 4; k++) {
        br_msg_t *ans = take_one(w, &listing, lh, sizeof(lh));
        assert_int_equal(looks_seen, k < 3 ? 0 : 2); /* (taken on the way to the fourth) */
        br_msg_destroy(&ans);
    }
    assert_non_null(got8);
    assert_int_equal(got8->has[0], 1);
    assert_int_equal(got8->partial[0], 4); /* user 8's own, though the store holds it */
    br_contentw_look_free(&got8);
    assert_non_null(got);
    assert_int_equal(got->has[0], 1);
    assert_int_equal(got->has[1], 0);
    assert_int_equal(got->partial[1], 10); /* user 7's partial, as it was then */
    assert_int_equal(got->has[2], 0);
    assert_int_equal(got->partial[2], 0);
    br_contentw_look_free(&got);
    assert_true(br_content_has(c, part)); /* (the chunk after it) */
    /* a look still queued when the writer stops is handed back, dropped */
    br_contentw_look_t *late = br_contentw_look_new(1, 0, look_seen, NULL);
    assert_non_null(late);
    for (int k = 0; k < 64; k++) /* the thread busy long enough to leave it queued */
        assert_int_equal(br_contentw_put(w, br_msg_reply(req), part, 9, (int64_t)strlen(b), 0,
                                         b, strlen(b), &err), 0);
    assert_int_equal(br_contentw_look(w, late, &err), 0);
    br_contentw_destroy(&w);
    assert_int_equal(looks_seen, 3);
    assert_int_equal(looks_dropped, 1);
    br_msg_destroy(&req);
    br_content_destroy(&c);
}

/* Looks are bounded on their own (a client asking pages without waiting grows no
 * queue without end; the caller then looks itself), and do not count against the
 * chunks waiting. */
static void test_looks_are_bounded_apart_from_chunks(void **state)
{
    (void)state;
    char dir[PATH_MAX], hex[65], lh[80];
    fresh_dir(dir);
    br_content_t *c = open_ok(dir, 0);
    br_err_t err = {0};
    br_contentw_t *w = br_contentw_new(c, &err);
    assert_non_null(w);
    looks_seen = looks_dropped = 0;
    for (int i = 0; i < BR_CONTENTW_LOOKS; i++) {
        br_contentw_look_t *l = br_contentw_look_new(1, 7, look_seen, NULL);
        assert_non_null(l);
        assert_int_equal(br_contentw_look(w, l, &err), 0);
    }
    br_contentw_look_t *over = br_contentw_look_new(1, 7, look_seen, NULL);
    assert_non_null(over);
    assert_int_equal(br_contentw_look(w, over, &err), -1);
    assert_int_equal(err.errnum, EAGAIN);
    /* a chunk is still taken, and its answer hands the looks back on the way */
    const char *a = "a chunk";
    hash_hex(a, strlen(a), hex);
    br_msg_t *req = br_msg_new(BR_MSG_REQUEST, "content.put", 1);
    assert_int_equal(br_contentw_put(w, br_msg_reply(req), hex, 7, (int64_t)strlen(a), 0, a,
                                     strlen(a), &err), 0);
    json_t *listing = NULL;
    br_msg_t *ans = take_one(w, &listing, lh, sizeof(lh));
    br_msg_destroy(&ans);
    assert_int_equal(looks_seen, BR_CONTENTW_LOOKS);
    assert_int_equal(br_contentw_look(w, over, &err), 0); /* room again */
    br_contentw_destroy(&w);
    assert_int_equal(looks_seen, BR_CONTENTW_LOOKS + 1);
    br_msg_destroy(&req);
    br_content_destroy(&c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_whole_after_last_chunk),
        cmocka_unit_test(test_a_user_proves_a_content_by_sending_it),
        cmocka_unit_test(test_writer_answers_in_order),
        cmocka_unit_test(test_writer_parses_a_listing_it_makes_whole),
        cmocka_unit_test(test_writer_looks_after_the_chunks_before),
        cmocka_unit_test(test_looks_are_bounded_apart_from_chunks),
        cmocka_unit_test(test_resume_after_restart),
        cmocka_unit_test(test_wrong_bytes_refused),
        cmocka_unit_test(test_quota),
        cmocka_unit_test(test_data_versions_and_tags),
        cmocka_unit_test(test_images_by_name_and_arch),
        cmocka_unit_test(test_sweep_keeps_referenced),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
