/* scheduler.c - placement of pending jobs onto nodes (first fit; gangs onto
 * several distinct nodes at once): br_sched_plan decides from the nodes and the
 * jobs alone (and, given a memory of the last pass, skips the jobs that fit
 * nowhere while no node gained room); br_sched_run reads the pending jobs and
 * carries the decisions out. */
#include "scheduler.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "arrays.h"
#include "jobs.h"
#include "ociarchive.h"
#include "overlaynet.h"
#include "spec.h"
#include "util.h"
#include "hooks.h"
#include "jobtab.h"
#include "netmap.h"
#include "stages.h"

/* What GPU i of n would have left after taking a job that needs vram on it (0: a
 * whole GPU): the free VRAM it reported (NVML's figure, so memory that processes
 * outside bramble use counts; a declared GPU's total) less what sharing jobs
 * reserved there, less vram. -1 when it cannot take the job. */
static uint64_t gpu_vram_free(const br_node_t *n, int i)
{
    json_t *g = br_node_gpu(n, i);
    json_t *fv = json_object_get(g, "vram_free");
    return (uint64_t)json_integer_value(json_is_integer(fv) ? fv
                                                            : json_object_get(g, "vram_total"));
}

static int64_t gpu_left(const br_node_t *n, int i, uint64_t vram, json_t *models)
{
    json_t *g = br_node_gpu(n, i);
    uint64_t free_vram = gpu_vram_free(n, i);
    if (!br_spec_match_list(models, json_string_value(json_object_get(g, "model")), 1))
        return -1;
    if (vram == 0) /* a whole GPU: nobody else on it */
        return n->gpu_jobs[i] == 0 ? (int64_t)free_vram : -1;
    if (n->gpu_whole[i] > 0 || free_vram < n->gpu_vram_used[i] + vram)
        return -1;
    return (int64_t)(free_vram - n->gpu_vram_used[i] - vram);
}

typedef struct {
    int index;
    int64_t left;
} gpu_fit_t;

static int by_left(const void *x, const void *y)
{
    const gpu_fit_t *a = x, *b = y;
    if (a->left != b->left)
        return a->left < b->left ? -1 : 1;
    return a->index - b->index;
}

/* The GPUs for a job: with no VRAM need, whole free GPUs in index order; with one,
 * best fit (the GPUs left with the least VRAM to spare, shared ones included), so
 * small jobs pack together and big ones still find whole GPUs. *left: the VRAM
 * the chosen GPUs have to spare afterwards. */
static json_t *pick_gpus(const br_node_t *n, json_t *res, int want, int64_t *left,
                         char *why, size_t whylen)
{
    uint64_t vram = (uint64_t)json_integer_value(json_object_get(res, "vram"));
    json_t *models = json_object_get(res, "gpu_model");
    gpu_fit_t fit[BR_NODE_MAX_GPUS];
    int count = 0;
    for (int i = 0; i < br_node_gpu_count(n) && i < BR_NODE_MAX_GPUS; i++) {
        int64_t l = gpu_left(n, i, vram, models);
        if (l >= 0)
            fit[count++] = (gpu_fit_t){i, l};
    }
    if (count < want) {
        char v[32];
        if (vram)
            snprintf(why, whylen, "%s has %d GPUs with %s VRAM to spare, the job needs %d",
                     n->name, count, br_format_size(vram, v, sizeof(v)), want);
        else
            snprintf(why, whylen, "%s has %d GPUs free, the job needs %d", n->name, count, want);
        return NULL;
    }
    if (vram)
        qsort(fit, (size_t)count, sizeof(fit[0]), by_left);
    json_t *gpus = json_array();
    *left = 0;
    for (int k = 0; k < want; k++) {
        json_array_append_new(gpus, json_integer(json_integer_value(
                                        json_object_get(br_node_gpu(n, fit[k].index), "index"))));
        *left += fit[k].left;
    }
    return gpus;
}

static int listed(json_t *spec, const char *node);

/* Whether n takes jobs now: ready, connected, refusing none (plan_scan says which
 * it is not). */
static int takes_jobs(const br_node_t *n)
{
    return n->state == BR_NODE_READY && n->route_len > 0 && !br_node_refuses(n);
}

/* Whether one of a loaded image's variants runs on a node of machine arch. */
static int image_runs_on(const json_t *variants, const char *arch)
{
    size_t i;
    json_t *v;
    json_array_foreach(variants, i, v)
        if (arch && br_ociarchive_runs_on(json_string_value(json_object_get(v, "arch")),
                                          json_string_value(json_object_get(v, "variant")),
                                          arch))
            return 1;
    return 0;
}

/* The architectures of a loaded image's variants, as "arm64, arm/v7". */
static void image_archs(const json_t *variants, char *out, size_t len)
{
    size_t i, at = 0;
    json_t *v;
    out[0] = '\0';
    json_array_foreach(variants, i, v) {
        const char *variant = json_string_value(json_object_get(v, "variant"));
        int n = snprintf(out + at, len - at, "%s%s%s%s", i ? ", " : "",
                         json_string_value(json_object_get(v, "arch")),
                         variant && *variant ? "/" : "", variant ? variant : "");
        if (n < 0 || (size_t)n >= len - at)
            break;
        at += (size_t)n;
    }
}

br_node_t *br_sched_first_fit(br_coord_t *c, json_t *spec)
{
    char why[200];
    for (br_node_t *n = br_nodes_first(c->nodes); n; n = n->next) {
        json_t *a = NULL;
        if (!listed(spec, n->name) || !takes_jobs(n) ||
            !br_sched_fit(n, spec, &a, NULL, why, sizeof(why)))
            continue;
        json_decref(a);
        return n;
    }
    return NULL;
}

