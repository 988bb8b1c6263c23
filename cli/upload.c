/* upload.c - sending a packed tree's files that the content store lacks. */
#include "upload.h"

#include <errno.h>
#include <fcntl.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "client.h"
#include "manifest_check.h"
#include "util.h"

#define CHUNK (256 * 1024)       /* the coordinator's BR_CONTENT_CHUNK */
#define UPLOAD_TIMEOUT_MS 60000  /* an answer to one chunk (the store fsyncs) */
#define ROUNDS 4                 /* asks again when the store's copy moved under us */
#define SHOW_AFTER_MS 1000       /* a progress line for uploads longer than this */
#define LARGEST 5

typedef struct {
    uint32_t seq;
    const char *path; /* what the chunk is of, for errors (NULL: the listing) */
} flight_t;

typedef struct {
    cli_t *cli;
    br_client_t *client;
    br_pack_t *p;
    cli_upload_t *st;
    int progress, shown_any;
    int64_t total, done, started, shown;
    flight_t fl[BR_CLIENT_PENDING];
    size_t head, n;
    int moved; /* a chunk was refused: not at what the store holds (ERANGE) */
    int failed;
    unsigned char buf[CHUNK];
} up_t;

static void show(up_t *u, int last)
{
    int64_t now = br_mono_ms();
    if (!u->progress || (!last && (now - u->started < SHOW_AFTER_MS || now - u->shown < 200)))
        return;
    if (last && !u->shown_any)
        return;
    u->shown = now;
    u->shown_any = 1;
    double s = (double)(now - u->started) / 1000.0, rate = s > 0 ? (double)u->done / s : 0;
    double left = rate > 0 ? (double)(u->total - u->done) / rate : 0;
    fprintf(stderr, "\ruploading: %.1f of %.1f MiB (%d%%), %.1f MB/s, %.0fs left   ",
            (double)u->done / 1048576.0, (double)u->total / 1048576.0,
            u->total ? (int)(100 * u->done / u->total) : 100, rate / 1e6,
            last ? 0.0 : left);
    if (last)
        fputc('\n', stderr);
}

/* "a (1.2 GiB), b (3 MiB)": the largest files of the tree. */
static const char *largest(br_pack_t *p, char *buf, size_t len)
{
    const char *path[LARGEST];
    int64_t size[LARGEST];
    size_t n = br_pack_largest(p, LARGEST, path, size), used = 0;
    buf[0] = 0;
    for (size_t i = 0; i < n && used < len; i++) {
        char sz[32];
        int w = snprintf(buf + used, len - used, "%s%s (%s)", i ? ", " : "", path[i],
                         br_format_size((uint64_t)size[i], sz, sizeof(sz)));
        used += w > 0 ? (size_t)w : 0;
    }
    return buf;
}

/* Say why the upload stopped: once. */
static void refuse(up_t *u, const char *path, const br_err_t *err)
{
    if (u->failed++)
        return;
    if (u->shown_any)
        fputc('\n', stderr);
    if (err->errnum == EBADMSG && path)
        cli_err(u->cli, "%s changed after it was hashed (the store found other bytes): "
                        "push again once it is written",
                path);
    else if (err->errnum == EDQUOT && !strstr(err->text, "largest")) {
        char big[700];
        cli_err(u->cli, "%s; the tree's largest files: %s. Leave out what is not needed "
                        "with .brambleignore",
                err->text, largest(u->p, big, sizeof(big)));
    } else
        cli_err(u->cli, "%s%s%s", path ? path : "", path ? ": " : "", err->text);
}

/* Take the answer to the oldest chunk in flight. */
static void take_one(up_t *u)
{
    flight_t *f = &u->fl[u->head];
    br_msg_t *resp = NULL;
    br_err_t err;
    u->head = (u->head + 1) % BR_CLIENT_PENDING;
    u->n--;
    if (br_client_recv(u->client, f->seq, UPLOAD_TIMEOUT_MS, &resp, &err) < 0) {
        if (err.errnum == ERANGE)
            u->moved = 1;
        else
            refuse(u, f->path, &err);
    }
    br_msg_destroy(&resp);
}

