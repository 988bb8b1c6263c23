/* test_upload.c - a tree of files sent into a content store (proto/upload.c), over a
 * real CURVE connection to a coordinator played here by a thread with a store in
 * memory that takes chunks only at what it holds and checks each whole content
 * against its name. Every file of a manifest built from real files ends stored,
 * each sent once, whether the store answers in pages or predates them (refusing the
 * word and forgetting the listing); a second upload of the same tree sends no file;
 * what a cut-off upload left is not sent again; a chunk the store's copy moved past
 * is asked about again, the listing's too; and a file changed since it was hashed fails the upload,
 * naming it, with nothing stored for it. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include "curve_server.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <limits.h>
#include <sodium.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <threads.h>
#include <unistd.h>
#include <zmq.h>

#include "client.h"
#include "cred.h"
#include "manifest_check.h"
#include "mfbuild.h"
#include "msg.h"
#include "sock.h"
#include "upload.h"
#include "util.h"
#include "zap.h"

#define WAIT_MS 5000 /* bound on every wait for an answer */
#define HEX_LEN (2 * BR_MANIFEST_HASH_LEN)
#define MAX_CONTENTS 16       /* contents the fake store holds */
#define MAX_CONTENT (4 << 20) /* bytes of one of them */
#define MAX_ASKS 32           /* listing asks answered (more: asked in circles) */
#define BIG_SIZE (600 * 1024) /* three chunks: 256 KiB, 256 KiB, 88 KiB */

/* ---- the fake coordinator: a CURVE ROUTER with ZAP, served by a thread ---- */

typedef struct {
    char hash[HEX_LEN + 1];
    int64_t size, held;
    unsigned char *data; /* size bytes, held of them so far */
    int whole;
    /* what the client did to it */
    int puts;             /* chunks taken (a put of nothing too) */
    int64_t received;     /* bytes taken from the client's chunks */
    int64_t first_offset; /* offset of the first chunk taken, -1 none */
    int completed;        /* times it became whole and hashed to its name */
} content_t;

typedef struct {
    void *ctx, *router;
    void *events; /* the router's monitor: its peer's disconnection */
    br_zap_t *zap;
    thrd_t thread;
    int running;
    atomic_int stop;
    char endpoint[256];
    char pub[BR_KEY_LEN + 1], sec[BR_KEY_LEN + 1];
    mtx_t mu; /* everything below: the server thread's, read by the test under it */
    int paged;   /* 1: knows content.lack's pages; 0: predates them */
    size_t page; /* entries one paged answer looks at */
    char move[HEX_LEN + 1]; /* a content another upload moves on ... */
    int moves;              /* ... under so many of the client's chunks, */
    size_t move_by;         /* ... by so many bytes of each (0: the whole chunk) */
    content_t c[MAX_CONTENTS];
    size_t n;
    int lack_contents;   /* content.lack asks by contents */
    int lack_listing;    /* ... by listing, answered */
    int listing_missing; /* ... by a listing not stored (refused, ENOENT) */
    int paged_refused;   /* ... refused for the word "paged" (predating pages) */
    json_int_t from[MAX_ASKS]; /* "from" of the answered listing asks, in order */
    int range_refused;   /* chunks refused: not at what the store holds */
    int bad_hash;        /* contents that did not hash to their names */
    int wrong;           /* requests no coordinator would take from this client */
    char wrong_text[BR_ERR_TEXT];
} server_t;

static int check_key(void *arg, const char *key)
{
    (void)arg;
    return strlen(key) == BR_KEY_LEN ? 0 : -1;
}

static content_t *find_content(server_t *s, const char *hash)
{
    for (size_t i = 0; i < s->n; i++)
        if (strcmp(s->c[i].hash, hash) == 0)
            return &s->c[i];
    return NULL;
}

/* The content hash of size bytes, made (empty) when the store has none of it. */
static content_t *get_content(server_t *s, const char *hash, int64_t size)
{
    content_t *c = find_content(s, hash);
    if (c || s->n == MAX_CONTENTS || size < 0 || size > MAX_CONTENT)
        return c;
    c = &s->c[s->n];
    *c = (content_t){.size = size, .first_offset = -1};
    if (!(c->data = malloc(size ? (size_t)size : 1)))
        return NULL;
    br_strlcpy(c->hash, hash, sizeof(c->hash));
    s->n++;
    return c;
}

static int hex_ok(const char *h)
{
    if (!h || strlen(h) != HEX_LEN)
        return 0;
    for (const char *p = h; *p; p++)
        if (!((*p >= '0' && *p <= '9') || (*p >= 'a' && *p <= 'f')))
            return 0;
    return 1;
}

/* A content whose last byte came: whole when it hashes to its name (as the real
 * store checks), else dropped. 0, or -1 with err. */