int br_sched_fit(const br_node_t *n, json_t *spec, json_t **assign, int64_t *left_out,
                 char *why, size_t whylen)
{
    json_t *res = json_object_get(spec, "resources");
    int cpus = (int)json_integer_value(json_object_get(res, "cpus"));
    uint64_t mem = (uint64_t)json_integer_value(json_object_get(res, "memory"));
    int gpus = (int)json_integer_value(json_object_get(res, "gpus"));
    const char *arch = json_string_value(json_object_get(n->info, "arch"));
    char a[32], b[32];
    if (!br_spec_match_list(json_object_get(res, "arch"), arch, 0)) {
        snprintf(why, whylen, "%s: arch %s not wanted", n->name, arch ? arch : "?");
        return 0;
    }
    if (br_spec_label_missing(json_object_get(res, "labels"),
                              json_object_get(n->info, "labels"))) {
        snprintf(why, whylen, "%s: labels do not match", n->name);
        return 0;
    }
    if (!json_object_get(n->info, "trees") &&
        (json_object_get(spec, "code") || json_object_size(json_object_get(spec, "data")) ||
         json_object_get(spec, "image_archive"))) {
        /* an agent that says nothing of a cache cannot fetch a tree: it would run the
         * job with whatever the node holds */
        snprintf(why, whylen, "%s: its agent fetches no code, data sets or images (it "
                              "predates them, or has not said what its cache holds yet)",
                 n->name);
        return 0;
    }
    if (json_is_string(json_object_get(spec, "image")) &&
        !json_is_string(json_object_get(n->info, "container_runtime"))) {
        snprintf(why, whylen, "%s runs no containers (its agent found no podman, or runs "
                              "with --container-runtime none)", n->name);
        return 0;
    }
    char not[200];
    if (br_overlay_wanted(spec) && !br_overlay_node_address(n, not, sizeof(not))) {
        snprintf(why, whylen, "%s has no place in the overlay (%s)", n->name, not);
        return 0;
    }
    json_t *variants = json_object_get(json_object_get(spec, "image_archive"), "variants");
    if (json_array_size(variants) && !image_runs_on(variants, arch)) {
        char archs[100];
        image_archs(variants, archs, sizeof(archs));
        snprintf(why, whylen, "%s is %s, and image %s was loaded for %s only", n->name,
                 arch ? arch : "of an unknown architecture",
                 json_string_value(json_object_get(json_object_get(spec, "image_archive"),
                                                   "name")),
                 archs);
        return 0;
    }
    if (n->attempts >= BR_NODE_MAX_ATTEMPTS) { /* what its agent would refuse */
        snprintf(why, whylen, "%s runs %d attempts, the most an agent runs", n->name,
                 n->attempts);
        return 0;
    }
    if (br_node_cpus(n) - n->cpus_used < cpus) {
        snprintf(why, whylen, "%s has %d CPUs free, the job needs %d", n->name,
                 br_node_cpus(n) - n->cpus_used, cpus);
        return 0;
    }
    if (mem && br_node_memory(n) < n->memory_used + mem) {
        snprintf(why, whylen, "%s has %s memory free, the job needs %s", n->name,
                 br_format_size(br_node_memory(n) - n->memory_used, a, sizeof(a)),
                 br_format_size(mem, b, sizeof(b)));
        return 0;
    }
    int64_t left = 0;
    json_t *g = pick_gpus(n, res, gpus, &left, why, whylen);
    if (!g)
        return 0;
    *assign = json_pack("{s:i, s:I, s:o}", "cpus", cpus, "memory", (json_int_t)mem,
                        "gpus", g);
    uint64_t vram = (uint64_t)json_integer_value(json_object_get(res, "vram"));
    if (vram && gpus > 0) /* it shares its GPUs: what it reserves on each */
        json_object_set_new(*assign, "vram", json_integer((json_int_t)vram));
    if (left_out)
        *left_out = left;
    return 1;
}

/* 1 unless the spec names its nodes (resources.nodelist) and node is not one. */
static int listed(json_t *spec, const char *node)
{
    json_t *list = json_object_get(json_object_get(spec, "resources"), "nodelist");
    return json_array_size(list) == 0 || br_spec_match_list(list, node, 0);
}

/* Append "; what" to why (bounded). */
static void add_why(char *why, size_t len, const char *what)
{
    size_t n = strlen(why);
    if (n + 3 < len)
        snprintf(why + n, len - n, "%s%s", n ? "; " : "", what);
}

/* The key of a replica's service in replica_counts. */
static const char *service_key(const br_job_t *job, char *buf, size_t len)
{
    snprintf(buf, len, "%lld", (long long)job->service);
    return buf;
}

/* One more replica of job's service on node, in counts (see replica_counts). */
static void count_replica(json_t *counts, const br_job_t *job, const char *node)
{
    char svc[24];
    service_key(job, svc, sizeof(svc));
    json_t *per = json_object_get(counts, svc);
    if (!per)
        json_object_set_new(counts, svc, per = json_object());
    json_object_set_new(per, node, json_integer(json_integer_value(json_object_get(per, node)) + 1));
}

/* How many replicas of each service each node runs: {"service id": {"node": n}},
 * counted when a pending job is a replica. */
static json_t *replica_counts(br_coord_t *c)
{
    json_t *counts = json_object();
    for (br_job_t *j = br_jobtab_first(c->jobs); j; j = j->next)
        if (j->service > 0 && br_job_state_live(j->state) && j->nranks > 0)
            count_replica(counts, j, j->ranks[0].node);
    return counts;
}

/* What a pass has learnt of one shape of job (job->shape: its resources, which
 * hold everything a node's fit depends on). Each placement only takes from nodes,
 * so within a pass a shape that fit nowhere fits nowhere again, and a first fit
 * never lies before the node the same shape last went to. Only for jobs whose
 * placement depends on nothing else (no excluded nodes, no wait for fresh
 * heartbeats, not a replica spread over nodes). */
typedef struct {
    br_node_t *from; /* first fit looks from here (NULL: the first node) */
    char *reason;    /* why it fit nowhere (NULL: it fit, or not tried yet) */
} shape_memo_t;

#define REASON_MAX 520 /* a wait's reason, as the store's reasons go */
#define HOW_MAX 400    /* why a gang went where it went */

/* The pass's one reservation (backfill): the nodes the highest job that cannot
 * start now will start on at until_ms, when the running jobs' time limits free
 * them; other jobs may use those nodes only if they end before, by their own
 * time_limit. */
typedef struct {
    int active;
    int64_t job, until_ms, now_ms;
    br_node_t *nodes[BR_SCHED_RESERVE_MAX];
    int count;
} reserve_t;

/* Does the reservation keep job off n? 1 with why filled. */
static int reserved_off(const reserve_t *rv, const br_job_t *job, const br_node_t *n,
                        char *why, size_t len)
{
    if (!rv || !rv->active || job->id == rv->job)
        return 0;
    int on = 0;
    for (int i = 0; i < rv->count && !on; i++)
        on = rv->nodes[i] == n;
    if (!on || (job->time_limit > 0 && rv->now_ms + job->time_limit <= rv->until_ms))
        return 0;
    char in[32];
    snprintf(why, len, "%s is reserved for job %lld in %s (for a job whose time_limit ends "
             "before)", n->name, (long long)rv->job,
             br_format_duration(rv->until_ms - rv->now_ms, in, sizeof(in)));
    return 1;
}

/* Look at the nodes from start (NULL: all) for job; memo (may be NULL) learns
 * where a first fit went. */