static void drain(up_t *u)
{
    while (u->n)
        take_one(u);
}

/* Send the chunk [off, off+len) of content hash (size bytes) from data. */
static int put(up_t *u, const char *hash, int64_t size, int64_t off, const void *data,
               size_t len, const char *path)
{
    if (u->n == BR_CLIENT_PENDING)
        take_one(u);
    if (u->failed)
        return -1;
    br_err_t err;
    uint32_t seq;
    json_t *body = json_pack("{s:s, s:I, s:I}", "hash", hash, "size", (json_int_t)size,
                             "offset", (json_int_t)off);
    if (br_client_send_data(u->client, "content.put", body, data, len, &seq, &err) < 0) {
        refuse(u, path, &err);
        return -1;
    }
    u->fl[(u->head + u->n) % BR_CLIENT_PENDING] = (flight_t){seq, path};
    u->n++;
    return 0;
}

/* Send the content of the manifest entry e from off on, read from its source. */
static int send_file(up_t *u, const json_t *e, int64_t off)
{
    const char *path = json_string_value(json_object_get(e, "path"));
    const char *hash = json_string_value(json_object_get(e, "hash"));
    int64_t size = json_integer_value(json_object_get(e, "size"));
    const char *src = br_pack_source(u->p, path);
    br_err_t err;
    int fd = src ? open(src, O_RDONLY | O_NOFOLLOW | O_CLOEXEC) : -1;
    struct stat st;
    if (fd < 0 || fstat(fd, &st) < 0 || st.st_size != size) {
        /* gone, or another size: not what was hashed (EBADMSG says so) */
        br_errf(&err, fd < 0 ? errno : EBADMSG, "%s", fd < 0 ? strerror(errno) : "");
        if (fd >= 0)
            close(fd);
        refuse(u, path, &err);
        return -1;
    }
    u->st->sent_files++;
    do {
        size_t want = size - off < CHUNK ? (size_t)(size - off) : CHUNK;
        ssize_t k = want ? pread(fd, u->buf, want, off) : 0;
        if (k != (ssize_t)want) {
            br_errf(&err, EBADMSG, "it shrank while it was sent");
            refuse(u, path, &err);
            close(fd);
            return -1;
        }
        if (put(u, hash, size, off, u->buf, want, path) < 0) {
            close(fd);
            return -1;
        }
        off += (int64_t)want;
        u->done += (int64_t)want;
        u->st->sent += (int64_t)want;
        show(u, 0);
    } while (off < size);
    close(fd);
    return 0;
}

/* The manifest's own text into the store (what of it is not there). */
static int send_listing(up_t *u, const char *text, size_t len, const char *hash)
{
    json_t *r = cli_call(u->cli, "content.lack",
                         json_pack("{s:[{s:s, s:I}]}", "contents", "hash", hash, "size",
                                   (json_int_t)len));
    if (!r)
        return -1;
    json_t *lack = json_array_get(json_object_get(r, "lack"), 0);
    int lacks = lack != NULL;
    int64_t off = lack ? json_integer_value(json_array_get(lack, 1)) : (int64_t)len;
    json_decref(r);
    /* (a partial that holds every byte, from a store stopped before it put it in
     * place, is finished by a put of nothing at its end) */
    while (lacks && off <= (int64_t)len) {
        size_t k = len - (size_t)off < CHUNK ? len - (size_t)off : CHUNK;
        if (put(u, hash, (int64_t)len, off, text + off, k, NULL) < 0)
            return -1;
        off += (int64_t)k;
        u->st->listing += (int64_t)k;
        if (off == (int64_t)len)
            break;
    }
    drain(u);
    return u->failed ? -1 : 0;
}

