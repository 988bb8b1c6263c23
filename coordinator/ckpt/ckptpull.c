/* ckptpull.c - a checkpoint pulled to a user's machine through the coordinator
 * (ckptpull.h). */
#include "ckptpull.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sodium.h>

#include "coord.h"
#include "manifest_check.h"
#include "replicas.h"
#include "sock.h"
#include "util.h"
#include "hooks.h"

#define WINDOW (2 * BR_XFER_WINDOW) /* reads in flight per pull */
#define AUTH_GRACE_MS 5000 /* a handshake refused sooner than this after the grant was
                            * sent may have come before it: connect again */

typedef struct {
    br_msg_t *reply; /* the client's answer, sent once the holder's comes */
    json_t *ask;     /* the ckpt.read passed on to the holder: its body */
    uint32_t seq;    /* ... and its seq */
    int64_t at;      /* monotonic ms it was passed on */
} read_t;

typedef struct {
    char id[17];      /* what the client names it by */
    char owner[64];   /* the key that opened it (Z85): only it may read */
    int64_t job, step;
    char holder[64];  /* the node read from */
    char holder_key[BR_KEY_LEN + 1];
    char endpoint[BR_ENDPOINT_MAX];
    int from_store;   /* the holder's replica, not the files the job wrote */
    char *path;       /* where the job wrote it */
    json_t *manifest; /* as stored: whole, or truncated naming its whole listing */
    char grant[160];
    void *sock, *mon;
    int64_t connected_at, used_at, granted_at;
    read_t win[WINDOW];
    int head, n;
    uint32_t seq;
} pull_t;

struct br_ckptpull {
    void *ctx; /* the coordinator's ZeroMQ context: the links to holders are made in it */
    pull_t *pulls[BR_CKPTPULL_MAX];
};

br_ckptpull_t *br_ckptpull_new(void *ctx)
{
    br_ckptpull_t *cp = calloc(1, sizeof(br_ckptpull_t));
    if (cp)
        cp->ctx = ctx;
    return cp;
}

static void disconnect(pull_t *p)
{
    br_sock_close(&p->mon);
    br_sock_close(&p->sock);
}

static void pull_free(pull_t *p)
{
    if (!p)
        return;
    disconnect(p);
    for (int i = 0; i < p->n; i++) {
        br_msg_destroy(&p->win[(p->head + i) % WINDOW].reply);
        json_decref(p->win[(p->head + i) % WINDOW].ask);
    }
    free(p->path);
    json_decref(p->manifest);
    free(p);
}

void br_ckptpull_destroy(br_ckptpull_t **pp)
{
    br_ckptpull_t *p = pp ? *pp : NULL;
    if (!p)
        return;
    for (int i = 0; i < BR_CKPTPULL_MAX; i++)
        pull_free(p->pulls[i]);
    free(p);
    *pp = NULL;
}

/* --- the reads in flight ------------------------------------------------------ */

/* Answer the oldest read waiting with an error, queued in the outbox (outside a
 * wake the loop sends it right after br_ckptpull_answer). */
static void fail_oldest(br_coord_t *c, pull_t *p, int errnum, const char *text)
{
    read_t *r = &p->win[p->head];
    br_msg_t *e = br_msg_reply_error(r->reply, errnum, "%s", text);
    br_msg_destroy(&r->reply);
    json_decref(r->ask);
    r->ask = NULL;
    p->head = (p->head + 1) % WINDOW;
    p->n--;
    br_coord_post(c, e);
}

static void fail_all(br_coord_t *c, pull_t *p, int errnum, const char *text)
{
    while (p->n)
        fail_oldest(c, p, errnum, text);
}

/* Close pull i: its reads are told why, its grant is withdrawn. In a wake. */
static void close_pull(br_coord_t *c, int i, int errnum, const char *why)
{
    pull_t *p = c->ckptpull->pulls[i];
    fail_all(c, p, errnum, why);
    br_replicas_withdraw(c, br_nodes_find(c->nodes, p->holder), p->job, p->grant,
                         p->path);
    pull_free(p);
    c->ckptpull->pulls[i] = NULL;
}

int br_ckptpull_items(br_ckptpull_t *cp, zmq_pollitem_t *items, int max)
{
    int n = 0;
    for (int i = 0; cp && i < BR_CKPTPULL_MAX && n < max; i++)
        if (cp->pulls[i] && cp->pulls[i]->sock)
            items[n++] = (zmq_pollitem_t){cp->pulls[i]->sock, 0, ZMQ_POLLIN, 0};
    return n;
}