static void plan_scan(const br_sched_in_t *in, br_job_t *job, br_sched_decision_t *d,
                      int *on_heartbeat, br_node_t *start, shape_memo_t *memo,
                      const reserve_t *rv)
{
    char reason[REASON_MAX], how[HOW_MAX];
    d->verdict = BR_SCHED_WAIT;
    json_t *spec = job->spec;
    int want = (int)json_integer_value(
        json_object_get(json_object_get(spec, "resources"), "nodes"));
    if (want < 1)
        want = 1;
    char why[400] = "", last[200];
    int count = 0, cap = 16;
    br_node_t **fit = malloc((size_t)cap * sizeof(*fit));
    json_t **assign = malloc((size_t)cap * sizeof(*assign));
    int64_t fresh = job->fresh_after;
    json_t *res = json_object_get(spec, "resources");
    /* a job that shares GPUs goes where it leaves the least VRAM to spare */
    int sharing = json_integer_value(json_object_get(res, "vram")) > 0 &&
                  json_integer_value(json_object_get(res, "gpus")) > 0;
    /* a service's replicas without a VRAM need spread over nodes: a lost node takes
     * as few of them with it as it can */
    int spread = !sharing && job->service > 0 && in->replicas;
    json_t *siblings = NULL; /* {"node": replicas of this service there} */
    char svc[24];
    if (spread)
        siblings = json_object_get(in->replicas, service_key(job, svc, sizeof(svc)));
    /* a job with data sets goes, among nodes otherwise equal, where the fewest of
     * their bytes have to be fetched (the nodes' caches, as their agents list them) */
    json_t *data = json_object_size(json_object_get(spec, "data")) ? json_object_get(spec, "data")
                                                                   : NULL;
    /* a job whose code a node fetched while it was uploaded goes there, among nodes
     * otherwise equal (stages.h) */
    json_t *code = json_object_get(spec, "code");
    const char *staged = in->stages && json_is_object(code)
                             ? br_stages_node_of(in->stages,
                                                 json_string_value(json_object_get(code, "hash")))
                             : NULL;
    uint64_t code_bytes = (uint64_t)json_integer_value(json_object_get(code, "bytes"));
    int best = 0;
    int64_t best_left = -1;
    uint64_t best_miss = UINT64_MAX;
    for (br_node_t *n = start ? start : br_nodes_first(in->nodes); n && fit && assign;
         n = n->next) {
        json_t *a = NULL;
        int64_t left = 0;
        if (!listed(spec, n->name)) {
            continue; /* resources.nodelist leaves it out */
        } else if (br_job_excluded(job, n->name)) {
            snprintf(last, sizeof(last), "%s cannot run it (an earlier attempt failed there)",
                     n->name);
        } else if (fresh && n->last_seen_ms <= fresh) {
            snprintf(last, sizeof(last), "%s not heard from since the gang stopped", n->name);
            *on_heartbeat = 1;
        } else if (n->state != BR_NODE_READY || !n->route_len) {
            snprintf(last, sizeof(last), "%s is %s", n->name,
                     n->route_len ? br_node_state_name(n->state) : "not connected");
        } else if (br_node_refuses(n)) {
            snprintf(last, sizeof(last), "%s refuses every job: %s", n->name,
                     br_node_refuses(n));
        } else if (reserved_off(rv, job, n, last, sizeof(last))) {
            /* (backfill: why is in last) */
        } else if (br_sched_fit(n, spec, &a, &left, last, sizeof(last))) {
            uint64_t miss = (data ? br_node_trees_missing(n, data) : 0) +
                            (staged && strcmp(n->name, staged) != 0 ? code_bytes + 1 : 0);
            /* (fewer bytes to fetch first, then the tighter fit) */
            int better = miss < best_miss || (miss == best_miss && left < best_left);
            if (want == 1 && sharing && count == 1) { /* keep only the best so far */
                if (better) {
                    json_decref(assign[0]);
                    fit[0] = n;
                    assign[0] = a;
                    best_left = left;
                    best_miss = miss;
                } else {
                    json_decref(a);
                }
                if (best_left == 0 && best_miss == 0)
                    break; /* nothing fits tighter */
                continue;
            }
            if (count == cap) {
                cap *= 2;
                br_node_t **f = realloc(fit, (size_t)cap * sizeof(*fit));
                json_t **as = f ? realloc(assign, (size_t)cap * sizeof(*assign)) : NULL;
                fit = f ? f : fit;
                assign = as ? as : assign;
                if (!f || !as) {
                    json_decref(a);
                    break;
                }
            }
            if (best_left < 0 || better) {
                best = count;
                best_left = left;
                best_miss = miss;
            }
            fit[count] = n;
            assign[count++] = a;
            if (count == want && want == 1 && !sharing && !spread && miss == 0) /* first fit */
                break;
            if (want > 1 && count >= BR_SCHED_GANG_CANDIDATES && count >= 4 * want)
                break; /* enough to choose the nearest set from */
            continue;
        }
        add_why(why, sizeof(why), last);
    }
    if (spread) { /* the node with the fewest of the service's replicas */
        best = 0;
        for (int i = 1; i < count; i++)
            if (json_integer_value(json_object_get(siblings, fit[i]->name)) <
                json_integer_value(json_object_get(siblings, fit[best]->name)))
                best = i;
    }
    int *chosen = count >= want ? calloc((size_t)want, sizeof(int)) : NULL;
    d->nodes = chosen ? calloc((size_t)want, sizeof(*d->nodes)) : NULL;
    d->assign = d->nodes ? calloc((size_t)want, sizeof(*d->assign)) : NULL;
    if (d->assign && want == 1) {
        chosen[0] = sharing || spread || data || staged ? best : 0;
    } else if (d->assign) { /* a gang: the nearest set of those that fit */
        const char *sites = json_string_value(json_object_get(res, "spread"));
        const char *net = json_string_value(json_object_get(res, "network"));
        br_netmap_via_t via = {net && strcmp(net, "overlay") == 0, in->relayed,
                               in->relayed_ctx};
        int direct = net && strcmp(net, "direct") == 0; /* (the overlay matters not) */
        br_netmap_choose(in->netmap, fit, count, want, sites && strcmp(sites, "any") == 0,
                         direct ? NULL : &via, chosen, how, sizeof(how));
        d->how = strdup(how);
    }
    if (d->assign) {
        d->verdict = BR_SCHED_PLACE;
        d->count = want;
        for (int i = 0; i < want; i++) {
            d->nodes[i] = fit[chosen[i]];
            d->assign[i] = json_incref(assign[chosen[i]]);
            br_node_hold(d->nodes[i], d->assign[i], 1); /* later jobs see it taken */
        }
        if (spread)
            count_replica(in->replicas, job, d->nodes[0]->name);
        if (memo && want == 1 && !sharing)
            memo->from = d->nodes[0];
    } else if (want == 1) {
        free(d->nodes);
        d->nodes = NULL;
        snprintf(reason, sizeof(reason), "waiting: no ready node fits (%s)",
                 why[0] ? why : "no node has joined yet");
        d->reason = strdup(reason);
    } else {
        free(d->nodes);
        d->nodes = NULL;
        snprintf(reason, sizeof(reason), "waiting: a gang of %d nodes, and %d fit%s (%s)",
                 want, count, count == 1 ? "s" : "", why[0] ? why : "no other node has joined");
        d->reason = strdup(reason);
    }
    free(chosen);
    for (int i = 0; i < count; i++)
        json_decref(assign[i]);
    free(fit);
    free(assign);
}

