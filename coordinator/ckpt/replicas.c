/* replicas.c - the coordinator's side of checkpoint replicas (replicas.h). */
#include "replicas.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ckptdir.h"
#include "hooks.h"
#include "jobs.h"
#include "jobtab.h"
#include "util.h"
#include "netmap.h"
#include "stats.h"

void br_replicas_hello(br_node_t *n, int port)
{
    if (port > 0 && port <= 65535)
        json_object_set_new(n->info, "replica_port", json_integer(port));
    else
        json_object_del(n->info, "replica_port");
}

#define BAD_DISK "node.heartbeat: bad body: 'disk'"

int br_replicas_check_disk(json_t *disk, br_err_t *err)
{
    json_t *rep = NULL, *ck = NULL, *e;
    json_int_t quota = 0, used = 0, free_ = 0;
    json_error_t je;
    size_t i;
    if (json_unpack_ex(disk, &je, JSON_STRICT, "{s?o, s?o}", "replicas", &rep,
                       "checkpoints", &ck) < 0)
        return br_errf(err, EPROTO, BAD_DISK ": %s", je.text);
    if (rep && (json_unpack_ex(rep, &je, JSON_STRICT, "{s:I, s:I, s?I}", "quota",
                               &quota, "used", &used, "free", &free_) < 0 ||
                quota < -1 || used < 0 || free_ < 0))
        return br_errf(err, EPROTO,
                       BAD_DISK ": replicas: quota, used and free are sizes");
    if (ck && (!json_is_array(ck) || json_array_size(ck) > 64))
        return br_errf(err, EPROTO, BAD_DISK ": checkpoints: at most 64 of them");
    json_array_foreach (ck, i, e) {
        const char *dir;
        if (json_unpack_ex(e, &je, JSON_STRICT, "{s:s, s:I}", "dir", &dir, "free",
                           &free_) < 0 ||
            dir[0] != '/' || free_ < 0 || strlen(dir) > 4096)
            return br_errf(err, EPROTO, BAD_DISK ": checkpoints: {\"dir\", \"free\"}");
    }
    return 0;
}

static int64_t room(const br_replica_cand_t *c)
{
    int64_t r = c->quota < 0 ? INT64_MAX : c->quota - c->used;
    return c->free >= 0 && c->free < r ? c->free : r;
}

/* Better first: bandwidth, round trip, room, name. */
static int better(const br_replica_cand_t *a, const br_replica_cand_t *b)
{
    if (a->mbps != b->mbps)
        return a->mbps > b->mbps;
    int ar = a->rtt_ms >= 0, br = b->rtt_ms >= 0;
    if (ar != br)
        return ar;
    if (ar && a->rtt_ms != b->rtt_ms)
        return a->rtt_ms < b->rtt_ms;
    if (room(a) != room(b))
        return room(a) > room(b);
    return strcmp(a->node, b->node) < 0;
}

int br_replicas_pick(const br_replica_cand_t *c, int nc, const char *writer,
                     int64_t bytes, int n, int *out)
{
    int k = 0;
    for (int i = 0; i < nc && n > 0; i++) {
        if (!c[i].ready || !c[i].port || c[i].quota == 0 ||
            (writer && strcmp(c[i].node, writer) == 0) || room(&c[i]) < bytes)
            continue;
        /* insertion into the best n so far */
        int at = k;
        while (at > 0 && better(&c[i], &c[out[at - 1]]))
            at--;
        if (at >= n)
            continue;
        int last = k < n ? k : n - 1;
        for (int j = last; j > at; j--)
            out[j] = out[j - 1];
        out[at] = i;
        if (k < n)
            k++;
    }
    return k;
}

void br_replicas_grant_id(int64_t job, const char *hash, const char *target, char *buf,
                          size_t len)
{
    snprintf(buf, len, "%lld.%.16s.%s", (long long)job, hash ? hash : "", target);
}

static void add_owner(json_t *o, const br_replica_ckpt_t *k)
{
    if (k->dir)
        json_object_set_new(o, "dir", json_string(k->dir));
    if (k->owner_id > 0)
        json_object_set_new(o, "owner_id", json_integer(k->owner_id));
    if (k->unix_user)
        json_object_set_new(o, "unix_user", json_string(k->unix_user));
}

json_t *br_replicas_serve_order(const br_replica_ckpt_t *k, const char *grant,
                                const char *peer, const char *peer_key, int64_t ttl_ms,
                                int from_store)
{
    json_t *o = json_pack("{s:s, s:I, s:s, s:s, s:I, s:O, s:s}", "grant", grant, "job",
                          (json_int_t)k->job, "peer", peer, "peer_key", peer_key, "ttl",
                          (json_int_t)ttl_ms, "manifest", k->manifest, "path", k->path);
    if (o && from_store)
        json_object_set_new(o, "replica", json_true());
    else if (o)
        add_owner(o, k);
    return o;
}

json_t *br_replicas_fetch_order(const br_replica_ckpt_t *k, const char *grant,
                                const char *holder, const char *addr, int port,
                                const char *key, int restore)
{
    json_t *o = json_pack("{s:I, s:I, s:s, s:{s:s, s:s, s:i, s:s}, s:O, s:s}", "job",
                          (json_int_t)k->job, "step", (json_int_t)k->step, "grant",
                          grant, "from", "node", holder, "addr", addr, "port", port,
                          "key", key, "manifest", k->manifest, "path", k->path);
    if (o && restore) {
        json_object_set_new(o, "restore", json_true());
        add_owner(o, k);
    }
    return o;
}

/* --- the module ----------------------------------------------------------------- */

#define RESTORE_SILENT_MS (10 * 60000) /* a restore with no word for this long failed */
#define REPAIR_BITE 32   /* jobs the repair after a start looks at per tick */
#define TARGET_GONE (-1) /* (a pull's "errnum" when its target was lost) */
#define UNORDERED_MAX 4096 /* unordered copies remembered until the repair */

struct br_replicas {
    /* pulls ordered and not yet reported, by grant ("r/" + grant for restores):
     * {"job", "hash", "step", "path", "holder", "target", "store": bool (the
     * holder serves its replica), "at": mono ms; replicas also "tries": pulls of
     * this copy so far (1 the
     * first), "tried": ["HOLDER>TARGET"...] that failed, "drop"?: true when the job
     * was purged meanwhile (its copy is dropped once it arrives)} */
    json_t *pulls;
    /* attempts waiting for a restore, by "JOB.ATTEMPT": {"job", "attempt",
     * "target", "pull" (its key in pulls, "" when released), "tried": ["HASH16
     * NODE"...], "why": what failed last, "newest": the newest checkpoint's hash} */
    json_t *restores;
    /* measured by the pulls themselves: "HOLDER>PULLER" -> MB/s of the last pull
     * of at least RATE_MIN_BYTES (the netmap measures round trips only) */
    json_t *rates;
    /* after a start (or a rollback), once the nodes had time to come back: the
     * running jobs' newest checkpoints that lack copies are copied again, a few
     * jobs per tick from repair_from on (pulls in flight were not kept) */
    int repaired;
    int64_t repair_from;
    int loads; /* the jobs read: 1 after the start, more after rollbacks */
    /* verified copies that nodes reported without an order of this coordinator's
     * (it restarted meanwhile): [{"job", "hash", "node", "path", "step"}], dropped
     * from their nodes after the repair unless it ordered them again */
    json_t *unordered;
};

