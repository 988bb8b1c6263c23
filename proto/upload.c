/* upload.c - sending a tree's files that the content store lacks. */
#include "upload.h"

#include <errno.h>
#include <fcntl.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "manifest_check.h"
#include "util.h"

#define ROUNDS 4 /* asks again when the store's copy moved under us */

typedef struct {
    uint32_t seq;
    const char *path; /* what the chunk is of, for errors (NULL: the listing) */
} flight_t;

typedef struct {
    const br_upload_t *o;
    br_upload_stats_t *st;
    int64_t total, done;
    flight_t fl[BR_CLIENT_PENDING];
    size_t head, n;
    int moved;  /* a chunk was refused: not at what the store holds (ERANGE) */
    int unpaged; /* the coordinator predates content.lack's pages */
    int relist;  /* ... and let go of the listing when it said so: send it again */
    int failed; /* the first refusal is in err, its path in path */
    br_err_t *err;
    char *path;
    size_t plen;
    unsigned char buf[BR_UPLOAD_CHUNK];
} up_t;

/* Keep the first refusal, and the path it is about. */
static void refuse(up_t *u, const char *path, const br_err_t *err)
{
    if (u->failed++)
        return;
    *u->err = *err;
    if (u->path)
        br_strlcpy(u->path, path ? path : "", u->plen);
}

/* content.lack with body (taken): its answer, or NULL with err. */
static json_t *ask_lack(up_t *u, json_t *body, br_err_t *err)
{
    return br_client_call(u->o->client, "content.lack", body, u->o->timeout_ms, err);
}