/* Decide for one job: where it goes (reserving its shares on those nodes), why it
 * waits, or until when it must not start. memo: what the pass knows of its shape. */
static void plan_one(const br_sched_in_t *in, br_job_t *job, br_sched_decision_t *d,
                     int *on_heartbeat, shape_memo_t *memo, const reserve_t *rv)
{
    d->job = job;
    if (job->not_before > in->now_ms) { /* a restart backoff: come back when it is over */
        d->verdict = BR_SCHED_LATER;
        d->not_before = job->not_before;
        return;
    }
    const br_after_t *waits = br_job_waits_for(job);
    if (waits) { /* (deps.h) */
        char reason[REASON_MAX];
        d->verdict = BR_SCHED_WAIT;
        snprintf(reason, sizeof(reason), "waiting: for job %lld to %s",
                 (long long)waits->job, br_after_goal(waits->on));
        d->reason = strdup(reason);
        return;
    }
    if (memo && memo->reason) { /* one alike fit nowhere, and nodes only filled since */
        d->verdict = BR_SCHED_WAIT;
        d->reason = strdup(memo->reason);
        return;
    }
    plan_scan(in, job, d, on_heartbeat, memo ? memo->from : NULL, memo, rv);
    if (d->verdict == BR_SCHED_WAIT && memo && memo->from) {
        memo->from = NULL; /* the reason names every node: look at them all once */
        free(d->reason);
        d->reason = NULL;
        plan_scan(in, job, d, on_heartbeat, NULL, memo, rv);
    }
    if (d->verdict == BR_SCHED_WAIT && memo && d->reason)
        memo->reason = strdup(d->reason);
}

/* What a pass knows of the shapes seen so far: memos, and an index of them by
 * shape text. */
typedef struct {
    shape_memo_t *memos;
    size_t n, cap;
    json_t *index; /* shape text -> position in memos */
} shape_book_t;

/* Is job's placement a matter of its shape and the nodes' room alone, so that what
 * one scan learnt holds for the others of its shape, and a note that it fit
 * nowhere holds until some node has more room? */
static int shape_alone(const br_job_t *job)
{
    return job->shape && !job->nexclude && !job->fresh_after && job->service == 0 &&
           !json_object_size(json_object_get(job->spec, "data")); /* (where data is) */
}

/* The memo of job's shape, added when new; NULL when the job's placement depends
 * on more than its shape, or when out of memory. */
static shape_memo_t *memo_of(shape_book_t *b, const br_job_t *job)
{
    if (!b->index || !shape_alone(job))
        return NULL;
    json_t *at = json_object_get(b->index, job->shape);
    if (at)
        return &b->memos[json_integer_value(at)];
    if (b->n == b->cap) {
        size_t more = b->cap ? 2 * b->cap : 8;
        shape_memo_t *m = realloc(b->memos, more * sizeof(*m));
        if (!m)
            return NULL;
        b->memos = m;
        b->cap = more;
    }
    if (json_object_set_new(b->index, job->shape, json_integer((json_int_t)b->n)) < 0)
        return NULL;
    b->memos[b->n] = (shape_memo_t){.from = NULL};
    return &b->memos[b->n++];
}

/* The ranks that will end, soonest first: those running (in->ends) and those this
 * pass placed, for the reservation. */
typedef struct {
    br_sched_end_t *v;
    size_t n, cap;
} ends_t;

static int ends_add(ends_t *e, br_node_t *node, json_t *share, int64_t end_ms)
{
    if (e->n == e->cap) {
        size_t cap = e->cap ? 2 * e->cap : 64;
        br_sched_end_t *v = realloc(e->v, cap * sizeof(*v));
        if (!v)
            return -1;
        e->v = v;
        e->cap = cap;
    }
    e->v[e->n++] = (br_sched_end_t){node, share, end_ms};
    return 0;
}

static int by_end(const void *x, const void *y)
{
    int64_t a = ((const br_sched_end_t *)x)->end_ms, b = ((const br_sched_end_t *)y)->end_ms;
    return a < b ? -1 : a > b;
}

/* Free what one decision holds (not the decision itself). */
static void decision_clear(br_sched_decision_t *d)
{
    for (int r = 0; r < d->count; r++)
        json_decref(d->assign[r]);
    free(d->assign);
    free(d->nodes);
    free(d->how);
    free(d->reason);
    free(d->victims);
}

/* Would job fit once the first k ranks of ends have ended? Its placement then
 * into nodes (count), and everything given back as it was. */
static int fits_after(const br_sched_in_t *in, br_job_t *job, const ends_t *e, size_t k,
                      br_node_t **nodes, int *count)
{
    for (size_t i = 0; i < k; i++)
        br_node_hold(e->v[i].node, e->v[i].share, -1);
    br_sched_decision_t d = {0};
    int hb = 0;
    plan_scan(in, job, &d, &hb, NULL, NULL, NULL);
    int fits = d.verdict == BR_SCHED_PLACE && d.count <= BR_SCHED_RESERVE_MAX;
    for (int r = 0; r < d.count; r++) {
        br_node_hold(d.nodes[r], d.assign[r], -1);
        if (fits)
            nodes[r] = d.nodes[r];
    }
    *count = fits ? d.count : 0;
    decision_clear(&d);
    for (size_t i = 0; i < k; i++)
        br_node_hold(e->v[i].node, e->v[i].share, 1);
    return fits;
}

/* What the planner keeps of a job, in its slot on the job (job.h): that it fit
 * nowhere when a pass last looked, at that pass's capacity version, under
 * reservation reserve (0: none in force then; at 0 the next pass decides it
 * again, scheduler.h), and its place in the last pass. */
typedef struct {
    uint64_t at, reserve;
} nowhere_t;

typedef struct {
    nowhere_t nowhere;
    br_sched_queue_t queue;
    int64_t preempting;   /* wall ms until which the jobs stopping to make room for
                           * this one may take (0: none) */
    int64_t preempted_at; /* wall ms it was last asked to make room (0: never) */
} sched_job_t;

static int sched_slot(void)
{
    static int slot = -1;
    if (slot < 0)
        slot = br_job_aux_slot("scheduler");
    return slot;
}

/* The planner's data of job; made (zeroed) when make, else NULL when it has none. */
static sched_job_t *sched_of(br_job_t *job, int make)
{
    sched_job_t *s = br_job_aux_get(job, sched_slot());
    if (!s && make && (s = calloc(1, sizeof(*s))))
        br_job_aux_set(job, sched_slot(), s, free);
    return s;
}

/* The planner's data of job to read: all zero when it has none yet. */
static const sched_job_t *sched_peek(const br_job_t *job)
{
    static const sched_job_t none;
    const sched_job_t *s = br_job_aux_get(job, sched_slot());
    return s ? s : &none;
}