#define RATE_MIN_BYTES (4 << 20) /* smaller pulls say little about bandwidth */

br_replicas_t *br_replicas_new(void)
{
    br_replicas_t *r = calloc(1, sizeof(*r));
    if (!r)
        return NULL;
    r->pulls = json_object();
    r->restores = json_object();
    r->rates = json_object();
    r->unordered = json_array();
    if (!r->pulls || !r->restores || !r->rates || !r->unordered)
        br_replicas_destroy(&r);
    return r;
}

void br_replicas_destroy(br_replicas_t **rp)
{
    br_replicas_t *r = rp ? *rp : NULL;
    if (!r)
        return;
    json_decref(r->pulls);
    json_decref(r->restores);
    json_decref(r->rates);
    json_decref(r->unordered);
    free(r);
    *rp = NULL;
}

int br_replicas_wanted(const json_t *spec, int cluster_nodes)
{
    json_t *ck = json_object_get(spec, "checkpoint");
    if (!json_is_object(ck))
        return 0;
    json_t *n = json_object_get(ck, "replicas");
    if (json_is_integer(n))
        return (int)json_integer_value(n);
    return cluster_nodes >= 2 ? 1 : 0;
}

int br_replicas_keep(const json_t *spec)
{
    json_t *k = json_object_get(json_object_get(spec, "checkpoint"), "keep");
    return json_is_integer(k) && json_integer_value(k) > 0 ? (int)json_integer_value(k) : 2;
}

static int node_serves(const br_node_t *n)
{
    return n && n->state == BR_NODE_READY && n->route_len > 0 &&
           json_integer_value(json_object_get(n->info, "replica_port")) > 0;
}

/* The job's spec (new reference), from memory or the store. */
static json_t *spec_of(br_coord_t *c, int64_t id, int64_t *owner_id)
{
    br_job_t *j = br_jobtab_find(c->jobs, id);
    if (j) {
        *owner_id = j->owner_id;
        return json_incref(j->spec);
    }
    json_t *row = br_store_job_get(c->store, id, NULL);
    json_t *spec = json_incref(json_object_get(row, "spec"));
    *owner_id = json_integer_value(json_object_get(row, "owner_id"));
    json_decref(row);
    return spec;
}

/* The key of a pull in pulls: its grant's name, after "r/" for a restore. */
static void pull_key(const char *grant, int restore, char *buf, size_t len)
{
    snprintf(buf, len, "%s%s", restore ? "r/" : "", grant);
}

/* Where a restore on target reads from, for its events. */
static const char *restore_source(const br_node_t *holder, const br_node_t *target,
                                  int from_store)
{
    return holder != target ? holder->name
           : from_store     ? "its own replica"
                            : "its own files (checked where they lie)";
}

/* Order holder to let target pull k, and target to pull it (restore: into its own
 * path), both at once: the two orders go on two links, and the puller takes a
 * refusal of its key in its first second for a grant still on its way
 * (agent/pull.c), so that copying starts as soon as a checkpoint is counted.
 * Remembered under key until ckpt.stored says how it went. Its record in pulls
 * (borrowed), or NULL when out of memory. */
static json_t *order_pull(br_coord_t *c, br_replicas_t *r, const br_replica_ckpt_t *k,
                          const char *hash, br_node_t *holder, int from_store,
                          br_node_t *target, int restore, char *key, size_t keylen)
{
    char grant[160];
    br_replicas_grant_id(k->job, hash, target->name, grant, sizeof(grant));
    pull_key(grant, restore, key, keylen);
    json_t *serve = br_replicas_serve_order(k, grant, target->name, target->pubkey,
                                            BR_REPLICAS_GRANT_TTL_MS, from_store);
    const char *addr = json_string_value(json_object_get(holder->info, "address"));
    int port = (int)json_integer_value(json_object_get(holder->info, "replica_port"));
    json_t *fetch = br_replicas_fetch_order(k, grant, holder->name, addr ? addr : "",
                                            port, holder->pubkey, restore);
    if (!serve || !fetch) {
        json_decref(serve);
        json_decref(fetch);
        return NULL;
    }
    br_coord_send_node(c, holder, "ckpt.serve", serve);
    br_coord_send_node(c, target, "ckpt.fetch", fetch);
    int64_t now = br_mono_ms();
    json_t *e = json_pack("{s:I, s:s, s:I, s:s, s:s, s:s, s:b, s:I, s:I}", "job",
                          (json_int_t)k->job, "hash", hash, "step", (json_int_t)k->step,
                          "path", k->path, "holder", holder->name, "target", target->name,
                          "store", from_store, "at", (json_int_t)now, "bytes",
                          json_integer_value(json_object_get(k->manifest, "bytes")));
    json_object_set_new(r->pulls, key, e);
    return e;
}

/* Fill k for job's checkpoint (path, step, manifest) with its owner's details. */
static void ckpt_of(br_coord_t *c, br_replica_ckpt_t *k, int64_t job, const json_t *spec,
                    int64_t owner_id, const char *path, int64_t step,
                    const json_t *manifest, json_t **section, char *user, size_t ulen)
{
    *section = br_ckptdir_section((json_t *)spec, job);
    user[0] = 0;
    if (owner_id > 0)
        br_store_unix_user_get(c->store, owner_id, user, ulen, NULL);
    *k = (br_replica_ckpt_t){.job = job,
                             .step = step,
                             .manifest = manifest,
                             .path = path,
                             .dir = json_string_value(json_object_get(*section, "dir")),
                             .owner_id = owner_id,
                             .unix_user = user[0] ? user : NULL};
}

static double rate_of(br_replicas_t *r, const char *from, const char *to)
{
    char k[140];
    snprintf(k, sizeof(k), "%s>%s", from, to);
    return json_real_value(json_object_get(r->rates, k));
}

/* A pull of bytes from holder to puller took secs: remember the rate. */
static void measured(br_replicas_t *r, const char *holder, const char *puller, int64_t bytes,
                     double secs)
{
    if (bytes < RATE_MIN_BYTES || secs <= 0 || json_object_size(r->rates) > 65536)
        return;
    char k[140];
    snprintf(k, sizeof(k), "%s>%s", holder, puller);
    json_object_set_new(r->rates, k, json_real((double)bytes / 1e6 / secs));
}

/* Every node as a candidate to hold a copy of a checkpoint written on writer: into
 * *cand and *of (the caller frees both); their count, or -1 when out of memory. */
