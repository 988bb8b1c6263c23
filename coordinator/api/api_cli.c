/* api_cli.c - what the CLI sends: tokens, nodes, jobs, logs and events. */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <sodium.h>

#include "api.h"
#include "arrays.h"
#include "cred.h"
#include "http.h"
#include "deps.h"
#include "devenv.h"
#include "jobs.h"
#include "nodelife.h"
#include "scheduler.h"
#include "plan.h"
#include "replicas.h"
#include "autoscale.h"
#include "gwload.h"
#include "services.h"
#include "stages.h"
#include "spec.h"
#include "routes.h"
#include "usage.h"
#include "token.h"
#include "util.h"
#include "jobtab.h"
#include "netmap.h"
#include "overlaynet.h"
#include "relay.h"
#include "watchers.h"
#include "stats.h"

#define LOG_PAGE (256 * 1024) /* a chunk is at most BR_MSG_DATA_MAX: so is a page */
#define RECENT_MS (10 * 60 * 1000)

void br_api_ping(br_coord_t *c, br_msg_t *m, const br_caller_t *who)
{
    static const char *kinds[] = {"unknown", "admin", "user", "node", "revoked", "gateway"};
    json_t *in = br_msg_body(m);
    if (in && (!json_is_object(in) || json_object_size(in) > 0)) { /* bodies are strict */
        br_err_t err;
        br_errf(&err, EPROTO, "ping: bad body: it takes no fields, got %s",
                json_is_object(in) ? "some" : "no object");
        br_reply_fail(c, m, &err);
        return;
    }
    json_t *body = json_pack("{s:s, s:s, s:s}", "version", BRAMBLE_VERSION, "principal",
                             kinds[who->kind], "name", who->name);
    if (who->kind == BR_PRINCIPAL_ADMIN) /* the coordinator's own health */
        json_object_set_new(body, "sends_dropped",
                            json_integer((json_int_t)br_stats_sends_dropped(c->stats)));
    br_reply_ok(c, m, body);
}

/* A metrics token (the bearer token of /metrics): never used up; ttl 0 never
 * expires. The HTTP side hears of it once the wake is committed. */
static void metrics_token_create(br_coord_t *c, br_msg_t *m, json_int_t ttl, int uses)
{
    br_err_t err;
    char text[BR_HTTP_TOKEN_MAX], hash[BR_TOKEN_HASH_HEX + 1], id[BR_TOKEN_ID_LEN + 1];
    if (uses != -1) {
        br_errf(&err, EINVAL, "a metrics token has no uses: leave uses out");
        goto fail;
    }
    if (ttl < 0 || ttl > 366LL * 86400 * 1000) {
        br_errf(&err, EINVAL, "ttl must be within a year (0: never expires)");
        goto fail;
    }
    int64_t now = br_now_ms();
    br_http_token_make(text, hash, id);
    if (br_store_token_add_metrics(c->store, id, hash, now, ttl ? now + ttl : 0, &err) < 0)
        goto fail;
    c->http_tokens_dirty = 1;
    br_reply_ok(c, m, json_pack("{s:s, s:s, s:o, s:s, s:o}", "token", text, "id", id, "expires",
                              ttl ? json_real((double)(now + ttl) / 1000.0) : json_null(),
                              "kind", "metrics", "http",
                              c->http ? json_string(c->cfg.http) : json_null()));
    sodium_memzero(text, sizeof(text));
    return;
fail:
    br_reply_fail(c, m, &err);
}

void br_api_token_create(br_coord_t *c, br_msg_t *m, const br_caller_t *who)
{
    json_int_t ttl;
    int uses = -1;
    const char *kind = "join";
    br_err_t err;
    br_token_t t;
    char text[BR_TOKEN_MAX], hash[BR_TOKEN_HASH_HEX + 1], id[BR_TOKEN_ID_LEN + 1];
    if (br_msg_unpack(m, &err, "{s:I, s?i, s?s}", "ttl", &ttl, "uses", &uses, "kind",
                      &kind) < 0)
        goto fail;
    if (strcmp(kind, "metrics") == 0) {
        metrics_token_create(c, m, ttl, uses);
        return;
    }
    if (strcmp(kind, "join") != 0) {
        br_errf(&err, EINVAL, "kind must be join or metrics, not '%.40s'", kind);
        goto fail;
    }
    if (uses == -1) {
        br_errf(&err, EINVAL, "token.create: a join token needs uses");
        goto fail;
    }
    if (ttl <= 0 || ttl > 366LL * 86400 * 1000 || uses < 1 || uses > 100000) {
        br_errf(&err, EINVAL, "ttl must be within a year and uses 1..100000");
        goto fail;
    }
    int64_t now = br_now_ms();
    if (br_token_init(&t, c->cfg.advertise, c->cfg.public_key, &err) < 0 ||
        br_token_encode(&t, text, sizeof(text), &err) < 0)
        goto fail;
    br_token_hash(t.secret, hash, id);
    char join_key[BR_KEY_LEN + 1];
    br_token_join_keypair(t.secret, join_key, NULL);
    if (br_store_token_add(c->store, id, hash, now, now + ttl, uses, join_key, &err) < 0)
        goto fail;
    br_reply_ok(c, m, json_pack("{s:s, s:s, s:f, s:s}", "token", text, "id", id, "expires",
                              (double)(now + ttl) / 1000.0, "kind", "join"));
    return;
fail:
    br_reply_fail(c, m, &err);
}

void br_api_token_list(br_coord_t *c, br_msg_t *m, const br_caller_t *who)
{
    br_err_t err;
    json_t *list = br_store_token_list(c->store, &err);
    if (!list) {
        br_reply_fail(c, m, &err);
        return;
    }
    size_t i;
    json_t *t;
    json_array_foreach(list, i, t) {
        json_object_set_new(t, "created", br_time_json(json_object_get(t, "created")));
        json_object_set_new(t, "expires", br_time_json(json_object_get(t, "expires")));
    }
    br_reply_ok(c, m, json_pack("{s:o}", "tokens", list));
}

void br_api_token_revoke(br_coord_t *c, br_msg_t *m, const br_caller_t *who)
{
    const char *id;
    br_err_t err;
    if (br_msg_unpack(m, &err, "{s:s}", "id", &id) < 0 ||
        br_store_token_revoke(c->store, id, &err) < 0) {
        br_reply_fail(c, m, &err);
        return;
    }
    c->http_tokens_dirty = 1; /* a metrics token is refused from the next request on */
    br_reply_ok(c, m, json_object());
}

/* --- nodes ------------------------------------------------------------------ */

static int by_id(const void *x, const void *y)
{
    int64_t a = *(const int64_t *)x, b = *(const int64_t *)y;
    return a < b ? -1 : a > b;
}

/* The ids of the starting and running jobs with a rank on n (a gang on several
 * nodes; a service job on none), each once, in id order. */
static json_t *node_jobs(br_coord_t *c, const br_node_t *n)
{
    size_t len = 0, cap = 0;
    int64_t *ids = NULL;
    for (br_rank_t *rk = br_jobtab_on_node(c->jobs, n->name); rk; rk = rk->node_next) {
        if (!br_job_state_live(rk->job->state) ||
            br_job_rank_on(rk->job, n->name, 0) != rk->index)
            continue; /* (a job with two ranks here counts at its first) */
        if (len == cap) {
            int64_t *more = realloc(ids, (cap = cap ? 2 * cap : 8) * sizeof(*more));
            if (!more)
                break;
            ids = more;
        }
        ids[len++] = rk->job->id;
    }
    if (len > 1)
        qsort(ids, len, sizeof(*ids), by_id);
    json_t *out = json_array();
    for (size_t i = 0; i < len; i++)
        json_array_append_new(out, json_integer(ids[i]));
    free(ids);
    return out;
}

static int by_job_rank(const void *x, const void *y)
{
    const br_rank_t *a = *(br_rank_t *const *)x, *b = *(br_rank_t *const *)y;
    if (a->job->id != b->job->id)
        return a->job->id < b->job->id ? -1 : 1;
    return a->index < b->index ? -1 : a->index > b->index;
}

/* The ranks on n that hold GPUs now (of a starting or running job, not done: a
 * rank done gave its share back), by job id then rank; a new array (free it) of
 * *len, NULL when there are none (or no memory). */