static void nowhere_set(br_job_t *job, uint64_t at, uint64_t reserve)
{
    sched_job_t *s = sched_of(job, at != 0);
    if (s)
        s->nowhere = (nowhere_t){at, reserve};
}

br_sched_queue_t br_sched_queue_of(const br_job_t *job)
{
    return sched_peek(job)->queue;
}

/* Reserve for job, which fits nowhere now: the fewest ranks to end (by time) that
 * make it fit, found by halving. 1 when rv now holds its nodes and time. */
static int reserve(const br_sched_in_t *in, br_job_t *job, ends_t *e, reserve_t *rv)
{
    if (e->n == 0)
        return 0;
    qsort(e->v, e->n, sizeof(*e->v), by_end);
    br_node_t *nodes[BR_SCHED_RESERVE_MAX];
    int count;
    if (!fits_after(in, job, e, e->n, nodes, &count))
        return 0; /* a rank without a time limit is in the way */
    size_t lo = 1, hi = e->n; /* fits after hi */
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (fits_after(in, job, e, mid, nodes, &count))
            hi = mid;
        else
            lo = mid + 1;
    }
    fits_after(in, job, e, hi, nodes, &count);
    rv->active = 1;
    rv->job = job->id;
    rv->until_ms = e->v[hi - 1].end_ms;
    rv->now_ms = in->now_ms;
    rv->count = count;
    memcpy(rv->nodes, nodes, (size_t)count * sizeof(*nodes));
    return 1;
}

/* Give back (sign -1) or take again (1) what a running job's ranks hold. */
static void hold_job(const br_sched_in_t *in, br_job_t *job, int sign)
{
    for (int r = 0; r < job->nranks; r++)
        if (job->ranks[r].state != BR_RANK_DONE)
            br_node_hold(br_nodes_find(in->nodes, job->ranks[r].node), job->ranks[r].share,
                         sign);
}

/* Would job fit now? Nothing is kept of the trial. */
static int fits_now(const br_sched_in_t *in, br_job_t *job)
{
    br_node_t *nodes[BR_SCHED_RESERVE_MAX];
    int count;
    ends_t none = {0};
    return fits_after(in, job, &none, 0, nodes, &count);
}

static int by_victim(const void *x, const void *y)
{
    const br_job_t *a = *(br_job_t *const *)x, *b = *(br_job_t *const *)y;
    if (a->priority != b->priority)
        return a->priority < b->priority ? -1 : 1;
    if (a->started != b->started) /* the newest first: the least work lost */
        return a->started > b->started ? -1 : 1;
    return a->id > b->id ? -1 : a->id < b->id;
}

#define VICTIMS_MAX 256 /* running jobs weighed for one preemption */

/* The fewest running jobs of lower priority whose room lets job start, into
 * d->victims; 0 when none would do. The nodes' counters are left as they were. */
static int choose_victims(const br_sched_in_t *in, br_job_t *job, br_sched_decision_t *d)
{
    br_job_t *cand[VICTIMS_MAX];
    size_t nc = 0;
    for (size_t i = 0; i < in->nvictims && nc < VICTIMS_MAX; i++)
        if (in->victims[i]->priority < job->priority && in->victims[i] != job)
            cand[nc++] = in->victims[i];
    qsort(cand, nc, sizeof(*cand), by_victim);
    size_t taken = 0;
    int fits = 0;
    while (taken < nc && !fits) { /* give back until it fits */
        hold_job(in, cand[taken++], -1);
        fits = fits_now(in, job);
    }
    if (fits) /* keep only those it needs: take each back that it fits without */
        for (size_t i = taken - 1; i-- > 0;) {
            hold_job(in, cand[i], 1);
            if (fits_now(in, job))
                cand[i] = NULL;
            else
                hold_job(in, cand[i], -1);
        }
    int count = 0;
    for (size_t i = 0; i < taken; i++)
        if (cand[i]) {
            hold_job(in, cand[i], 1); /* as it was: they have not stopped yet */
            count++;
        }
    if (!fits || !(d->victims = calloc((size_t)count, sizeof(*d->victims))))
        return 0;
    for (size_t i = 0; i < taken; i++)
        if (cand[i])
            d->victims[d->nvictims++] = cand[i];
    return 1;
}

/* ---- what a pass keeps for the next (br_sched_memory_t) -------------------------- */

/* A node's room, as far as a fit depends on it (br_sched_fit, plan_scan). */
typedef struct {
    char name[64];
    int ready;        /* ready and connected */
    int cpus, attempts, ngpus;
    int64_t memory;   /* free */
    uint64_t attrs;   /* digest of its arch, labels and GPU models */
    size_t gpu;       /* its first GPU in the snapshot's gpus */
} node_room_t;

typedef struct {
    int jobs, whole;
    int64_t vram; /* free VRAM less what sharing jobs reserved */
} gpu_room_t;

typedef struct {
    node_room_t *nodes;
    size_t n;
    gpu_room_t *gpus;
    size_t ngpus;
} room_t;

struct br_sched_memory {
    room_t room;      /* the nodes as the last pass left them */
    int have;         /* room holds a snapshot */
    uint64_t version; /* capacity version (0: none yet) */
    /* the last reservation made, and its generation */
    uint64_t reserve;
    int64_t rv_job, rv_until;
    int rv_count;
    char rv_nodes[BR_SCHED_RESERVE_MAX][64];
    size_t considered, kept; /* of the last pass */
};

/* Capacity versions and reservation generations, never the same twice in this
 * process: a job's note never matches another memory's numbers. */
static uint64_t generations;

static uint64_t mix(uint64_t h, const void *p, size_t len)
{
    const unsigned char *b = p;
    for (size_t i = 0; i < len; i++)
        h = (h ^ b[i]) * 1099511628211ULL; /* FNV-1a */
    return h;
}

/* A digest of v (objects whatever the order of their keys). */
static uint64_t digest(const json_t *v, uint64_t h)
{
    int type = v ? (int)json_typeof(v) : -1;
    h = mix(h, &type, sizeof(type));
    if (json_is_string(v)) {
        h = mix(h, json_string_value(v), json_string_length(v));
    } else if (json_is_integer(v)) {
        json_int_t i = json_integer_value(v);
        h = mix(h, &i, sizeof(i));
    } else if (json_is_real(v)) {
        double d = json_real_value(v);
        h = mix(h, &d, sizeof(d));
    } else if (json_is_array(v)) {
        for (size_t i = 0; i < json_array_size(v); i++)
            h = digest(json_array_get(v, i), h);
    } else if (json_is_object(v)) {
        const char *k;
        json_t *x;
        uint64_t sum = 0;
        json_object_foreach((json_t *)v, k, x)
            sum += digest(x, mix(14695981039346656037ULL, k, strlen(k)));
        h = mix(h, &sum, sizeof(sum));
    }
    return h;
}