static int candidates(br_coord_t *c, br_replicas_t *r, const char *writer,
                      br_replica_cand_t **cand, br_node_t ***of)
{
    int count = 0, nc = 0;
    for (br_node_t *n = br_nodes_first(c->nodes); n; n = n->next)
        count++;
    *cand = calloc((size_t)count + 1, sizeof(**cand));
    *of = calloc((size_t)count + 1, sizeof(**of));
    if (!*cand || !*of)
        return -1;
    for (br_node_t *n = br_nodes_first(c->nodes); n; n = n->next, nc++) {
        json_t *rep = json_object_get(json_object_get(n->info, "disk"), "replicas");
        json_t *q = json_object_get(rep, "quota"), *f = json_object_get(rep, "free");
        double rtt = br_netmap_rtt(c->netmap, writer, n->name);
        (*of)[nc] = n;
        (*cand)[nc] = (br_replica_cand_t){
            .node = n->name,
            .ready = n->state == BR_NODE_READY && n->route_len > 0,
            .port = (int)json_integer_value(json_object_get(n->info, "replica_port")),
            .quota = json_is_integer(q) ? json_integer_value(q) : -1,
            .used = json_integer_value(json_object_get(rep, "used")),
            .free = json_is_integer(f) ? json_integer_value(f) : -1,
            .mbps = rate_of(r, writer, n->name),
            .rtt_ms = rtt >= 0 ? rtt : -1};
    }
    return nc;
}

/* Take out of the candidates the nodes that hold job's checkpoint hash or pull it
 * now: how many they are. */
static int holding(br_coord_t *c, br_replicas_t *r, int64_t job, const char *hash,
                   br_replica_cand_t *cand, int nc)
{
    json_t *reps = br_store_replica_list(c->store, job, NULL);
    int n = 0;
    for (int i = 0; i < nc; i++) {
        char grant[160];
        br_replicas_grant_id(job, hash, cand[i].node, grant, sizeof(grant));
        int has = json_object_get(r->pulls, grant) != NULL;
        size_t j;
        json_t *rp;
        json_array_foreach(reps, j, rp) has |=
            strcmp(json_string_value(json_object_get(rp, "hash")), hash) == 0 &&
            strcmp(json_string_value(json_object_get(rp, "node")), cand[i].node) == 0;
        if (has) {
            cand[i].ready = 0;
            n++;
        }
    }
    json_decref(reps);
    return n;
}

/* Have checkpoint.replicas nodes other than writer hold job's checkpoint (path,
 * step, manifest): those that hold it or pull it already count, the others are
 * ordered to pull it from writer; note ends the event that says so. */
static void replicate(br_coord_t *c, br_replicas_t *r, br_job_t *job, br_node_t *writer,
                      const char *path, int64_t step, const json_t *manifest,
                      const char *note)
{
    const char *hash = json_string_value(json_object_get(manifest, "hash"));
    br_replica_cand_t *cand = NULL;
    br_node_t **of = NULL;
    int nc = candidates(c, r, writer->name, &cand, &of);
    int want = br_replicas_wanted(job->spec, nc);
    if (want > BR_REPLICAS_MAX)
        want = BR_REPLICAS_MAX;
    if (nc > 0 && want > 0) /* (a checkpoint reported again: those count) */
        want -= holding(c, r, job->id, hash, cand, nc);
    if (nc < 0 || want <= 0) {
        free(cand);
        free(of);
        return;
    }
    int out[BR_REPLICAS_MAX];
    int64_t bytes = json_integer_value(json_object_get(manifest, "bytes"));
    int k = br_replicas_pick(cand, nc, writer->name, bytes, want, out);
    json_t *section = NULL;
    char user[64], key[200], names[512] = "";
    br_replica_ckpt_t ck;
    ckpt_of(c, &ck, job->id, job->spec, job->owner_id, path, step, manifest, &section,
            user, sizeof(user));
    size_t used = 0;
    for (int i = 0; i < k; i++) {
        order_pull(c, r, &ck, hash, writer, 0, of[out[i]], 0, key, sizeof(key));
        used += (size_t)snprintf(names + used, used < sizeof(names) ? sizeof(names) - used : 0,
                                 "%s%s", i ? ", " : "", of[out[i]]->name);
        if (used >= sizeof(names))
            used = sizeof(names) - 1;
    }
    if (k > 0)
        br_coord_event(c, job->id, writer->name, "replica",
                       "checkpoint %s (step %lld) is being copied to %s%s", path,
                       (long long)step, names, note);
    else {
        char why[512];
        snprintf(why, sizeof(why),
                 "checkpoint.replicas is %d, but no other node can hold a copy of "
                 "checkpoints now (none ready that serves, has room and takes replicas)",
                 want);
        if (br_store_event_seen(c->store, job->id, why, NULL) == 0)
            br_coord_event(c, job->id, writer->name, "replica", "%s", why);
    }
    json_decref(section);
    free(cand);
    free(of);
}

/* A counted checkpoint: have checkpoint.replicas other nodes pull it. */
static void on_checkpoint(br_coord_t *c, br_hook_arg_t *a, void *ctx)
{
    const char *hash = json_string_value(json_object_get(a->manifest, "hash"));
    if (a->job && a->node && hash && a->reason)
        replicate(c, ctx, a->job, a->node, a->reason, a->step, a->manifest, "");
}

int br_replicas_drop(br_coord_t *c, int64_t job, const json_t *row, const char *why)
{
    const char *hash = json_string_value(json_object_get(row, "hash"));
    const char *node = json_string_value(json_object_get(row, "node"));
    if (!hash || !node)
        return 0;
    br_node_t *n = br_nodes_find(c->nodes, node);
    int told = n && n->route_len > 0; /* (a lost node's agent hears nothing) */
    if (told)
        br_coord_send_node(
            c, n, "ckpt.drop",
            json_pack("{s:I, s:s}", "job", (json_int_t)job, "hash", hash));
    br_store_replica_del(c->store, job, hash, node, NULL);
    br_coord_event(
        c, job, node, "replica", "replica of checkpoint %s (step %lld) %s %s: %s%s",
        json_string_value(json_object_get(row, "path")),
        (long long)json_integer_value(json_object_get(row, "step")),
        told ? "dropped from" : "forgotten on", node, why,
        told ? "" : " (the node is not connected: its copy stays on its disk)");
    return told;
}

void br_replicas_purged(br_coord_t *c, int64_t job)
{
    br_replicas_t *r = c->replicas;
    const char *key;
    json_t *e;
    if (r)
        json_object_foreach (r->pulls, key, e)
            if (json_integer_value(json_object_get(e, "job")) == job)
                json_object_set_new(e, "drop", json_true());
}

/* Keep only the newest keep checkpoints of job as replicas: drop the others. */
static void prune(br_coord_t *c, int64_t job, int keep)
{
    json_t *list = br_store_replica_list(c->store, job, NULL);
    json_t *hashes = json_object(), *row;
    size_t i;
    char why[64];
    snprintf(why, sizeof(why), "checkpoint.keep is %d", keep);
    json_array_foreach(list, i, row) {
        const char *hash = json_string_value(json_object_get(row, "hash"));
        if (!json_object_get(hashes, hash))
            json_object_set_new(hashes, hash, json_integer((json_int_t)json_object_size(hashes)));
        if (json_integer_value(json_object_get(hashes, hash)) >= keep)
            br_replicas_drop(c, job, row, why);
    }
    json_decref(hashes);
    json_decref(list);
}