/* One answer from p's holder, passed back to the client whose read it answers. */
static void pass_back(br_coord_t *c, pull_t *p, br_msg_t *m)
{
    if (br_msg_kind(m) != BR_MSG_RESPONSE)
        return;
    /* answers come in the order asked; older reads with none were lost with a link */
    while (p->n && p->win[p->head].seq < br_msg_seq(m))
        fail_oldest(c, p, ETIMEDOUT, "the holder's answer was lost; ask again");
    if (!p->n || p->win[p->head].seq != br_msg_seq(m))
        return; /* an answer to a read already failed */
    read_t *r = &p->win[p->head];
    br_msg_t *reply = r->reply;
    r->reply = NULL;
    json_decref(r->ask);
    r->ask = NULL;
    p->head = (p->head + 1) % WINDOW;
    p->n--;
    size_t len = 0;
    const void *data = br_msg_data(m, &len);
    br_msg_set_body(reply, json_incref(br_msg_body(m)));
    if (!data || br_msg_set_data(reply, data, len) == 0)
        br_coord_post(c, reply); /* sent by the loop after br_ckptpull_answer */
    else
        br_msg_destroy(&reply);
}

static int connect_holder(br_coord_t *c, pull_t *p, br_err_t *err);

/* Pass body (a ckpt.read's) on to p's holder under the next seq: 0, or -1 with err
 * (EAGAIN: the link has no room now). */
static int pass_on(pull_t *p, json_t *body, br_err_t *err)
{
    br_msg_t *fwd = br_msg_new(BR_MSG_REQUEST, "ckpt.read", p->seq + 1);
    if (!fwd)
        return br_errf(err, ENOMEM, "out of memory");
    br_msg_set_body(fwd, json_incref(body));
    int rc = br_msg_send(p->sock, fwd, err);
    br_msg_destroy(&fwd);
    if (rc == 0)
        p->seq++;
    return rc;
}

/* The holder refused the coordinator's key so soon after the grant was sent that
 * the grant may not have reached it yet (the order and the connection race): a
 * fresh connection, and the reads waiting asked again on it. 0, or -1 with err. */
static int knock_again(br_coord_t *c, pull_t *p, br_err_t *err)
{
    disconnect(p);
    if (connect_holder(c, p, err) < 0)
        return -1;
    int64_t now = br_mono_ms();
    for (int i = 0; i < p->n; i++) {
        read_t *r = &p->win[(p->head + i) % WINDOW];
        if (pass_on(p, r->ask, err) < 0)
            return -1;
        r->seq = p->seq;
        r->at = now;
    }
    return 0;
}

void br_ckptpull_answer(br_coord_t *c)
{
    int64_t now = br_mono_ms();
    for (int i = 0; c->ckptpull && i < BR_CKPTPULL_MAX; i++) {
        pull_t *p = c->ckptpull->pulls[i];
        if (!p || !p->sock)
            continue;
        for (;;) {
            br_msg_t *m = NULL;
            br_err_t err;
            if (br_msg_recv(p->sock, 0, ZMQ_DONTWAIT, &m, &err) < 0) {
                br_msg_destroy(&m);
                if (errno == EAGAIN || errno == EINTR)
                    break;
                fprintf(stderr, "brambled: checkpoint pull %s: %s sent %s\n", p->id,
                        p->holder, err.text);
                continue;
            }
            pass_back(c, p, m);
            br_msg_destroy(&m);
        }
        int ev = br_sock_monitor_take(p->mon);
        char text[256];
        br_err_t err;
        if ((ev & (ZMQ_EVENT_HANDSHAKE_FAILED_AUTH | ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL))) {
            if (now - p->granted_at < AUTH_GRACE_MS && knock_again(c, p, &err) == 0)
                continue;
            snprintf(text, sizeof(text), "%s refused the coordinator's key (its grant for "
                     "this checkpoint did not reach it)", p->holder);
            fail_all(c, p, EACCES, text);
            disconnect(p);
        } else if (p->n && now - p->win[p->head].at > BR_CKPTPULL_ANSWER_MS) {
            snprintf(text, sizeof(text), "%s did not answer within %d s", p->holder,
                     BR_CKPTPULL_ANSWER_MS / 1000);
            fail_all(c, p, ETIMEDOUT, text);
            disconnect(p); /* a fresh link for the next read */
        }
    }
}

/* --- the pulls ------------------------------------------------------------------ */

static int find(br_coord_t *c, const char *id, const char *owner)
{
    for (int i = 0; i < BR_CKPTPULL_MAX; i++) {
        pull_t *p = c->ckptpull->pulls[i];
        if (p && strcmp(p->id, id) == 0 && strcmp(p->owner, owner) == 0)
            return i;
    }
    return -1;
}

/* The checkpoint of job at step (< 0: the newest) from the job's list (a new
 * reference), or NULL with err. */