static void room_free(room_t *r)
{
    free(r->nodes);
    free(r->gpus);
    *r = (room_t){0};
}

/* Every node's room now, in name order. -1 when out of memory. */
static int room_take(br_nodes_t *nodes, room_t *r)
{
    size_t cap = 0, gcap = 0;
    *r = (room_t){0};
    for (br_node_t *n = br_nodes_first(nodes); n; n = n->next) {
        int ngpus = br_node_gpu_count(n);
        if (ngpus > BR_NODE_MAX_GPUS)
            ngpus = BR_NODE_MAX_GPUS;
        if (r->n == cap) {
            cap = cap ? 2 * cap : 64;
            node_room_t *m = realloc(r->nodes, cap * sizeof(*m));
            if (!m)
                goto oom;
            r->nodes = m;
        }
        if (r->ngpus + (size_t)ngpus > gcap) {
            gcap = 2 * (r->ngpus + (size_t)ngpus) + 64;
            gpu_room_t *g = realloc(r->gpus, gcap * sizeof(*g));
            if (!g)
                goto oom;
            r->gpus = g;
        }
        node_room_t *x = &r->nodes[r->n++];
        memset(x, 0, sizeof(*x));
        snprintf(x->name, sizeof(x->name), "%s", n->name);
        x->ready = takes_jobs(n);
        x->cpus = br_node_cpus(n) - n->cpus_used;
        x->memory = (int64_t)br_node_memory(n) - (int64_t)n->memory_used;
        x->attempts = n->attempts;
        x->ngpus = ngpus;
        x->gpu = r->ngpus;
        uint64_t h = 14695981039346656037ULL;
        h = digest(json_object_get(n->info, "arch"), h);
        h = digest(json_object_get(n->info, "labels"), h);
        h = digest(json_object_get(n->info, "trees") ? json_true() : json_false(), h);
        for (int i = 0; i < ngpus; i++) {
            h = digest(json_object_get(br_node_gpu(n, i), "model"), h);
            r->gpus[r->ngpus++] = (gpu_room_t){
                n->gpu_jobs[i], n->gpu_whole[i],
                (int64_t)gpu_vram_free(n, i) - (int64_t)n->gpu_vram_used[i]};
        }
        x->attrs = h;
    }
    return 0;
oom:
    room_free(r);
    return -1;
}

/* Has any node of now more room than in was (or is it new, or changed what it
 * is)? A node gone, or one with less room, makes no job fit that did not. */
static int room_grew(const room_t *was, const room_t *now)
{
    size_t k = 0;
    for (size_t i = 0; i < now->n; i++) {
        const node_room_t *x = &now->nodes[i];
        int c = 1;
        while (k < was->n && (c = strcmp(was->nodes[k].name, x->name)) < 0)
            k++; /* (gone since) */
        if (c != 0)
            return 1; /* new */
        const node_room_t *o = &was->nodes[k++];
        if ((x->ready && !o->ready) || x->cpus > o->cpus || x->memory > o->memory ||
            x->attempts < o->attempts || x->attrs != o->attrs || x->ngpus != o->ngpus)
            return 1;
        for (int g = 0; g < x->ngpus; g++) {
            const gpu_room_t *a = &now->gpus[x->gpu + (size_t)g],
                             *b = &was->gpus[o->gpu + (size_t)g];
            if (a->jobs < b->jobs || a->whole < b->whole || a->vram > b->vram)
                return 1;
        }
    }
    return 0;
}

br_sched_memory_t *br_sched_memory_new(void)
{
    return calloc(1, sizeof(br_sched_memory_t));
}

void br_sched_memory_destroy(br_sched_memory_t **m)
{
    if (m && *m) {
        room_free(&(*m)->room);
        free(*m);
        *m = NULL;
    }
}

void br_sched_memory_counts(const br_sched_memory_t *m, size_t *considered, size_t *kept)
{
    *considered = m ? m->considered : 0;
    *kept = m ? m->kept : 0;
}

/* At the start of a pass: a new capacity version unless no node can have more
 * room than the last pass left it. The nodes as they are now are kept: a pass
 * that places nothing leaves them so (its trials give back what they hold). */
static void memory_begin(br_sched_memory_t *m, br_nodes_t *nodes)
{
    room_t now;
    m->considered = m->kept = 0;
    int took = room_take(nodes, &now) == 0;
    if (!m->have || !took || room_grew(&m->room, &now))
        m->version = ++generations;
    room_free(&m->room);
    m->room = now; /* (empty when not took) */
    m->have = took;
}

/* At its end, when it placed something: the nodes as it leaves them (with what
 * it placed held). */
static void memory_end(br_sched_memory_t *m, br_nodes_t *nodes)
{
    room_free(&m->room);
    m->have = room_take(nodes, &m->room) == 0;
}

/* The generation of the reservation rv made in this pass: the last one's when
 * it is the same (job, time, nodes), else a new one. */
static uint64_t memory_reserve(br_sched_memory_t *m, const reserve_t *rv)
{
    int same = m->reserve && m->rv_job == rv->job && m->rv_until == rv->until_ms &&
               m->rv_count == rv->count;
    for (int i = 0; same && i < rv->count; i++)
        same = strcmp(m->rv_nodes[i], rv->nodes[i]->name) == 0;
    if (same)
        return m->reserve;
    m->reserve = ++generations;
    m->rv_job = rv->job;
    m->rv_until = rv->until_ms;
    m->rv_count = rv->count;
    for (int i = 0; i < rv->count; i++)
        snprintf(m->rv_nodes[i], sizeof(m->rv_nodes[i]), "%s", rv->nodes[i]->name);
    return m->reserve;
}