static void restore_key(char *buf, size_t len, int64_t job, int attempt)
{
    snprintf(buf, len, "%lld.%d", (long long)job, attempt);
}

/* Order the next restore for job's attempt on target: the newest checkpoint that
 * has a copy not yet tried on a node that serves (target's own first, then the
 * nearest), else (unless only_newest) an older one. e: the restore's record
 * (new on the first call). 1 when a pull was ordered; 0 when nothing is left. */
static int next_restore(br_coord_t *c, br_replicas_t *r, br_job_t *job, br_node_t *target,
                        json_t *e, int only_newest)
{
    json_t *ckpts = br_store_checkpoint_list(c->store, job->id, NULL);
    json_t *reps = br_store_replica_list(c->store, job->id, NULL);
    json_t *tried = json_object_get(e, "tried");
    const char *newest = json_string_value(json_object_get(e, "newest"));
    int ordered = 0;
    for (size_t i = json_array_size(ckpts); i-- > 0 && !ordered;) {
        json_t *cp = json_array_get(ckpts, i);
        const char *hash = json_string_value(json_object_get(json_object_get(cp, "manifest"), "hash"));
        const char *writer = json_string_value(json_object_get(cp, "node"));
        if (!hash)
            continue;
        br_node_t *best = NULL;
        int best_store = 0;
        double best_rtt = 1e300;
        size_t j;
        json_t *rp;
        for (j = 0; j <= json_array_size(reps); j++) { /* the replicas, then the writer */
            rp = j < json_array_size(reps) ? json_array_get(reps, j) : NULL;
            if (rp && strcmp(json_string_value(json_object_get(rp, "hash")), hash) != 0)
                continue;
            const char *name = rp ? json_string_value(json_object_get(rp, "node")) : writer;
            br_node_t *h = br_nodes_find(c->nodes, name);
            char t[160];
            snprintf(t, sizeof(t), "%.16s %s", hash, name);
            int seen = 0;
            size_t x;
            json_t *tv;
            json_array_foreach(tried, x, tv) seen |= strcmp(json_string_value(tv), t) == 0;
            if (seen || !node_serves(h))
                continue;
            double rtt = h == target ? -1 : br_netmap_rtt(c->netmap, target->name, h->name);
            if (rtt < 0 && h != target)
                rtt = 1e9; /* not measured: after the measured ones */
            if (rp == NULL && best)
                continue; /* the writer only when no replica serves */
            if (!best || rtt < best_rtt) {
                best = h;
                best_rtt = rtt;
                best_store = rp != NULL;
            }
        }
        if (!best && only_newest)
            break;
        if (!best)
            continue;
        json_t *m = br_store_checkpoint_manifest(c->store, job->id, hash, NULL);
        if (!m)
            continue;
        const char *path = json_string_value(json_object_get(cp, "path"));
        int64_t step = json_integer_value(json_object_get(cp, "step"));
        json_t *section = NULL;
        char user[64], key[200], t[160];
        br_replica_ckpt_t ck;
        ckpt_of(c, &ck, job->id, job->spec, job->owner_id, path, step, m, &section, user,
                sizeof(user));
        order_pull(c, r, &ck, hash, best, best_store, target, 1, key, sizeof(key));
        snprintf(t, sizeof(t), "%.16s %s", hash, best->name);
        json_array_append_new(tried, json_string(t));
        json_object_set_new(e, "pull", json_string(key));
        const char *why = json_string_value(json_object_get(e, "why"));
        if (newest && strcmp(newest, hash) != 0)
            br_coord_event(c, job->id, target->name, "restore",
                           "no good copy of the newest checkpoint%s%s; attempt %d falls back "
                           "to %s (step %lld): restoring it on %s from %s",
                           why ? ": " : "", why ? why : "", job->attempt, path,
                           (long long)step, target->name,
                           restore_source(best, target, best_store));
        else
            br_coord_event(c, job->id, target->name, "restore",
                           "attempt %d waits for checkpoint %s (step %lld): restoring it on "
                           "%s from %s",
                           job->attempt, path, (long long)step, target->name,
                           restore_source(best, target, best_store));
        json_decref(section);
        json_decref(m);
        ordered = 1;
    }
    json_decref(ckpts);
    json_decref(reps);
    return ordered;
}

/* job.run for rank 0 of a resuming attempt is about to go: hold it while the
 * newest checkpoint is restored on the node from a copy and verified, also when
 * the node wrote it itself (then from a replica, else from its own files: they
 * are hashed where they lie, and a damaged one is refused), unless no node that
 * serves holds a copy of it (the agent then checks what it sees). When the agent says
 * it cannot see it (cause "not_here"), an older checkpoint that has a copy is
 * restored instead, once per attempt. */
static void on_resuming(br_coord_t *c, br_hook_arg_t *a, void *ctx)
{
    br_replicas_t *r = ctx;
    br_job_t *job = a->job;
    int not_here = a->cause && strcmp(a->cause, "not_here") == 0;
    char key[64], nh[80];
    restore_key(key, sizeof(key), job->id, job->attempt);
    snprintf(nh, sizeof(nh), "%s.not_here", key);
    json_t *e = json_object_get(r->restores, key);
    if (e && !not_here) {
        if (*json_string_value(json_object_get(e, "pull")))
            a->hold = 1; /* under way (a heartbeat's reconcile asks again) */
        else
            json_object_del(r->restores, key); /* done: let it go */
        return;
    }
    if (not_here && json_object_get(r->restores, nh))
        return; /* restored once already, and still not seen: the core decides */
    json_t *latest = br_store_checkpoint_latest(c->store, job->id, NULL);
    const char *writer = json_string_value(json_object_get(latest, "node"));
    const char *hash =
        json_string_value(json_object_get(json_object_get(latest, "manifest"), "hash"));
    if (hash && writer) { /* also on the writer's own node: verified before use */
        e = json_pack("{s:I, s:i, s:s, s:s, s:[], s:s}", "job", (json_int_t)job->id,
                      "attempt", job->attempt, "target", a->node->name, "pull", "", "tried",
                      "newest", hash);
        if (e && not_here)
            json_object_set_new(e, "why", json_string(a->reason ? a->reason : "not visible"));
        if (e && next_restore(c, r, job, a->node, e, !not_here)) {
            json_object_set(r->restores, key, e);
            if (not_here)
                json_object_set_new(r->restores, nh,
                                    json_pack("{s:I, s:s}", "job", (json_int_t)job->id,
                                              "pull", ""));
            a->hold = 1;
        }
        json_decref(e);
    }
    json_decref(latest);
}

/* A restore's pull ended (error NULL: verified): start the attempt, or try the
 * next copy. */