static br_rank_t **gpu_ranks(br_coord_t *c, const br_node_t *n, size_t *len)
{
    size_t cap = 0;
    br_rank_t **out = NULL;
    *len = 0;
    for (br_rank_t *rk = br_jobtab_on_node(c->jobs, n->name); rk; rk = rk->node_next) {
        if (!br_job_state_live(rk->job->state) || rk->state == BR_RANK_DONE ||
            json_array_size(json_object_get(rk->share, "gpus")) == 0)
            continue;
        if (*len == cap) {
            br_rank_t **more = realloc(out, (cap = cap ? 2 * cap : 8) * sizeof(*more));
            if (!more)
                break;
            out = more;
        }
        out[(*len)++] = rk;
    }
    if (*len > 1)
        qsort(out, *len, sizeof(*out), by_job_rank);
    return out;
}

/* One holder of a GPU: {"job", "name" (null to a user for another's job),
 * "whole" (no VRAM need: the GPU is the job's alone), "vram" (bytes; null when
 * whole)}. */
static json_t *holder_new(const br_job_t *job, const br_caller_t *who, json_int_t vram)
{
    int sees = who->kind == BR_PRINCIPAL_ADMIN || job->owner_id == who->id;
    json_t *name = sees && job->name ? json_string(job->name) : NULL;
    return json_pack("{s:I, s:o, s:b, s:o}", "job", (json_int_t)job->id, "name",
                     name ? name : json_null(), "whole", vram <= 0, "vram",
                     vram > 0 ? json_integer(vram) : json_null());
}

/* Rank rk's hold into the "held_by" of each of its GPUs (GPU i at position i of
 * gpus); a job's ranks come together, so a second rank on a GPU adds to the last. */
static void holders_add(json_t *gpus, const br_rank_t *rk, const br_caller_t *who)
{
    json_int_t vram = json_integer_value(json_object_get(rk->share, "vram"));
    size_t i;
    json_t *x;
    json_array_foreach(json_object_get(rk->share, "gpus"), i, x) {
        json_int_t idx = json_integer_value(x);
        json_t *g = idx >= 0 ? json_array_get(gpus, (size_t)idx) : NULL;
        json_t *held = json_object_get(g, "held_by");
        if (!json_is_array(held) || json_integer_value(json_object_get(g, "index")) != idx)
            continue;
        json_t *last = json_array_get(held, json_array_size(held) - 1);
        json_t *was = json_object_get(last, "vram");
        if (!last || json_integer_value(json_object_get(last, "job")) != rk->job->id)
            json_array_append_new(held, holder_new(rk->job, who, vram));
        else if (vram > 0 && json_is_integer(was))
            json_object_set_new(last, "vram", json_integer(json_integer_value(was) + vram));
    }
}

/* What bramble's jobs hold of GPU g: all of it when one holds it whole. */
static json_int_t held_bytes(const json_t *g)
{
    json_int_t sum = 0;
    size_t i;
    json_t *h;
    json_array_foreach(json_object_get(g, "held_by"), i, h) {
        if (json_is_true(json_object_get(h, "whole")))
            return json_integer_value(json_object_get(g, "vram_total"));
        sum += json_integer_value(json_object_get(h, "vram"));
    }
    return sum;
}

/* Each GPU of the node's public object gains "held_by" (the jobs holding it, in
 * id order) and "vram_held" (what they hold, now, with or without NVML). */
static void gpu_holders(br_coord_t *c, const br_node_t *n, json_t *gpus,
                        const br_caller_t *who)
{
    size_t i, len;
    json_t *g;
    json_array_foreach(gpus, i, g)
        if (json_is_object(g))
            json_object_set_new(g, "held_by", json_array());
    br_rank_t **ranks = gpu_ranks(c, n, &len);
    for (size_t k = 0; k < len; k++)
        holders_add(gpus, ranks[k], who);
    free(ranks);
    json_array_foreach(gpus, i, g)
        if (json_is_object(g))
            json_object_set_new(g, "vram_held", json_integer(held_bytes(g)));
}

static json_t *node_public(br_coord_t *c, br_node_t *n, const br_caller_t *who)
{
    json_t *o = json_deep_copy(n->info);
    json_object_del(o, "pubkey");
    json_object_del(o, "token");
    json_object_set_new(o, "state", json_string(br_node_state_name(n->state)));
    json_object_set_new(o, "connected", json_boolean(n->route_len > 0));
    json_t *seen = n->last_seen_ms ? json_integer(n->last_seen_ms)
                                   : json_incref(json_object_get(n->info, "last_seen"));
    json_object_set_new(o, "last_seen", br_time_json(seen));
    json_decref(seen);
    json_object_set_new(o, "joined", br_time_json(json_object_get(n->info, "joined")));
    if (json_object_get(n->info, "key_rotated"))
        json_object_set_new(o, "key_rotated",
                            br_time_json(json_object_get(n->info, "key_rotated")));
    static const char *want[] = {"arch", "cpus", "memory", "gpus", "labels",
                                 "cost_per_hour"};
    for (size_t i = 0; i < sizeof(want) / sizeof(want[0]); i++)
        if (!json_object_get(o, want[i]))
            json_object_set_new(o, want[i], json_null());
    json_object_set_new(o, "jobs", node_jobs(c, n));
    gpu_holders(c, n, json_object_get(o, "gpus"), who);
    json_object_set_new(o, "free", json_pack("{s:i, s:I}", "cpus",
                                             br_node_cpus(n) - n->cpus_used, "memory",
                                             (json_int_t)(br_node_memory(n) - n->memory_used)));
    return o;
}

void br_api_node_list(br_coord_t *c, br_msg_t *m, const br_caller_t *who)
{
    json_t *list = json_array();
    for (br_node_t *n = br_nodes_first(c->nodes); n; n = n->next) {
        json_t *o = node_public(c, n, who);
        json_object_del(o, "envs"); /* (node show's: the list stays small) */
        json_array_append_new(list, o);
    }
    br_reply_ok(c, m, json_pack("{s:o}", "nodes", list));
}

static br_node_t *named_node(br_coord_t *c, br_msg_t *m)
{
    const char *name;
    br_err_t err;
    br_node_t *n = NULL;
    if (br_msg_unpack(m, &err, "{s:s}", "name", &name) == 0) {
        n = br_nodes_find(c->nodes, name);
        if (!n)
            br_errf(&err, ENOENT, "no node named '%s'", name);
    }
    if (!n)
        br_reply_fail(c, m, &err);
    return n;
}

static void reply_node(br_coord_t *c, br_msg_t *m, br_node_t *n, const br_caller_t *who)
{
    br_reply_ok(c, m, json_pack("{s:o}", "node", node_public(c, n, who)));
}

void br_api_node_show(br_coord_t *c, br_msg_t *m, const br_caller_t *who)
{
    br_node_t *n = named_node(c, m);
    if (!n)
        return;
    json_t *node = node_public(c, n, who), *paths = br_overlay_node_paths(c, n);
    if (paths) /* how it reaches its overlay peers (in memory) */
        json_object_set_new(node, "overlay_paths", paths);
    br_reply_ok(c, m, json_pack("{s:o}", "node", node));
}

void br_api_node_drain(br_coord_t *c, br_msg_t *m, const br_caller_t *who)
{
    br_node_t *n = named_node(c, m);
    if (!n)
        return;
    br_nodelife_drain(c, n, who->name);
    reply_node(c, m, n, who);
}

void br_api_node_undrain(br_coord_t *c, br_msg_t *m, const br_caller_t *who)
{
    br_node_t *n = named_node(c, m);
    if (!n)
        return;
    br_nodelife_undrain(c, n, who->name);
    reply_node(c, m, n, who);
}

void br_api_node_remove(br_coord_t *c, br_msg_t *m, const br_caller_t *who)
{
    br_node_t *n = named_node(c, m);
    br_err_t err;
    if (!n)
        return;
    char key[sizeof(n->pubkey)], why[160];
    br_strlcpy(key, n->pubkey, sizeof(key));
    snprintf(why, sizeof(why), "node %s was removed", n->name);
    if (br_nodelife_remove(c, n, who->name, &err) < 0) {
        br_reply_fail(c, m, &err);
        return;
    }
    if (c->relay && key[0]) /* its shells and forwards end with its key, at once */
        br_relay_cut(c->relay, 0, key, why);
    br_reply_ok(c, m, json_object());
}

/* Ask a node's agent to make a new key pair (node.rekey); it sends node.key. */
void br_api_node_rotate_key(br_coord_t *c, br_msg_t *m, const br_caller_t *who)
{
    br_node_t *n = named_node(c, m);
    br_err_t err;
    (void)who;
    if (!n)
        return;
    if (!n->route_len || n->state == BR_NODE_LOST) {
        br_errf(&err, ENOTCONN, "node %s is not connected: a node makes its new key "
                                "itself, so it must be up (or remove it and join it again)",
                n->name);
        br_reply_fail(c, m, &err);
        return;
    }
    br_coord_send_node(c, n, "node.rekey", json_object());
    br_reply_ok(c, m, json_pack("{s:s, s:b}", "name", n->name, "ordered", 1));
}