br_sched_decision_t *br_sched_plan(const br_sched_in_t *in, br_job_t *const *jobs, size_t n,
                                   int *on_heartbeat)
{
    *on_heartbeat = 0;
    br_fairshare_t *order = br_fairshare_new(in->usage, jobs, n, in->now_ms);
    br_sched_decision_t *d = calloc(n ? n : 1, sizeof(*d));
    if (!order || !d) {
        br_fairshare_destroy(&order);
        free(d);
        return NULL;
    }
    /* what the pass learns of each shape; once nodes are reserved, the jobs whose
     * time limit ends before the reservation may still use them, so they learn
     * apart (gap) */
    shape_book_t book = {.index = json_object()}, gap = {.index = json_object()};
    char limit[REASON_MAX];
    br_job_t *job;
    ends_t ends = {0};
    reserve_t rv = {0};
    int reserve_tried = !in->backfill;
    for (size_t k = 0; k < in->nends && !reserve_tried; k++)
        if (ends_add(&ends, in->ends[k].node, in->ends[k].share, in->ends[k].end_ms) < 0)
            reserve_tried = 1;
    br_sched_memory_t *m = in->memory;
    uint64_t rv_gen = 0; /* the generation of this pass's reservation, once made */
    int placed = 0;      /* anything: the nodes' room changed */
    if (m)
        memory_begin(m, in->nodes);
    for (size_t i = 0; i < n && (job = br_fairshare_next(order, &d[i].score, limit,
                                                         sizeof(limit))); i++) {
        if (limit[0]) { /* its owner's limit holds it back */
            d[i].job = job;
            d[i].verdict = BR_SCHED_WAIT;
            d[i].reason = strdup(limit);
            nowhere_set(job, 0, 0);
            continue;
        }
        if (br_arrays_hold_back(in->arrays, job, d, i)) { /* an array's "%N" */
            nowhere_set(job, 0, 0);
            continue;
        }
        nowhere_t was = sched_peek(job)->nowhere;
        if (m && reserve_tried && was.at == m->version && shape_alone(job) &&
            (was.reserve == 0 || (rv.active && was.reserve == rv_gen)) &&
            job->not_before <= in->now_ms && !br_job_waits_for(job)) {
            /* it fit nowhere, and no node has more room since (scheduler.h) */
            d[i].job = job;
            d[i].verdict = BR_SCHED_WAIT;
            d[i].kept = 1;
            m->kept++;
            continue;
        }
        int in_gap = rv.active && job->time_limit > 0 &&
                     in->now_ms + job->time_limit <= rv.until_ms;
        plan_one(in, job, &d[i], on_heartbeat, memo_of(in_gap ? &gap : &book, job), &rv);
        if (m) { /* note whether it fit nowhere, and under which reservation */
            m->considered++;
            int nowhere = d[i].verdict == BR_SCHED_WAIT && shape_alone(job) &&
                          !br_job_waits_for(job);
            nowhere_set(job, nowhere ? m->version : 0, nowhere && rv.active ? rv_gen : 0);
        }
        if (d[i].verdict == BR_SCHED_PLACE) {
            placed = 1;
            int gpus = 0, cpus = 0;
            for (int r = 0; r < d[i].count; r++) {
                int g, k;
                br_node_share_size(d[i].assign[r], &g, &k);
                gpus += g;
                cpus += k;
                if (job->time_limit > 0 && !reserve_tried) /* it ends by then too */
                    ends_add(&ends, d[i].nodes[r], d[i].assign[r],
                             in->now_ms + job->time_limit);
            }
            br_fairshare_placed(order, gpus, cpus);
        } else if (d[i].verdict == BR_SCHED_WAIT && !reserve_tried &&
                   !br_job_waits_for(job) && job->service == 0) {
            reserve_tried = 1; /* the highest job that fits nowhere, and it alone */
            if (reserve(in, job, &ends, &rv)) {
                d[i].start_at = rv.until_ms;
                if (m)
                    rv_gen = memory_reserve(m, &rv);
            }
            int64_t may = job->submitted + in->preempt_after_ms;
            int64_t stopping = sched_peek(job)->preempting;
            if (stopping > may)
                may = stopping; /* its last round's victims are still stopping */
            int soon = d[i].start_at && d[i].start_at <= in->now_ms + in->preempt_after_ms;
            if (in->preempt_after_ms > 0 && !soon && may <= in->now_ms)
                choose_victims(in, job, &d[i]);
            else if (in->preempt_after_ms > 0 && !soon)
                d[i].preempt_at = may;
        }
    }
    if (m && placed)
        memory_end(m, in->nodes);
    free(ends.v);
    for (shape_book_t *b = &book; b; b = b == &book ? &gap : NULL) {
        for (size_t i = 0; i < b->n; i++)
            free(b->memos[i].reason);
        free(b->memos);
        json_decref(b->index);
    }
    br_fairshare_destroy(&order);
    return d;
}

void br_sched_decisions_free(br_sched_decision_t *d, size_t n)
{
    for (size_t i = 0; d && i < n; i++)
        decision_clear(&d[i]);
    free(d);
}

/* Record why job waits (only when the reason changed). */
static void set_reason(br_coord_t *c, br_job_t *job, const char *reason)
{
    if (br_job_set_reason(job, reason))
        br_job_save_reason(c, job);
}

struct br_sched {
    int needed;       /* a pass is due at the end of the wake */
    int on_heartbeat; /* a job waits for nodes to be heard from: pass again then */
    int64_t at;       /* wall ms when a restart backoff ends, or a job may preempt (0) */
    br_sched_memory_t *memory; /* what the last pass leaves the next */
    int64_t paced_us; /* monotonic us before which no pass starts (br_sched_wake) */
};

static void on_changed(br_coord_t *c, br_hook_arg_t *arg, void *ctx)
{
    (void)c;
    (void)arg;
    ((br_sched_t *)ctx)->needed = 1;
}

static void on_heard(br_coord_t *c, br_hook_arg_t *arg, void *ctx)
{
    (void)c;
    (void)arg;
    br_sched_t *s = ctx;
    s->needed |= s->on_heartbeat;
}

br_sched_t *br_sched_new(br_coord_t *c)
{
    br_sched_t *s = calloc(1, sizeof(*s));
    if (s && !(s->memory = br_sched_memory_new())) {
        free(s);
        return NULL;
    }
    if (s && (br_hooks_add(c->hooks, BR_HOOK_CHANGED, on_changed, s) < 0 ||
              br_hooks_add(c->hooks, BR_HOOK_NODE_BACK, on_changed, s) < 0 ||
              br_hooks_add(c->hooks, BR_HOOK_JOB_LEFT, on_changed, s) < 0 ||
              br_hooks_add(c->hooks, BR_HOOK_NODE_HEARD, on_heard, s) < 0)) {
        br_sched_memory_destroy(&s->memory);
        free(s);
        return NULL;
    }
    if (s)
        s->needed = 1; /* the first wake places what the store left pending */
    return s;
}

void br_sched_destroy(br_sched_t **s)
{
    if (s && *s) {
        br_sched_memory_destroy(&(*s)->memory);
        free(*s);
        *s = NULL;
    }
}

void br_sched_wake(br_coord_t *c)
{
    br_sched_t *s = c->sched;
    if (s->at && br_now_ms() >= s->at) { /* a restart backoff is over */
        s->at = 0;
        s->needed = 1;
    }
    if (!s->needed)
        return;
    int64_t start = br_mono_us();
    if (start < s->paced_us)
        return; /* (br_sched_wait_ms: the loop wakes for it) */
    s->needed = 0;
    br_sched_run(c);
    int64_t end = br_mono_us();
    s->paced_us = end + BR_SCHED_PACE * (end - start);
}

int64_t br_sched_wait_ms(const br_coord_t *c)
{
    const br_sched_t *s = c->sched;
    if (!s->needed)
        return -1;
    int64_t left = s->paced_us - br_mono_us();
    return left > 0 ? (left + 999) / 1000 : 0;
}

