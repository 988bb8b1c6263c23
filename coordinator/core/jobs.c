/* jobs.c - job life on the coordinator: place, start, exit, cancel, node loss. */
#include "jobs.h"

#include <errno.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ckptdir.h"
#include "util.h"
#include "hooks.h"
#include "jobtab.h"
#include "netmap.h"
#include "ociarchive.h"
#include "overlaynet.h"
#include "stats.h"
#include "treefetch.h"

void br_job_save(br_coord_t *c, br_job_t *job)
{
    br_err_t err;
    json_t *fields = br_job_fields(job);
    if (!fields || br_store_job_update(c->store, job->id, fields, &err) < 0)
        fprintf(stderr, "brambled: job %lld not saved: %s\n", (long long)job->id,
                fields ? err.text : "out of memory");
    json_decref(fields);
}

void br_job_save_reason(br_coord_t *c, br_job_t *job)
{
    br_err_t err;
    if (br_store_job_set_reason(c->store, job->id, job->reason, &err) < 0)
        fprintf(stderr, "brambled: job %lld: reason not saved: %s\n", (long long)job->id,
                err.text);
}

static br_node_t *rank_node(br_coord_t *c, const br_job_t *job, int r)
{
    return r >= 0 && r < job->nranks ? br_nodes_find(c->nodes, job->ranks[r].node) : NULL;
}

/* Give back what the ranks not done hold on their nodes; drop the ranks too
 * (back to pending), or keep them as where it ran (it ended). */
static void release_ranks(br_coord_t *c, br_job_t *job, int drop)
{
    for (int r = 0; r < job->nranks; r++)
        if (job->ranks[r].state != BR_RANK_DONE)
            br_node_hold(rank_node(c, job, r), job->ranks[r].share, -1);
    br_jobtab_unlink_ranks(c->jobs, job);
    if (drop)
        br_job_set_ranks(job, NULL, NULL, 0);
}