static int finish(server_t *s, content_t *c, br_err_t *err)
{
    unsigned char h[BR_MANIFEST_HASH_LEN];
    char hex[HEX_LEN + 1];
    crypto_generichash(h, sizeof(h), c->data, (size_t)c->size, NULL, 0);
    sodium_bin2hex(hex, sizeof(hex), h, sizeof(h));
    if (strcmp(hex, c->hash) != 0) {
        s->bad_hash++;
        c->held = 0;
        return br_errf(err, EBADMSG, "%.16s... does not hash to its name", c->hash);
    }
    c->whole = 1;
    c->completed++;
    return 0;
}

static void wrong(server_t *s, const char *fmt, const char *what)
{
    if (!s->wrong++)
        snprintf(s->wrong_text, sizeof(s->wrong_text), fmt, what);
}

/* content.lack by contents: [{"hash", "size"}] */
static json_t *lack_contents(server_t *s, const json_t *contents, br_err_t *err)
{
    json_t *lack = json_array();
    json_int_t bytes = 0;
    size_t i;
    json_t *e;
    s->lack_contents++;
    json_array_foreach(contents, i, e) {
        const char *h = json_string_value(json_object_get(e, "hash"));
        json_int_t size = json_integer_value(json_object_get(e, "size"));
        if (!hex_ok(h) || !json_is_integer(json_object_get(e, "size"))) {
            json_decref(lack);
            return br_errp(err, EINVAL, "contents[%zu]: {\"hash\", \"size\"}", i);
        }
        content_t *c = find_content(s, h);
        if (c && c->whole)
            continue;
        int64_t off = c && c->held <= size ? c->held : 0;
        bytes += size - off;
        json_array_append_new(lack,
                              json_pack("[I, I]", (json_int_t)i, (json_int_t)off));
    }
    return json_pack("{s:o, s:b, s:I}", "lack", lack, "more", 0, "bytes", bytes);
}

/* content.lack by listing: the entries of the stored manifest from `from` on whose
 * contents the store lacks, each content once; paged: at most s->page looked at. */
static json_t *lack_listing(server_t *s, const json_t *listing, const json_t *summary,
                            json_int_t from, int paged, br_err_t *err)
{
    const char *lhash = json_string_value(json_object_get(listing, "hash"));
    json_int_t lsize = json_integer_value(json_object_get(listing, "size"));
    content_t *l = lhash ? find_content(s, lhash) : NULL;
    if (!l || !l->whole || l->size != lsize) {
        s->listing_missing++;
        return br_errp(err, ENOENT,
                       "the manifest's listing %.16s... is not stored: send it "
                       "first (content.put)",
                       lhash ? lhash : "");
    }
    /* (a client asking in circles fails, not hangs) */
    if (s->lack_listing == MAX_ASKS) {
        wrong(s, "%s", "more listing asks than any upload here needs");
        return br_errp(err, EMLINK, "asked too often");
    }
    json_t *m =
        br_manifest_from_listing(summary, (const char *)l->data, (size_t)l->size, err);
    if (!m)
        return NULL;
    s->from[s->lack_listing++] = from;
    const json_t *entries = json_object_get(m, "entries");
    json_t *lack = json_array(), *seen = json_object();
    json_int_t bytes = 0;
    int more = 0;
    size_t i;
    for (i = (size_t)from; i < json_array_size(entries); i++) {
        if (paged && i - (size_t)from == s->page) {
            more = 1;
            break;
        }
        const json_t *e = json_array_get(entries, i);
        const char *h = json_string_value(json_object_get(e, "hash"));
        content_t *c = find_content(s, h);
        if (json_object_get(seen, h) || (c && c->whole))
            continue;
        json_int_t size = json_integer_value(json_object_get(e, "size"));
        int64_t off = c && c->held <= size ? c->held : 0;
        bytes += size - off;
        json_object_set_new(seen, h, json_true());
        json_array_append_new(lack,
                              json_pack("[I, I]", (json_int_t)i, (json_int_t)off));
    }
    json_decref(seen);
    json_decref(m);
    json_t *out =
        json_pack("{s:o, s:b, s:I}", "lack", lack, "more", more, "bytes", bytes);
    if (paged) /* (a coordinator that predates pages says no "next") */
        json_object_set_new(out, "next", json_integer((json_int_t)i));
    return out;
}