/* Ask a node's agent to remove one of the environments it keeps (env.rm): now, or
 * once no running job uses it. Known by its last heartbeat's "envs". */
void br_api_node_env_rm(br_coord_t *c, br_msg_t *m, const br_caller_t *who)
{
    const char *name, *key;
    br_err_t err;
    (void)who;
    if (br_msg_unpack(m, &err, "{s:s, s:s}", "name", &name, "key", &key) < 0) {
        br_reply_fail(c, m, &err);
        return;
    }
    br_node_t *n = br_nodes_find(c->nodes, name);
    json_t *envs = n ? json_object_get(n->info, "envs") : NULL, *e;
    size_t i, found = 0;
    json_array_foreach(envs, i, e)
        found |= strcmp(json_string_value(json_object_get(e, "key")), key) == 0;
    if (!n)
        br_errf(&err, ENOENT, "no node named '%s'", name);
    else if (!found)
        br_errf(&err, ENOENT, "node %s keeps no environment '%s' ('bramble node show %s' "
                              "lists them)",
                name, key, name);
    else if (!n->route_len || n->state == BR_NODE_LOST)
        br_errf(&err, ENOTCONN, "node %s is not connected", name);
    if (!n || !found || !n->route_len || n->state == BR_NODE_LOST) {
        br_reply_fail(c, m, &err);
        return;
    }
    br_coord_send_node(c, n, "env.rm", json_pack("{s:s}", "key", key));
    br_reply_ok(c, m, json_pack("{s:s, s:s, s:b}", "name", n->name, "key", key, "ordered", 1));
}

void br_api_node_probe(br_coord_t *c, br_msg_t *m, const br_caller_t *who)
{
    json_t *matrix = br_netmap_matrix(c->netmap, c->nodes);
    json_object_set_new(matrix, "overlay", br_overlay_pairs(c)); /* how its pairs reach */
    br_reply_ok(c, m, matrix);
}

/* --- jobs ------------------------------------------------------------------- */

/* What the spec language allows but this coordinator cannot run yet. */
static int supported(const br_spec_t *s, br_err_t *err)
{
    if (s->kind == BR_JOB_SERVICE && s->resources.nodes > 1)
        return br_errf(err, ENOTSUP,
                       "kind: service: each replica runs on one node (resources.nodes: 1); "
                       "use service.replicas for more");
    if (s->kind == BR_JOB_SERVICE && s->resources.tasks_per_node != 1)
        return br_errf(err, ENOTSUP, "kind: service: one process per replica "
                                     "(resources.tasks_per_node: 1)");
    return 0;
}

/* 8e9 -> "8B", 3.5e8 -> "350M". */
static const char *param_count(double p, char *buf, size_t len)
{
    if (p >= 1e9)
        snprintf(buf, len, "%gB", p / 1e9);
    else if (p >= 1e6)
        snprintf(buf, len, "%gM", p / 1e6);
    else
        snprintf(buf, len, "%g", p);
    return buf;
}

/* model: {params, mode, dtype}: the VRAM each GPU needs, from the planner (DDP, no
 * ZeRO, no activations: a floor), written into the spec with how it was found. */
static int size_from_model(br_spec_t *s, json_t *spec_json, br_err_t *err)
{
    br_plan_in_t in = {.params = s->model.params, .gpus = 1};
    br_plan_mem_t mem;
    br_plan_field_t field;
    char w[32], o[32], g[32], t[32], n[32], sizing[300];
    if (s->resources.gpus < 1)
        s->resources.gpus = 1; /* a model needs a GPU */
    in.gpus = s->resources.gpus;
    if (br_plan_mode_parse(s->model.mode, &in.mode) < 0 ||
        br_dtype_parse(s->model.dtype, &in.dtype) < 0 ||
        br_plan_compute(&in, &mem, &field, err) < 0) {
        if (err)
            br_err_prefix(err, "model");
        return -1;
    }
    s->resources.vram = mem.total;
    snprintf(sizing, sizeof(sizing),
             "resources.vram %s per GPU from model: %s parameters, %s, %s on %d GPU(s) "
             "(weights %s, gradients and optimizer %s, overhead %s; docs/planning.md)",
             br_format_size(mem.total, t, sizeof(t)), param_count(s->model.params, n, sizeof(n)),
             s->model.mode, s->model.dtype, in.gpus, br_format_size(mem.weights, w, sizeof(w)),
             br_format_size(mem.gradients + mem.optimizer, g, sizeof(g)),
             br_format_size(mem.overhead, o, sizeof(o)));
    json_t *res = json_object_get(spec_json, "resources");
    json_object_set_new(res, "vram", json_integer((json_int_t)mem.total));
    json_object_set_new(res, "gpus", json_integer(s->resources.gpus));
    json_object_set_new(spec_json, "sizing", json_string(sizing));
    return 0;
}

static json_t *sets_array(json_t *sets, const char **out, int max, br_err_t *err)
{
    size_t i;
    json_t *v;
    if (!json_is_array(sets)) {
        br_errf(err, EPROTO, "job.submit: bad body: 'sets' must be an array of strings");
        return NULL;
    }
    if (json_array_size(sets) > (size_t)max) {
        br_errf(err, EINVAL, "too many --set values (at most %d)", max);
        return NULL;
    }
    json_array_foreach(sets, i, v) {
        if (!json_is_string(v)) {
            br_errf(err, EINVAL, "sets: expected strings");
            return NULL;
        }
        out[i] = json_string_value(v);
    }
    return sets;
}

void br_api_job_submit(br_coord_t *c, br_msg_t *m, const br_caller_t *who)
{
    const char *text;
    json_t *sets, *code = NULL;
    const char *setv[64];
    br_err_t err;
    br_spec_t *spec = NULL;
    if (br_msg_unpack(m, &err, "{s:s, s:o, s?o}", "spec", &text, "sets", &sets, "code",
                      &code) < 0 ||
        !sets_array(sets, setv, 64, &err))
        goto fail;
    spec = br_spec_parse(text, strlen(text), setv, (int)json_array_size(sets), &err);
    if (!spec || supported(spec, &err) < 0)
        goto fail;
    if (br_jobtab_named(c->jobs, spec->name)) { /* current jobs are all in memory */
        br_errf(&err, EEXIST, "a job named '%s' is already active", spec->name);
        goto fail;
    }
    if ((spec->code || spec->files) && !code) {
        br_errf(&err, EINVAL, "%s%s: the job's code is packed and sent by bramble "
                              "submit, and this request brought none",
                spec->code ? "code: " : "files:", spec->code ? spec->code : "");
        goto fail;
    }
    if (spec->outputs && !code && !spec->workdir) {
        br_errf(&err, EINVAL, "outputs: are looked for in the job's working dir: give it "
                              "code: or workdir:");
        goto fail;
    }
    json_t *spec_json = br_spec_to_json(spec);
    if ((code && br_api_code_keep(c, who, code, spec_json, &err) < 0) ||
        (spec->data && br_api_data_resolve(c, who, spec_json, &err) < 0) ||
        (spec->image && br_api_image_resolve(c, spec_json, &err) < 0) ||
        (spec->model.given && size_from_model(spec, spec_json, &err) < 0) ||
        br_deps_check(c, spec_json, who->kind == BR_PRINCIPAL_ADMIN ? 0 : who->id, &err) < 0 ||
        br_usage_admit(c->usage, c->jobs, who->id, spec_json, &err) < 0) {
        json_decref(spec_json);
        goto fail;
    }
    json_t *job = json_pack("{s:s, s:s, s:s, s:s, s:I, s:O, s:s, s:I, s:i}", "name",
                            spec->name, "kind", br_job_kind_name(spec->kind), "state",
                            "pending", "owner", who->name, "owner_id", (json_int_t)who->id,
                            "spec", spec_json, "spec_yaml", text, "submitted",
                            (json_int_t)br_now_ms(), "attempt", 1);
    br_job_t *added = NULL;
    int64_t last = 0;
    int64_t id = spec->kind == BR_JOB_SERVICE
                     ? br_services_submit(c, job, spec->service.replicas, &err)
                 : spec->array.count
                     ? br_arrays_submit(c, job, &spec->array, who->name, &last, &err)
                 : (added = br_jobs_add(c, job, &err)) ? added->id
                                                       : -1;
    json_decref(job);
    if (id >= 0 && spec->kind != BR_JOB_SERVICE) {
        if (!spec->array.count) /* (a task's event says it was submitted) */
            br_coord_event(c, id, NULL, "pending", "submitted by %s", who->name);
        if (spec->model.given)
            br_coord_event(c, id, NULL, "pending", "%s",
                           json_string_value(json_object_get(spec_json, "sizing")));
    }
    json_decref(spec_json);
    if (id < 0)
        goto fail;
    json_t *answer = json_pack("{s:I}", "id", (json_int_t)id);
    if (spec->array.count) { /* the whole array in this one answer */
        char range[BR_ARRAY_TEXT_MAX];
        json_object_set_new(answer, "array",
                            json_pack("{s:s, s:i, s:i, s:I, s:I}", "range",
                                      br_array_range_text(&spec->array, range, sizeof(range)),
                                      "count", spec->array.count, "max", spec->array.max,
                                      "first", (json_int_t)id, "last", (json_int_t)last));
    }
    br_spec_destroy(&spec);
    br_reply_ok(c, m, answer);
    return;
fail:
    br_spec_destroy(&spec);
    br_reply_fail(c, m, &err);
}