static void restore_ended(br_coord_t *c, br_replicas_t *r, json_t *pull, const char *error,
                          int errnum, int64_t received, int64_t deduped)
{
    int64_t id = json_integer_value(json_object_get(pull, "job"));
    const char *hash = json_string_value(json_object_get(pull, "hash"));
    const char *path = json_string_value(json_object_get(pull, "path"));
    const char *holder = json_string_value(json_object_get(pull, "holder"));
    const char *tname = json_string_value(json_object_get(pull, "target"));
    int64_t step = json_integer_value(json_object_get(pull, "step"));
    br_job_t *job = br_jobtab_find(c->jobs, id);
    char key[64];
    json_t *e = NULL;
    if (job) {
        restore_key(key, sizeof(key), id, job->attempt);
        e = json_object_get(r->restores, key);
    }
    if (!e || job->state != BR_JOB_STARTING) { /* the attempt is over: nothing waits */
        if (e)
            json_object_del(r->restores, key);
        return;
    }
    if (!error) {
        double secs = (double)(br_mono_ms() - json_integer_value(json_object_get(pull, "at"))) / 1000.0;
        char got[32], same[32], rate[32];
        br_format_size((uint64_t)received, got, sizeof(got));
        br_format_size((uint64_t)deduped, same, sizeof(same));
        br_format_size((uint64_t)(secs > 0.001 ? (double)received / secs : (double)received),
                       rate, sizeof(rate));
        measured(r, holder, tname, received, secs);
        int own = strcmp(holder, tname) == 0;
        br_coord_event(c, id, tname, "restore",
                       "checkpoint %s (step %lld, %.16s) restored and verified on %s from "
                       "%s%s: %s received (%s already there) in %.1f s, %s/s",
                       path, (long long)step, hash, tname,
                       !own ? holder
                       : json_is_true(json_object_get(pull, "store")) ? "its own replica"
                                                                      : "its own files",
                       json_is_true(json_object_get(pull, "store")) || own ? ""
                                                                          : " (the writer)",
                       got, same, secs, rate);
        const char *newest = json_string_value(json_object_get(e, "newest"));
        if (newest && strcmp(newest, hash) != 0) { /* an older one: this attempt only */
            br_job_set_resume(job, path, step); /* (out of memory: the newest) */
        }
        json_object_set_new(e, "pull", json_string(""));
        br_jobs_release(c, id, job->attempt);
        return;
    }
    char why[600];
    snprintf(why, sizeof(why), "the copy on %s: %s", holder, error);
    json_object_set_new(e, "why", json_string(why));
    br_coord_event(c, id, tname, "restore", "restore of checkpoint %s (step %lld) on %s from %s failed: %s",
                   path, (long long)step, tname, holder, error);
    if (errnum == EBADMSG && json_is_true(json_object_get(pull, "store"))) {
        /* that replica is bad: forget it */
        br_node_t *h = br_nodes_find(c->nodes, holder);
        if (h)
            br_coord_send_node(c, h, "ckpt.drop",
                               json_pack("{s:I, s:s}", "job", (json_int_t)id, "hash", hash));
        br_store_replica_del(c->store, id, hash, holder, NULL);
    }
    br_node_t *target = br_nodes_find(c->nodes, tname);
    if (target && next_restore(c, r, job, target, e, 0))
        return;
    br_coord_event(c, id, tname, "restore",
                   "no good copy of any checkpoint of job %lld could be restored on %s; "
                   "attempt %d starts there if the agent sees the newest checkpoint",
                   (long long)id, tname, job->attempt);
    json_object_set_new(e, "pull", json_string(""));
    br_jobs_release(c, id, job->attempt);
}

/* Whether tried lists "HOLDER>TARGET" (holder NULL: any holder to target). */
static int was_tried(const json_t *tried, const char *holder, const char *target)
{
    size_t i;
    json_t *t;
    json_array_foreach (tried, i, t) {
        const char *s = json_string_value(t), *gt = s ? strchr(s, '>') : NULL;
        if (gt && strcmp(gt + 1, target) == 0 &&
            (!holder || ((size_t)(gt - s) == strlen(holder) &&
                         strncmp(s, holder, strlen(holder)) == 0)))
            return 1;
    }
    return 0;
}

/* Where target (NULL: a client that is no node) can pull job's checkpoint hash
 * from, not tried yet: its writer first, then the verified replica nearest to
 * target; *from_store: a replica. NULL: none. */
static br_node_t *pick_source(br_coord_t *c, int64_t job, const char *hash,
                              const char *writer, br_node_t *target,
                              const json_t *tried, int *from_store)
{
    br_node_t *w = br_nodes_find(c->nodes, writer), *best = NULL;
    const char *to = target ? target->name : "";
    *from_store = 0;
    if (w != target && node_serves(w) && !was_tried(tried, w->name, to))
        return w;
    json_t *reps = br_store_replica_list(c->store, job, NULL), *rp;
    double best_rtt = 1e300;
    size_t i;
    json_array_foreach (reps, i, rp) {
        br_node_t *h =
            br_nodes_find(c->nodes, json_string_value(json_object_get(rp, "node")));
        if (strcmp(json_string_value(json_object_get(rp, "hash")), hash) != 0 ||
            h == target || !node_serves(h) || was_tried(tried, h->name, to))
            continue;
        double rtt = target ? br_netmap_rtt(c->netmap, target->name, h->name) : -1;
        if (rtt < 0)
            rtt = 1e9; /* not measured: after the measured ones */
        if (!best || rtt < best_rtt) {
            best = h;
            best_rtt = rtt;
        }
    }
    json_decref(reps);
    *from_store = best != NULL;
    return best;
}

void br_replicas_withdraw(br_coord_t *c, br_node_t *holder, int64_t job, const char *grant,
                          const char *path)
{
    /* (the holder reads nothing but the grant's name from a withdrawal) */
    json_t *o = json_pack("{s:s, s:I, s:s, s:s, s:I, s:{}, s:s}", "grant", grant, "job",
                          (json_int_t)job, "peer", "-", "peer_key", "", "ttl",
                          (json_int_t)0, "manifest", "path", path);
    if (holder && o)
        br_coord_send_node(c, holder, "ckpt.serve", o);
    else
        json_decref(o);
}

br_node_t *br_replicas_source(br_coord_t *c, int64_t job, const char *hash,
                              const char *writer, int *from_store)
{
    return pick_source(c, job, hash, writer, NULL, NULL, from_store);
}

void br_replicas_lend(br_coord_t *c, br_node_t *holder, int from_store, int64_t job,
                      int64_t step, const char *path, const json_t *manifest,
                      const char *grant, const char *peer, const char *peer_key,
                      int64_t ttl_ms)
{
    int64_t owner_id = 0;
    json_t *spec = spec_of(c, job, &owner_id), *section = NULL;
    char user[64];
    br_replica_ckpt_t k;
    ckpt_of(c, &k, job, spec, owner_id, path, step, manifest, &section, user,
            sizeof(user));
    json_t *serve = br_replicas_serve_order(&k, grant, peer, peer_key, ttl_ms, from_store);
    if (serve)
        br_coord_send_node(c, holder, "ckpt.serve", serve);
    json_decref(section);
    json_decref(spec);
}

/* Another node to hold job's checkpoint hash (bytes, written on writer): one that
 * neither holds nor pulls it and was not tried as a target. NULL: none. */