static json_t *checkpoint_of(br_coord_t *c, int64_t job, int64_t step, br_err_t *err)
{
    json_t *list = br_store_checkpoint_list(c->store, job, err), *cp, *found = NULL;
    if (!list)
        return NULL;
    size_t i;
    json_array_foreach (list, i, cp) /* by step, then as recorded: the last match */
        if (step < 0 || json_integer_value(json_object_get(cp, "step")) == step)
            found = cp;
    json_incref(found);
    json_decref(list);
    if (!found && step < 0)
        br_errf(err, ENOENT, "job %lld has no counted checkpoint", (long long)job);
    else if (!found)
        br_errf(err, ENOENT, "job %lld has no counted checkpoint at step %lld (see "
                "bramble checkpoint list %lld)", (long long)job, (long long)step,
                (long long)job);
    return found;
}

json_t *br_ckptpull_open(br_coord_t *c, const char *owner, int64_t id, int64_t step,
                         br_err_t *err)
{
    json_t *cp = NULL, *stored = NULL, *answer = NULL;
    pull_t *p = NULL;
    int slot = -1;
    if (!(cp = checkpoint_of(c, id, step, err)))
        goto fail;
    step = json_integer_value(json_object_get(cp, "step"));
    const json_t *sum = json_object_get(cp, "manifest");
    const char *hash = json_string_value(json_object_get(sum, "hash"));
    const char *writer = json_string_value(json_object_get(cp, "node"));
    const char *path = json_string_value(json_object_get(cp, "path"));
    if (!hash) {
        br_errf(err, ENOTSUP, "checkpoint step %lld of job %lld was counted without a "
                "manifest: it cannot be verified, so it is not pulled", (long long)step,
                (long long)id);
        goto fail;
    }
    const char *lhash;
    int64_t lsize;
    if (!(stored = br_store_checkpoint_manifest(c->store, id, hash, err)))
        goto fail;
    if (br_manifest_listing(stored, &lhash, &lsize, err) < 0) { /* an older agent's */
        br_errf(err, ENOTSUP, "checkpoint step %lld of job %lld has more files (%lld) "
                "than its manifest lists, and no whole listing was kept: it is not "
                "pulled", (long long)step, (long long)id,
                (long long)json_integer_value(json_object_get(sum, "files")));
        goto fail;
    }
    int from_store = 0;
    br_node_t *h = br_replicas_source(c, id, hash, writer ? writer : "", &from_store);
    if (!h) {
        br_errf(err, EHOSTUNREACH, "no node that holds checkpoint step %lld of job %lld "
                "is connected and serves checkpoints (written on %s; see bramble "
                "checkpoint list %lld)", (long long)step, (long long)id,
                writer ? writer : "?", (long long)id);
        goto fail;
    }
    for (int i = 0; i < BR_CKPTPULL_MAX && slot < 0; i++)
        if (!c->ckptpull->pulls[i])
            slot = i;
    if (slot < 0) {
        br_errf(err, EBUSY, "%d checkpoint pulls are open already: try again later",
                BR_CKPTPULL_MAX);
        goto fail;
    }
    const char *addr = json_string_value(json_object_get(h->info, "address"));
    int port = (int)json_integer_value(json_object_get(h->info, "replica_port"));
    p = calloc(1, sizeof(*p));
    if (!p || !(p->path = strdup(path ? path : "")) || !addr ||
        (size_t)snprintf(p->endpoint, sizeof(p->endpoint),
                         strchr(addr, ':') ? "tcp://[%s]:%d" : "tcp://%s:%d", addr,
                         port) >= sizeof(p->endpoint)) {
        br_errf(err, addr ? ENOMEM : EHOSTUNREACH, "%s",
                addr ? "out of memory" : "the holder's address is not known");
        goto fail;
    }
    unsigned char rnd[8];
    randombytes_buf(rnd, sizeof(rnd));
    sodium_bin2hex(p->id, sizeof(p->id), rnd, sizeof(rnd));
    br_strlcpy(p->owner, owner, sizeof(p->owner));
    br_strlcpy(p->holder, h->name, sizeof(p->holder));
    br_strlcpy(p->holder_key, h->pubkey, sizeof(p->holder_key));
    snprintf(p->grant, sizeof(p->grant), "%lld.%.16s.pull-%s", (long long)id, hash, p->id);
    p->job = id;
    p->step = step;
    p->from_store = from_store;
    p->manifest = json_incref(stored);
    p->used_at = p->granted_at = br_mono_ms();
    answer = json_pack("{s:s, s:I, s:I, s:s, s:O, s:s, s:b}", "xfer", p->id, "job",
                       (json_int_t)id, "step", (json_int_t)step, "path", p->path,
                       "manifest", stored, "from", h->name, "replica", from_store);
    if (!answer) {
        br_errf(err, ENOMEM, "out of memory");
        goto fail;
    }
    br_replicas_lend(c, h, from_store, id, step, p->path, stored, p->grant,
                     "the coordinator", c->cfg.public_key, BR_CKPTPULL_GRANT_MS);
    c->ckptpull->pulls[slot] = p;
    json_decref(stored);
    json_decref(cp);
    return answer;
fail:
    pull_free(p);
    json_decref(stored);
    json_decref(cp);
    return NULL;
}