void br_api_code_stage(br_coord_t *c, br_msg_t *m, const br_caller_t *who)
{
    const char *text, *setv[64];
    json_t *sets, *listing, *summary, *files = NULL, *spec_json = NULL;
    br_err_t err;
    br_spec_t *spec = NULL;
    if (br_msg_unpack(m, &err, "{s:s, s:o, s:o, s:o}", "spec", &text, "sets", &sets,
                      "listing", &listing, "manifest", &summary) < 0 ||
        !sets_array(sets, setv, 64, &err))
        goto fail;
    if (!json_is_string(json_object_get(summary, "hash"))) {
        br_errf(&err, EPROTO, "code.stage: the manifest has no hash");
        goto fail;
    }
    /* a spec the submit would refuse stages nothing: the submit will say why */
    spec = br_spec_parse(text, strlen(text), setv, (int)json_array_size(sets), &err);
    if (!spec || spec->kind == BR_JOB_SERVICE || !(spec_json = br_spec_to_json(spec))) {
        br_spec_destroy(&spec);
        br_reply_ok(c, m, json_object());
        return;
    }
    const char *mhash = json_string_value(json_object_get(summary, "hash"));
    /* the job brings this tree (its spec's code:, or submit --code) */
    json_object_set_new(spec_json, "code", json_pack("{s:s, s:O}", "hash", mhash, "bytes",
                                                     json_object_get(summary, "bytes")));
    br_node_t *n = br_sched_first_fit(c, spec_json);
    if (!n || br_node_holds_tree(n, mhash)) { /* nowhere now, or there already */
        br_reply_ok(c, m, n ? json_pack("{s:s, s:b}", "node", n->name, "held", 1)
                            : json_object());
        goto out;
    }
    if (!(files = br_api_tree_files(c, who, listing, summary, &err)))
        goto fail;
    int fresh;
    br_stage_t *x = br_stages_add(c->stages, who->id, n->name, mhash, files, br_mono_ms(),
                                  &fresh);
    if (!x) {
        br_errf(&err, ENOMEM, "out of memory");
        goto fail;
    }
    if (fresh) { /* the node pulls it as a job's code, from us, reading as it comes */
        char grant[40];
        snprintf(grant, sizeof(grant), "stage:%lld", (long long)x->id);
        br_coord_send_node(
            c, n, "tree.stage",
            json_pack("{s:s, s:{s:s, s:s, s:O, s:O, s:[], s:b, s:O}}", "grant", grant,
                      "manifest", "hash", mhash, "root", "dir", "files",
                      json_object_get(summary, "files"), "bytes",
                      json_object_get(summary, "bytes"), "entries", "truncated", 1,
                      "listing", listing));
    }
    br_reply_ok(c, m, json_pack("{s:s}", "node", n->name));
    goto out;
fail:
    br_reply_fail(c, m, &err);
out:
    json_decref(files);
    json_decref(spec_json);
    br_spec_destroy(&spec);
}

void br_api_job_list(br_coord_t *c, br_msg_t *m, const br_caller_t *who)
{
    int all = 0;
    br_err_t err;
    if (br_msg_unpack(m, &err, "{s:b}", "all", &all) < 0) {
        br_reply_fail(c, m, &err);
        return;
    }
    json_t *jobs = all ? br_store_job_list(c->store, NULL, 0, &err)
                       : br_store_job_list_recent(c->store, br_now_ms() - RECENT_MS, 2000,
                                                  &err);
    if (!jobs) {
        br_reply_fail(c, m, &err);
        return;
    }
    json_t *out = json_array();
    int64_t recent = br_now_ms() - RECENT_MS;
    size_t i;
    json_t *job;
    json_array_foreach(jobs, i, job) {
        json_t *ended = json_object_get(job, "ended");
        if (!br_coord_may_see(who, job) ||
            (!all && json_is_integer(ended) && json_integer_value(ended) < recent))
            continue;
        json_t *p = br_jobs_public(job);
        json_object_del(p, "spec");
        br_arrays_annotate(job, p);
        if (br_services_is_replica(job)) /* (a service's list of replicas: job show) */
            br_services_annotate(c, job, p);
        json_array_append_new(out, p);
    }
    json_decref(jobs);
    br_reply_ok(c, m, json_pack("{s:o}", "jobs", out));
}

#define BR_QUEUE_ESTIMATED 200 /* the first pending jobs given an estimated start */

/* By their places in the last scheduling pass; those it has not seen yet last. */
static int by_place(const void *x, const void *y)
{
    const br_job_t *a = *(br_job_t *const *)x, *b = *(br_job_t *const *)y;
    int64_t pa = br_sched_queue_of(a).place, pb = br_sched_queue_of(b).place;
    pa = pa ? pa : INT64_MAX;
    pb = pb ? pb : INT64_MAX;
    if (pa != pb)
        return pa < pb ? -1 : 1;
    return a->id < b->id ? -1 : a->id > b->id;
}

/* The pending jobs in the order the scheduler considered them in its last pass:
 * each one's place in the whole queue, its score and the score's parts
 * (fairshare.h), how long it has waited, and why. A user sees only their own
 * jobs (with their places among everyone's). */
void br_api_job_queue(br_coord_t *c, br_msg_t *m, const br_caller_t *who)
{
    size_t n;
    br_job_t **list = br_jobtab_pending(c->jobs, &n);
    if (!list) {
        br_err_t err;
        br_errf(&err, ENOMEM, "job.queue: out of memory");
        br_reply_fail(c, m, &err);
        return;
    }
    qsort(list, n, sizeof(*list), by_place);
    /* when the first of them start at the latest, as the time limits tell */
    size_t ne = n < BR_QUEUE_ESTIMATED ? n : BR_QUEUE_ESTIMATED;
    int64_t *start = calloc(ne ? ne : 1, sizeof(*start));
    if (start)
        br_sched_estimate(c, list, ne, start);
    json_t *out = json_array();
    int64_t now = br_now_ms();
    for (size_t i = 0; i < n; i++) {
        br_job_t *j = list[i];
        if (who->kind != BR_PRINCIPAL_ADMIN && j->owner_id != who->id)
            continue;
        br_sched_queue_t q = br_sched_queue_of(j);
        json_array_append_new(
            out, json_pack("{s:I, s:I, s:s, s:s, s:i, s:i, s:f, s:f, s:s*,"
                           " s:{s:f, s:f, s:f, s:f}}", "position",
                           (json_int_t)(i + 1), "id", (json_int_t)j->id, "name", j->name,
                           "owner", j->owner, "priority", j->priority, "attempt", j->attempt,
                           "submitted", (double)j->submitted / 1000.0, "waited",
                           (double)(now - j->submitted) / 1000.0, "reason", j->reason,
                           "score", "total", q.total, "priority", q.priority, "fairshare",
                           q.fairshare, "age", q.age));
        int64_t at = start && i < ne && start[i] ? start[i] : q.start_at;
        if (at) /* by then at the latest */
            json_object_set_new(json_array_get(out, json_array_size(out) - 1), "start",
                                json_real((double)at / 1000.0));
    }
    free(start);
    free(list);
    br_reply_ok(c, m, json_pack("{s:o, s:I}", "jobs", out, "pending", (json_int_t)n));
}