int cli_upload(cli_t *cli, br_pack_t *p, int progress, json_t **listing, json_t **summary,
               cli_upload_t *st)
{
    br_err_t err;
    *listing = *summary = NULL;
    memset(st, 0, sizeof(*st));
    const json_t *m = br_pack_manifest(p, &err);
    if (!m)
        return cli_fail(cli, "%s", err.text);
    br_client_t *client = cli_client(cli);
    if (!client)
        return CLI_FAIL;
    up_t *u = calloc(1, sizeof(*u));
    char *text = json_dumps(m, JSON_COMPACT);
    if (!u || !text) {
        free(u);
        free(text);
        return cli_fail(cli, "out of memory");
    }
    *u = (up_t){.cli = cli, .client = client, .p = p, .st = st, .progress = progress,
                .started = br_mono_ms()};
    st->files = json_integer_value(json_object_get(m, "files"));
    st->bytes = json_integer_value(json_object_get(m, "bytes"));
    size_t len = strlen(text);
    unsigned char h[BR_MANIFEST_HASH_LEN];
    char hex[2 * BR_MANIFEST_HASH_LEN + 1];
    crypto_generichash(h, sizeof(h), (const unsigned char *)text, len, NULL, 0);
    sodium_bin2hex(hex, sizeof(hex), h, sizeof(h));
    *listing = json_pack("{s:s, s:I}", "hash", hex, "size", (json_int_t)len);
    *summary = json_pack("{s:O, s:O, s:O, s:O}", "hash", json_object_get(m, "hash"), "root",
                         json_object_get(m, "root"), "files", json_object_get(m, "files"),
                         "bytes", json_object_get(m, "bytes"));
    int rc = send_listing(u, text, len, hex);
    free(text);
    const json_t *entries = json_object_get(m, "entries");
    for (int round = 0; rc == 0 && round < ROUNDS; round++) {
        json_int_t from = 0;
        int more = 1;
        u->moved = 0;
        while (rc == 0 && more) {
            json_t *r = cli_call(cli, "content.lack",
                                 json_pack("{s:O, s:O, s:I}", "listing", *listing,
                                           "manifest", *summary, "from", from));
            if (!r) {
                rc = -1;
                break;
            }
            u->total += json_integer_value(json_object_get(r, "bytes"));
            more = json_is_true(json_object_get(r, "more"));
            size_t i;
            json_t *l;
            json_array_foreach(json_object_get(r, "lack"), i, l) {
                json_int_t at = json_integer_value(json_array_get(l, 0));
                const json_t *e = json_array_get(entries, (size_t)at);
                if (!e || send_file(u, e, json_integer_value(json_array_get(l, 1))) < 0) {
                    if (!e)
                        cli_err(cli, "the coordinator named entry %lld, which the tree "
                                     "does not have", (long long)at);
                    rc = -1;
                    break;
                }
                from = at + 1;
            }
            json_decref(r);
            drain(u);
            rc = rc < 0 || u->failed ? -1 : 0;
        }
        if (rc == 0 && !u->moved)
            break;
        if (rc == 0 && round == ROUNDS - 1) {
            cli_err(cli, "the store's copy of the files kept changing under this upload "
                         "(another upload of the same files?): try again");
            rc = -1;
        }
    }
    drain(u);
    if (rc == 0)
        show(u, 1);
    else if (u->shown_any && !u->failed)
        fputc('\n', stderr);
    free(u);
    if (rc < 0) {
        json_decref(*listing);
        json_decref(*summary);
        *listing = *summary = NULL;
        return CLI_FAIL;
    }
    return CLI_OK;
}

void cli_upload_say_left_out(const br_pack_t *p)
{
    const char *const *names;
    size_t n = br_pack_left_out(p, &names);
    if (!n)
        return;
    fprintf(stderr, "left out by %s: ", br_pack_in_git(p) ? ".gitignore/.brambleignore"
                                                           : ".brambleignore");
    for (size_t i = 0; i < n && i < BR_PACK_LEFT_OUT; i++)
        fprintf(stderr, "%s%s", i ? ", " : "", names[i]);
    fprintf(stderr, n > BR_PACK_LEFT_OUT ? " and %zu more\n" : "\n",
            n - BR_PACK_LEFT_OUT);
}