static br_node_t *other_target(br_coord_t *c, br_replicas_t *r, int64_t job,
                               const char *hash, const char *writer, int64_t bytes,
                               const json_t *tried)
{
    br_replica_cand_t *cand = NULL;
    br_node_t **of = NULL, *t = NULL;
    int nc = candidates(c, r, writer, &cand, &of), out[1];
    if (nc > 0) {
        holding(c, r, job, hash, cand, nc);
        for (int i = 0; i < nc; i++)
            if (was_tried(tried, NULL, cand[i].node))
                cand[i].ready = 0;
        if (br_replicas_pick(cand, nc, writer, bytes, 1, out) == 1)
            t = of[out[0]];
    }
    free(cand);
    free(of);
    return t;
}

/* A replica's pull failed on its target (errnum, error): pulled again, at most
 * BR_REPLICAS_TRIES times in all, by another node when the target had no room
 * (ENOSPC, EDQUOT, EFBIG) or went away (TARGET_GONE), else by the same target from
 * another node that has the checkpoint; an event says what failed and what next. */
static void replica_failed(br_coord_t *c, br_replicas_t *r, const json_t *pull,
                           int errnum, const char *error)
{
    int64_t id = json_integer_value(json_object_get(pull, "job"));
    int64_t step = json_integer_value(json_object_get(pull, "step"));
    const char *hash = json_string_value(json_object_get(pull, "hash"));
    const char *path = json_string_value(json_object_get(pull, "path"));
    const char *holder = json_string_value(json_object_get(pull, "holder"));
    const char *tname = json_string_value(json_object_get(pull, "target"));
    json_t *tries_v = json_object_get(pull, "tries");
    int tries = json_is_integer(tries_v) ? (int)json_integer_value(tries_v) : 1;
    int elsewhere = errnum == ENOSPC || errnum == EDQUOT || errnum == EFBIG ||
                    errnum == TARGET_GONE;
    if (errnum == ECANCELED && error && strstr(error, "superseded")) {
        /* its puller left it out for a newer checkpoint's copy (agent/puller.h) */
        br_coord_event(c, id, tname, "replica",
                       "replica of checkpoint %s (step %lld) skipped on %s: a newer "
                       "checkpoint's copy was queued there before it began",
                       path, (long long)step, tname);
        return;
    }
    json_t *tried = json_deep_copy(json_object_get(pull, "tried"));
    if (!tried)
        tried = json_array();
    char t[160], then[300];
    snprintf(t, sizeof(t), "%s>%s", holder, tname);
    json_array_append_new(tried, json_string(t));
    /* (also when the job has ended meanwhile: its copies are kept for a while) */
    int64_t owner = 0;
    int purged = json_is_true(json_object_get(pull, "drop"));
    json_t *spec = purged ? NULL : spec_of(c, id, &owner);
    json_t *m = spec ? br_store_checkpoint_manifest(c->store, id, hash, NULL) : NULL;
    json_t *latest = m ? br_store_checkpoint_latest(c->store, id, NULL) : NULL;
    json_t *mh = json_object_get(json_object_get(latest, "manifest"), "hash");
    const char *writer = json_string_value(json_object_get(latest, "node"));
    br_node_t *dst = NULL, *src = NULL;
    int from_store = 0;
    if (!spec)
        snprintf(then, sizeof(then), "the job was purged: not tried again");
    else if (!m || !writer || !json_is_string(mh) ||
             strcmp(json_string_value(mh), hash))
        snprintf(then, sizeof(then), "a newer checkpoint is copied instead");
    else if (tries >= BR_REPLICAS_TRIES)
        snprintf(then, sizeof(then), "given up after %d tries", tries);
    else {
        if (elsewhere)
            dst = other_target(c, r, id, hash, writer,
                               json_integer_value(json_object_get(m, "bytes")), tried);
        else if ((dst = br_nodes_find(c->nodes, tname)) && !node_serves(dst))
            dst = NULL;
        src = dst ? pick_source(c, id, hash, writer, dst, tried, &from_store) : NULL;
        if (!src)
            snprintf(then, sizeof(then), "%s",
                     elsewhere ? "no other node can hold it now"
                               : "no other node that has it "
                                 "serves it now");
    }
    if (src) {
        json_t *section = NULL;
        char user[64], key[200];
        br_replica_ckpt_t ck;
        ckpt_of(c, &ck, id, spec, owner, path, step, m, &section, user, sizeof(user));
        json_t *e =
            order_pull(c, r, &ck, hash, src, from_store, dst, 0, key, sizeof(key));
        if (e) {
            json_object_set_new(e, "tries", json_integer(tries + 1));
            json_object_set(e, "tried", tried);
        }
        snprintf(then, sizeof(then), "pulled again by %s from %s (try %d of %d)",
                 dst->name, src->name, tries + 1, BR_REPLICAS_TRIES);
        json_decref(section);
    }
    br_coord_event(c, id, tname, "replica",
                   "replica of checkpoint %s (step %lld) failed on %s: %s; %s", path,
                   (long long)step, tname, error, then);
    json_decref(latest);
    json_decref(m);
    json_decref(spec);
    json_decref(tried);
}

/* Whether node holds job's checkpoint hash as a recorded replica, or pulls it. */
static int known_copy(br_coord_t *c, br_replicas_t *r, int64_t job, const char *hash,
                      const char *node)
{
    char grant[160];
    br_replicas_grant_id(job, hash, node, grant, sizeof(grant));
    json_t *reps = br_store_replica_list(c->store, job, NULL), *rp;
    int known = json_object_get(r->pulls, grant) != NULL;
    size_t i;
    json_array_foreach (reps, i, rp)
        known |= strcmp(json_string_value(json_object_get(rp, "hash")), hash) == 0 &&
                 strcmp(json_string_value(json_object_get(rp, "node")), node) == 0;
    json_decref(reps);
    return known;
}

/* Drop the copies that nodes reported but this coordinator did not order (it
 * restarted while they were pulled), unless they are known by now. */
static void drop_unordered(br_coord_t *c, br_replicas_t *r)
{
    size_t i;
    json_t *u;
    json_array_foreach (r->unordered, i, u) {
        int64_t job = json_integer_value(json_object_get(u, "job"));
        const char *hash = json_string_value(json_object_get(u, "hash"));
        const char *node = json_string_value(json_object_get(u, "node"));
        br_node_t *n = br_nodes_find(c->nodes, node);
        if (known_copy(c, r, job, hash, node) || !n || n->route_len == 0)
            continue;
        br_coord_send_node(c, n, "ckpt.drop",
                           json_pack("{s:I, s:s}", "job", (json_int_t)job, "hash", hash));
        json_t *row = br_store_job_get(c->store, job, NULL);
        if (row) /* (a job this store knows) */
            br_coord_event(c, job, node, "replica",
                           "replica of checkpoint %s (step %lld) dropped from %s: it is not "
                           "needed, and its pull is none this coordinator waits for (one "
                           "ordered before a restart or a store rollback, or given up on since)",
                           json_string_value(json_object_get(u, "path")),
                           (long long)json_integer_value(json_object_get(u, "step")), node);
        json_decref(row);
    }
    json_array_clear(r->unordered);
}