/* Job id if the caller may see it, else NULL (answered with ENOENT). */
static json_t *visible_job(br_coord_t *c, br_msg_t *m, const br_caller_t *who,
                           json_int_t id)
{
    br_err_t err;
    json_t *job = br_store_job_get(c->store, id, &err);
    if (job && !br_coord_may_see(who, job)) {
        json_decref(job);
        job = NULL;
    }
    if (!job) {
        br_errf(&err, ENOENT, "no job %lld", (long long)id);
        br_reply_fail(c, m, &err);
    }
    return job;
}

/* The job named by a body {"id": n} or {"id": n, "index": i} (task i of array n),
 * or NULL (answered). *index: i, or -1 when not given; now: where not NULL, the
 * body's "now" too (job.cancel). */
static json_t *named_job_now(br_coord_t *c, br_msg_t *m, const br_caller_t *who,
                             json_int_t *id, int *index, int *now)
{
    br_err_t err;
    *index = -1;
    int rc = now ? br_msg_unpack(m, &err, "{s:I, s?i, s?b}", "id", id, "index", index,
                                 "now", now)
                 : br_msg_unpack(m, &err, "{s:I, s?i}", "id", id, "index", index);
    if (rc < 0) {
        br_reply_fail(c, m, &err);
        return NULL;
    }
    if (*index < -1) {
        br_errf(&err, EINVAL, "index: an array task's index is not negative");
        br_reply_fail(c, m, &err);
        return NULL;
    }
    if (*index >= 0) { /* the array must be the caller's to see, then its task */
        json_t *array = visible_job(c, m, who, *id);
        if (!array)
            return NULL; /* (answered) */
        json_decref(array);
        int64_t task = br_store_job_array_task(c->store, *id, *index, &err);
        if (task < 0) {
            br_reply_fail(c, m, &err);
            return NULL;
        }
        *id = task;
    }
    return visible_job(c, m, who, *id);
}

static json_t *named_job(br_coord_t *c, br_msg_t *m, const br_caller_t *who,
                         json_int_t *id, int *index)
{
    return named_job_now(c, m, who, id, index, NULL);
}

void br_api_job_show(br_coord_t *c, br_msg_t *m, const br_caller_t *who)
{
    json_int_t id;
    int index;
    json_t *job = named_job(c, m, who, &id, &index);
    if (!job)
        return;
    json_t *p = br_jobs_public(job);
    br_arrays_annotate(job, p);
    json_t *events = br_store_event_list(c->store, id, 0, 0, NULL);
    size_t i;
    json_t *e;
    json_array_foreach(events, i, e) json_object_set_new(e, "time",
                                                         br_time_json(json_object_get(e, "time")));
    json_object_set_new(p, "events", events ? events : json_array());
    json_t *cps = br_store_checkpoint_list(c->store, id, NULL);
    br_replicas_annotate(c, id, cps); /* where their copies are */
    size_t k;
    json_t *cp;
    json_array_foreach(cps, k, cp) {
        json_object_set_new(cp, "time", br_time_json(json_object_get(cp, "time")));
    }
    json_object_set_new(p, "checkpoints", cps ? cps : json_array());
    json_t *xfers = br_replicas_transfers(c, id), *code_x = br_api_code_transfers(c, id);
    json_array_extend(xfers, code_x); /* and its code's fetches */
    json_decref(code_x);
    json_object_set_new(p, "transfers", xfers);
    json_t *outs = br_store_output_list(c->store, id, NULL); /* what its attempts left */
    size_t oi;
    json_t *o;
    json_array_foreach(outs, oi, o)
        json_object_set_new(o, "time", br_time_json(json_object_get(o, "time")));
    json_object_set_new(p, "outputs", outs ? outs : json_array());
    int64_t lost = br_store_log_lost(c->store, id, NULL);
    json_object_set_new(p, "log_lost", json_integer(lost > 0 ? lost : 0));
    br_services_annotate(c, job, p);
    json_t *as = br_services_is_service(job)
                     ? br_autoscale_show(c, id, json_object_get(job, "spec"))
                     : NULL;
    if (as)
        json_object_set_new(p, "autoscale", as);
    json_t *dev = br_devenv_show(c, id);
    if (dev)
        json_object_set_new(p, "dev", dev);
    json_decref(job);
    br_reply_ok(c, m, json_pack("{s:o}", "job", p));
}

void br_api_job_cancel(br_coord_t *c, br_msg_t *m, const br_caller_t *who)
{
    json_int_t id;
    int index, now = 0;
    br_err_t err;
    json_t *job = named_job_now(c, m, who, &id, &index, &now);
    if (!job)
        return;
    if (index < 0 && br_arrays_is_array(c, id)) { /* the whole array */
        int n = br_arrays_cancel(c, id, now);
        json_decref(job);
        if (n == 0) {
            br_errf(&err, EINVAL, "array %lld has no task pending, starting or running; "
                                  "nothing to cancel", (long long)id);
            br_reply_fail(c, m, &err);
            return;
        }
        job = br_store_job_get(c->store, id, &err); /* its first task, as it is now */
        if (!job) {
            br_reply_fail(c, m, &err);
            return;
        }
        json_t *p = br_jobs_public(job);
        br_arrays_annotate(job, p);
        json_decref(job);
        json_t *stopping = json_array(); /* the tasks in their grace, for a waiter */
        for (br_job_t *j = br_jobtab_first(c->jobs); j; j = j->next)
            if (j->array_of == id && j->stop.cancel)
                json_array_append_new(stopping, json_integer((json_int_t)j->id));
        br_reply_ok(c, m, json_pack("{s:o, s:{s:I, s:i, s:o}}", "job", p, "array", "id",
                                  (json_int_t)id, "cancelled", n, "stopping", stopping));
        return;
    }
    if (br_services_is_replica(job)) {
        br_errf(&err, EINVAL,
                "job %lld is replica %lld of service %lld: scale the service (bramble "
                "scale) or cancel it",
                (long long)id,
                (long long)json_integer_value(json_object_get(job, "replica")),
                (long long)json_integer_value(json_object_get(job, "service")));
        json_decref(job);
        br_reply_fail(c, m, &err);
        return;
    }
    if (br_services_is_service(job) &&
        strcmp(json_string_value(json_object_get(job, "state")), "running") == 0)
        br_services_cancel(c, job); /* its replicas first */
    json_decref(job);
    job = br_jobs_cancel(c, id, now, &err);
    if (!job) {
        br_reply_fail(c, m, &err);
        return;
    }
    json_t *p = br_jobs_public(job);
    br_arrays_annotate(job, p);
    br_reply_ok(c, m, json_pack("{s:o}", "job", p));
    json_decref(job);
}

typedef struct {
    json_t *chunks;
    char *buf;
    size_t len, cap;
} log_page_t;

static void add_chunk(void *arg, int attempt, int rank, int stream, const void *data,
                      size_t len)
{
    log_page_t *p = arg;
    if (p->len + len > p->cap) {
        size_t cap = (p->len + len) * 2;
        char *nb = realloc(p->buf, cap);
        if (!nb)
            return;
        p->buf = nb;
        p->cap = cap;
    }
    memcpy(p->buf + p->len, data, len);
    p->len += len;
    json_array_append_new(p->chunks, json_pack("{s:i, s:i, s:i, s:I}", "stream", stream,
                                               "rank", rank, "attempt", attempt, "len",
                                               (json_int_t)len));
}

void br_api_job_logs(br_coord_t *c, br_msg_t *m, const br_caller_t *who)
{
    json_int_t id, after;
    int rank;
    br_err_t err;
    if (br_msg_unpack(m, &err, "{s:I, s:I, s:i}", "id", &id, "after", &after, "rank",
                      &rank) < 0) {
        br_reply_fail(c, m, &err);
        return;
    }
    json_t *job = visible_job(c, m, who, id);
    if (!job)
        return;
    log_page_t page = {json_array(), NULL, 0, 0};
    int64_t next = after;
    if (br_store_log_read(c->store, id, rank, after, LOG_PAGE, add_chunk, &page, &next,
                          &err) < 0) {
        json_decref(page.chunks);
        free(page.buf);
        json_decref(job);
        br_reply_fail(c, m, &err);
        return;
    }
    const char *state = json_string_value(json_object_get(job, "state"));
    int ended = strcmp(state, "completed") == 0 || strcmp(state, "failed") == 0 ||
                strcmp(state, "cancelled") == 0;
    int end = ended && json_array_size(page.chunks) == 0;
    br_msg_t *resp = br_msg_reply(m);
    json_t *body = json_pack("{s:I, s:b, s:o, s:i}", "next", (json_int_t)next, "end", end,
                             "chunks", page.chunks, "ranks",
                             br_job_world_size(json_object_get(job, "spec")));
    if (!resp || !body || br_msg_set_data(resp, page.buf ? page.buf : "", page.len) < 0) {
        json_decref(body);
        br_msg_destroy(&resp);
        br_errf(&err, ENOMEM, "job.logs: out of memory");
        br_reply_fail(c, m, &err);
    } else {
        br_msg_set_body(resp, body);
        br_coord_post(c, resp);
    }
    free(page.buf);
    json_decref(job);
}

