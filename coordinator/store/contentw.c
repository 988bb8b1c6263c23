/* contentw.c - content.put's chunks written on a helper thread (contentw.h). */
#include "contentw.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "listcache.h"
#include "manifest_check.h"
#include "workq.h"

#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#define CONTENTW_NICE 10 /* a nice value, not SCHED_IDLE as the relay (worker.h): the
                          * writer holds the store's lock, which the loop takes at
                          * each chunk, and a writer preempted while holding it held
                          * the loop (heartbeats' p99 3.2 ms against 1.5 ms) */
#define CONTENTW_LISTING_MAX BR_LISTCACHE_LISTING_MAX /* a listing parsed ahead */

typedef struct {
    br_wqnode_t node;
    br_msg_t *reply;
    char hash[80];
    int64_t who; /* (br_content_write's) */
    int64_t size, offset, held;
    unsigned char *data;
    size_t len;
    int rc, whole;
    br_err_t err;
    json_t *listing; /* the manifest this chunk made whole, parsed (or NULL) */
    br_contentw_look_t *look; /* or, in place of a chunk, a look at the store */
} chunk_t;

struct br_contentw {
    br_workq_t q;
    br_content_t *c;
    int niced; /* (its thread only) */
    size_t looks; /* queued and not yet taken (under the queue's mutex) */
};

static chunk_t *chunk_of(br_wqnode_t *n)
{
    return n ? BR_WQ_JOB(n, chunk_t, node) : NULL;
}

br_contentw_look_t *br_contentw_look_new(size_t n, int64_t who,
                                         void (*seen)(br_contentw_look_t *, void *),
                                         void *arg)
{
    br_contentw_look_t *l = calloc(1, sizeof(*l));
    size_t k = n ? n : 1;
    if (!l || !(l->hash = calloc(k, sizeof(*l->hash))) || !(l->has = calloc(k, 1)) ||
        !(l->partial = calloc(k, sizeof(*l->partial)))) {
        br_contentw_look_free(&l);
        return NULL;
    }
    l->n = n;
    l->who = who;
    l->seen = seen;
    l->arg = arg;
    return l;
}

void br_contentw_look_free(br_contentw_look_t **lp)
{
    br_contentw_look_t *l = lp ? *lp : NULL;
    if (!l)
        return;
    free(l->hash);
    free(l->has);
    free(l->partial);
    free(l);
    *lp = NULL;
}

static void chunk_free(chunk_t *k)
{
    if (k) {
        if (k->look) { /* never made: its owner frees what it waited with */
            k->look->dropped = 1;
            k->look->seen(k->look, k->look->arg);
        }
        br_msg_destroy(&k->reply);
        json_decref(k->listing);
        free(k->data);
        free(k);
    }
}

/* The content hash (size bytes), just made whole, parsed as a manifest's listing
 * when it is one (its text begins as mfbuild writes them, and it verifies), so that
 * the loop need not parse it when the upload's content.lack names it; else NULL. */
static json_t *parse_listing(br_contentw_t *w, const char *hash, int64_t size)
{
    static const char head[] = "{\"hash\":\"";
    char first[sizeof(head)];
    int64_t got = 0;
    br_err_t err;
    if (size < (int64_t)sizeof(head) || size > CONTENTW_LISTING_MAX ||
        br_content_read(w->c, hash, 0, first, sizeof(head) - 1, &got, &err) !=
            (ssize_t)sizeof(head) - 1 ||
        memcmp(first, head, sizeof(head) - 1) != 0)
        return NULL;
    char *text = malloc((size_t)size);
    json_t *m = NULL;
    if (text && br_content_read(w->c, hash, 0, text, (size_t)size, &got, &err) == size)
        m = br_manifest_parse_listing(text, (size_t)size, &err);
    free(text);
    if (m && br_manifest_tree_links_ok(m, &err) < 0) { /* (the loop says why, parsing it) */
        json_decref(m);
        m = NULL;
    }
    return m;
}

static void work(void *owner, br_wqnode_t *n)
{
    br_contentw_t *w = owner;
    chunk_t *k = chunk_of(n);
    if (!w->niced++) /* bulk bytes yield to the loop's heartbeats when the CPU is short */
        setpriority(PRIO_PROCESS, (id_t)syscall(SYS_gettid), CONTENTW_NICE);
    if (k->look) {
        br_contentw_look_t *l = k->look;
        for (size_t i = 0; i < l->n; i++) {
            l->has[i] = (unsigned char)br_content_has(w->c, l->hash[i]);
            /* (a user's own partial counts even where the store holds the content
             * through another: theirs is what their chunks are written to) */
            l->partial[i] = l->has[i] && !l->who ? 0
                                                 : br_content_partial(w->c, l->hash[i], l->who);
        }
        return;
    }
    k->rc = br_content_write(w->c, k->hash, k->who, k->size, k->offset,
                             k->data ? (const void *)k->data : "",
                             k->len, &k->held, &k->whole, &k->err);
    /* a listing's text ends its object: a content whose last byte is another is
     * none, and is not opened again to be looked at */
    int ends_object = k->data && k->len && k->data[k->len - 1] == '}';
    free(k->data); /* (written, or not to be) */
    k->data = NULL;
    if (k->rc == 0 && k->whole && ends_object && k->offset + (int64_t)k->len == k->size)
        k->listing = parse_listing(w, k->hash, k->size);
}

static void drop(br_wqnode_t *n)
{
    chunk_free(chunk_of(n));
}

static const br_workq_ops_t ops = {NULL, work, NULL, drop};

br_contentw_t *br_contentw_new(br_content_t *c, br_err_t *err)
{
    br_contentw_t *w = calloc(1, sizeof(*w));
    if (!w)
        return br_errp(err, ENOMEM, "out of memory");
    w->c = c;
    if (br_workq_init(&w->q, "content writer", &ops, w, err) < 0 ||
        br_workq_start(&w->q, err) < 0) {
        br_workq_fini(&w->q);
        free(w);
        return NULL;
    }
    return w;
}

void br_contentw_destroy(br_contentw_t **wp)
{
    br_contentw_t *w = wp ? *wp : NULL;
    if (!w)
        return;
    br_workq_fini(&w->q);
    free(w);
    *wp = NULL;
}

int br_contentw_fd(const br_contentw_t *w)
{
    return br_workq_fd(&w->q);
}

int br_contentw_put(br_contentw_t *w, br_msg_t *reply, const char *hash, int64_t who,
                    int64_t size, int64_t offset, const void *data, size_t len, br_err_t *err)
{
    chunk_t *k = calloc(1, sizeof(*k));
    if (!k || (len && !(k->data = malloc(len)))) {
        free(k);
        return br_errf(err, ENOMEM, "out of memory");
    }
    if (len)
        memcpy(k->data, data, len);
    snprintf(k->hash, sizeof(k->hash), "%s", hash);
    k->who = who;
    k->size = size;
    k->offset = offset;
    k->len = len;
    pthread_mutex_lock(&w->q.w.mu);
    int full = (size_t)w->q.todo.n >= BR_CONTENTW_QUEUE + w->looks; /* (chunks, not looks) */
    if (!full) {
        k->reply = reply;
        br_workq_add(&w->q, NULL, &k->node);
    }
    pthread_mutex_unlock(&w->q.w.mu);
    if (full) {
        chunk_free(k);
        return br_errf(err, EAGAIN, "%d chunks wait to be written already: send again "
                                    "later", BR_CONTENTW_QUEUE);
    }
    return 0;
}

int br_contentw_look(br_contentw_t *w, br_contentw_look_t *look, br_err_t *err)
{
    chunk_t *k = calloc(1, sizeof(*k));
    if (!k)
        return br_errf(err, ENOMEM, "out of memory");
    k->look = look;
    pthread_mutex_lock(&w->q.w.mu);
    int full = w->looks >= BR_CONTENTW_LOOKS;
    if (!full) {
        w->looks++;
        br_workq_add(&w->q, NULL, &k->node);
    }
    pthread_mutex_unlock(&w->q.w.mu);
    if (full) {
        free(k);
        return br_errf(err, EAGAIN, "%d looks wait already", BR_CONTENTW_LOOKS);
    }
    return 0;
}

br_msg_t *br_contentw_take(br_contentw_t *w, json_t **listing, char *lhash, size_t lhlen)
{
    chunk_t *k;
    *listing = NULL;
    for (;;) {
        while ((k = chunk_of(br_workq_take(&w->q))) && k->look) {
            br_contentw_look_t *l = k->look;
            k->look = NULL;
            chunk_free(k);
            pthread_mutex_lock(&w->q.w.mu);
            w->looks--;
            pthread_mutex_unlock(&w->q.w.mu);
            l->seen(l, l->arg);
        }
        if (!k)
            return NULL;
        if (k->listing && strlen(k->hash) < lhlen) {
            *listing = k->listing;
            k->listing = NULL;
            strcpy(lhash, k->hash);
        }
        br_msg_t *out;
        if (k->rc == 0) {
            out = k->reply;
            k->reply = NULL;
            br_msg_set_body(out, json_pack("{s:I, s:b}", "held", (json_int_t)k->held,
                                           "whole", k->whole));
        } else {
            out = br_msg_reply_error(k->reply, k->err.errnum, "%s", k->err.text);
        }
        chunk_free(k);
        if (out)
            return out;
        /* out of memory for this answer: its client asks again; the next is taken, so
         * that NULL still means none is left (the listing, only a head start, goes) */
        json_decref(*listing);
        *listing = NULL;
    }
}