/* Take the answer to the oldest chunk in flight. */
static void take_one(up_t *u)
{
    flight_t *f = &u->fl[u->head];
    br_msg_t *resp = NULL;
    br_err_t err;
    u->head = (u->head + 1) % BR_CLIENT_PENDING;
    u->n--;
    /* once one went unanswered, the rest are not waited for one by one */
    int wait = u->failed ? 0 : u->o->timeout_ms;
    if (br_client_recv(u->o->client, f->seq, wait, &resp, &err) < 0) {
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
    if (br_client_send_data(u->o->client, "content.put", body, data, len, &seq, &err) < 0) {
        refuse(u, path, &err);
        return -1;
    }
    u->fl[(u->head + u->n) % BR_CLIENT_PENDING] = (flight_t){seq, path};
    u->n++;
    return 0;
}

/* Send the content of the manifest entry e from off on, read from its source. A
 * content whole in all but its renaming (off = size) gets a put of nothing. */
static int send_file(up_t *u, const json_t *e, int64_t off)
{
    const char *path = json_string_value(json_object_get(e, "path"));
    const char *hash = json_string_value(json_object_get(e, "hash"));
    int64_t size = json_integer_value(json_object_get(e, "size"));
    const char *src = u->o->source(u->o->arg, path);
    br_err_t err;
    int fd = src ? open(src, O_RDONLY | O_NOFOLLOW | O_CLOEXEC) : -1;
    struct stat st;
    if (fd < 0 || fstat(fd, &st) < 0 || st.st_size != size) {
        /* gone, or another size: not what was hashed (EBADMSG says so) */
        br_errf(&err, fd < 0 ? errno : EBADMSG, "%s",
                fd < 0 ? strerror(errno) : "changed after it was hashed");
        if (fd >= 0)
            close(fd);
        refuse(u, path, &err);
        return -1;
    }
    u->st->sent_files++;
    do {
        size_t want = size - off < BR_UPLOAD_CHUNK ? (size_t)(size - off) : BR_UPLOAD_CHUNK;
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
        if (u->o->progress)
            u->o->progress(u->o->arg, u->done, u->total);
    } while (off < size);
    close(fd);
    return 0;
}

/* The manifest's own text into the store (what of it is not there). */
static int send_listing_once(up_t *u, const char *text, size_t len, const char *hash)
{
    br_err_t err;
    json_t *r = ask_lack(u, json_pack("{s:[{s:s, s:I}]}", "contents", "hash", hash, "size",
                                      (json_int_t)len), &err);
    if (!r) {
        refuse(u, NULL, &err);
        return -1;
    }
    json_t *lack = json_array_get(json_object_get(r, "lack"), 0);
    int lacks = lack != NULL;
    int64_t off = lack ? json_integer_value(json_array_get(lack, 1)) : (int64_t)len;
    json_decref(r);
    /* (a partial that holds every byte, from a store stopped before it put it in
     * place, is finished by a put of nothing at its end) */
    while (lacks && off <= (int64_t)len) {
        size_t k = len - (size_t)off < BR_UPLOAD_CHUNK ? len - (size_t)off : BR_UPLOAD_CHUNK;
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

/* The listing into the store, asked about again while its copy there moves under
 * this upload (another upload of the same tree, at once, whose chunks came first). */
static int send_listing(up_t *u, const char *text, size_t len, const char *hash)
{
    for (int round = 0; round < ROUNDS; round++) {
        u->moved = 0;
        if (send_listing_once(u, text, len, hash) < 0)
            return -1;
        if (!u->moved)
            return 0;
    }
    br_err_t err;
    br_errf(&err, EAGAIN, "the store's copy of the manifest's listing kept changing under "
                          "this upload (another upload of the same files?): try again");
    refuse(u, NULL, &err);
    return -1;
}

/* One pass over what the store lacks (from its answers, in pages). */
static int send_lacking(up_t *u, const json_t *listing, const json_t *summary)
{
    const json_t *entries = json_object_get(u->o->manifest, "entries");
    json_int_t from = 0;
    int more = 1;
    while (more) {
        json_t *body = json_pack("{s:O, s:O, s:I}", "listing", listing, "manifest", summary,
                                 "from", from);
        if (body && !u->unpaged)
            json_object_set_new(body, "paged", json_true());
        br_err_t err;
        json_t *r = ask_lack(u, body, &err);
        /* a coordinator that predates pages refuses the word, and lets go of the
         * listing it refused it with: the listing again, then asked without it */
        if (!r && !u->unpaged && err.errnum == EPROTO && strstr(err.text, "paged")) {
            u->unpaged = u->moved = u->relist = 1;
            return 0;
        }
        if (!r) {
            refuse(u, NULL, &err);
            return -1;
        }
        u->total += json_integer_value(json_object_get(r, "bytes"));
        more = json_is_true(json_object_get(r, "more"));
        if (u->o->lacking) /* (page by page: what is known lacking so far) */
            u->o->lacking(u->o->arg, listing, summary, u->total);
        size_t i;
        json_t *l;
        int rc = 0;
        json_array_foreach(json_object_get(r, "lack"), i, l) {
            json_int_t at = json_integer_value(json_array_get(l, 0));
            const json_t *e = json_array_get(entries, (size_t)at);
            if (!e) {
                br_errf(&err, EPROTO, "the coordinator named entry %lld, which the tree "
                                      "does not have", (long long)at);
                refuse(u, NULL, &err);
            }
            if (!e || send_file(u, e, json_integer_value(json_array_get(l, 1))) < 0) {
                rc = -1;
                break;
            }
            from = at + 1;
        }
        json_t *next = json_object_get(r, "next"); /* (a coordinator that pages says) */
        if (rc == 0 && json_is_integer(next) && json_integer_value(next) > from)
            from = json_integer_value(next);
        json_decref(r);
        drain(u);
        if (rc < 0 || u->failed)
            return -1;
    }
    return 0;
}

int br_upload_run(const br_upload_t *o, json_t **listing, json_t **summary,
                  br_upload_stats_t *st, char *path, size_t plen, br_err_t *err)
{
    const json_t *m = o->manifest;
    *listing = *summary = NULL;
    memset(st, 0, sizeof(*st));
    if (path && plen)
        path[0] = '\0';
    up_t *u = calloc(1, sizeof(*u));
    char *text = json_dumps(m, JSON_COMPACT);
    if (!u || !text) {
        free(u);
        free(text);
        return br_errf(err, ENOMEM, "out of memory");
    }
    *u = (up_t){.o = o, .st = st, .err = err, .path = path, .plen = plen};
    st->files = json_integer_value(json_object_get(m, "files"));
    st->bytes = json_integer_value(json_object_get(m, "bytes"));
    size_t len = strlen(text);
    unsigned char h[BR_MANIFEST_HASH_LEN];
    char hex[2 * BR_MANIFEST_HASH_LEN + 1];
    crypto_generichash(h, sizeof(h), (const unsigned char *)text, len, NULL, 0);
    sodium_bin2hex(hex, sizeof(hex), h, sizeof(h));
    *listing = json_pack("{s:s, s:I}", "hash", hex, "size", (json_int_t)len);
    *summary = br_manifest_summary(m);
    int rc = send_listing(u, text, len, hex);
    for (int round = 0; rc == 0; round++) {
        u->moved = 0;
        if (u->relist) { /* (send_lacking's coordinator let the listing go) */
            u->relist = 0;
            if ((rc = send_listing(u, text, len, hex)) < 0)
                break;
        }
        rc = send_lacking(u, *listing, *summary);
        if (rc == 0 && !u->moved)
            break;
        if (rc == 0 && round == ROUNDS - 1) {
            br_errf(err, EAGAIN, "the store's copy of the files kept changing under this "
                                 "upload (another upload of the same files?): try again");
            rc = -1;
        }
    }
    drain(u);
    free(u);
    free(text);
    if (rc < 0) {
        json_decref(*listing);
        json_decref(*summary);
        *listing = *summary = NULL;
        return -1;
    }
    return 0;
}