/* A user sees the events of their own jobs and those of nodes; the admin all.
 * seen caches each job's answer for one listing. */
static int event_visible(br_coord_t *c, const br_caller_t *who, json_t *e, json_t *seen)
{
    json_t *job = json_object_get(e, "job");
    if (who->kind == BR_PRINCIPAL_ADMIN || !json_is_integer(job))
        return 1;
    char key[32];
    snprintf(key, sizeof(key), "%lld", (long long)json_integer_value(job));
    json_t *known = json_object_get(seen, key);
    if (!known) {
        json_t *j = br_store_job_get(c->store, json_integer_value(job), NULL);
        known = json_boolean(j && br_coord_may_see(who, j));
        json_object_set_new(seen, key, known);
        json_decref(j);
    }
    return json_is_true(known);
}

void br_api_event_list(br_coord_t *c, br_msg_t *m, const br_caller_t *who)
{
    json_int_t after, job, limit;
    br_err_t err;
    if (br_msg_unpack(m, &err, "{s:I, s:I, s:I}", "after", &after, "job", &job, "limit",
                      &limit) < 0) {
        br_reply_fail(c, m, &err);
        return;
    }
    if (limit < 0 || limit > 10000 || after < 0 || job < 0) {
        br_errf(&err, EINVAL, "event.list: %s", limit < 0 || limit > 10000
                                                    ? "limit is 0 (the most, 10000) to 10000"
                                                    : "after and job are ids, 0 or more");
        br_reply_fail(c, m, &err);
        return;
    }
    if (limit == 0)
        limit = 10000;
    if (job > 0) { /* one job's: one the caller may see, or no such job */
        json_t *row = visible_job(c, m, who, job);
        if (!row)
            return; /* (answered) */
        json_decref(row);
    }
    json_t *events = br_store_event_list(c->store, job, after, (int)limit, &err);
    if (!events) {
        br_reply_fail(c, m, &err);
        return;
    }
    json_int_t next = after;
    json_t *out = json_array(), *seen = json_object(); /* job id -> may see */
    if (job > 0) { /* seen just now: not read again for each of its events */
        char key[32];
        snprintf(key, sizeof(key), "%lld", (long long)job);
        json_object_set_new(seen, key, json_true());
    }
    size_t i;
    json_t *e;
    json_array_foreach(events, i, e) {
        next = json_integer_value(json_object_get(e, "id"));
        json_object_set_new(e, "time", br_time_json(json_object_get(e, "time")));
        if (event_visible(c, who, e, seen))
            json_array_append(out, e);
    }
    json_decref(seen);
    json_decref(events);
    br_reply_ok(c, m, json_pack("{s:o, s:I}", "events", out, "next", next));
}

void br_api_event_watch(br_coord_t *c, br_msg_t *m, const br_caller_t *who)
{
    json_int_t job = 0;
    int logs = 0;
    br_err_t err = {0};
    if (br_msg_unpack(m, &err, "{s:I, s?b}", "job", &job, "logs", &logs) < 0 || job < 0 ||
        (logs && job == 0)) {
        if (!err.text[0])
            br_errf(&err, EINVAL, "event.watch: %s",
                    job < 0 ? "job must be an id, or 0 for every job"
                            : "logs needs one job, not 0");
        br_reply_fail(c, m, &err);
        return;
    }
    if (job > 0) {
        json_t *j = br_store_job_get(c->store, job, NULL);
        int visible = j && br_coord_may_see(who, j);
        json_decref(j);
        if (!visible) {
            br_errf(&err, ENOENT, "no job %lld", (long long)job);
            br_reply_fail(c, m, &err);
            return;
        }
    }
    size_t route_len;
    const void *route = br_msg_route(m, &route_len);
    br_watch_who_t ww = {.admin = who->kind == BR_PRINCIPAL_ADMIN, .owner = who->id};
    if (br_watchers_add(c->watchers, route, route_len, job, logs, &ww, br_mono_ms(),
                        &err) < 0) {
        br_reply_fail(c, m, &err);
        return;
    }
    br_reply_ok(c, m, json_pack("{s:I}", "ttl_ms", (json_int_t)BR_WATCH_TTL_MS));
}

/* --- users ------------------------------------------------------------------ */

/* 1 when a user (or the admin) has this name, 0 when not, -1 on a store error. */
static int user_exists(br_coord_t *c, const char *name, br_err_t *err)
{
    json_t *users = br_store_key_list_users(c->store, err);
    if (!users)
        return -1;
    size_t i;
    json_t *u;
    int found = 0;
    json_array_foreach(users, i, u) {
        found |= strcmp(json_string_value(json_object_get(u, "name")), name) == 0;
    }
    json_decref(users);
    return found;
}

/* A local account name as useradd takes it: [a-z_][a-z0-9_-]*, at most 32. */
static int check_unix_user(const char *u, br_err_t *err)
{
    if (!u)
        return 0;
    size_t n = strlen(u);
    int ok = n >= 1 && n <= 32 && ((u[0] >= 'a' && u[0] <= 'z') || u[0] == '_');
    for (size_t i = 1; ok && i < n; i++)
        ok = (u[i] >= 'a' && u[i] <= 'z') || (u[i] >= '0' && u[i] <= '9') || u[i] == '_' ||
             u[i] == '-';
    return ok ? 0 : br_errf(err, EINVAL, "unix user '%.40s': a local account name "
                                         "([a-z_][a-z0-9_-]*, at most 32)", u);
}

/* A user's limits as change ({"max_gpus": 2, "share": null, ...}: null drops a
 * limit, an absent key keeps it) leaves them: checked, nothing stored. id 0: a
 * user not made yet (no limits so far). New reference, or NULL. */
static json_t *merge_limits(br_coord_t *c, int64_t id, const json_t *change, br_err_t *err)
{
    if (!json_is_object(change))
        return br_errp(err, EINVAL, "limits must be an object");
    const br_user_use_t *x = id ? br_usage_user(c->usage, id) : NULL;
    br_limits_t lim;
    if (x)
        lim = x->lim;
    else
        br_limits_none(&lim);
    json_t *merged = br_limits_json(&lim);
    const char *k;
    json_t *v;
    json_object_foreach((json_t *)change, k, v) {
        if (json_is_null(v))
            json_object_del(merged, k);
        else
            json_object_set(merged, k, v);
    }
    if (br_limits_parse(merged, &lim, err) < 0) {
        json_decref(merged);
        return NULL;
    }
    return merged;
}

/* Store user name's limits (merge_limits's) and read the ledger again. */
static int store_limits(br_coord_t *c, const char *name, const json_t *limits, br_err_t *err)
{
    if (br_store_limits_set(c->store, BR_PRINCIPAL_USER, name, limits, err) < 0 ||
        br_usage_users_again(c->usage, c->store, err) < 0)
        return -1;
    br_coord_changed(c); /* a limit lifted may let a job start */
    br_routes_keys_changed(c->routes); /* (the gateways enforce rpm) */
    return 0;
}

/* The limits in words for an event: "max_gpus 2, share 3" ("none"). */
static const char *limits_text(const json_t *limits, char *buf, size_t len)
{
    size_t off = 0;
    const char *k;
    json_t *v;
    buf[0] = '\0';
    json_object_foreach((json_t *)limits, k, v) {
        if (off < len)
            off += (size_t)snprintf(buf + off, len - off, "%s%s %g", off ? ", " : "", k,
                                    json_number_value(v));
    }
    return buf[0] ? buf : "none";
}