/* node reports a verified copy that was not ordered (an order from before a
 * restart): kept if the copies ordered again after the restart take it in (the
 * same node pulls it again, finding it there), else dropped once those are
 * ordered. */
static void unordered(br_coord_t *c, br_replicas_t *r, int64_t job, const char *hash,
                      const char *node, const char *path, int64_t step)
{
    if (json_array_size(r->unordered) < UNORDERED_MAX)
        json_array_append_new(r->unordered,
                              json_pack("{s:I, s:s, s:s, s:s, s:I}", "job", (json_int_t)job,
                                        "hash", hash, "node", node, "path", path, "step",
                                        (json_int_t)step));
    if (r->repaired)
        drop_unordered(c, r);
}

/* A node says how a pull it was ordered went. Only pulls this coordinator
 * ordered, to that node, are taken. */
int br_replicas_stored(br_coord_t *c, const char *node, const br_replica_stored_t *s,
                       br_err_t *err)
{
    int64_t job = s->job, step = s->step, received = s->received, deduped = s->deduped;
    const char *hash = s->hash, *path = s->path, *error = s->error;
    int restore = s->restore, errnum = s->errnum;
    br_replicas_t *r = c->replicas;
    char grant[160], key[200];
    br_replicas_grant_id(job, hash, node, grant, sizeof(grant));
    pull_key(grant, restore, key, sizeof(key));
    json_t *pull = r ? json_object_get(r->pulls, key) : NULL;
    if (!pull || strcmp(json_string_value(json_object_get(pull, "hash")), hash) != 0) {
        if (r && !restore && !error) /* a copy nobody will know of: not to stay */
            unordered(c, r, job, hash, node, path, step);
        return br_errf(err, EPERM, "no %s of checkpoint %.16s of job %lld to %s was "
                       "ordered", restore ? "restore" : "replica", hash, (long long)job,
                       node);
    }
    json_incref(pull);
    json_object_del(r->pulls, key);
    const char *holder = json_string_value(json_object_get(pull, "holder"));
    /* the pull is over, however it went: its grant goes now rather than when it
     * lapses (before any order below grants the same name again), unless the
     * other kind of pull of the same checkpoint by the same node (a restore and a
     * replica share the grant's name) still reads from the same holder */
    char sibling[200];
    pull_key(grant, !restore, sibling, sizeof(sibling));
    const char *sib_holder =
        json_string_value(json_object_get(json_object_get(r->pulls, sibling), "holder"));
    if (!sib_holder || strcmp(sib_holder, holder) != 0)
        br_replicas_withdraw(c, br_nodes_find(c->nodes, holder), job, grant, path);
    if (!error)
        br_stats_pulled(c->stats, restore, received, deduped);
    if (restore) {
        restore_ended(c, r, pull, error, errnum, received, deduped);
    } else if (error) {
        replica_failed(c, r, pull, errnum, error);
    } else if (json_is_true(json_object_get(pull, "drop"))) { /* purged meanwhile */
        json_t *row = json_pack("{s:s, s:s, s:O, s:O}", "hash", hash, "node", node,
                                "path", json_object_get(pull, "path"), "step",
                                json_object_get(pull, "step"));
        br_replicas_drop(c, job, row, "the job was purged (bramble job purge)");
        json_decref(row);
    } else {
        double secs = (double)(br_mono_ms() - json_integer_value(json_object_get(pull, "at"))) / 1000.0;
        char sent[32], same[32];
        measured(r, holder, node, received, secs);
        br_store_replica_add(c->store, job, hash, node,
                             json_integer_value(json_object_get(pull, "step")),
                             json_string_value(json_object_get(pull, "path")),
                             received + deduped, br_now_ms(), NULL);
        br_coord_event(c, job, node, "replica",
                       "checkpoint %s (step %lld, %.16s) replicated on %s from %s: %s sent, "
                       "%s already there, in %.1f s",
                       path, (long long)step, hash, node, holder,
                       br_format_size((uint64_t)received, sent, sizeof(sent)),
                       br_format_size((uint64_t)deduped, same, sizeof(same)), secs);
        int64_t owner;
        json_t *spec = spec_of(c, job, &owner);
        prune(c, job, br_replicas_keep(spec));
        json_decref(spec);
    }
    json_decref(pull);
    return 0;
}

/* After a start or a rollback the pulls in flight are forgotten, and the agents'
 * reports of them are refused: once the nodes had time to come back, the running
 * jobs' newest checkpoints that have fewer copies than checkpoint.replicas (held
 * or under way) are copied again, REPAIR_BITE jobs per tick. */
static void repair(br_coord_t *c, br_replicas_t *r)
{
    int left = REPAIR_BITE;
    br_job_t *j;
    for (j = br_jobtab_first(c->jobs); j && left > 0; j = j->next) {
        if (j->id < r->repair_from)
            continue;
        r->repair_from = j->id + 1;
        if (j->state != BR_JOB_RUNNING && j->state != BR_JOB_STARTING)
            continue;
        left--;
        json_t *latest = br_store_checkpoint_latest(c->store, j->id, NULL);
        const char *hash = json_string_value(
            json_object_get(json_object_get(latest, "manifest"), "hash"));
        const char *writer = json_string_value(json_object_get(latest, "node"));
        br_node_t *w = writer ? br_nodes_find(c->nodes, writer) : NULL;
        json_t *m = hash && node_serves(w)
                        ? br_store_checkpoint_manifest(c->store, j->id, hash, NULL)
                        : NULL;
        if (m)
            replicate(
                c, r, j, w, json_string_value(json_object_get(latest, "path")),
                json_integer_value(json_object_get(latest, "step")), m,
                r->loads > 1 ? " (again: the store rolled a wake back, and copies under way "
                               "then were forgotten)"
                             : " (again: the coordinator restarted, and copies under way "
                               "then were forgotten)");
        json_decref(m);
        json_decref(latest);
    }
    if (!j) {
        r->repaired = 1;
        drop_unordered(c, r);
    }
}

/* Once a second: a pull whose target went away, or that has been silent too long, has failed (a restore
 * tries the next copy, a replica another node), as has a restore whose holder went
 * away (a replica's target reports that itself when its pull stops). Then, once
 * the nodes had time to come back after a start, the copies forgotten at start are
 * ordered again, and the replicas of jobs that ended longer than
 * --replica-retention ago are dropped (replkeep.h), so that a node not yet back
 * is not left with a copy the coordinator forgot. */