static br_msg_t *content_lack(server_t *s, br_msg_t *m)
{
    json_t *contents = NULL, *listing = NULL, *summary = NULL, *out = NULL;
    json_int_t from = 0;
    int paged = 0;
    br_err_t err = {0};
    int rc = s->paged ? br_msg_unpack(m, &err, "{s?o, s?o, s?o, s?I, s?b}", "contents",
                                      &contents, "listing", &listing, "manifest",
                                      &summary, "from", &from, "paged", &paged)
                      : br_msg_unpack(m, &err, "{s?o, s?o, s?o, s?I}", "contents",
                                      &contents, "listing", &listing, "manifest",
                                      &summary, "from", &from);
    if (rc < 0) {
        /* a coordinator that predates pages refuses the word and lets go of the
         * listing the request named (it was kept only for that request) */
        json_t *lh =
            json_object_get(json_object_get(br_msg_body(m), "listing"), "hash");
        content_t *l =
            json_is_string(lh) ? find_content(s, json_string_value(lh)) : NULL;
        if (!s->paged && strstr(err.text, "paged")) {
            s->paged_refused++;
            if (l)
                l->held = l->whole = 0;
        } else
            wrong(s, "content.lack: %s", err.text);
        return br_msg_reply_error(m, err.errnum, "%s", err.text);
    }
    if (!contents == !listing || !listing != !summary || from < 0) {
        wrong(s, "%s", "content.lack: neither contents nor listing with manifest");
        return br_msg_reply_error(m, EINVAL,
                                  "content.lack: give contents, or listing with "
                                  "manifest");
    }
    out = contents ? lack_contents(s, contents, &err)
                   : lack_listing(s, listing, summary, from, paged, &err);
    if (!out)
        return br_msg_reply_error(m, err.errnum, "%s", err.text);
    br_msg_t *r = br_msg_reply(m);
    br_msg_set_body(r, out);
    return r;
}

static br_msg_t *content_put(server_t *s, br_msg_t *m)
{
    const char *hash;
    json_int_t size, offset;
    br_err_t err = {0};
    size_t len = 0;
    const unsigned char *data = br_msg_data(m, &len);
    if (br_msg_unpack(m, &err, "{s:s, s:I, s:I}", "hash", &hash, "size", &size,
                      "offset", &offset) < 0) {
        wrong(s, "content.put: %s", err.text);
        return br_msg_reply_error(m, err.errnum, "%s", err.text);
    }
    content_t *c = hex_ok(hash) ? get_content(s, hash, size) : NULL;
    if (!c || c->size != size || len > BR_UPLOAD_CHUNK || offset < 0 ||
        (int64_t)len > size - offset) {
        wrong(s, "content.put of %s: not a chunk the store would take", hash);
        return br_msg_reply_error(m, EINVAL, "content.put: not a chunk of %.16s...",
                                  hash);
    }
    if (!c->whole && strcmp(hash, s->move) == 0 && s->moves > 0 && offset == c->held &&
        len) {
        /* another upload of the same content sends the very chunk first */
        s->moves--;
        size_t k = s->move_by && s->move_by < len ? s->move_by : len;
        memcpy(c->data + offset, data, k);
        c->held += (int64_t)k;
        if (c->held == c->size)
            finish(s, c, &err);
    }
    if (c->whole) { /* takes nothing */
        c->puts++;
        br_msg_t *r = br_msg_reply(m);
        br_msg_set_body(r,
                        json_pack("{s:I, s:b}", "held", (json_int_t)size, "whole", 1));
        return r;
    }
    if (offset != c->held) {
        s->range_refused++;
        return br_msg_reply_error(m, ERANGE,
                                  "the store holds %lld bytes of it, not %lld",
                                  (long long)c->held, (long long)offset);
    }
    if (len)
        memcpy(c->data + offset, data, len);
    c->held += (int64_t)len;
    c->received += (int64_t)len;
    c->puts++;
    if (c->first_offset < 0)
        c->first_offset = offset;
    if (c->held == c->size && finish(s, c, &err) < 0)
        return br_msg_reply_error(m, err.errnum, "%s", err.text);
    br_msg_t *r = br_msg_reply(m);
    br_msg_set_body(
        r, json_pack("{s:I, s:b}", "held", (json_int_t)c->held, "whole", c->whole));
    return r;
}

static void serve_router(void *arg)
{
    server_t *s = arg;
    for (;;) {
        br_msg_t *m = NULL, *r = NULL;
        br_err_t err = {0};
        int rc = br_msg_recv(s->router, 1, ZMQ_DONTWAIT, &m, &err);
        if (rc < 0 && !m && err.errnum == EAGAIN)
            return;
        mtx_lock(&s->mu);
        if (rc < 0) {
            wrong(s, "a malformed message: %s", err.text);
            if (m)
                r = br_msg_reply_error(m, EPROTO, "%s", err.text);
        } else if (strcmp(br_msg_type(m), "content.lack") == 0) {
            r = content_lack(s, m);
        } else if (strcmp(br_msg_type(m), "content.put") == 0) {
            r = content_put(s, m);
        } else {
            wrong(s, "the request %s", br_msg_type(m));
            r = br_msg_reply_error(m, EINVAL, "unknown request '%s'", br_msg_type(m));
        }
        mtx_unlock(&s->mu);
        br_msg_destroy(&m);
        if (r)
            br_msg_send(s->router, r, NULL);
        br_msg_destroy(&r);
    }
}