void br_api_user_set(br_coord_t *c, br_msg_t *m, const br_caller_t *who)
{
    const char *name;
    json_t *unix_user = NULL, *limits = NULL, *now = NULL;
    br_err_t err;
    if (br_msg_unpack(m, &err, "{s:s, s?o, s?o}", "name", &name, "unix_user", &unix_user,
                      "limits", &limits) < 0)
        goto fail;
    if (!unix_user && !limits) {
        br_errf(&err, EINVAL, "user.set: give unix_user, limits or both");
        goto fail;
    }
    if (unix_user && !json_is_null(unix_user) &&
        (!json_is_string(unix_user) ||
         check_unix_user(json_string_value(unix_user), &err) < 0)) {
        if (!json_is_string(unix_user))
            br_errf(&err, EINVAL, "unix_user must be a string or null");
        goto fail;
    }
    if (limits) { /* checked before anything is written */
        int64_t id;
        if (br_store_principal_id(c->store, BR_PRINCIPAL_USER, name, &id, &err) < 0)
            goto fail;
        if (!id) {
            br_errf(&err, ENOENT, "no user '%s'", name);
            goto fail;
        }
        if (!(now = merge_limits(c, id, limits, &err)))
            goto fail;
    }
    const char *u = json_string_value(unix_user);
    if ((unix_user && br_store_unix_user_set(c->store, name, u, &err) < 0) ||
        (now && store_limits(c, name, now, &err) < 0)) {
        json_decref(now);
        goto fail;
    }
    char text[300];
    if (unix_user)
        br_coord_event(c, 0, NULL, "user", "user %s set by %s: jobs run as %s%s", name,
                       who->name, u ? "local account " : "the node's uid for the user",
                       u ? u : "");
    if (now)
        br_coord_event(c, 0, NULL, "user", "user %s's limits set by %s: %s", name, who->name,
                       limits_text(now, text, sizeof(text)));
    json_t *out = json_pack("{s:s}", "name", name);
    if (unix_user)
        json_object_set_new(out, "unix_user", u ? json_string(u) : json_null());
    if (now)
        json_object_set_new(out, "limits", now);
    br_reply_ok(c, m, out);
    return;
fail:
    br_reply_fail(c, m, &err);
}

int br_api_key_unused(br_coord_t *c, const char *key, br_err_t *err)
{
    br_principal_t kind;
    char existing[64];
    if (!br_key_valid(key))
        return br_errf(err, EINVAL, "public_key: not 40 characters of Z85");
    if (br_store_key_lookup(c->store, key, &kind, existing, sizeof(existing), err) < 0)
        return -1;
    if (kind != BR_PRINCIPAL_UNKNOWN)
        return br_errf(err, EEXIST, "that key is already in use");
    return 0;
}

void br_api_user_add(br_coord_t *c, br_msg_t *m, const br_caller_t *who)
{
    const char *name, *key, *unix_user = NULL;
    br_err_t err;
    json_t *limits = NULL, *now = NULL;
    if (br_msg_unpack(m, &err, "{s:s, s:s, s?s, s?o}", "name", &name, "public_key", &key,
                      "unix_user", &unix_user, "limits", &limits) < 0 ||
        check_unix_user(unix_user, &err) < 0)
        goto fail;
    if (!br_valid_name(name) || strcmp(name, "admin") == 0) {
        br_errf(&err, EINVAL, "user name '%s': use lowercase letters, digits and '-' "
                              "(not 'admin')", name);
        goto fail;
    }
    int taken = user_exists(c, name, &err);
    if (taken < 0)
        goto fail;
    if (taken) {
        br_errf(&err, EEXIST, "user '%s' exists already", name);
        goto fail;
    }
    if (br_api_key_unused(c, key, &err) < 0)
        goto fail;
    if (limits && !(now = merge_limits(c, 0, limits, &err))) /* before anything is written */
        goto fail;
    if (br_store_key_add(c->store, key, BR_PRINCIPAL_USER, name, &err) < 0 ||
        (unix_user && br_store_unix_user_set(c->store, name, unix_user, &err) < 0) ||
        (now ? store_limits(c, name, now, &err) < 0
             : br_usage_users_again(c->usage, c->store, &err) < 0)) {
        json_decref(now);
        goto fail;
    }
    char text[300];
    br_coord_event(c, 0, NULL, "user", "user %s added by %s%s%s; limits: %s", name,
                   who->name, unix_user ? "; jobs run as local account " : "",
                   unix_user ? unix_user : "", now ? limits_text(now, text, sizeof(text))
                                                   : "none");
    json_decref(now);
    br_reply_ok(c, m, json_pack("{s:s, s:s}", "name", name, "endpoint", c->cfg.advertise));
    return;
fail:
    br_reply_fail(c, m, &err);
}

void br_api_user_list(br_coord_t *c, br_msg_t *m, const br_caller_t *who)
{
    br_err_t err;
    json_t *users = br_store_key_list_users(c->store, &err);
    if (!users) {
        br_reply_fail(c, m, &err);
        return;
    }
    size_t i;
    json_t *u;
    json_array_foreach(users, i, u) {
        json_object_set_new(u, "created", br_time_json(json_object_get(u, "created")));
        int64_t id = 0;
        br_principal_t kind = strcmp(json_string_value(json_object_get(u, "kind")), "admin")
                                  ? BR_PRINCIPAL_USER
                                  : BR_PRINCIPAL_ADMIN;
        if (br_store_principal_id(c->store, kind,
                                  json_string_value(json_object_get(u, "name")), &id,
                                  &err) < 0) {
            json_decref(users);
            br_reply_fail(c, m, &err);
            return;
        }
        const br_user_use_t *x = br_usage_user(c->usage, id);
        json_object_set_new(u, "limits", x ? br_limits_json(&x->lim) : json_object());
    }
    br_reply_ok(c, m, json_pack("{s:o}", "users", users));
}

/* What users used since a time: a user sees their own, the admin anyone's. */
void br_api_usage(br_coord_t *c, br_msg_t *m, const br_caller_t *who)
{
    json_int_t since = 0;
    const char *user = NULL;
    br_err_t err;
    if (br_msg_unpack(m, &err, "{s?I, s?s}", "since", &since, "user", &user) < 0)
        goto fail;
    int64_t id = who->kind == BR_PRINCIPAL_ADMIN ? 0 : who->id;
    if (user && who->kind == BR_PRINCIPAL_ADMIN) {
        if (br_store_principal_id(c->store, strcmp(user, "admin") ? BR_PRINCIPAL_USER
                                                                  : BR_PRINCIPAL_ADMIN,
                                  user, &id, &err) < 0)
            goto fail;
        if (!id) {
            br_errf(&err, ENOENT, "no user '%s'", user);
            goto fail;
        }
    } else if (user && strcmp(user, who->name) != 0) {
        br_errf(&err, EPERM, "only the admin sees another user's usage");
        goto fail;
    }
    json_t *rows = br_usage_show(c, since, id, br_now_ms(), &err);
    if (!rows)
        goto fail;
    /* what the gateways answered: everyone's for the admin without --user (id 0) */
    json_t *models = br_store_model_usage_since(
        c->store, since / BR_USAGE_HOUR_MS,
        who->kind == BR_PRINCIPAL_ADMIN && !user ? -1 : id, &err);
    if (!models) {
        json_decref(rows);
        goto fail;
    }
    br_reply_ok(c, m, json_pack("{s:o, s:o, s:I}", "users", rows, "models", models, "since",
                              since));
    return;
fail:
    br_reply_fail(c, m, &err);
}

/* A removed user's active jobs: cancelled, or handed to the caller (the admin).
 * The number of jobs dealt with, or -1. */
static int removed_users_jobs(br_coord_t *c, int64_t owner_id, int to_admin,
                              const br_caller_t *who, br_err_t *err)
{
    static const char *const active[] = {"pending", "starting", "running", NULL};
    json_t *jobs = br_store_job_list(c->store, active, 0, err);
    if (!jobs)
        return -1;
    size_t i;
    json_t *job;
    int n = 0;
    json_array_foreach(jobs, i, job) {
        if (json_integer_value(json_object_get(job, "owner_id")) != (json_int_t)owner_id)
            continue;
        int64_t id = json_integer_value(json_object_get(job, "id"));
        if (to_admin) {
            if (br_jobs_set_owner(c, id, who->name, who->id, err) < 0)
                break;
            br_coord_event(c, id, NULL, json_string_value(json_object_get(job, "state")),
                           "handed to %s: its owner was removed", who->name);
        } else {
            json_t *done = br_jobs_cancel(c, id, 0, err);
            if (!done && err->errnum != EINVAL) /* EINVAL: a replica ended with it */
                break;
            json_decref(done);
        }
        n++;
    }
    int failed = i < json_array_size(jobs);
    json_decref(jobs);
    return failed ? -1 : n;
}