static int connect_holder(br_coord_t *c, pull_t *p, br_err_t *err)
{
    /* watched from before it connects: a refusal of the first handshake is seen */
    p->sock = br_sock_client_watched(
        c->ckptpull->ctx, p->endpoint, p->holder_key, c->cfg.public_key, c->cfg.secret_key,
        1000, 10000, ZMQ_EVENT_HANDSHAKE_FAILED_AUTH | ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL,
        &p->mon, err);
    if (!p->sock)
        return -1;
    int zero = 0; /* a read that cannot go now is refused, never waited for */
    zmq_setsockopt(p->sock, ZMQ_SNDTIMEO, &zero, sizeof(zero));
    p->connected_at = br_mono_ms();
    return 0;
}

int br_ckptpull_read(br_coord_t *c, const char *owner, const char *xfer,
                     const char *path, const char *hash, int64_t offset, br_msg_t *answer,
                     br_err_t *err)
{
    int i = find(c, xfer, owner);
    pull_t *p = i < 0 ? NULL : c->ckptpull->pulls[i];
    json_t *ask = NULL;
    if (!p)
        return br_errf(err, ENOENT, "no checkpoint pull %.16s (closed, or not read from "
                       "for %d s)", xfer, BR_CKPTPULL_IDLE_MS / 1000);
    if (p->n == WINDOW)
        return br_errf(err, EAGAIN, "%d reads of this pull are in flight already", WINDOW);
    if (!p->sock && connect_holder(c, p, err) < 0) {
        br_err_prefix(err, "connecting to %s", p->holder);
        return -1;
    }
    if (!(ask = json_pack("{s:s, s:s, s:s, s:I}", "grant", p->grant, "path", path, "hash",
                          hash, "offset", (json_int_t)offset)))
        return br_errf(err, ENOMEM, "out of memory");
    if (pass_on(p, ask, err) < 0) {
        json_decref(ask);
        if (err->errnum == EAGAIN)
            br_errf(err, EAGAIN, "the link to %s is busy: ask again", p->holder);
        return -1;
    }
    int64_t now = br_mono_ms();
    p->win[(p->head + p->n++) % WINDOW] = (read_t){answer, ask, p->seq, now};
    p->used_at = now;
    if (now - p->granted_at > BR_CKPTPULL_GRANT_MS / 2) { /* renewed while used */
        br_node_t *h = br_nodes_find(c->nodes, p->holder);
        if (h)
            br_replicas_lend(c, h, p->from_store, p->job, p->step, p->path, p->manifest,
                             p->grant, "the coordinator", c->cfg.public_key,
                             BR_CKPTPULL_GRANT_MS);
        p->granted_at = now;
    }
    return 0;
}

void br_ckptpull_close(br_coord_t *c, const char *owner, const char *xfer)
{
    int i = find(c, xfer, owner);
    if (i >= 0)
        close_pull(c, i, ECANCELED, "the pull was closed");
}

/* --- hooks ---------------------------------------------------------------------- */

static void on_tick(br_coord_t *c, br_hook_arg_t *a, void *ctx)
{
    (void)a;
    br_ckptpull_t *cp = ctx;
    int64_t now = br_mono_ms();
    for (int i = 0; i < BR_CKPTPULL_MAX; i++)
        if (cp->pulls[i] && !cp->pulls[i]->n &&
            now - cp->pulls[i]->used_at > BR_CKPTPULL_IDLE_MS)
            close_pull(c, i, ETIMEDOUT, "the pull was not read from");
}

static void on_lost(br_coord_t *c, br_hook_arg_t *a, void *ctx)
{
    br_ckptpull_t *cp = ctx;
    char text[160];
    for (int i = 0; a->node && i < BR_CKPTPULL_MAX; i++)
        if (cp->pulls[i] && strcmp(cp->pulls[i]->holder, a->node->name) == 0) {
            snprintf(text, sizeof(text), "%s, which the checkpoint was read from, was lost: "
                     "pull it again", a->node->name);
            close_pull(c, i, EHOSTUNREACH, text);
        }
}

int br_ckptpull_init(br_coord_t *c)
{
    br_ckptpull_t *cp = c->ckptpull;
    return br_hooks_add(c->hooks, BR_HOOK_TICK, on_tick, cp) < 0 ||
                   br_hooks_add(c->hooks, BR_HOOK_NODE_LOST, on_lost, cp) < 0
               ? -1
               : 0;
}