static int server_main(void *arg)
{
    server_t *s = arg;
    curve_server_loop(s->zap, s->router, &s->stop, serve_router, s);
    return 0;
}

static void server_destroy(server_t *s)
{
    if (!s)
        return;
    if (s->running) {
        atomic_store(&s->stop, 1);
        thrd_join(s->thread, NULL);
        mtx_destroy(&s->mu);
    }
    br_sock_close(&s->events);
    br_sock_close(&s->router);
    br_zap_destroy(&s->zap);
    if (s->ctx)
        zmq_ctx_term(s->ctx);
    for (size_t i = 0; i < s->n; i++)
        free(s->c[i].data);
    free(s);
}

/* Wait (at most WAIT_MS) for the server to see its client's connection close, so
 * that it is not stopped while taking the disconnection in: libzmq then leaks what
 * the connection held (a decoder's buffer), a few runs in a hundred. */
static void server_gone_client(server_t *s)
{
    int64_t deadline = br_mono_ms() + WAIT_MS;
    while (s && s->events && br_mono_ms() < deadline) {
        zmq_pollitem_t it = {s->events, 0, ZMQ_POLLIN, 0};
        if (zmq_poll(&it, 1, 50) == 1) {
            zmq_msg_t part;
            zmq_msg_init(&part);
            int more = 1;
            while (more && zmq_msg_recv(&part, s->events, 0) >= 0)
                more = zmq_msg_more(&part);
            zmq_msg_close(&part);
            return;
        }
    }
}

/* A store that pages (page entries at a time), or predates pages (paged 0). */
static server_t *server_new(int paged, size_t page)
{
    server_t *s = calloc(1, sizeof(*s));
    if (!s)
        return NULL;
    s->paged = paged;
    s->page = page;
    br_err_t err = {0};
    s->ctx = zmq_ctx_new();
    if (!s->ctx || br_keypair(s->pub, s->sec, &err) < 0 ||
        !(s->zap = br_zap_new(s->ctx, check_key, s, &err)) ||
        !(s->router = br_sock_server(s->ctx, "tcp://127.0.0.1:*", s->sec, &err)))
        goto fail;
    size_t len = sizeof(s->endpoint);
    char mon[64];
    snprintf(mon, sizeof(mon), "inproc://test-upload-router-%p", (void *)s);
    if (zmq_socket_monitor(s->router, mon, ZMQ_EVENT_DISCONNECTED) < 0 ||
        !(s->events = zmq_socket(s->ctx, ZMQ_PAIR)) || zmq_connect(s->events, mon) < 0)
        goto fail;
    if (zmq_getsockopt(s->router, ZMQ_LAST_ENDPOINT, s->endpoint, &len) < 0 ||
        mtx_init(&s->mu, mtx_plain) != thrd_success)
        goto fail;
    atomic_init(&s->stop, 0);
    if (thrd_create(&s->thread, server_main, s) != thrd_success) {
        mtx_destroy(&s->mu);
        goto fail;
    }
    s->running = 1;
    return s;
fail:
    print_error("server: %s\n", err.text);
    server_destroy(s);
    return NULL;
}

/* ---- the tree, its manifest, and the upload ---- */

typedef struct {
    server_t *s;
    br_client_t *client;
    char dir[64];
    int made;           /* dir was made (and goes at the end) */
    unsigned char *big; /* b/big.bin's bytes */
    br_mfbuild_t *b;
    json_t *manifest;
    /* what br_upload_run's callbacks saw */
    int64_t done, total;
    int lacking_calls;
    int64_t lacking_bytes;
} fixture_t;

static void write_file(const fixture_t *f, const char *rel, const void *data,
                       size_t len)
{
    char path[PATH_MAX];
    snprintf(path, sizeof(path), "%s/%s", f->dir, rel);
    FILE *fp = fopen(path, "wb");
    assert_non_null(fp);
    assert_int_equal(fwrite(data, 1, len, fp), len);
    assert_int_equal(fclose(fp), 0);
}

/* The manifest of the tree as the packer makes it: each file hashed from an open
 * descriptor, its real path kept as its source. */