void br_api_user_remove(br_coord_t *c, br_msg_t *m, const br_caller_t *who)
{
    const char *name, *jobs = "cancel";
    br_err_t err;
    int64_t id;
    if (br_msg_unpack(m, &err, "{s:s, s?:s}", "name", &name, "jobs", &jobs) < 0)
        goto fail;
    if (strcmp(jobs, "cancel") != 0 && strcmp(jobs, "admin") != 0) {
        br_errf(&err, EINVAL, "jobs must be 'cancel' or 'admin', not '%.40s'", jobs);
        goto fail;
    }
    if (strcmp(name, "admin") == 0) {
        br_errf(&err, EINVAL, "the admin cannot be removed");
        goto fail;
    }
    int found = user_exists(c, name, &err);
    if (found < 0)
        goto fail;
    if (!found) {
        br_errf(&err, ENOENT, "no user '%s'", name);
        goto fail;
    }
    int n;
    if (br_store_principal_id(c->store, BR_PRINCIPAL_USER, name, &id, &err) < 0 ||
        (n = removed_users_jobs(c, id, strcmp(jobs, "admin") == 0, who, &err)) < 0 ||
        br_store_key_revoke(c->store, BR_PRINCIPAL_USER, name, &err) < 0)
        goto fail;
    br_routes_keys_changed(c->routes); /* their API keys go with them */
    char why[160];
    snprintf(why, sizeof(why), "user %s was removed", name);
    if (c->relay) /* and their shells and forwards, at once */
        br_relay_cut(c->relay, id, NULL, why);
    br_coord_event(c, 0, NULL, "user", "user %s removed by %s; %d active job(s) %s", name,
                   who->name, n, strcmp(jobs, "admin") == 0 ? "handed to them" : "cancelled");
    br_reply_ok(c, m, json_pack("{s:i, s:s}", "jobs", n, "jobs_were",
                              strcmp(jobs, "admin") == 0 ? "handed to the admin"
                                                         : "cancelled"));
    return;
fail:
    br_reply_fail(c, m, &err);
}

/* A user (or the admin) replaces its own key: the new one belongs to the same
 * principal (same id, same jobs), the one that sent this is refused from now on. */
void br_api_user_rotate_key(br_coord_t *c, br_msg_t *m, const br_caller_t *who)
{
    const char *key;
    br_err_t err;
    if (br_msg_unpack(m, &err, "{s:s}", "public_key", &key) < 0)
        goto fail;
    if (!br_key_valid(key)) {
        br_errf(&err, EINVAL, "public_key must be a CURVE public key (40 characters of Z85)");
        goto fail;
    }
    if (br_store_key_add(c->store, key, who->kind, who->name, &err) < 0 ||
        br_store_key_revoke_one(c->store, br_msg_user(m), &err) < 0)
        goto fail;
    if (c->relay) /* what the old key opened goes with it */
        br_relay_cut(c->relay, 0, br_msg_user(m), "the key that opened it was replaced "
                                                   "(rotate-key)");
    br_coord_event(c, 0, NULL, "user", "%s %s rotated its key",
                   who->kind == BR_PRINCIPAL_ADMIN ? "admin" : "user", who->name);
    br_reply_ok(c, m, json_object());
    return;
fail:
    br_reply_fail(c, m, &err);
}

void br_api_audit_list(br_coord_t *c, br_msg_t *m, const br_caller_t *who)
{
    json_int_t after = 0;
    int limit = 0;
    br_err_t err;
    (void)who;
    if (br_msg_unpack(m, &err, "{s?I, s?i}", "after", &after, "limit", &limit) < 0)
        goto fail;
    if (after < 0 || limit < 0 || limit > 100000) {
        br_errf(&err, EINVAL, "audit: after must be >= 0 and limit 0..100000");
        goto fail;
    }
    json_t *entries = br_store_audit_list(c->store, after, limit, &err);
    if (!entries)
        goto fail;
    size_t i;
    json_t *e;
    json_array_foreach(entries, i, e)
        json_object_set_new(e, "time", br_time_json(json_object_get(e, "time")));
    br_reply_ok(c, m, json_pack("{s:o}", "entries", entries));
    return;
fail:
    br_reply_fail(c, m, &err);
}

/* --- services ---------------------------------------------------------------- */

/* The running service named in the body, if the caller may act on it (answered
 * otherwise). */
static json_t *named_service(br_coord_t *c, br_msg_t *m, const br_caller_t *who,
                             const char *name)
{
    br_err_t err;
    json_t *s = br_services_find(c, name, who->kind == BR_PRINCIPAL_ADMIN ? 0 : who->id,
                                 &err);
    if (!s)
        br_reply_fail(c, m, &err);
    return s;
}

void br_api_service_endpoints(br_coord_t *c, br_msg_t *m, const br_caller_t *who)
{
    const char *name;
    br_err_t err;
    if (br_msg_unpack(m, &err, "{s:s}", "name", &name) < 0) {
        br_reply_fail(c, m, &err);
        return;
    }
    json_t *s = named_service(c, m, who, name);
    if (!s)
        return;
    br_reply_ok(c, m, json_pack("{s:o, s:I}", "endpoints", br_services_endpoints(c, s),
                              "replicas",
                              json_integer_value(json_object_get(s, "replicas"))));
    json_decref(s);
}

/* A running service as service.list shows it. New reference. */
static json_t *service_view(br_coord_t *c, const br_job_t *j, int64_t now)
{
    json_t *sv = json_object_get(j->spec, "service");
    json_t *model = json_object_get(sv, "model"), *aliases = json_object_get(sv, "aliases");
    json_t *adapters = json_object_get(sv, "adapters");
    json_t *out = json_pack("{s:I, s:s, s:s, s:O, s:o, s:o}", "id", (json_int_t)j->id,
                            "name", j->name, "owner", j->owner ? j->owner : "", "model",
                            json_is_string(model) ? model : json_null(), "aliases",
                            aliases ? json_incref(aliases) : json_array(), "adapters",
                            adapters ? json_incref(adapters) : json_array());
    json_t *row = json_pack("{s:I, s:i}", "id", (json_int_t)j->id, "replicas", j->replicas);
    if (out && row)
        br_services_annotate(c, row, out); /* replicas, replicas_wanted */
    json_decref(row);
    json_t *as = br_autoscale_show(c, j->id, j->spec);
    json_object_set_new(out, "autoscale", as ? as : json_null());
    int inflight, waiting;
    double rate, errors, latency;
    br_gwload_service(c->gwload, j->id, now, &inflight, &waiting);
    br_gwload_service_rates(c->gwload, j->id, now, &rate, &errors, &latency);
    json_object_set_new(out, "load",
                        json_pack("{s:i, s:i, s:f, s:f, s:f, s:i}", "inflight", inflight,
                                  "waiting", waiting, "rate", rate, "errors", errors,
                                  "latency_ms", latency, "gateways",
                                  br_gwload_fresh(c->gwload, now)));
    return out;
}

void br_api_service_list(br_coord_t *c, br_msg_t *m, const br_caller_t *who)
{
    json_t *list = json_array();
    int64_t now = br_mono_ms();
    for (br_job_t *j = br_jobtab_first(c->jobs); j; j = j->next)
        if (j->replicas >= 0 && j->state == BR_JOB_RUNNING &&
            (who->kind == BR_PRINCIPAL_ADMIN || j->owner_id == who->id))
            json_array_append_new(list, service_view(c, j, now));
    br_reply_ok(c, m, json_pack("{s:o}", "services", list));
}

void br_api_service_scale(br_coord_t *c, br_msg_t *m, const br_caller_t *who)
{
    const char *name;
    int replicas;
    br_err_t err;
    if (br_msg_unpack(m, &err, "{s:s, s:i}", "name", &name, "replicas", &replicas) < 0) {
        br_reply_fail(c, m, &err);
        return;
    }
    if (replicas < 0 || replicas > 1000) {
        br_errf(&err, EINVAL, "replicas: %d is out of range (0..1000)", replicas);
        br_reply_fail(c, m, &err);
        return;
    }
    json_t *s = named_service(c, m, who, name);
    if (!s)
        return;
    int was = (int)json_integer_value(json_object_get(s, "replicas"));
    br_autoscale_spec_t as;
    if (br_autoscale_spec_of(json_object_get(s, "spec"), &as) &&
        (replicas < as.min || replicas > as.max)) {
        br_errf(&err, EINVAL,
                "service '%s' scales itself between %d and %d replicas "
                "(service.autoscale); scale it within them",
                name, as.min, as.max);
        br_reply_fail(c, m, &err);
        json_decref(s);
        return;
    }
    if (br_services_scale(c, s, replicas, NULL, &err) < 0)
        br_reply_fail(c, m, &err);
    else
        br_reply_ok(c, m, json_pack("{s:I, s:i, s:i}", "id", json_integer_value(
                                                             json_object_get(s, "id")),
                                  "replicas", replicas, "was", was));
    json_decref(s);
}