static void on_tick(br_coord_t *c, br_hook_arg_t *a, void *ctx)
{
    (void)a;
    br_replicas_t *r = ctx;
    int64_t now = br_mono_ms();
    const char *key;
    json_t *e, *tmp;
    json_t *failed = json_array();
    json_object_foreach_safe (r->pulls, tmp, key, e) {
        const char *hname = json_string_value(json_object_get(e, "holder"));
        const char *tname = json_string_value(json_object_get(e, "target"));
        br_node_t *holder = br_nodes_find(c->nodes, hname);
        br_node_t *target = br_nodes_find(c->nodes, tname);
        int hgone = !holder || holder->state == BR_NODE_LOST;
        int tgone = !target || target->state == BR_NODE_LOST;
        int64_t age = now - json_integer_value(json_object_get(e, "at"));
        int restore = strncmp(key, "r/", 2) == 0;
        char why[300] = "";
        int errnum = ETIMEDOUT;
        if (restore && (hgone || tgone))
            snprintf(why, sizeof(why), "a node went away");
        else if (tgone) {
            snprintf(why, sizeof(why), "%s went away", tname);
            errnum = TARGET_GONE;
        } else if (restore && age > RESTORE_SILENT_MS)
            snprintf(why, sizeof(why), "no word");
        else if (!restore && age > BR_REPLICAS_GRANT_TTL_MS)
            snprintf(why, sizeof(why), "no word from %s for %lld min", tname,
                     (long long)(BR_REPLICAS_GRANT_TTL_MS / 60000));
        if (why[0]) {
            json_array_append_new(
                failed, json_pack("{s:O, s:s, s:i, s:b}", "pull", e, "why", why,
                                  "errnum", errnum, "restore", restore));
            json_object_del(r->pulls, key);
        }
    }
    size_t i;
    json_array_foreach (failed, i, e) {
        json_t *pull = json_object_get(e, "pull");
        const char *why = json_string_value(json_object_get(e, "why"));
        int errnum = (int)json_integer_value(json_object_get(e, "errnum"));
        if (json_is_true(json_object_get(e, "restore")))
            restore_ended(c, r, pull, why, errnum, 0, 0);
        else
            replica_failed(c, r, pull, errnum, why);
    }
    json_decref(failed);
    if (now - c->started_mono < c->cfg.grace_ms)
        return; /* the nodes are not all back: hold both until they had time */
    if (!r->repaired)
        repair(c, r);
}

/* A job left: nothing waits for its restores. Its replicas stay until
 * --replica-retention has passed or the job is purged (replkeep.h). */
static void on_left(br_coord_t *c, br_hook_arg_t *a, void *ctx)
{
    (void)c;
    br_replicas_t *r = ctx;
    const char *key;
    json_t *e, *tmp;
    json_object_foreach_safe (r->restores, tmp, key, e)
        if (json_integer_value(json_object_get(e, "job")) == a->job->id)
            json_object_del(r->restores, key);
}

/* The jobs were read again (a rollback undid a wake): orders of that wake never
 * left, so forget what is in flight; attempts held are asked again. */
static void on_loaded(br_coord_t *c, br_hook_arg_t *a, void *ctx)
{
    (void)c;
    (void)a;
    br_replicas_t *r = ctx;
    json_object_clear(r->pulls);
    json_object_clear(r->restores);
    r->loads++;
    r->repaired = 0; /* the copies of that wake are ordered again */
    r->repair_from = 0;
}

int br_replicas_init(br_coord_t *c)
{
    br_replicas_t *r = c->replicas;
    return br_hooks_add(c->hooks, BR_HOOK_CHECKPOINT, on_checkpoint, r) < 0 ||
                   br_hooks_add(c->hooks, BR_HOOK_RESUMING, on_resuming, r) < 0 ||
                   br_hooks_add(c->hooks, BR_HOOK_TICK, on_tick, r) < 0 ||
                   br_hooks_add(c->hooks, BR_HOOK_JOB_LEFT, on_left, r) < 0 ||
                   br_hooks_add(c->hooks, BR_HOOK_LOADED, on_loaded, r) < 0
               ? -1
               : 0;
}

void br_replicas_annotate(br_coord_t *c, int64_t job, json_t *checkpoints)
{
    json_t *reps = br_store_replica_list(c->store, job, NULL);
    size_t i, j;
    json_t *cp, *rp;
    json_array_foreach(checkpoints, i, cp) {
        const char *hash =
            json_string_value(json_object_get(json_object_get(cp, "manifest"), "hash"));
        json_t *copies = json_array();
        json_array_append_new(copies, json_pack("{s:O, s:b}", "node",
                                                json_object_get(cp, "node"), "writer", 1));
        json_array_foreach(reps, j, rp) {
            if (hash && strcmp(hash, json_string_value(json_object_get(rp, "hash"))) == 0)
                json_array_append_new(copies,
                                      json_pack("{s:O, s:o}", "node", json_object_get(rp, "node"),
                                                "time", br_time_json(json_object_get(rp, "time"))));
        }
        json_object_set_new(cp, "copies", copies);
    }
    json_decref(reps);
}

int br_replicas_check_pulling(const json_t *p, br_err_t *err)
{
    json_int_t job, done;
    const char *hash;
    int restore;
    json_error_t je;
    if (json_unpack_ex((json_t *)p, &je, JSON_STRICT, "{s:I, s:s, s:b, s:I}", "job", &job,
                       "hash", &hash, "restore", &restore, "done", &done) < 0 ||
        job < 1 || done < 0)
        return br_errf(err, EPROTO, "node.heartbeat: pulling must be {job, hash, restore, "
                       "done}: %s", je.text[0] ? je.text : "a job id and bytes done");
    return 0;
}

void br_replicas_progress(br_coord_t *c, br_node_t *n, const json_t *p)
{
    char grant[160], key[200];
    const char *hash = json_string_value(json_object_get(p, "hash"));
    br_replicas_grant_id(json_integer_value(json_object_get(p, "job")), hash, n->name, grant,
                         sizeof(grant));
    pull_key(grant, json_is_true(json_object_get(p, "restore")), key, sizeof(key));
    json_t *e = c->replicas ? json_object_get(c->replicas->pulls, key) : NULL;
    if (!e || strcmp(json_string_value(json_object_get(e, "hash")), hash) != 0)
        return; /* not one this coordinator ordered */
    json_object_set(e, "done", json_object_get(p, "done"));
    json_object_set_new(e, "done_at", json_integer(br_mono_ms()));
}

json_t *br_replicas_transfers(br_coord_t *c, int64_t job)
{
    json_t *out = json_array(), *e;
    const char *key;
    int64_t now = br_mono_ms();
    json_object_foreach (c->replicas ? c->replicas->pulls : NULL, key, e) {
        if (json_integer_value(json_object_get(e, "job")) != job)
            continue;
        int64_t at = json_integer_value(json_object_get(e, "at"));
        int64_t done = json_integer_value(json_object_get(e, "done"));
        int64_t done_at = json_integer_value(json_object_get(e, "done_at"));
        json_t *t = json_pack(
            "{s:s, s:O?, s:O?, s:O?, s:O?, s:I, s:O?, s:f}", "kind",
            strncmp(key, "r/", 2) == 0 ? "restore" : "replica", "step",
            json_object_get(e, "step"), "path", json_object_get(e, "path"), "from",
            json_object_get(e, "holder"), "to", json_object_get(e, "target"), "done",
            (json_int_t)done, "bytes", json_object_get(e, "bytes"), "seconds",
            (double)(now - at) / 1000.0);
        /* the rate from the order to the last heartbeat that said how far it was */
        if (t && done_at > at)
            json_object_set_new(t, "rate", json_real((double)done * 1000.0 /
                                                     (double)(done_at - at)));
        json_array_append_new(out, t);
    }
    return out;
}