static void build_manifest(fixture_t *f)
{
    static const char *const rel[] = {"a.txt", "b/big.bin", "b/c.txt", "d.txt",
                                      "e.empty"};
    br_err_t err = {0};
    f->b = br_mfbuild_new(NULL, &err);
    assert_non_null(f->b);
    for (size_t i = 0; i < sizeof(rel) / sizeof(rel[0]); i++) {
        char path[PATH_MAX], real[PATH_MAX];
        snprintf(path, sizeof(path), "%s/%s", f->dir, rel[i]);
        assert_non_null(realpath(path, real));
        int fd = open(real, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
        assert_true(fd >= 0);
        struct stat st;
        assert_int_equal(fstat(fd, &st), 0);
        int rc = br_mfbuild_file(f->b, fd, &st, rel[i], real, &err);
        close(fd);
        if (rc < 0)
            fail_msg("%s: %s", rel[i], err.text);
    }
    f->manifest = br_mfbuild_json(f->b, "dir", &err);
    if (!f->manifest)
        fail_msg("manifest: %s", err.text);
}

/* Five files in a new directory: two small ones, one of three chunks, a second copy
 * of the first (one content for two paths) and an empty one. */
static int setup_tree(fixture_t *f)
{
    snprintf(f->dir, sizeof(f->dir), "/tmp/test_upload.XXXXXX");
    if (!mkdtemp(f->dir) || !(f->big = malloc(BIG_SIZE)))
        return -1;
    f->made = 1;
    char b[PATH_MAX];
    snprintf(b, sizeof(b), "%s/b", f->dir);
    if (mkdir(b, 0700) < 0)
        return -1;
    unsigned char seed[randombytes_SEEDBYTES] = {7};
    randombytes_buf_deterministic(f->big, BIG_SIZE, seed);
    write_file(f, "a.txt", "alpha\n", 6);
    write_file(f, "b/big.bin", f->big, BIG_SIZE);
    write_file(f, "b/c.txt", "gamma gamma\n", 12);
    write_file(f, "d.txt", "alpha\n", 6);
    write_file(f, "e.empty", "", 0);
    build_manifest(f);
    return 0;
}

static int teardown(void **state);

static int setup_with(void **state, int paged, size_t page)
{
    fixture_t *f = calloc(1, sizeof(*f));
    if (!f)
        return -1;
    *state = f;
    char pub[BR_KEY_LEN + 1], sec[BR_KEY_LEN + 1];
    br_err_t err = {0};
    if (setup_tree(f) < 0 || !(f->s = server_new(paged, page)) ||
        br_keypair(pub, sec, &err) < 0 ||
        !(f->client = br_client_new(f->s->endpoint, f->s->pub, pub, sec, &err))) {
        print_error("setup: %s\n", err.text);
        teardown(state); /* (cmocka does not, after a failed setup) */
        *state = NULL;
        return -1;
    }
    return 0;
}

static int setup_paged(void **state)
{
    return setup_with(state, 1, 1000);
}

static int setup_pages_of_two(void **state)
{
    return setup_with(state, 1, 2);
}

static int setup_unpaged(void **state)
{
    return setup_with(state, 0, 0);
}

static int teardown(void **state)
{
    fixture_t *f = *state;
    if (!f)
        return 0;
    br_client_destroy(&f->client);
    server_gone_client(f->s);
    server_destroy(f->s);
    br_mfbuild_destroy(&f->b);
    json_decref(f->manifest);
    if (f->made)
        br_rm_tree(AT_FDCWD, f->dir);
    free(f->big);
    free(f);
    return 0;
}

static const char *source(void *arg, const char *path)
{
    fixture_t *f = arg;
    return br_mfbuild_src(f->b, path);
}

static void progress(void *arg, int64_t done, int64_t total)
{
    fixture_t *f = arg;
    f->done = done;
    f->total = total;
}

static void lacking(void *arg, const json_t *listing, const json_t *summary,
                    int64_t bytes)
{
    fixture_t *f = arg;
    assert_non_null(json_object_get(listing, "hash"));
    assert_non_null(json_object_get(summary, "hash"));
    f->lacking_calls++;
    f->lacking_bytes = bytes;
}

/* The hash (hex) of the manifest's own compact text, its listing; its length. */
static size_t listing_of(const fixture_t *f, char *hex)
{
    char *text = json_dumps(f->manifest, JSON_COMPACT);
    assert_non_null(text);
    size_t len = strlen(text);
    unsigned char h[BR_MANIFEST_HASH_LEN];
    crypto_generichash(h, sizeof(h), (const unsigned char *)text, len, NULL, 0);
    sodium_bin2hex(hex, HEX_LEN + 1, h, sizeof(h));
    free(text);
    return len;
}

/* br_upload_run of the fixture's manifest; its return, with listing and summary
 * checked (on success) and dropped. */
static int upload(fixture_t *f, br_upload_stats_t *st, char *path, size_t plen,
                  br_err_t *err)
{
    br_upload_t u = {.client = f->client,
                     .timeout_ms = WAIT_MS,
                     .manifest = f->manifest,
                     .source = source,
                     .progress = progress,
                     .lacking = lacking,
                     .arg = f};
    /* (set apart from NULL: a failure leaves them NULL) */
    json_t *listing = (json_t *)1, *summary = (json_t *)1;
    f->done = f->total = f->lacking_bytes = 0;
    f->lacking_calls = 0;
    int rc = br_upload_run(&u, &listing, &summary, st, path, plen, err);
    if (rc < 0) {
        assert_null(listing);
        assert_null(summary);
        return rc;
    }
    /* the listing is the manifest's own compact text, the summary sums it up */
    char hex[HEX_LEN + 1];
    size_t len = listing_of(f, hex);
    assert_string_equal(json_string_value(json_object_get(listing, "hash")), hex);
    assert_int_equal(json_integer_value(json_object_get(listing, "size")), len);
    assert_string_equal(json_string_value(json_object_get(summary, "hash")),
                        json_string_value(json_object_get(f->manifest, "hash")));
    assert_int_equal(json_integer_value(json_object_get(summary, "files")), 5);
    json_decref(listing);
    json_decref(summary);
    return rc;
}

static const json_t *entry(const fixture_t *f, const char *path)
{
    const json_t *e = br_manifest_find(f->manifest, path);
    assert_non_null(e);
    return e;
}

static const char *hash_of(const fixture_t *f, const char *path)
{
    return json_string_value(json_object_get(entry(f, path), "hash"));
}

/* A copy of what the store holds of hash (whole 0 and held 0 when nothing). */
static content_t held(fixture_t *f, const char *hash)
{
    mtx_lock(&f->s->mu);
    content_t *c = find_content(f->s, hash);
    content_t out = c ? *c : (content_t){.first_offset = -1};
    out.data = NULL;
    mtx_unlock(&f->s->mu);
    return out;
}

/* Every file of the manifest, and its listing, is whole in the store, byte for byte
 * what is on disk; the store saw no request it would refuse as malformed. */
static void assert_all_stored(fixture_t *f)
{
    const json_t *entries = json_object_get(f->manifest, "entries");
    size_t i;
    const json_t *e;
    mtx_lock(&f->s->mu);
    json_array_foreach(entries, i, e) {
        const char *path = json_string_value(json_object_get(e, "path"));
        content_t *c =
            find_content(f->s, json_string_value(json_object_get(e, "hash")));
        if (!c || !c->whole)
            fail_msg("%s is not stored", path);
        size_t len = 0;
        char *bytes = br_read_file(br_mfbuild_src(f->b, path), MAX_CONTENT, &len, NULL);
        assert_non_null(bytes);
        assert_int_equal(c->size, len);
        assert_memory_equal(c->data, bytes, len);
        free(bytes);
    }
    assert_int_equal(f->s->bad_hash, 0);
    if (f->s->wrong)
        fail_msg("the store saw %d wrong request(s), first %s", f->s->wrong,
                 f->s->wrong_text);
    mtx_unlock(&f->s->mu);
}

/* Each file's content came once, whole, from its first byte. */
static void assert_each_sent_once(fixture_t *f)
{
    static const char *const paths[] = {"a.txt", "b/big.bin", "b/c.txt", "e.empty"};
    for (size_t i = 0; i < sizeof(paths) / sizeof(paths[0]); i++) {
        content_t c = held(f, hash_of(f, paths[i]));
        if (c.completed != 1 || c.received != c.size || c.first_offset != 0)
            fail_msg("%s: became whole %d time(s), %lld of %lld bytes came, from %lld",
                     paths[i], c.completed, (long long)c.received, (long long)c.size,
                     (long long)c.first_offset);
    }
}

static int64_t tree_bytes(void)
{
    return 6 + BIG_SIZE + 12 + 6 + 0;
}

/* ---- the tests ---- */

/* A store that pages: every file it lacks is sent once, and then it holds them all. */
static void test_paged_store_gets_every_file_once(void **state)
{
    fixture_t *f = *state;
    br_upload_stats_t st;
    br_err_t err = {0};
    char path[256];
    if (upload(f, &st, path, sizeof(path), &err) < 0)
        fail_msg("upload: %s (%s)", err.text, path);
    assert_all_stored(f);
    assert_each_sent_once(f);
    assert_int_equal(st.files, 5);
    assert_int_equal(st.bytes, tree_bytes());
    assert_int_equal(st.sent_files, 4); /* d.txt is a.txt's content: sent once */
    assert_int_equal(st.sent, tree_bytes() - 6);
    assert_true(st.listing > 0);
    assert_int_equal(f->done, st.sent); /* the progress line ends at what was lacking */
    assert_int_equal(f->total, st.sent);
    assert_int_equal(f->lacking_calls, 1);
    assert_int_equal(f->lacking_bytes, st.sent);
    mtx_lock(&f->s->mu);
    assert_int_equal(f->s->lack_listing, 1);
    assert_int_equal(f->s->range_refused, 0);
    mtx_unlock(&f->s->mu);
}

/* Pages of two entries: the client asks again from each answer's "next" while
 * "more" says so; a.txt's second copy, on the second page, is held by then. */
static void test_pages_are_followed(void **state)
{
    fixture_t *f = *state;
    br_upload_stats_t st;
    br_err_t err = {0};
    char path[256];
    if (upload(f, &st, path, sizeof(path), &err) < 0)
        fail_msg("upload: %s (%s)", err.text, path);
    assert_all_stored(f);
    assert_each_sent_once(f);
    assert_int_equal(st.sent_files, 4);
    assert_int_equal(st.sent, tree_bytes() - 6);
    assert_int_equal(f->lacking_calls, 3); /* after each page, what is known so far */
    assert_int_equal(f->lacking_bytes, st.sent);
    assert_int_equal(f->done, st.sent);
    mtx_lock(&f->s->mu);
    assert_int_equal(f->s->lack_listing, 3);
    assert_int_equal(f->s->from[0], 0);
    assert_int_equal(f->s->from[1], 2);
    assert_int_equal(f->s->from[2], 4);
    mtx_unlock(&f->s->mu);
}

/* The same tree again, to the same store: nothing but the questions; with pages
 * that name nothing, "next" alone moves the client on. */
static void test_second_upload_sends_nothing(void **state)
{
    fixture_t *f = *state;
    br_upload_stats_t st;
    br_err_t err = {0};
    char path[256];
    if (upload(f, &st, path, sizeof(path), &err) < 0)
        fail_msg("first upload: %s (%s)", err.text, path);
    assert_int_equal(st.sent, tree_bytes() - 6);
    if (upload(f, &st, path, sizeof(path), &err) < 0)
        fail_msg("second upload: %s (%s)", err.text, path);
    assert_int_equal(st.files, 5);
    assert_int_equal(st.bytes, tree_bytes());
    assert_int_equal(st.sent_files, 0);
    assert_int_equal(st.sent, 0);
    assert_int_equal(st.listing, 0);
    assert_int_equal(f->lacking_bytes, 0);
    assert_all_stored(f);
    assert_each_sent_once(f); /* (counted over both uploads) */
    mtx_lock(&f->s->mu);
    assert_int_equal(f->s->lack_listing, 6);
    assert_int_equal(f->s->from[3], 0);
    assert_int_equal(f->s->from[4], 2);
    assert_int_equal(f->s->from[5], 4);
    mtx_unlock(&f->s->mu);
}

/* A store that predates pages refuses "paged" and forgets the listing it was sent:
 * the listing goes again, the question again without the word, and every file
 * once. */
static void test_store_without_pages(void **state)
{
    fixture_t *f = *state;
    br_upload_stats_t st;
    br_err_t err = {0};
    char path[256];
    if (upload(f, &st, path, sizeof(path), &err) < 0)
        fail_msg("upload: %s (%s)", err.text, path);
    assert_all_stored(f);
    assert_each_sent_once(f);
    assert_int_equal(st.sent_files, 4);
    assert_int_equal(st.sent, tree_bytes() - 6);
    char hex[HEX_LEN + 1];
    size_t len = listing_of(f, hex);
    assert_int_equal(st.listing, 2 * (int64_t)len); /* sent twice */
    content_t l = held(f, hex); /* stored, forgotten, stored again */
    assert_int_equal(l.whole, 1);
    assert_int_equal(l.completed, 2);
    mtx_lock(&f->s->mu);
    assert_int_equal(f->s->paged_refused, 1);
    assert_int_equal(f->s->listing_missing, 0); /* never asked about a forgotten one */
    assert_int_equal(f->s->lack_listing, 1);
    assert_int_equal(f->s->from[0], 0);
    mtx_unlock(&f->s->mu);
}

/* What a cut-off upload left of the large file (its first chunk) is not sent again:
 * its chunks start at what the store holds. */
static void test_partial_goes_on(void **state)
{
    fixture_t *f = *state;
    const char *big = hash_of(f, "b/big.bin");
    const int64_t kept = 256 * 1024;
    mtx_lock(&f->s->mu);
    content_t *c = get_content(f->s, big, BIG_SIZE);
    assert_non_null(c);
    memcpy(c->data, f->big, kept);
    c->held = kept;
    mtx_unlock(&f->s->mu);
    br_upload_stats_t st;
    br_err_t err = {0};
    char path[256];
    if (upload(f, &st, path, sizeof(path), &err) < 0)
        fail_msg("upload: %s (%s)", err.text, path);
    assert_all_stored(f);
    content_t got = held(f, big);
    assert_int_equal(got.first_offset, kept);
    assert_int_equal(got.received, BIG_SIZE - kept);
    assert_int_equal(got.completed, 1);
    assert_int_equal(st.sent_files, 4);
    assert_int_equal(st.sent, tree_bytes() - 6 - kept);
    /* what was lacking, the partial less */
    assert_int_equal(f->lacking_bytes, st.sent);
    mtx_lock(&f->s->mu);
    assert_int_equal(f->s->range_refused, 0);
    mtx_unlock(&f->s->mu);
}

/* Another upload of the same file moves the store's copy on under the first chunk:
 * that chunk is refused (ERANGE), the store is asked again, and the file ends
 * stored, of the bytes the two uploads sent. */
static void test_moved_copy_is_asked_again(void **state)
{
    fixture_t *f = *state;
    const char *big = hash_of(f, "b/big.bin");
    mtx_lock(&f->s->mu);
    br_strlcpy(f->s->move, big, sizeof(f->s->move));
    f->s->moves = 1;
    mtx_unlock(&f->s->mu);
    br_upload_stats_t st;
    br_err_t err = {0};
    char path[256];
    if (upload(f, &st, path, sizeof(path), &err) < 0)
        fail_msg("upload: %s (%s)", err.text, path);
    assert_all_stored(f);
    content_t got = held(f, big);
    assert_int_equal(got.completed, 1);
    /* the first chunk came from the other upload */
    assert_int_equal(got.received, BIG_SIZE - BR_UPLOAD_CHUNK);
    mtx_lock(&f->s->mu);
    assert_int_equal(f->s->range_refused, 1);
    assert_int_equal(f->s->lack_listing, 2); /* asked again */
    mtx_unlock(&f->s->mu);
}

/* Another upload of the same tree, whose chunks end elsewhere (another chunk size),
 * moves the store's copy of the listing on under this one's: the listing is asked
 * about again and sent from where the store holds it, and the upload goes on. */
static void test_moved_listing_is_asked_again(void **state)
{
    fixture_t *f = *state;
    char hex[HEX_LEN + 1];
    size_t len = listing_of(f, hex);
    mtx_lock(&f->s->mu);
    br_strlcpy(f->s->move, hex, sizeof(f->s->move));
    f->s->moves = 1;
    f->s->move_by = len / 2;
    mtx_unlock(&f->s->mu);
    br_upload_stats_t st;
    br_err_t err = {0};
    char path[256];
    if (upload(f, &st, path, sizeof(path), &err) < 0)
        fail_msg("upload: %s (%s)", err.text, path);
    assert_all_stored(f);
    assert_each_sent_once(f);
    content_t got = held(f, hex);
    assert_int_equal(got.completed, 1);
    assert_int_equal(got.received, len - len / 2); /* the rest, from where it was */
    mtx_lock(&f->s->mu);
    assert_int_equal(f->s->range_refused, 1);
    assert_int_equal(f->s->listing_missing, 0);
    mtx_unlock(&f->s->mu);
}

/* A file changed after it was hashed fails the upload with EBADMSG, naming it; the
 * store is sent nothing of it. */
static void test_changed_file_is_refused(void **state)
{
    fixture_t *f = *state;
    const char *hash = hash_of(f, "b/c.txt");
    write_file(f, "b/c.txt", "gamma gamma gamma\n", 18);
    br_upload_stats_t st;
    br_err_t err = {0};
    char path[256];
    assert_int_equal(upload(f, &st, path, sizeof(path), &err), -1);
    assert_int_equal(err.errnum, EBADMSG);
    assert_string_equal(path, "b/c.txt");
    assert_non_null(strstr(err.text, "changed"));
    content_t got = held(f, hash);
    assert_int_equal(got.whole, 0);
    assert_int_equal(got.held, 0);
    assert_int_equal(got.puts, 0);
    mtx_lock(&f->s->mu);
    assert_int_equal(f->s->bad_hash, 0);
    assert_int_equal(f->s->wrong, 0);
    mtx_unlock(&f->s->mu);
}

int main(void)
{
    if (sodium_init() < 0)
        return 1;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_paged_store_gets_every_file_once,
                                        setup_paged, teardown),
        cmocka_unit_test_setup_teardown(test_pages_are_followed, setup_pages_of_two,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_second_upload_sends_nothing,
                                        setup_pages_of_two, teardown),
        cmocka_unit_test_setup_teardown(test_store_without_pages, setup_unpaged,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_partial_goes_on, setup_paged, teardown),
        cmocka_unit_test_setup_teardown(test_moved_copy_is_asked_again, setup_paged,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_moved_listing_is_asked_again, setup_paged,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_changed_file_is_refused, setup_paged,
                                        teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