int br_job_post(br_coord_t *c, br_job_t *job, br_job_state_t state, const char *node,
                const char *fmt, ...)
{
    char text[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(text, sizeof(text), fmt, ap);
    va_end(ap);
    if (!br_job_state_move_ok(job->state, state, job->replicas >= 0)) {
        fprintf(stderr, "brambled: job %lld: no move from %s to %s (%s): not made\n",
                (long long)job->id, br_job_state_name(job->state), br_job_state_name(state),
                text);
        return -1;
    }
    if (state == BR_JOB_RUNNING && !job->started)
        job->started = br_now_ms();
    if (!br_job_state_live(state) && br_job_state_live(job->state)) {
        br_hook_arg_t a = {.job = job};
        br_hooks_run(c, c->hooks, BR_HOOK_RELEASING, &a);
        release_ranks(c, job, state == BR_JOB_PENDING);
        job->charged = 0; /* it holds nothing from now (usage.h) */
        job->stop.at_mono = 0; /* (a stop ends with its attempt) */
        job->stop.cancel = 0;
        job->held.rank = -1; /* the attempt is over, however it ended */
    }
    if (br_job_state_ended(state) && !br_job_state_ended(job->state))
        job->ended = br_now_ms();
    job->state = state;
    br_job_save(c, job);
    br_coord_event(c, job->id, node, br_job_state_name(state), "%s", text);
    if (br_job_state_ended(state)) {
        br_hook_arg_t a = {.job = job};
        br_jobtab_remove(c->jobs, job); /* (its hooks see the others, not it) */
        br_hooks_run(c, c->hooks, BR_HOOK_JOB_LEFT, &a);
    } else if (state == BR_JOB_RUNNING) {
        br_hook_arg_t a = {.job = job};
        br_hooks_run(c, c->hooks, BR_HOOK_JOB_RUNNING, &a);
    }
    if (state != BR_JOB_RUNNING)
        br_coord_changed(c); /* something was freed, or waits to be placed */
    return 0;
}

int br_jobs_restore(br_coord_t *c, br_err_t *err)
{
    for (br_node_t *n = br_nodes_first(c->nodes); n; n = n->next)
        br_node_release_all(n);
    if (br_jobtab_load(c->jobs, c->store, err) < 0)
        return -1;
    for (br_job_t *job = br_jobtab_first(c->jobs); job; job = job->next)
        for (int r = 0; r < job->nranks; r++)
            if (job->ranks[r].state != BR_RANK_DONE)
                br_node_hold(rank_node(c, job, r), job->ranks[r].share, 1);
    br_hooks_run(c, c->hooks, BR_HOOK_LOADED, NULL);
    return 0;
}

br_job_t *br_jobs_add(br_coord_t *c, json_t *row, br_err_t *err)
{
    int64_t id = br_store_job_add(c->store, row, err);
    if (id < 0)
        return NULL;
    br_job_t *job = NULL;
    if (br_jobtab_add_stored(c->jobs, row, id, &job, err) < 0)
        return NULL;
    if (!job) {
        br_errf(err, EINVAL, "job %lld was stored ended", (long long)id);
        return NULL;
    }
    br_hook_arg_t a = {.job = job};
    br_hooks_run(c, c->hooks, BR_HOOK_JOB_ADDED, &a);
    if (job->state == BR_JOB_PENDING)
        br_coord_changed(c);
    return job;
}

int br_jobs_set_owner(br_coord_t *c, int64_t id, const char *owner, int64_t owner_id,
                      br_err_t *err)
{
    if (br_store_job_set_owner(c->store, id, owner, owner_id, err) < 0)
        return -1;
    br_job_t *job = br_jobtab_find(c->jobs, id);
    char *copy = job ? strdup(owner) : NULL;
    if (copy) {
        free(job->owner);
        job->owner = copy;
        job->owner_id = owner_id;
    }
    return 0;
}

/* "a, b, c": the job's nodes in rank order. */
static const char *node_list(const br_job_t *job, const char *sep, char *buf, size_t len)
{
    size_t off = 0;
    buf[0] = '\0';
    for (int r = 0; r < job->nranks; r++) {
        int w = snprintf(buf + off, len - off, "%s%s", r ? sep : "", job->ranks[r].node);
        if (w < 0 || (size_t)w >= len - off)
            break;
        off += (size_t)w;
    }
    return buf;
}

static void set_env(json_t *env, const char *k, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void set_env(json_t *env, const char *k, const char *fmt, ...)
{
    char buf[4096];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof(buf), fmt, ap);
    va_end(ap);
    json_object_set_new(env, k, json_string(buf));
}

/* "0,1,2" from GPU indexes gpus[from..from+count-1]. */
static const char *gpu_list(json_t *gpus, size_t from, size_t count, char *buf, size_t len)
{
    size_t off = 0;
    buf[0] = '\0';
    for (size_t i = from; i < from + count && i < json_array_size(gpus); i++) {
        int w = snprintf(buf + off, len - off, "%s%lld", i > from ? "," : "",
                         (long long)json_integer_value(json_array_get(gpus, i)));
        if (w < 0 || (size_t)w >= len - off)
            break;
        off += (size_t)w;
    }
    return buf;
}

/* The environment of rank r (ARCHITECTURE.md, "What a job process sees"). */
static json_t *job_env(br_coord_t *c, br_job_t *job, int r)
{
    json_t *spec = job->spec;
    json_t *env = json_deep_copy(json_object_get(spec, "env"));
    if (!json_is_object(env)) {
        json_decref(env);
        env = json_object();
    }
    char gpus[512], nodes[4096];
    json_t *g = json_object_get(job->ranks[r].share, "gpus");
    br_node_t *master = rank_node(c, job, 0);
    const char *addr = master ? json_string_value(json_object_get(master->info, "address"))
                              : NULL;
    set_env(env, "BRAMBLE_JOB_ID", "%lld", (long long)job->id);
    if (job->service > 0) { /* named after its service */
        set_env(env, "BRAMBLE_JOB_NAME", "%s", json_string_value(json_object_get(spec, "name")));
        set_env(env, "BRAMBLE_REPLICA", "%d", job->replica);
    } else {
        set_env(env, "BRAMBLE_JOB_NAME", "%s", job->name);
    }
    set_env(env, "BRAMBLE_ATTEMPT", "%d", job->attempt);
    if (job->array_of > 0) { /* a task of a job array (arrays.h) */
        set_env(env, "BRAMBLE_ARRAY_ID", "%lld", (long long)job->array_of);
        set_env(env, "BRAMBLE_ARRAY_INDEX", "%d", job->array_index);
        set_env(env, "BRAMBLE_ARRAY_COUNT", "%d", job->array_count);
    }
    set_env(env, "BRAMBLE_NODE_NAME", "%s", job->ranks[r].node);
    set_env(env, "BRAMBLE_NODELIST", "%s", node_list(job, ",", nodes, sizeof(nodes)));
    const char *own = NULL;
    br_node_t *self = br_nodes_find(c->nodes, job->ranks[r].node);
    /* (chosen once per attempt, for every rank: overlaynet.h) */
    if (br_overlay_job_uses(c, job) && master && self &&
        (own = br_overlay_node_address(self, NULL, 0))) {
        /* over the overlay: its addresses, and its interface for gloo and NCCL
         * (unless the spec says otherwise) */
        addr = br_overlay_node_address(master, NULL, 0);
        set_env(env, "BRAMBLE_OVERLAY_ADDR", "%s", own);
        for (int k = 0; k < 2; k++) {
            const char *var = k ? "NCCL_SOCKET_IFNAME" : "GLOO_SOCKET_IFNAME";
            if (!json_object_get(json_object_get(spec, "env"), var))
                set_env(env, var, "%s", BR_OVERLAY_IFNAME);
        }
    }
    set_env(env, "MASTER_ADDR", "%s", addr && *addr ? addr : "127.0.0.1");
    if (job->port > 0) /* else rank 0's agent chooses it */
        set_env(env, "MASTER_PORT", "%d", job->port);
    set_env(env, "NNODES", "%d", job->nranks);
    set_env(env, "NODE_RANK", "%d", r);
    set_env(env, "NPROC_PER_NODE", "%d", br_job_tasks_per_node(spec));
    set_env(env, "CUDA_VISIBLE_DEVICES", "%s",
            gpu_list(g, 0, json_array_size(g), gpus, sizeof(gpus)));
    set_env(env, "CUDA_DEVICE_ORDER", "PCI_BUS_ID"); /* NVML order = CUDA order */
    json_t *ckpt = br_ckptdir_section(spec, job->id);
    set_env(env, "BRAMBLE_CHECKPOINT_DIR", "%s",
            ckpt ? json_string_value(json_object_get(ckpt, "dir")) : "");
    json_decref(ckpt); /* (the expanded copy) */
    /* the newest complete checkpoint of a current attempt (only those are stored),
     * unless none of its copies was good and this attempt resumes from an older one */
    json_t *latest = job->resume_attempt == job->attempt && job->resume_from
                         ? json_pack("{s:s, s:I}", "path", job->resume_from, "step",
                                     (json_int_t)job->resume_step)
                         : br_store_checkpoint_latest(c->store, job->id, NULL);
    const char *from = json_string_value(json_object_get(latest, "path"));
    set_env(env, "BRAMBLE_RESUME_FROM", "%s", from ? from : "");
    if (from)
        set_env(env, "BRAMBLE_RESUME_STEP", "%lld",
                (long long)json_integer_value(json_object_get(latest, "step")));
    else
        set_env(env, "BRAMBLE_RESUME_STEP", "%s", "");
    json_decref(latest);
    return env;
}

/* The processes rank r's node starts, with their own variables: one per node, as
 * RANK r of WORLD_SIZE nodes (LOCAL_RANK 0, LOCAL_WORLD_SIZE 1), so a plain
 * init_process_group("env://") works without torchrun, which sets its own for its
 * workers; or with tasks_per_node > 1 one per task as srun does: RANK, LOCAL_RANK,
 * WORLD_SIZE, LOCAL_WORLD_SIZE and the task's own share of the GPUs. */
static json_t *rank_tasks(const br_job_t *job, int r)
{
    int per = br_job_tasks_per_node(job->spec);
    json_t *tasks = json_array();
    if (per <= 1) {
        char rank[16], world[16];
        snprintf(rank, sizeof(rank), "%d", r);
        snprintf(world, sizeof(world), "%d", job->nranks);
        json_array_append_new(tasks, json_pack("{s:i, s:{s:s, s:s, s:s, s:s}}", "rank", r,
                                               "env", "RANK", rank, "LOCAL_RANK", "0",
                                               "WORLD_SIZE", world, "LOCAL_WORLD_SIZE", "1"));
        return tasks;
    }
    json_t *g = json_object_get(job->ranks[r].share, "gpus");
    size_t each = json_array_size(g) / (size_t)per;
    for (int l = 0; l < per; l++) {
        char rank[16], local[16], world[16], lworld[16], gpus[512];
        snprintf(rank, sizeof(rank), "%d", r * per + l);
        snprintf(local, sizeof(local), "%d", l);
        snprintf(world, sizeof(world), "%d", job->nranks * per);
        snprintf(lworld, sizeof(lworld), "%d", per);
        gpu_list(g, (size_t)l * each, each, gpus, sizeof(gpus));
        json_array_append_new(
            tasks, json_pack("{s:i, s:{s:s, s:s, s:s, s:s, s:s}}", "rank", r * per + l, "env",
                             "RANK", rank, "LOCAL_RANK", local, "WORLD_SIZE", world,
                             "LOCAL_WORLD_SIZE", lworld, "CUDA_VISIBLE_DEVICES", gpus));
    }
    return tasks;
}

#define DATA_GRANT_TTL_MS (60 * 60 * 1000) /* a node's leave to read a tree from another */

#define DATA_NEARER_MS 5.0 /* round trips closer than this are one site's */
#define NEAR_WAIT_MAX_MS (30 * 60 * 1000) /* a job waits this long for a node nearby to
                                           * fetch a data set it can then read there */

/* Whether target is nearer to node n (round trip rtt) than to the coordinator, as
 * tree_holder judges it: the coordinator wins only when nearer by half and by more
 * than DATA_NEARER_MS. */
static int nearer_than_coordinator(br_coord_t *c, const br_node_t *target, double rtt)
{
    double coord = br_netmap_coordinator_rtt(c->netmap, target->name);
    return rtt >= 0 && !(coord >= 0 && coord < rtt / 2 && rtt - coord > DATA_NEARER_MS);
}

/* The node nearest target (by the network map) that holds the tree of manifest hash
 * in its cache and serves trees, unless the coordinator is nearer by half and by
 * DATA_NEARER_MS (another site): NULL for the coordinator. A holder is preferred
 * when in doubt: the coordinator's link is often a home uplink, which every node
 * that fetches from it shares, and within a site round trips say little. */
static br_node_t *tree_holder(br_coord_t *c, const br_node_t *target, const char *hash)
{
    br_node_t *best = NULL;
    double best_rtt = 0;
    for (br_node_t *n = br_nodes_first(c->nodes); n; n = n->next) {
        if (n == target || n->state != BR_NODE_READY || !n->route_len ||
            json_integer_value(json_object_get(n->info, "replica_port")) <= 0 ||
            !br_node_holds_tree(n, hash))
            continue;
        double rtt = br_netmap_rtt(c->netmap, target->name, n->name);
        if (rtt >= 0 && (!best || rtt < best_rtt)) { /* (unmeasured or lost: not asked) */
            best = n;
            best_rtt = rtt;
        }
    }
    return best && nearer_than_coordinator(c, target, best_rtt) ? best : NULL;
}

static json_t *image_variant(json_t *img, const br_node_t *n);

json_t *br_jobs_image_variant(const br_job_t *job, const br_node_t *n)
{
    return image_variant(json_object_get(job->spec, "image_archive"), n);
}

/* Whether job j's nodes fetch tree hash: one of its data sets, or its loaded image's
 * archive (of some architecture). */
static int uses_tree(const br_job_t *j, const char *hash)
{
    const char *k;
    json_t *d;
    size_t i;
    json_object_foreach(json_object_get(j->spec, "data"), k, d)
        if (strcmp(json_string_value(json_object_get(d, "hash")), hash) == 0)
            return 1;
    json_array_foreach(json_object_get(json_object_get(j->spec, "image_archive"), "variants"),
                       i, d)
        if (strcmp(json_string_value(json_object_get(d, "hash")), hash) == 0)
            return 1;
    return 0;
}

/* A node near target (nearer than the coordinator) that is fetching tree hash now
 * (another job's rank whose order went there is starting, and the node does not
 * hold the tree yet), or NULL. */
static br_node_t *near_fetcher(br_coord_t *c, const br_job_t *self, const br_node_t *target,
                               const char *hash)
{
    for (br_job_t *j = br_jobtab_first(c->jobs); j; j = j->next) {
        if (j == self || j->state != BR_JOB_STARTING)
            continue;
        int uses = uses_tree(j, hash);
        for (int r = 0; uses && r < j->nranks; r++) {
            br_node_t *n = rank_node(c, j, r);
            if (n && n != target && (j->ranks[r].sent || j->ranks[r].fetch == 1) &&
                n->state == BR_NODE_READY && n->route_len &&
                json_integer_value(json_object_get(n->info, "replica_port")) > 0 &&
                !br_node_holds_tree(n, hash) &&
                nearer_than_coordinator(c, target,
                                        br_netmap_rtt(c->netmap, target->name, n->name)))
                return n;
        }
    }
    return NULL;
}

/* Whether rank 0 of job (one rank, with data sets) waits before its job.run for a
 * node nearby that is fetching one of its data sets from the coordinator, to read it
 * there rather than over the coordinator's link a second time (on_tick asks
 * again); at most NEAR_WAIT_MAX_MS. */
static int wait_near(br_coord_t *c, br_job_t *job, br_node_t *n)
{
    br_rank_t *rk = &job->ranks[0];
    int64_t now = br_mono_ms();
    if (job->nranks != 1 || rk->wait_near < 0)
        return 0;
    if (rk->wait_near > 0 && now - rk->wait_near > NEAR_WAIT_MAX_MS) {
        rk->wait_near = -1;
        return 0;
    }
    const char *k;
    json_t *d, *trees = json_array();
    char what[300];
    json_object_foreach(json_object_get(job->spec, "data"), k, d)
        json_array_append(trees, d);
    json_t *img = image_variant(json_object_get(job->spec, "image_archive"), n);
    if (img)
        json_array_append(trees, img);
    size_t i;
    json_array_foreach(trees, i, d) {
        const char *hash = json_string_value(json_object_get(d, "hash"));
        /* (a node that holds it already serves it: no need to wait for another) */
        br_node_t *f = hash && !br_node_holds_tree(n, hash) && !tree_holder(c, n, hash)
                           ? near_fetcher(c, job, n, hash)
                           : NULL;
        if (!f)
            continue;
        if (d == img)
            snprintf(what, sizeof(what), "image %s",
                     json_string_value(json_object_get(json_object_get(job->spec,
                                                                       "image_archive"),
                                                       "name")));
        else
            snprintf(what, sizeof(what), "data set %s",
                     json_string_value(json_object_get(d, "set")));
        if (!rk->wait_near)
            br_coord_event(c, job->id, n->name, "starting",
                           "attempt %d waits for %s, nearer than the coordinator, to fetch "
                           "%s, to read it there", job->attempt, f->name, what);
        rk->wait_near = rk->wait_near ? rk->wait_near : now;
        json_decref(trees);
        return 1;
    }
    json_decref(trees);
    rk->wait_near = 0;
    return 0;
}

/* Where rank r's node reads data set d (a spec's data entry) from: a nearby node that
 * holds it, which is given leave to serve it (ckpt.serve, "cache": true), as
 * {"node", "addr", "port", "key", "grant"}; or NULL: the coordinator. */
static json_t *data_source(br_coord_t *c, br_job_t *job, br_node_t *target, json_t *d,
                           json_t *manifest, const char *kind)
{
    const char *hash = json_string_value(json_object_get(d, "hash"));
    br_node_t *h = hash ? tree_holder(c, target, hash) : NULL;
    const char *addr = h ? json_string_value(json_object_get(h->info, "address")) : NULL;
    if (!addr || !*addr)
        return NULL;
    char grant[200];
    snprintf(grant, sizeof(grant), "%s:%lld:%.16s:%s", kind, (long long)job->id, hash,
             target->name);
    br_coord_send_node(c, h, "ckpt.serve",
                       json_pack("{s:s, s:I, s:s, s:s, s:I, s:O, s:s, s:b}", "grant", grant,
                                 "job", (json_int_t)job->id, "peer", target->name, "peer_key",
                                 target->pubkey, "ttl", (json_int_t)DATA_GRANT_TTL_MS,
                                 "manifest", manifest, "path", "", "cache", 1));
    return json_pack("{s:s, s:s, s:I, s:s, s:s}", "node", h->name, "addr", addr, "port",
                     json_integer_value(json_object_get(h->info, "replica_port")), "key",
                     h->pubkey, "grant", grant);
}

/* The variant of loaded image img (a spec's image_archive) that runs on node n, or
 * NULL (none does: the scheduler places it nowhere such). */
static json_t *image_variant(json_t *img, const br_node_t *n)
{
    const char *arch = json_string_value(json_object_get(n->info, "arch"));
    size_t i;
    json_t *v;
    json_array_foreach(json_object_get(img, "variants"), i, v)
        if (arch && br_ociarchive_runs_on(json_string_value(json_object_get(v, "arch")),
                                          json_string_value(json_object_get(v, "variant")),
                                          arch))
            return v;
    return NULL;
}

/* e (taken) with what node n needs to fetch tree d (the job's code, a data set's or
 * an image's entry in the spec: "hash", "files", "bytes", "listing"): its
 * "manifest", truncated to its summary and listing, and "from", a node nearby that
 * has it, when one does (kind: "code", "data" or "image", its grants' prefix). */
static json_t *tree_order(br_coord_t *c, br_job_t *job, br_node_t *n, json_t *d,
                          const char *kind, json_t *e)
{
    json_object_set_new(e, "manifest",
                        json_pack("{s:O, s:s, s:O, s:O, s:[], s:b, s:O}", "hash",
                                  json_object_get(d, "hash"), "root", "dir", "files",
                                  json_object_get(d, "files"), "bytes",
                                  json_object_get(d, "bytes"), "entries", "truncated", 1,
                                  "listing", json_object_get(d, "listing")));
    const char *hash = json_string_value(json_object_get(d, "hash"));
    if (br_node_holds_tree(n, hash))
        return e;
    json_t *src = data_source(c, job, n, d, json_object_get(e, "manifest"), kind);
    br_treefetch_ordered(job, n->name, kind,
                         json_string_value(json_object_get(e, strcmp(kind, "data") == 0
                                                                   ? "set"
                                                                   : "name")),
                         hash, json_integer_value(json_object_get(d, "bytes")),
                         json_string_value(json_object_get(src, "node")), br_mono_ms());
    if (src) /* a node nearby has it: read from there, the coordinator else */
        json_object_set_new(e, "from", src);
    return e;
}

/* The trees rank r's node n needs (the job's code and data sets), into body as
 * job.run has them (PROTOCOL.md section 6): "code" and "data". */
static void add_trees(br_coord_t *c, br_job_t *job, br_node_t *n, json_t *body)
{
    json_t *spec = job->spec;
    json_t *code = json_object_get(spec, "code");
    if (json_is_object(code)) { /* the node reads its files from us (PROTOCOL.md 11), or
                                 * from a node nearby that holds the tree */
        char grant[32];
        snprintf(grant, sizeof(grant), "code:%lld", (long long)job->id);
        json_object_set_new(body, "code",
                            tree_order(c, job, n, code, "code",
                                       json_pack("{s:s}", "grant", grant)));
    }
    json_t *data = json_object_get(spec, "data");
    if (json_object_size(data)) { /* its data sets, read-only at their paths */
        char grant[32];
        const char *k;
        json_t *d, *list = json_array();
        snprintf(grant, sizeof(grant), "data:%lld", (long long)job->id);
        json_object_foreach(data, k, d)
            json_array_append_new(list, tree_order(c, job, n, d, "data",
                                                   json_pack("{s:s, s:O, s:O}", "name", k,
                                                             "set", json_object_get(d, "set"),
                                                             "path",
                                                             json_object_get(d, "path"))));
        json_object_set_new(body, "data", json_pack("{s:s, s:o}", "grant", grant, "sets", list));
    }
    json_t *img = json_object_get(spec, "image_archive"), *v = image_variant(img, n);
    if (v) { /* a loaded image: its archive, for the node's architecture */
        char grant[32];
        snprintf(grant, sizeof(grant), "image:%lld", (long long)job->id);
        json_object_set_new(body, "image_archive",
                            tree_order(c, job, n, v, "image",
                                       json_pack("{s:s, s:O, s:O}", "grant", grant, "name",
                                                 json_object_get(img, "name"), "image_id",
                                                 json_object_get(v, "image_id"))));
    }
}

static br_job_t *current_job(br_coord_t *c, int64_t id, int attempt, const br_node_t *n);
static void send_run(br_coord_t *c, br_job_t *job, int r, int announce);

/* A job whose nodes fetch trees (code, data sets) before its ranks start. */
static int has_trees(const br_job_t *job)
{
    return json_is_object(json_object_get(job->spec, "code")) ||
           json_object_size(json_object_get(job->spec, "data")) ||
           json_is_object(json_object_get(job->spec, "image_archive"));
}

/* A gang whose nodes fetch trees before any rank starts. */
static int gang_fetches(const br_job_t *job)
{
    return job->nranks > 1 && has_trees(job);
}

int br_jobs_prefetched(const br_job_t *job, int r)
{
    return r >= 0 && r < job->nranks && job->ranks[r].fetch > 0;
}

/* Ask rank r's node to fetch its trees (job.fetch), once. */
static void send_fetch(br_coord_t *c, br_job_t *job, int r)
{
    br_node_t *n = rank_node(c, job, r);
    if (!n || job->ranks[r].fetch)
        return;
    json_t *body = json_pack("{s:I, s:i, s:i}", "job", (json_int_t)job->id, "attempt",
                             job->attempt, "rank", r);
    add_trees(c, job, n, body);
    br_coord_send_node(c, n, "job.fetch", body);
    job->ranks[r].fetch = 1;
}

/* A gang's barrier: 1 while some rank's node still fetches its trees (rank 0's first,
 * then the others, which may read them from it), 0 once all have them. */
static int fetching(br_coord_t *c, br_job_t *job)
{
    if (!gang_fetches(job))
        return 0;
    if (job->ranks[0].fetch < 2) {
        send_fetch(c, job, 0);
        return 1;
    }
    int waiting = 0;
    for (int r = 1; r < job->nranks; r++) {
        send_fetch(c, job, r);
        waiting |= job->ranks[r].fetch < 2;
    }
    return waiting;
}

void br_jobs_fetched(br_coord_t *c, int64_t id, int attempt, br_node_t *n)
{
    br_job_t *job = current_job(c, id, attempt, n);
    int r = job ? br_job_rank_on(job, n->name, 1) : -1;
    if (r < 0 || job->ranks[r].fetch == 2)
        return;
    job->ranks[r].fetch = 2; /* (its data sets count as held there: api_agent.c) */
    if (job->state == BR_JOB_STARTING && !job->ranks[0].sent)
        send_run(c, job, 0, 1); /* (the next step of the barrier, or the start) */
}

/* Send the job.run order for rank r of job's current attempt (announce: say in the
 * job's events where it resumes from). The rank remembers it was sent (job.h). */
static void send_run(br_coord_t *c, br_job_t *job, int r, int announce)
{
    br_node_t *n = rank_node(c, job, r);
    json_t *spec = job->spec;
    json_t *workdir = json_object_get(spec, "workdir");
    json_t *ckpt = json_object_get(spec, "checkpoint");
    if (!n)
        return;
    if (r == 0 && fetching(c, job))
        return; /* br_jobs_fetched sends it once every rank's node has its trees */
    if (r == 0 && wait_near(c, job, n))
        return; /* on_tick sends it once that node holds the data set */
    if (r == 0 && job->attempt > 1) { /* a module may first bring the checkpoint there */
        br_hook_arg_t a = {.job = job, .node = n};
        br_hooks_run(c, c->hooks, BR_HOOK_RESUMING, &a);
        if (a.hold)
            return; /* br_jobs_release sends it */
    }
    json_t *env = job_env(c, job, r);
    const char *from = json_string_value(json_object_get(env, "BRAMBLE_RESUME_FROM"));
    if (announce && r == 0 && from && *from)
        br_coord_event(c, job->id, n->name, "starting", "attempt %d resumes from %s (step %s)",
                       job->attempt, from,
                       json_string_value(json_object_get(env, "BRAMBLE_RESUME_STEP")));
    json_t *body = json_pack("{s:I, s:i, s:s, s:i, s:s, s:O, s:o, s:o}", "job",
                             (json_int_t)job->id, "attempt", job->attempt, "name", job->name,
                             "rank", r, "command",
                             json_string_value(json_object_get(spec, "command")), "workdir",
                             workdir ? workdir : json_null(), "env", env, "tasks",
                             rank_tasks(job, r));
    if (job->owner_id > 0) { /* whose job: the agent runs each owner as its own uid */
        char unix_user[64];
        json_object_set_new(body, "owner_id", json_integer(job->owner_id));
        if (br_store_unix_user_get(c->store, job->owner_id, unix_user, sizeof(unix_user),
                                   NULL) == 0 && unix_user[0])
            json_object_set_new(body, "unix_user", json_string(unix_user));
    }
    const char *addr = json_string_value(json_object_get(n->info, "address"));
    if (addr && *addr) /* its agent names the interface that holds it (GLOO_SOCKET_IFNAME) */
        json_object_set_new(body, "node_address", json_string(addr));
    if (json_is_object(ckpt) && r == 0) { /* rank 0's checkpoints are the gang's */
        json_t *section = br_ckptdir_section(spec, job->id);
        /* an attempt that follows one that ran may take a newer complete checkpoint
         * that one wrote after its last report (docs/checkpoints.md, "Nothing newer
         * is lost"); not when it resumes from an older one on purpose (replicas.c) */
        if (job->attempt > 1 && job->started > 0 &&
            !(job->resume_attempt == job->attempt && job->resume_from))
            json_object_set_new(section, "resume_after", json_integer(job->started));
        json_object_set_new(body, "checkpoint", section);
    }
    json_t *progress = json_object_get(spec, "progress");
    if (json_is_object(progress) && r == 0) /* rank 0's node judges the gang's hangs */
        json_object_set(body, "progress", progress);
    json_t *service = json_object_get(spec, "service");
    if (job->service > 0 && json_is_object(service)) /* its PORT and health */
        json_object_set_new(body, "service",
                            json_pack("{s:O, s:O, s:O, s:O}", "port",
                                      json_object_get(service, "port"), "health",
                                      json_object_get(service, "health"), "interval",
                                      json_object_get(service, "interval"), "grace",
                                      json_object_get(service, "grace")));
    add_trees(c, job, n, body);
    json_t *outputs = json_object_get(spec, "outputs");
    if (json_array_size(outputs)) /* kept from the working dir at the attempt's end */
        json_object_set(body, "outputs", outputs);
    json_t *image = json_object_get(spec, "image");
    if (json_is_string(image)) /* the job runs in a container of it (agent/container.h) */
        json_object_set(body, "image", image);
    json_t *setup = json_object_get(spec, "setup");
    if (json_is_string(setup)) /* run before the command, once per node (cached) */
        json_object_set_new(body, "setup",
                            json_pack("{s:O, s:o}", "command", setup, "files",
                                      json_is_array(json_object_get(spec, "setup_files"))
                                          ? json_incref(json_object_get(spec, "setup_files"))
                                          : json_array()));
    br_coord_send_node(c, n, "job.run", body);
    job->ranks[r].sent = 1;
}

int br_jobs_place(br_coord_t *c, br_job_t *job, br_node_t *const *nodes,
                  json_t *const *assign, int count, const char *how)
{
    const char **names = calloc((size_t)count, sizeof(*names));
    if (!names)
        return -1;
    for (int r = 0; r < count; r++) {
        names[r] = nodes[r]->name;
        br_err_t err;
        if (br_store_attempt_node_add(c->store, job->id, job->attempt, nodes[r]->name,
                                      &err) < 0)
            fprintf(stderr, "brambled: job %lld: %s\n", (long long)job->id, err.text);
    }
    br_jobtab_unlink_ranks(c->jobs, job);
    int rc = br_job_set_ranks(job, names, assign, count);
    br_jobtab_link_ranks(c->jobs, job);
    free(names);
    if (rc < 0)
        return -1;
    free(job->placement);
    job->placement = how && *how ? strdup(how) : NULL;
    job->charged = br_now_ms(); /* what it holds counts from now (usage.h) */
    br_job_set_reason(job, NULL);
    if (job->attempt == 1) /* a fresh job: does its checkpoint dir hold another's steps? */
        br_ckptdir_check_shared(c, job->id, job->spec);
    char list[1024], data[96] = "";
    json_t *sets = json_object_get(job->spec, "data");
    if (json_object_size(sets)) { /* what its data sets cost to bring there */
        uint64_t missing = 0;
        char sz[32];
        for (int r = 0; r < count; r++)
            missing += br_node_trees_missing(nodes[r], sets);
        if (missing)
            snprintf(data, sizeof(data), "; its data sets: %s to fetch",
                     br_format_size(missing, sz, sizeof(sz)));
        else
            snprintf(data, sizeof(data), "; its data sets are there already");
    }
    br_job_post(c, job, BR_JOB_STARTING, nodes[0]->name, "attempt %d placed on %s%s%s%s%s",
                job->attempt, node_list(job, ", ", list, sizeof(list)),
                how && *how ? " (" : "", how && *how ? how : "", how && *how ? ")" : "", data);
    br_treefetch_forget(job); /* (what the last placement's nodes fetched) */
    send_run(c, job, 0, 1);
    return 0;
}

void br_jobs_log_lost(br_coord_t *c, int64_t id, int attempt, const char *node,
                      int64_t bytes)
{
    char size[32];
    if (bytes <= 0)
        return;
    int64_t before = br_store_log_lost_set(c->store, id, attempt, node, bytes, NULL);
    if (before == 0) /* the first: job show counts the rest */
        br_coord_event(c, id, node, "log",
                       "output dropped on %s: %s of attempt %d's oldest output did not "
                       "fit in its agent's buffer while the coordinator could not take it "
                       "(log_dropped; job show counts it)",
                       node, br_format_size((uint64_t)bytes, size, sizeof(size)), attempt);
}

int br_jobs_log_allowed(br_coord_t *c, int64_t id, int attempt, const char *node)
{
    br_job_t *job = br_jobtab_find(c->jobs, id);
    int current;
    if (job) {
        current = job->attempt;
        if (attempt == current && br_job_rank_on(job, node, 0) >= 0)
            return 1;
    } else { /* ended: its last output may still come */
        json_t *row = br_store_job_get(c->store, id, NULL);
        current = row ? (int)json_integer_value(json_object_get(row, "attempt")) : 0;
        int mine = 0;
        size_t i;
        json_t *name;
        json_array_foreach(json_object_get(row, "nodes"), i, name) {
            mine |= json_is_string(name) && strcmp(json_string_value(name), node) == 0;
        }
        json_decref(row);
        if (row && attempt == current && mine)
            return 1;
    }
    /* a superseded attempt's last output, shipped after a partition healed, is
     * still worth keeping, but only from a node that was given that attempt */
    return attempt >= 1 && attempt < current &&
           br_store_attempt_node_ran(c->store, id, attempt, node, NULL) == 1;
}

/* The job if attempt is its current attempt and it is starting or running, and
 * (when n is given) n runs one of its ranks that has not finished. */
static br_job_t *current_job(br_coord_t *c, int64_t id, int attempt, const br_node_t *n)
{
    br_job_t *job = br_jobtab_find(c->jobs, id);
    if (!job || job->attempt != attempt || !br_job_state_live(job->state))
        return NULL;
    return !n || br_job_rank_on(job, n->name, 1) >= 0 ? job : NULL;
}

/* The job runs (again): its wait since submission when this is its first run, its
 * recovery since a node loss when one sent it back. */
static void measure_start(br_coord_t *c, br_job_t *job)
{
    int64_t now = br_now_ms();
    if (job->started == 0) /* never ran */
        br_stats_observe(c->stats, BR_STAT_QUEUE_WAIT, (double)(now - job->submitted) / 1000.0);
    if (job->lost_at > 0) {
        br_stats_observe(c->stats, BR_STAT_RECOVERY, (double)(now - job->lost_at) / 1000.0);
        job->lost_at = 0;
    }
}

/* Rank r runs: once rank 0 runs, the port it chose goes to the other ranks; once
 * every rank runs, so does the job. */
static void rank_started(br_coord_t *c, br_job_t *job, int r, int port)
{
    if (job->ranks[r].state != BR_RANK_PLACED)
        return;
    job->ranks[r].state = BR_RANK_STARTED;
    if (r == 0 && port > 0 && job->port == 0) { /* a gang's, or a replica's PORT */
        job->port = port;
        for (int k = 1; k < job->nranks; k++)
            send_run(c, job, k, 0);
    }
    int all = 1;
    for (int k = 0; k < job->nranks; k++)
        all &= job->ranks[k].state != BR_RANK_PLACED;
    if (all && job->state == BR_JOB_STARTING) {
        char list[1024];
        measure_start(c, job);
        job->started = br_now_ms();
        br_node_t *n0 = rank_node(c, job, 0);
        br_job_post(c, job, BR_JOB_RUNNING, n0 ? n0->name : NULL, "attempt %d running on %s",
                    job->attempt, node_list(job, ", ", list, sizeof(list)));
    } else {
        br_job_save(c, job);
    }
}

void br_jobs_started(br_coord_t *c, int64_t id, int attempt, br_node_t *n, int port)
{
    br_job_t *job = current_job(c, id, attempt, n);
    if (job)
        rank_started(c, job, br_job_rank_on(job, n->name, 1), port);
}

static int restart_allowed(const br_job_t *job, const char *cause)
{
    json_t *restart = json_object_get(job->spec, "restart");
    json_int_t max = json_integer_value(json_object_get(restart, "max"));
    size_t i;
    json_t *on;
    json_array_foreach(json_object_get(restart, "on"), i, on) {
        if (json_is_string(on) && strcmp(json_string_value(on), cause) == 0)
            return job->restarts < max;
    }
    return 0;
}

/* The attempt's exit (exit_code/signal < 0: none) and why it ended. */
static void set_exit(br_job_t *job, int exit_code, int signal, const char *reason)
{
    job->exit_code = exit_code >= 0 ? exit_code : -1;
    job->signal = signal >= 0 ? signal : -1;
    br_job_set_reason(job, reason);
}

/* Back to pending as the next attempt, with event text; counts a restart unless it
 * was the node's fault that the attempt could not run (then the node is excluded
 * instead), or no_count. fresh: place it only on nodes heard from after now (see
 * scheduler.h). */
static void requeue(br_coord_t *c, br_job_t *job, const char *node, const char *exclude,
                    int no_count, int fresh, int64_t delay_ms, const char *text)
{
    int64_t now = br_now_ms();
    job->not_before = delay_ms > 0 ? now + delay_ms : 0; /* (scheduler.c) */
    job->fresh_after = fresh ? now : 0;
    if (exclude)
        br_job_exclude(job, exclude);
    else if (!no_count)
        job->restarts++;
    job->attempt++;
    br_job_post(c, job, BR_JOB_PENDING, node, "%s", text);
}

/* Stop every rank of job that has not finished: order its node (all but skip,
 * whose rank is already gone) to kill it. What they hold is given back when the
 * job leaves its attempt (br_job_post). */
static void signal_ranks(br_coord_t *c, br_job_t *job, const br_node_t *skip, int sig,
                         int64_t grace_ms)
{
    for (int r = 0; r < job->nranks; r++) {
        if (job->ranks[r].state == BR_RANK_DONE)
            continue;
        br_node_t *n = rank_node(c, job, r);
        json_t *body = json_pack("{s:I, s:i}", "job", (json_int_t)job->id, "attempt",
                                 job->attempt);
        if (sig > 0) { /* the signal now, SIGKILL once the grace is over */
            json_object_set_new(body, "signal", json_integer(sig));
            json_object_set_new(body, "grace", json_integer((json_int_t)grace_ms));
        }
        if (n && n != skip)
            br_coord_send_node(c, n, "job.kill", body);
        else
            json_decref(body);
    }
}

static void stop_ranks(br_coord_t *c, br_job_t *job, const br_node_t *skip)
{
    signal_ranks(c, job, skip, 0, 0);
}

/* Ask every rank of job to stop on purpose (job->stop.why says why): sig now,
 * SIGKILL from its agent grace_ms later; however the attempt then ends is the
 * stop's end (end_attempt): cancelled when a cancel asked, requeued when preempted,
 * else failed. */
static void begin_stop(br_coord_t *c, br_job_t *job, int preempt, int sig, int64_t grace_ms)
{
    job->stop.at_mono = br_mono_ms();
    job->stop.grace_ms = grace_ms;
    job->stop.preempt = preempt;
    signal_ranks(c, job, NULL, sig, grace_ms);
}

/* The current attempt of job ended because of node n (cause NULL: every rank
 * completed): stop what still runs, then restart it per policy, or settle it.
 * exclude: requeue without counting a restart, never again on n. */
static void end_attempt(br_coord_t *c, br_job_t *job, br_node_t *n, const char *cause,
                        int exit_code, int signal, const char *reason, int exclude)
{
    int attempt = job->attempt;
    const char *node = n ? n->name : NULL;
    char why[600], text[900];
    int others = 0;
    for (int r = 0; r < job->nranks; r++)
        others += rank_node(c, job, r) != n && job->ranks[r].state != BR_RANK_DONE;
    int per_node = br_job_tasks_per_node(job->spec) > 1; /* processes per node */
    char stopped[64] = ""; /* (none when it was the gang's last rank) */
    if (others)
        snprintf(stopped, sizeof(stopped), "; stopped the %s %d %s%s",
                 per_node ? "gang on the other" : "other", others,
                 per_node ? "node" : "rank", others == 1 ? "" : "s");
    if (cause && job->nranks > 1 && per_node)
        /* the agent's reason names the process's rank */
        snprintf(why, sizeof(why), "on %s: %s%s", node ? node : "?", reason, stopped);
    else if (cause && job->nranks > 1)
        snprintf(why, sizeof(why), "rank %d on %s: %s%s",
                 n ? br_job_rank_on(job, n->name, 0) : -1, node ? node : "?", reason, stopped);
    else
        snprintf(why, sizeof(why), "%s", reason ? reason : "");
    if (job->stop.at_mono) { /* it was being stopped on purpose: that is its end */
        char was[900];
        snprintf(was, sizeof(was), "%s (%s)", job->stop.why,
                 !cause ? "it exited 0 when asked to stop" : why[0] ? why : cause);
        stop_ranks(c, job, n);
        set_exit(job, exit_code, signal, was);
        if (job->stop.cancel) {
            br_job_post(c, job, BR_JOB_CANCELLED, node, "%s", was);
        } else if (job->stop.preempt) { /* it waits to resume, from its newest checkpoint */
            snprintf(text, sizeof(text), "%s; back to pending as attempt %d, to resume from "
                                         "its newest checkpoint",
                     was, attempt + 1);
            requeue(c, job, node, NULL, 1, 0, 0, text);
        } else {
            br_job_post(c, job, BR_JOB_FAILED, node, "%s", was);
        }
        return;
    }
    int lost = cause && strcmp(cause, "node_lost") == 0;
    if (lost && !job->lost_at) /* from the first loss until it runs again */
        job->lost_at = br_now_ms();
    stop_ranks(c, job, n);
    br_hook_arg_t a = {.job = job, .node = n, .cause = cause, .reason = why};
    if (!exclude) /* a module may take it over (a service's replica starts again) */
        br_hooks_run(c, c->hooks, BR_HOOK_ATTEMPT_ENDED, &a);
    if (a.restart) {
        set_exit(job, exit_code, signal, a.text);
        snprintf(text, sizeof(text), "%s; starting it again as attempt %d in %.1fs", a.text,
                 attempt + 1, (double)a.delay_ms / 1000.0);
        requeue(c, job, node, NULL, 0, 0, a.delay_ms, text);
    } else if (!cause) {
        set_exit(job, exit_code, signal, NULL);
        br_job_post(c, job, BR_JOB_COMPLETED, node, "attempt %d exited 0%s", attempt,
                    job->nranks > 1 ? " on every rank" : "");
    } else if (exclude) {
        set_exit(job, exit_code, signal, why);
        snprintf(text, sizeof(text), "%s; trying another node as attempt %d", why, attempt + 1);
        requeue(c, job, node, node, 0, 0, 0, text);
    } else if (restart_allowed(job, cause)) {
        /* a gang's rank often fails because a peer's node just died, before that
         * node is known to be lost: restart only on nodes that speak up after it */
        set_exit(job, exit_code, signal, why);
        snprintf(text, sizeof(text), "%s; restarting as attempt %d (%s)", why, attempt + 1,
                 cause);
        requeue(c, job, node, NULL, 0, job->nranks > 1 && strcmp(cause, "nonzero_exit") == 0,
                0, text);
    } else {
        set_exit(job, exit_code, signal, why);
        br_job_post(c, job, BR_JOB_FAILED, node, "%s", why);
    }
}

/* A held rank failure (job.h) ends the attempt as the rank's own failure once
 * every other rank's node not done was heard from after it came, or once
 * node_timeout passed (a node that stays silent is lost before that, and its
 * loss ends the attempt as node_lost instead). */
static void settle_held(br_coord_t *c, br_job_t *job)
{
    if (job->held.rank < 0 || !br_job_state_live(job->state))
        return;
    int64_t now = br_mono_ms();
    int waiting = 0;
    for (int k = 0; k < job->nranks; k++) {
        br_node_t *m = rank_node(c, job, k);
        if (k != job->held.rank && job->ranks[k].state != BR_RANK_DONE && m &&
            m->last_seen_mono <= job->held.at_mono)
            waiting = 1;
    }
    if (waiting && now - job->held.at_mono < c->cfg.node_timeout_ms)
        return;
    int r = job->held.rank;
    job->held.rank = -1;
    end_attempt(c, job, rank_node(c, job, r), "nonzero_exit", job->held.exit_code,
                job->held.signal, job->held.why, 0);
}

void br_jobs_exited(br_coord_t *c, int64_t id, int attempt, br_node_t *n, int exit_code,
                    int signal, const char *reason)
{
    br_job_t *job = current_job(c, id, attempt, n);
    if (!job) {
        br_coord_event(c, id, n->name, "exited", "attempt %d ended (no longer current)",
                       attempt);
        return;
    }
    int r = br_job_rank_on(job, n->name, 1);
    char why[300];
    if (reason && *reason)
        snprintf(why, sizeof(why), "%s", reason);
    else if (signal >= 0)
        snprintf(why, sizeof(why), "killed by signal %d (%s)", signal, strsignal(signal));
    else
        snprintf(why, sizeof(why), "exit code %d", exit_code);
    int failed = exit_code != 0 || signal >= 0 || (reason && *reason);
    /* a rank of a job asked to stop has its whole grace, whatever the others do: it
     * is done, and the attempt ends with the last one (below) */
    if (failed && !job->stop.at_mono) {
        if (job->nranks > 1 && job->held.rank < 0) {
            /* a gang's rank that fails may fail because a peer's node just died
             * (gloo errors out at once): the verdict waits until every other
             * rank's node has spoken since, or is lost (then node_lost applies) */
            job->held.rank = r;
            job->held.exit_code = exit_code;
            job->held.signal = signal;
            job->held.at_mono = br_mono_ms();
            br_strlcpy(job->held.why, why, sizeof(job->held.why));
            settle_held(c, job);
            return;
        }
        if (job->held.rank < 0)
            end_attempt(c, job, n, "nonzero_exit", exit_code, signal, why, 0);
        return; /* (a second rank's failure while one is held: the first speaks) */
    }
    /* this rank is done and frees its node; the job when every rank is */
    br_hook_arg_t a = {.job = job, .node = n};
    br_hooks_run(c, c->hooks, BR_HOOK_RELEASING, &a);
    br_node_hold(n, job->ranks[r].share, -1);
    job->ranks[r].state = BR_RANK_DONE;
    int left = br_job_ranks_left(job);
    if (left == 0) {
        end_attempt(c, job, n, failed ? "nonzero_exit" : NULL, exit_code, signal,
                    failed ? why : NULL, 0);
    } else {
        br_job_save(c, job);
        if (failed) /* (in a stop's grace) */
            br_coord_event(c, id, n->name, br_job_state_name(job->state),
                           "rank %d on %s ended in its grace (%s); %d to go", r, n->name, why,
                           left);
        else
            br_coord_event(c, id, n->name, br_job_state_name(job->state),
                           "rank %d exited 0 on %s; %d to go", r, n->name, left);
        br_coord_changed(c);
    }
}

void br_jobs_hung(br_coord_t *c, int64_t id, int attempt, br_node_t *n, int exit_code,
                  int signal, const char *reason)
{
    br_job_t *job = current_job(c, id, attempt, n);
    if (job) /* restarted under restart.on: [hung] */
        end_attempt(c, job, n, "hung", exit_code, signal, reason, 0);
}

void br_jobs_not_here(br_coord_t *c, int64_t id, int attempt, br_node_t *n,
                      const char *reason)
{
    br_job_t *job = current_job(c, id, attempt, n);
    if (!job)
        return;
    br_hook_arg_t a = {.job = job, .node = n, .cause = "not_here", .reason = reason};
    br_hooks_run(c, c->hooks, BR_HOOK_RESUMING, &a); /* a copy may be brought there */
    if (a.hold) {
        job->ranks[0].sent = 0; /* br_jobs_release sends it again */
        /* and the exit of the run it then starts is its own, not a resend of the
         * report just taken: else it would be dropped as one, and the attempt taken
         * for lost once the node no longer lists it */
        br_err_t err;
        if (br_store_attempt_reopen(c->store, id, attempt, n->name, &err) < 0)
            fprintf(stderr, "brambled: job %lld attempt %d: %s\n", (long long)id, attempt,
                    err.text);
    } else {
        end_attempt(c, job, n, "not_here", -1, -1, reason, 1);
    }
}

void br_jobs_release(br_coord_t *c, int64_t id, int attempt)
{
    br_job_t *job = br_jobtab_find(c->jobs, id);
    if (job && job->attempt == attempt && job->state == BR_JOB_STARTING && job->nranks > 0 &&
        job->ranks[0].state == BR_RANK_PLACED && !job->ranks[0].sent)
        send_run(c, job, 0, 1);
}

/* The attempt could not start on n, and not by the job's fault: what else runs is
 * stopped, and the job goes back to pending as the next attempt after delay_ms, no
 * restart counted and no node excluded; why is its reason, then what comes next. */
static void not_started(br_coord_t *c, br_job_t *job, br_node_t *n, const char *why,
                        const char *then, int64_t delay_ms)
{
    char text[1400];
    stop_ranks(c, job, n);
    set_exit(job, -1, -1, why);
    snprintf(text, sizeof(text), "%s; %s", why, then);
    requeue(c, job, n->name, NULL, 1, 0, delay_ms, text);
}

void br_jobs_node_full(br_coord_t *c, int64_t id, int attempt, br_node_t *n,
                       const char *reason)
{
    br_job_t *job = current_job(c, id, attempt, n);
    if (!job)
        return;
    char why[300], then[64];
    snprintf(why, sizeof(why), "%s refused attempt %d: %s", n->name, attempt, reason);
    snprintf(then, sizeof(then), "placing it again as attempt %d", attempt + 1);
    not_started(c, job, n, why, then, 1000);
}

void br_jobs_image_failed(br_coord_t *c, int64_t id, int attempt, br_node_t *n,
                          const char *reason)
{
    br_job_t *job = current_job(c, id, attempt, n);
    if (!job)
        return;
    char why[1200], then[64];
    snprintf(why, sizeof(why), "%s: %s", n->name, reason);
    snprintf(then, sizeof(then), "trying again in %d s, as attempt %d",
             BR_IMAGE_RETRY_MS / 1000, attempt + 1);
    not_started(c, job, n, why, then, BR_IMAGE_RETRY_MS);
}

int br_jobs_checkpoint(br_coord_t *c, int64_t id, int attempt, br_node_t *n,
                       const char *path, int64_t step, int64_t size, int64_t time_ms,
                       const json_t *manifest, const char *refused, br_err_t *err)
{
    br_job_t *job = current_job(c, id, attempt, n);
    if (!job) /* a superseded attempt's checkpoint never counts */
        return br_errf(err, ESTALE,
                       "attempt %d of job %lld is not current on %s: checkpoint not counted",
                       attempt, (long long)id, n->name);
    int r = br_job_rank_on(job, n->name, 1);
    if (r != 0) /* a gang resumes from what rank 0 saved */
        return br_errf(err, ESTALE,
                       "%s runs rank %d of job %lld: only rank 0's checkpoints count",
                       n->name, r, (long long)id);
    if (refused) {
        char why[512]; /* as long as an event's reason gets */
        snprintf(why, sizeof(why),
                 "checkpoint %s (step %lld) of attempt %d not counted: %s", path,
                 (long long)step, attempt, refused);
        int seen = br_store_event_seen(c->store, id, why, err);
        if (seen == 0)
            br_coord_event(c, id, n->name, br_job_state_name(job->state), "%s", why);
        return seen < 0 ? -1 : 0;
    }
    const json_t *m = manifest;
    if (json_is_true(json_object_get(m, "truncated")))
        fprintf(stderr,
                "brambled: job %lld: the manifest of checkpoint %s lists %zu of "
                "its %lld files (the rest did not fit in the report; all are in its "
                "hash)%s\n",
                (long long)id, path, json_array_size(json_object_get(m, "entries")),
                (long long)json_integer_value(json_object_get(m, "files")),
                json_object_get(m, "listing")
                    ? ": its writer keeps the whole one, and its holders serve it"
                    : ", and no whole one was kept: it cannot be copied or pulled");
    if (br_store_checkpoint_add(c->store, id, attempt, n->name, path, step, size, time_ms,
                                manifest, err) < 0)
        return -1;
    br_hook_arg_t a = {.job = job, .node = n, .reason = path, .step = step,
                       .manifest = manifest};
    br_hooks_run(c, c->hooks, BR_HOOK_CHECKPOINT, &a);
    if (job->stop.at_mono && job->stop.preempt && br_job_state_live(job->state)) {
        /* the checkpoint it was asked for: it may stop now, not at the grace's end */
        stop_ranks(c, job, NULL);
        br_coord_event(c, id, n->name, br_job_state_name(job->state),
                       "checkpoint step %lld counted after it was asked to make room: "
                       "stopping it", (long long)step);
    }
    return 0;
}

int64_t br_jobs_preempt(br_coord_t *c, br_job_t *job, br_job_t *const *victims, int n)
{
    int64_t longest = 0;
    char names[300] = "", grace[32];
    size_t off = 0;
    for (int i = 0; i < n; i++) {
        br_job_t *v = victims[i];
        br_node_t *at = rank_node(c, v, 0);
        snprintf(v->stop.why, sizeof(v->stop.why),
                 "preempted by job %lld (priority %d, over its %d)", (long long)job->id,
                 job->priority, v->priority);
        begin_stop(c, v, 1, v->preempt_signal, v->preempt_grace);
        br_coord_event(c, v->id, at ? at->name : NULL, "running",
                       "%s: signal %d sent; it has %s to write a checkpoint, then it is "
                       "stopped and resumes later",
                       v->stop.why, v->preempt_signal,
                       br_format_duration(v->preempt_grace, grace, sizeof(grace)));
        if (v->preempt_grace > longest)
            longest = v->preempt_grace;
        if (off < sizeof(names))
            off += (size_t)snprintf(names + off, sizeof(names) - off, "%s%lld",
                                    off ? ", " : "", (long long)v->id);
    }
    char reason[400];
    snprintf(reason, sizeof(reason), "waiting: job%s %s asked to make room (preempted, "
                                     "they checkpoint first)",
             n > 1 ? "s" : "", names);
    br_job_set_reason(job, reason);
    br_job_save(c, job);
    br_coord_event(c, job->id, NULL, "pending", "preempting job%s %s to start: each gets "
                                               "its own grace to write a checkpoint",
                   n > 1 ? "s" : "", names);
    /* no second round until these had their grace and time to report */
    return br_now_ms() + longest + c->cfg.node_timeout_ms;
}

int64_t br_jobs_fence_ms(const br_coord_t *c)
{
    return c->cfg.node_timeout_ms * 3 / 5;
}

/* A running job asked to stop by its cancel: SIGTERM to every process now, SIGKILL
 * once --kill-grace has passed; its exit then cancels it (end_attempt). A job
 * already stopping (time limit, preemption) keeps the grace it has, and now ends
 * as cancelled. */
/* Stop job's running attempt for why (stop.why; it then ends cancelled): SIGTERM,
 * SIGKILL after --kill-grace. asked heads its event ("cancel requested"). */
static void cancel_gracefully(br_coord_t *c, br_job_t *job, const char *why, const char *asked)
{
    br_node_t *n = rank_node(c, job, 0);
    char grace_text[32], text[500];
    int stopping = job->stop.at_mono != 0;
    snprintf(job->stop.why, sizeof(job->stop.why), "%s", why);
    job->stop.cancel = 1;
    job->stop.preempt = 0;
    if (!stopping)
        begin_stop(c, job, 0, SIGTERM, c->cfg.kill_grace_ms);
    /* (a grace begun now is whole: a millisecond between here and begin_stop made
     * "30s" read "29999ms") */
    int64_t left = stopping ? job->stop.grace_ms - (br_mono_ms() - job->stop.at_mono)
                            : job->stop.grace_ms;
    br_format_duration(left > 0 ? left : 0, grace_text, sizeof(grace_text));
    if (stopping)
        snprintf(text, sizeof(text), "%s while it was being stopped: SIGKILL in %s if still "
                                     "running (bramble cancel --now kills it at once)",
                 asked, grace_text);
    else
        snprintf(text, sizeof(text), "%s: SIGTERM sent, SIGKILL in %s if still running "
                                     "(bramble cancel --now kills it at once)",
                 asked, grace_text);
    br_job_set_reason(job, text);
    br_job_save(c, job);
    br_coord_event(c, job->id, n ? n->name : NULL, br_job_state_name(job->state), "%s", text);
}

int br_jobs_stop_for(br_coord_t *c, br_job_t *job, const char *why)
{
    if (job->state != BR_JOB_RUNNING || br_job_ranks_left(job) == 0 || job->stop.at_mono)
        return -1;
    cancel_gracefully(c, job, why, why);
    return 0;
}

json_t *br_jobs_cancel(br_coord_t *c, int64_t id, int now, br_err_t *err)
{
    br_job_t *job = br_jobtab_find(c->jobs, id);
    if (!job) {
        json_t *row = br_store_job_get(c->store, id, err);
        if (row)
            br_errf(err, EINVAL, "job %lld has already ended (%s); nothing to cancel",
                    (long long)id, json_string_value(json_object_get(row, "state")));
        json_decref(row);
        return NULL;
    }
    if (!now && job->state == BR_JOB_RUNNING && br_job_ranks_left(job) > 0) {
        if (!job->stop.cancel) /* (a second cancel leaves the first one's grace) */
            cancel_gracefully(c, job, "cancelled by request", "cancel requested");
        return br_store_job_get(c->store, id, err);
    }
    br_node_t *n = br_job_state_live(job->state) ? rank_node(c, job, 0) : NULL;
    int killed = job->state == BR_JOB_RUNNING && br_job_ranks_left(job) > 0;
    if (br_job_state_live(job->state))
        stop_ranks(c, job, NULL);
    /* (a service's own job runs no process: nothing of it is killed) */
    const char *why = job->stop.cancel ? "cancelled by request (killed at once, in its grace)"
                      : killed         ? "cancelled by request (killed at once)"
                                       : "cancelled by request";
    br_job_set_reason(job, why);
    br_job_post(c, job, BR_JOB_CANCELLED, n ? n->name : NULL, "%s", why);
    return br_store_job_get(c->store, id, err);
}

/* The current jobs with a rank on node that has not finished, each once. */
static br_job_t **jobs_on(br_coord_t *c, const char *node, size_t *count)
{
    size_t len = 0, cap = 0;
    br_job_t **list = NULL;
    for (br_rank_t *rk = br_jobtab_on_node(c->jobs, node); rk; rk = rk->node_next) {
        if (rk->state == BR_RANK_DONE || br_job_rank_on(rk->job, node, 1) != rk->index)
            continue; /* (a job with two ranks here is taken at its first) */
        if (len == cap) {
            br_job_t **l = realloc(list, (cap = cap ? 2 * cap : 16) * sizeof(*l));
            if (!l)
                break;
            list = l;
        }
        list[len++] = rk->job;
    }
    *count = len;
    return list;
}

void br_jobs_node_gone(br_coord_t *c, br_node_t *n, const char *reason)
{
    size_t count;
    br_job_t **list = jobs_on(c, n->name, &count);
    for (size_t i = 0; i < count; i++)
        if (br_job_state_live(list[i]->state) && br_job_rank_on(list[i], n->name, 1) >= 0)
            end_attempt(c, list[i], n, "node_lost", -1, -1, reason, 0);
    free(list);
}
void br_jobs_check_limits(br_coord_t *c)
{
    int64_t now = br_now_ms(), mono = br_mono_ms();
    br_job_t *job, *next;
    for (job = br_jobtab_first(c->jobs); job; job = next) {
        next = job->next; /* (a job that fails here leaves the table) */
        if (job->stop.at_mono && br_job_state_live(job->state) &&
            mono - job->stop.at_mono > job->stop.grace_ms + c->cfg.node_timeout_ms) {
            /* no exit came back after the grace: its agent is gone or deaf; every
             * rank is killed (no node is spared) */
            char text[300];
            snprintf(text, sizeof(text), "no exit reported after signal %d: killed",
                     job->stop.preempt ? job->preempt_signal : SIGTERM);
            end_attempt(c, job, NULL, "stopped", -1, -1, text, 0);
            continue;
        }
        if (job->state != BR_JOB_RUNNING || job->time_limit <= 0 || !job->started ||
            now - job->started < job->time_limit || job->service > 0)
            continue; /* (a service's replicas run until it is cancelled) */
        br_node_t *n = rank_node(c, job, 0);
        char limit_text[32], grace_text[32], text[300];
        if (!job->stop.at_mono) { /* SIGTERM now, SIGKILL after the grace */
            snprintf(job->stop.why, sizeof(job->stop.why), "time limit %s reached",
                     br_format_duration(job->time_limit, limit_text, sizeof(limit_text)));
            begin_stop(c, job, 0, SIGTERM, c->cfg.kill_grace_ms);
            snprintf(text, sizeof(text), "%s: SIGTERM sent, SIGKILL in %s if still running",
                     job->stop.why,
                     br_format_duration(job->stop.grace_ms, grace_text, sizeof(grace_text)));
            br_job_set_reason(job, text);
            br_job_save(c, job);
            br_coord_event(c, job->id, n ? n->name : NULL, "running", "%s", text);
        }
    }
}

static void on_node_lost(br_coord_t *c, br_hook_arg_t *a, void *ctx)
{
    (void)ctx;
    br_jobs_node_gone(c, a->node, a->reason);
}

/* A node went unhealthy: a gang with a rank there stops and restarts elsewhere as
 * if the node were lost (one rank's GPU failing stalls the collective); a job
 * of that node alone goes on. */
static void on_node_unhealthy(br_coord_t *c, br_hook_arg_t *a, void *ctx)
{
    (void)ctx;
    size_t count;
    br_job_t **list = jobs_on(c, a->node->name, &count);
    char why[300];
    snprintf(why, sizeof(why), "node %s unhealthy (%s)", a->node->name, a->reason);
    for (size_t i = 0; i < count; i++) {
        br_job_t *job = list[i];
        if (job->nranks < 2 || !br_job_state_live(job->state) ||
            br_job_rank_on(job, a->node->name, 1) < 0)
            continue;
        /* its agent is there: its rank is stopped too (end_attempt spares the
         * node it names, as a lost one's rank is gone) */
        br_coord_send_node(c, a->node, "job.kill",
                           json_pack("{s:I, s:i}", "job", (json_int_t)job->id, "attempt",
                                     job->attempt));
        end_attempt(c, job, a->node, "node_lost", -1, -1, why, 0);
    }
    free(list);
}

/* A node spoke: the held failures of the gangs it is in may be settled now. */
static void on_heard(br_coord_t *c, br_hook_arg_t *a, void *ctx)
{
    (void)ctx;
    size_t count;
    br_job_t **list = jobs_on(c, a->node->name, &count);
    for (size_t i = 0; i < count; i++)
        if (list[i]->held.rank >= 0)
            settle_held(c, list[i]);
    free(list);
}

static void on_tick(br_coord_t *c, br_hook_arg_t *a, void *ctx)
{
    (void)a;
    (void)ctx;
    br_jobs_check_limits(c);
    br_job_t *job, *next;
    for (job = br_jobtab_first(c->jobs); job; job = next) {
        next = job->next;
        if (job->held.rank >= 0)
            settle_held(c, job);
        else if (job->state == BR_JOB_STARTING && job->nranks == 1 &&
                 job->ranks[0].wait_near > 0 && !job->ranks[0].sent)
            send_run(c, job, 0, 1); /* (waits on while that node still fetches) */
    }
}

int br_jobs_init(br_coord_t *c)
{
    return br_hooks_add(c->hooks, BR_HOOK_NODE_LOST, on_node_lost, NULL) < 0 ||
                   br_hooks_add(c->hooks, BR_HOOK_NODE_UNHEALTHY, on_node_unhealthy,
                                NULL) < 0 ||
                   br_hooks_add(c->hooks, BR_HOOK_NODE_HEARD, on_heard, NULL) < 0 ||
                   br_hooks_add(c->hooks, BR_HOOK_TICK, on_tick, NULL) < 0
               ? -1
               : 0;
}

static json_t *find_task(json_t *tasks, int64_t id, int attempt)
{
    size_t i;
    json_t *t;
    json_array_foreach(tasks, i, t) {
        if (json_integer_value(json_object_get(t, "job")) == id &&
            json_integer_value(json_object_get(t, "attempt")) == attempt)
            return t;
    }
    return NULL;
}

void br_jobs_reconcile(br_coord_t *c, br_node_t *n, json_t *tasks, int full)
{
    if (!br_jobtab_on_node(c->jobs, n->name) && json_array_size(tasks) == 0)
        return; /* nothing current is placed here, and it runs nothing: all agree */
    size_t count;
    br_job_t **list = jobs_on(c, n->name, &count);
    /* current ranks here that the node does not run any more */
    for (size_t i = 0; i < count; i++) {
        br_job_t *job = list[i];
        int r = br_job_rank_on(job, n->name, 1);
        if (r < 0 || !br_job_state_live(job->state))
            continue; /* (ended by an earlier one of this list: a gang's other rank) */
        json_t *t = find_task(tasks, job->id, job->attempt);
        /* output its agent could not ship */
        br_jobs_log_lost(c, job->id, job->attempt, n->name,
                         json_integer_value(json_object_get(t, "log_dropped")));
        br_rank_state_t rs = job->ranks[r].state;
        if (job->held.rank == r)
            continue; /* its failure is held: its verdict comes (settle_held) */
        if (t) { /* it runs: a start report lost on the way counts as made now */
            if (rs == BR_RANK_PLACED)
                rank_started(c, job, r, (int)json_integer_value(json_object_get(t, "port")));
            br_hook_arg_t a = {.job = job, .node = n, .task = t};
            br_hooks_run(c, c->hooks, BR_HOOK_TASK_REPORTED, &a);
            continue;
        }
        if (rs == BR_RANK_PLACED && (!job->ranks[r].sent || (full && has_trees(job)))) {
            /* placed by a coordinator that died before its order left (or, for ranks
             * above 0, rank 0 has not said its port yet): send it when it can go
             * (never twice: the agent ignores an order for an attempt it runs); an
             * order whose code or data sets an agent that started again was still
             * fetching (it forgot them) is sent again, as is a gang's fetch */
            if (full && job->ranks[r].fetch == 1)
                job->ranks[r].fetch = 0;
            if (r == 0 || job->port > 0)
                send_run(c, job, r, 0);
            else if (gang_fetches(job))
                fetching(c, job);
        } else if (full || rs == BR_RANK_STARTED) {
            end_attempt(c, job, n, "node_lost", -1, -1, "the agent no longer runs it", 0);
        }
    }
    free(list);
    /* attempts the node runs that are not current: stop them */
    size_t i;
    json_t *t;
    json_array_foreach(tasks, i, t) {
        int64_t id = json_integer_value(json_object_get(t, "job"));
        int attempt = (int)json_integer_value(json_object_get(t, "attempt"));
        const char *st = json_string_value(json_object_get(t, "state"));
        br_job_t *cur = current_job(c, id, attempt, n);
        int live = st && (strcmp(st, "running") == 0 || strcmp(st, "frozen") == 0);
        if (!cur && live) /* superseded: it must not go on */
            br_coord_send_node(c, n, "job.kill",
                               json_pack("{s:I, s:i}", "job", (json_int_t)id, "attempt", attempt));
        else if (cur && st && strcmp(st, "frozen") == 0) /* still its own: go on */
            br_coord_send_node(c, n, "job.thaw",
                               json_pack("{s:I, s:i}", "job", (json_int_t)id, "attempt", attempt));
    }
}

json_t *br_jobs_public(json_t *job)
{
    json_t *o = json_copy(job); /* shallow: only top-level keys change below */
    json_object_del(o, "spec_yaml");
    json_object_del(o, "assign");
    if (!json_is_string(json_object_get(o, "placement"))) /* why a gang went there */
        json_object_del(o, "placement");
    static const char *internal[] = {"restarts", "not_before", "fresh_after", "lost_at",
                                     "exclude",  "service",    "replica",     "replicas"};
    for (size_t i = 0; i < sizeof(internal) / sizeof(internal[0]); i++)
        json_object_del(o, internal[i]); /* (services.h annotates what users see of them) */
    static const char *times[] = {"submitted", "started", "ended"};
    for (size_t i = 0; i < 3; i++)
        json_object_set_new(o, times[i], br_time_json(json_object_get(job, times[i])));
    /* what it used, as charged so far (usage.h) */
    json_object_set_new(
        o, "usage",
        json_pack("{s:f, s:f, s:f}", "gpu_hours",
                  (double)json_integer_value(json_object_get(job, "gpu_ms")) / 3600000.0,
                  "cpu_hours",
                  (double)json_integer_value(json_object_get(job, "cpu_ms")) / 3600000.0,
                  "cost", (double)json_integer_value(json_object_get(job, "cost_micros")) / 1e6));
    static const char *raw[] = {"gpu_ms", "cpu_ms", "cost_micros", "charged"};
    for (size_t i = 0; i < 4; i++)
        json_object_del(o, raw[i]);
    return o;
}