/* The running ranks that end by their jobs' time limits. */
static ends_t running_ends(br_coord_t *c, int64_t now)
{
    ends_t ends = {0};
    for (br_job_t *j = br_jobtab_first(c->jobs); j; j = j->next) {
        if (!br_job_state_live(j->state) || j->time_limit <= 0)
            continue;
        int64_t end = (j->started ? j->started : now) + j->time_limit;
        for (int r = 0; r < j->nranks; r++) {
            br_node_t *at = br_nodes_find(c->nodes, j->ranks[r].node);
            if (at && j->ranks[r].state != BR_RANK_DONE &&
                ends_add(&ends, at, j->ranks[r].share, end < now ? now : end) < 0)
                return ends;
        }
    }
    return ends;
}

void br_sched_estimate(br_coord_t *c, br_job_t *const *queue, size_t n, int64_t *start)
{
    int64_t now = br_now_ms();
    ends_t ends = running_ends(c, now);
    br_sched_decision_t *g = calloc(n ? n : 1, sizeof(*g)); /* its placements */
    br_sched_in_t in = {.nodes = c->nodes, .netmap = c->netmap, .now_ms = now,
                        .relayed = br_overlay_relayed_pair, .relayed_ctx = c};
    for (size_t i = 0; i < n; i++)
        start[i] = 0;
    size_t placed = 0, freed = 0, events = 0;
    while (g && placed < n && events++ < BR_SCHED_ESTIMATE_EVENTS) {
        /* the next time something ends: a running rank, or a job placed before */
        if (freed == ends.n)
            break; /* nothing ends by a time limit: no later start can be told */
        qsort(ends.v + freed, ends.n - freed, sizeof(*ends.v), by_end);
        int64_t t = ends.v[freed].end_ms;
        for (; freed < ends.n && ends.v[freed].end_ms <= t; freed++)
            br_node_hold(ends.v[freed].node, ends.v[freed].share, -1);
        for (size_t i = 0; i < n; i++) { /* then the queue, in its order, as a pass would */
            br_job_t *job = queue[i];
            if (start[i] || br_job_waits_for(job) || job->not_before > t)
                continue;
            int hb = 0;
            br_sched_decision_t d = {0};
            plan_scan(&in, job, &d, &hb, NULL, NULL, NULL);
            if (d.verdict != BR_SCHED_PLACE) {
                decision_clear(&d);
                continue;
            }
            start[i] = t;
            placed++;
            g[i] = d;
            for (int r = 0; r < d.count && job->time_limit > 0; r++)
                ends_add(&ends, d.nodes[r], d.assign[r], t + job->time_limit);
        }
    }
    /* everything back as it was */
    for (size_t k = 0; k < freed; k++)
        br_node_hold(ends.v[k].node, ends.v[k].share, 1);
    for (size_t i = 0; g && i < n; i++) {
        for (int r = 0; r < g[i].count; r++)
            br_node_hold(g[i].nodes[r], g[i].assign[r], -1);
        decision_clear(&g[i]);
    }
    free(g);
    free(ends.v);
}

void br_sched_run(br_coord_t *c)
{
    br_sched_t *s = c->sched;
    s->on_heartbeat = 0;
    size_t n;
    br_job_t **list = br_jobtab_pending(c->jobs, &n);
    if (n == 0) { /* (or out of memory: the next pass) */
        free(list);
        return;
    }
    int replicas = 0;
    for (size_t i = 0; i < n; i++)
        replicas |= list[i]->service > 0;
    br_sched_in_t in = {.nodes = c->nodes,
                        .netmap = c->netmap,
                        .relayed = br_overlay_relayed_pair,
                        .relayed_ctx = c,
                        .stages = c->stages,
                        .now_ms = br_now_ms(),
                        .replicas = replicas ? replica_counts(c) : NULL,
                        .usage = c->usage,
                        .arrays = br_arrays_pass_new(c->jobs, list, n),
                        .memory = s->memory};
    if (c->usage)
        br_usage_standing(c->usage, c->jobs, in.now_ms);
    ends_t ends = running_ends(c, in.now_ms);
    in.backfill = 1;
    in.ends = ends.v;
    in.nends = ends.n;
    /* the running jobs that may be asked to make room: preemptible, not stopping,
     * run for the minimum since they started and since they last made room */
    br_job_t **victims = NULL;
    size_t nv = 0;
    int64_t min_run = c->cfg.preempt_min_run_ms;
    for (br_job_t *j = br_jobtab_first(c->jobs); c->cfg.preempt_after_ms > 0 && j;
         j = j->next) {
        int64_t made_room = sched_peek(j)->preempted_at;
        if (j->state != BR_JOB_RUNNING || !j->preemptible || j->stop.at_mono ||
            !j->started || in.now_ms - j->started < min_run ||
            (made_room && in.now_ms - made_room < j->preempt_grace + min_run))
            continue;
        br_job_t **more = realloc(victims, (nv + 1) * sizeof(*victims));
        if (!more)
            break;
        victims = more;
        victims[nv++] = j;
    }
    in.preempt_after_ms = c->cfg.preempt_after_ms;
    in.victims = victims;
    in.nvictims = nv;
    br_sched_decision_t *d = br_sched_plan(&in, list, n, &s->on_heartbeat);
    for (size_t i = 0; d && i < n; i++) {
        br_job_t *job = d[i].job;
        if (!job)
            continue;
        sched_job_t *sj = sched_of(job, 1);
        if (sj)
            sj->queue = (br_sched_queue_t){(int64_t)i + 1, d[i].score.priority,
                                           d[i].score.fairshare, d[i].score.age,
                                           d[i].score.total, d[i].start_at};
        if (d[i].nvictims) { /* it makes room by preemption */
            int64_t until = br_jobs_preempt(c, job, d[i].victims, d[i].nvictims);
            if (sj)
                sj->preempting = until;
            for (int v = 0; v < d[i].nvictims; v++) {
                sched_job_t *vj = sched_of(d[i].victims[v], 1);
                if (vj)
                    vj->preempted_at = br_now_ms();
            }
        }
        if (d[i].preempt_at && (!s->at || d[i].preempt_at < s->at))
            s->at = d[i].preempt_at; /* a pass then, to see whether it may preempt */
        switch (d[i].verdict) {
        case BR_SCHED_PLACE:
            br_jobs_place(c, d[i].job, d[i].nodes, d[i].assign, d[i].count,
                          d[i].count > 1 ? d[i].how : NULL);
            break;
        case BR_SCHED_WAIT:
            if (!d[i].kept) /* (a job kept waiting keeps its reason) */
                set_reason(c, d[i].job, d[i].reason);
            break;
        case BR_SCHED_LATER:
            if (!s->at || d[i].not_before < s->at)
                s->at = d[i].not_before;
            break;
        }
    }
    br_sched_decisions_free(d, n);
    json_decref(in.replicas);
    free(ends.v);
    free(victims);
    br_arrays_pass_destroy(&in.arrays);
    free(list);
}
