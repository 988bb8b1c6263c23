/* api_agent.c - what agents send: join with a token, hello after each connect,
 * heartbeats with their tasks, job starts and exits, and log output. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api.h"
#include "gpulive.h"
#include "devenv.h"
#include "jobs.h"
#include "jobtab.h"
#include "manifest_check.h"
#include "nodelife.h"
#include "overlaylog.h"
#include "overlaynet.h"
#include "relay.h"
#include "replicas.h"
#include "stages.h"
#include "token.h"
#include "util.h"
#include "netmap.h"
#include "probeset.h"
#include "watchers.h"
#include "stats.h"

void br_api_node_join(br_coord_t *c, br_msg_t *m, const br_caller_t *who)
{
    const char *token, *name, *key;
    json_t *labels;
    double cost;
    br_err_t err;
    br_token_t t;
    char hash[BR_TOKEN_HASH_HEX + 1], id[BR_TOKEN_ID_LEN + 8], join_key[BR_KEY_LEN + 1];
    if (br_msg_unpack(m, &err, "{s:s, s:s, s:s, s:o, s:F}", "token", &token, "public_key",
                      &key, "name", &name, "labels", &labels, "cost_per_hour", &cost) < 0)
        goto fail;
    if (!br_key_valid(key)) {
        br_errf(&err, EINVAL, "public_key must be a CURVE public key (40 characters of Z85)");
        goto fail;
    }
    if (!br_valid_name(name)) {
        br_errf(&err, EINVAL, "node name '%s' must be lowercase letters, digits and '-'",
                name);
        goto fail;
    }
    if (br_token_decode(token, &t, &err) < 0)
        goto fail;
    br_token_join_keypair(t.secret, join_key, NULL);
    if (strcmp(join_key, br_msg_user(m)) != 0) { /* joins come over the token's own key */
        br_errf(&err, EACCES, "token not recognised");
        goto fail;
    }
    br_token_hash(t.secret, hash, NULL);
    if (br_nodes_find(c->nodes, name)) {
        br_errf(&err, EEXIST,
                "node name '%s' is taken: give this node another with --name NAME (or "
                "'bramble node remove %s' first if it is the same machine)",
                name, name);
        goto fail;
    }
    if (br_store_token_use(c->store, hash, br_now_ms(), id, &err) < 0 ||
        br_store_key_add(c->store, key, BR_PRINCIPAL_NODE, name, &err) < 0)
        goto fail;
    json_t *info = json_pack("{s:s, s:s, s:s, s:O, s:f, s:I, s:s}", "name", name, "pubkey",
                             key, "state", "lost", "labels", labels,
                             "cost_per_hour", cost, "joined", (json_int_t)br_now_ms(),
                             "token", id);
    br_node_t *n = br_nodes_add(c->nodes, info);
    json_decref(info);
    br_node_move_t mv = {BR_NODE_LOST, "joined", BR_NODE_NO_HOOK, NULL, 0};
    if (n) { /* lost (not connected) until its agent says hello */
        br_nodes_seen(c->nodes, n, br_mono_ms());
        br_node_post(c, n, &mv, "joined with token %s", id);
    } else {
        br_coord_event(c, 0, name, "joined", "joined with token %s", id);
    }
    br_reply_ok(c, m, json_pack("{s:s}", "name", name));
    return;
fail:
    br_reply_fail(c, m, &err);
}

/* Copy what an agent reports about itself into the node's stored info. */
static void take_inventory(br_node_t *n, br_msg_t *m, json_t *inv, json_t *gpus,
                           json_t *labels, double cost, const char *advertise)
{
    const char *k;
    json_t *v;
    json_object_del(n->info, "refuses"); /* (said again at each hello, while it holds) */
    json_object_del(n->info, "container_runtime"); /* (likewise) */
    json_object_del(n->info, "streams");           /* (an agent put back older) */
    json_object_foreach(inv, k, v) {
        if (strcmp(k, "name") != 0 && strcmp(k, "pubkey") != 0 && strcmp(k, "state") != 0)
            json_object_set(n->info, k, v);
    }
    v = json_object_get(n->info, "refuses");
    if (v && (!json_is_string(v) || strlen(json_string_value(v)) > 400))
        json_object_set_new(n->info, "refuses", json_string("its agent refuses every job"));
    json_object_set(n->info, "gpus", gpus);
    json_object_set(n->info, "labels", labels);
    json_object_set_new(n->info, "cost_per_hour", json_real(cost));
    json_object_set_new(n->info, "address",
                        json_string(advertise && *advertise ? advertise
                                                            : br_msg_peer_addr(m)));
}

static br_node_t *caller_node(br_coord_t *c, br_msg_t *m, const br_caller_t *who)
{
    size_t len;
    const void *route = br_msg_route(m, &len);
    return br_nodelife_seen(c, who->name, route, len);
}

/* The node's agent made a new key pair: it is the node's key from now on, and the
 * one that sent this is refused from its next message. */
void br_api_node_key(br_coord_t *c, br_msg_t *m, const br_caller_t *who)
{
    const char *key;
    br_err_t err;
    br_node_t *n = caller_node(c, m, who);
    if (br_msg_unpack(m, &err, "{s:s}", "public_key", &key) < 0)
        goto fail;
    if (!br_key_valid(key)) {
        br_errf(&err, EINVAL, "public_key must be a CURVE public key (40 characters of Z85)");
        goto fail;
    }
    if (!n) {
        br_errf(&err, ENOENT, "no node named '%s'", who->name);
        goto fail;
    }
    if (br_store_key_add(c->store, key, BR_PRINCIPAL_NODE, n->name, &err) < 0 ||
        br_store_key_revoke_one(c->store, br_msg_user(m), &err) < 0)
        goto fail;
    if (c->relay) /* the shells and forwards its old key carried go with it */
        br_relay_cut(c->relay, 0, br_msg_user(m), "the node's key was replaced "
                                                   "(node rotate-key)");
    br_strlcpy(n->pubkey, key, sizeof(n->pubkey));
    json_object_set_new(n->info, "pubkey", json_string(key));
    json_object_set_new(n->info, "key_rotated", json_integer(br_now_ms()));
    br_node_move_t mv = {n->state, NULL, BR_NODE_NO_HOOK, NULL, 0};
    br_node_post(c, n, &mv, "node %s has a new key; the old one is revoked", n->name);
    br_reply_ok(c, m, json_object());
    return;
fail:
    br_reply_fail(c, m, &err);
}

/* A hello's or heartbeat's task list, as PROTOCOL.md section 4 has it: objects
 * with a job id, an attempt number and a state the agent knows. 0, or -1 with err
 * naming the entry. */
static int check_tasks(const char *type, const json_t *tasks, br_err_t *err)
{
    if (!json_is_array(tasks))
        return br_errf(err, EPROTO, "%s: tasks must be an array", type);
    size_t i;
    json_t *t;
    json_array_foreach(tasks, i, t) {
        const char *st = json_string_value(json_object_get(t, "state"));
        if (!json_is_object(t) || !json_is_integer(json_object_get(t, "job")) ||
            !json_is_integer(json_object_get(t, "attempt")))
            return br_errf(err, EPROTO, "%s: tasks[%zu] must be an object with an integer "
                                        "job and attempt", type, i);
        if (!st || (strcmp(st, "running") != 0 && strcmp(st, "frozen") != 0 &&
                    strcmp(st, "exited") != 0))
            return br_errf(err, EPROTO, "%s: tasks[%zu].state must be running, frozen or "
                                        "exited", type, i);
    }
    return 0;
}

void br_api_node_hello(br_coord_t *c, br_msg_t *m, const br_caller_t *who)
{
    json_t *inv, *gpus, *labels, *tasks;
    double cost;
    const char *adv = NULL;
    int probe_port = 0, replica_port = 0;
    br_err_t err = {0};
    if (br_msg_unpack(m, &err, "{s:o, s:o, s:o, s:F, s:o, s?s, s?i, s?i}", "inventory",
                      &inv, "gpus", &gpus, "labels", &labels, "cost_per_hour", &cost,
                      "tasks", &tasks, "advertise_addr", &adv, "probe_port", &probe_port,
                      "replica_port", &replica_port) < 0 ||
        !json_is_object(inv) || !json_is_array(gpus) || !json_is_object(labels) ||
        check_tasks("node.hello", tasks, &err) < 0) {
        if (!err.text[0])
            br_errf(&err, EPROTO, "node.hello: bad body");
        br_reply_fail(c, m, &err);
        return;
    }
    br_node_t *n = caller_node(c, m, who);
    if (!n) {
        br_errf(&err, ENOENT, "node '%s' is not registered", who->name);
        br_reply_fail(c, m, &err);
        return;
    }
    json_t *overlay = NULL;
    json_t *place = br_overlay_node_hello(c, n, json_object_get(inv, "overlay"),
                                          br_msg_peer_addr(m), &overlay);
    const char *was = json_string_value(json_object_get(json_object_get(n->info, "overlay"),
                                                        "error"));
    const char *bad = json_string_value(json_object_get(place, "error"));
    if (bad && (!was || strcmp(was, bad) != 0))
        br_coord_event(c, 0, n->name, "overlay", "node %s gets no overlay address: %s",
                       n->name, bad);
    json_t *host = json_incref(json_object_get(n->info, "address"));
    take_inventory(n, m, inv, gpus, labels, cost, adv);
    json_object_set_new(n->info, "overlay", place); /* (saved with what its hello said) */
    if (!host || !json_equal(host, json_object_get(n->info, "address")))
        br_overlay_log_changed(c->overlay_log, n->name); /* (it moved: its peers reach
                                                          * it elsewhere) */
    json_decref(host);
    if (probe_port > 0 && probe_port <= 65535)
        json_object_set_new(n->info, "probe_port", json_integer(probe_port));
    else
        json_object_del(n->info, "probe_port");
    br_replicas_hello(n, replica_port); /* where it serves checkpoint files */
    br_nodelife_hello(c, n);
    br_jobs_reconcile(c, n, tasks, 1);
    n->answered_at = br_mono_ms();
    json_t *answer = json_pack("{s:s, s:I, s:I, s:I, s:s, s:I}", "name", n->name,
                               "heartbeat_interval", (json_int_t)c->cfg.heartbeat_ms,
                               "node_timeout", (json_int_t)c->cfg.node_timeout_ms,
                               "fence_timeout", (json_int_t)br_jobs_fence_ms(c), "probe_key",
                               br_probeset_key(c->probeset), "probe_interval",
                               (json_int_t)BR_PROBE_INTERVAL_MS);
    if (overlay) /* its place in the overlay (overlaynet.h), and its peers */
        json_object_set_new(answer, "overlay", overlay);
    json_t *wg = br_overlay_peers_news(c, n);
    if (wg) /* its peers: all of them, after a hello */
        json_object_update(answer, wg);
    json_decref(wg);
    br_reply_ok(c, m, answer);
}

/* A heartbeat's "trees": the manifest hashes of the trees in the node's cache. */
static int check_trees(const json_t *trees, br_err_t *err)
{
    size_t i;
    json_t *h;
    if (!json_is_array(trees) || json_array_size(trees) > BR_NODE_TREES_MAX)
        return br_errf(err, EPROTO, "node.heartbeat: trees must be an array of at most %d "
                                    "manifest hashes", BR_NODE_TREES_MAX);
    json_array_foreach(trees, i, h)
        if (!json_is_string(h) || json_string_length(h) != 64)
            return br_errf(err, EPROTO, "node.heartbeat: trees[%zu] is not a manifest hash",
                           i);
    return 0;
}

/* A heartbeat's "envs": the environments the node's cache keeps (agent/envcache.h). */
static int check_envs(const json_t *envs, br_err_t *err)
{
    size_t i;
    json_t *e;
    if (!json_is_array(envs) || json_array_size(envs) > BR_NODE_ENVS_MAX)
        return br_errf(err, EPROTO, "node.heartbeat: envs must be an array of at most %d "
                                    "environments", BR_NODE_ENVS_MAX);
    json_array_foreach(envs, i, e) {
        const char *key = json_string_value(json_object_get(e, "key"));
        static const char *const nums[] = {"uid", "bytes", "built", "used"};
        int bad = !key || !*key || strlen(key) > 64 || strspn(key, "0123456789abcdef") !=
                                                             strlen(key);
        for (size_t k = 0; k < 4; k++)
            bad |= !json_is_integer(json_object_get(e, nums[k])) ||
                   json_integer_value(json_object_get(e, nums[k])) < 0;
        if (bad || !json_is_number(json_object_get(e, "seconds")))
            return br_errf(err, EPROTO, "node.heartbeat: envs[%zu] is not {\"key\" (hex), "
                                        "\"uid\", \"bytes\", \"seconds\", \"built\", "
                                        "\"used\"}", i);
    }
    return 0;
}

/* A heartbeat's optional figure key: absent, or a number of 0 or more. */
static int check_amount(const json_t *v, const char *key, br_err_t *err)
{
    if (v && (!json_is_number(v) || !(json_number_value(v) >= 0)))
        return br_errf(err, EPROTO, "node.heartbeat: %s must be a number, 0 or more", key);
    return 0;
}

void br_api_node_heartbeat(br_coord_t *c, br_msg_t *m, const br_caller_t *who)
{
    json_t *tasks, *rtt = NULL, *gpus = NULL, *disk = NULL, *cost = NULL, *watts = NULL,
           *pulling = NULL, *trees = NULL, *envs = NULL, *reach = NULL;
    double load = -1;
    br_err_t err = {0};
    int64_t began = br_mono_us();
    if (br_msg_unpack(m, &err, "{s:o, s?F, s?o, s?o, s?o, s?o, s?o, s?o, s?o, s?o, s?o}",
                      "tasks", &tasks, "load", &load, "rtt", &rtt, "gpus", &gpus, "disk",
                      &disk, "cost_per_hour", &cost, "power_watts", &watts, "pulling",
                      &pulling, "trees", &trees, "envs", &envs, "overlay_reach",
                      &reach) < 0 ||
        (reach && br_overlay_reach_check(reach, &err) < 0) ||
        (trees && check_trees(trees, &err) < 0) || (envs && check_envs(envs, &err) < 0) ||
        (pulling && br_replicas_check_pulling(pulling, &err) < 0) ||
        check_tasks("node.heartbeat", tasks, &err) < 0 || (rtt && !json_is_object(rtt)) ||
        check_amount(cost, "cost_per_hour", &err) < 0 ||
        check_amount(watts, "power_watts", &err) < 0 ||
        (gpus && br_gpulive_check(gpus, &err) < 0) ||
        (disk && br_replicas_check_disk(disk, &err) < 0)) {
        if (!err.text[0])
            br_errf(&err, EPROTO, "node.heartbeat: tasks must be an array");
        br_reply_fail(c, m, &err);
        return;
    }
    br_node_t *n = caller_node(c, m, who);
    if (!n || n->state == BR_NODE_LOST) {
        /* lost while silent: it must say hello again so its tasks are reconciled */
        br_errf(&err, ENOTCONN, "node is not connected: send node.hello");
        br_reply_fail(c, m, &err);
        return;
    }
    if (load >= 0) /* kept in memory, shown by nodes and top; not worth a write */
        json_object_set_new(n->info, "load", json_real(load));
    if (disk) /* in memory too: where replicas may go */
        json_object_set(n->info, "disk", disk);
    if (trees) { /* what its cache holds: where a job's data sets are (scheduler.h) */
        json_t *held = json_object();
        size_t i;
        json_t *h;
        json_array_foreach(trees, i, h) {
            json_object_set_new(held, json_string_value(h), json_true());
            br_stages_held(c->stages, n->name, json_string_value(h), br_mono_ms());
        }
        json_object_set_new(n->info, "trees", held);
    }
    if (envs) /* what its setups built (node show), in memory */
        json_object_set(n->info, "envs", envs);
    if (pulling) { /* how far a copy of a checkpoint, or a job's code, is: job show */
        br_replicas_progress(c, n, pulling);
        br_api_code_progress(c, n, pulling);
    }
    if (cost) /* in memory: the rate now, fixed part and electricity (docs/cli.md) */
        json_object_set_new(n->info, "cost_per_hour", json_real(json_number_value(cost)));
    if (watts)
        json_object_set_new(n->info, "power_watts", json_real(json_number_value(watts)));
    else if (cost) /* they come together: the agent no longer knows the draw */
        json_object_del(n->info, "power_watts");
    char fault[200];
    int took = gpus ? br_gpulive_take(n, gpus, fault, sizeof(fault)) : 0; /* in memory */
    if (took & BR_GPULIVE_ROSE) /* more VRAM to spare */
        br_coord_changed(c);
    if (took & BR_GPULIVE_FAULT)
        br_nodelife_unhealthy(c, n, fault);
    if (rtt) {
        json_t *ms = json_object_get(rtt, "coordinator"); /* the heartbeat before this */
        if (json_is_number(ms) && json_number_value(ms) >= 0)
            br_stats_observe(c->stats, BR_STAT_HEARTBEAT_RTT, json_number_value(ms) / 1000.0);
        br_netmap_report(c->netmap, n->name, rtt);
    }
    if (reach) /* which overlay peers it reached (overlaynet.h) */
        br_overlay_reach(c, n, reach);
    br_overlay_seen_from(c, n, br_msg_peer_addr(m)); /* (it may have moved) */
    br_nodelife_heard(c, n);
    br_jobs_reconcile(c, n, tasks, 0);
    /* the nodes to probe (probeset.h) and its overlay peers (overlaynet.h), when
     * they changed since its agent heard */
    int64_t now = br_mono_ms();
    json_t *peers = br_probeset_news(c->probeset, c->nodes, n, now);
    json_t *wg = br_overlay_peers_news(c, n);
    if (peers || wg || br_nodelife_answer_due(c, n, now)) { /* (else left unanswered) */
        json_t *body = json_object();
        if (peers) /* the nodes to probe changed */
            json_object_set_new(body, "peers", peers);
        if (wg) /* its overlay peers changed (overlaynet.h) */
            json_object_update(body, wg);
        json_decref(wg);
        n->answered_at = now;
        br_reply_ok(c, m, body);
    }
    br_stats_observe(c->stats, BR_STAT_HEARTBEAT_HANDLING,
                     (double)(br_mono_us() - began) / 1e6);
}

/* Rank 0's agent took a newer complete checkpoint than its order named, one the
 * previous attempt wrote after its last report (docs/checkpoints.md, "Nothing newer
 * is lost"): the job's events say so, and the gang's other ranks, whose orders go
 * once this start is heard, resume from it too. The agent's own report of it
 * (job.checkpoint) counts it. */
static void resumed_newer(br_coord_t *c, br_node_t *n, int64_t id, int attempt,
                          const char *path, int64_t step)
{
    br_job_t *job = br_jobtab_find(c->jobs, id);
    if (!job || job->attempt != attempt || !br_job_state_live(job->state) ||
        br_job_rank_on(job, n->name, 1) != 0)
        return; /* not current, or not its rank 0: what it runs does not count */
    json_t *latest = br_store_checkpoint_latest(c->store, id, NULL);
    int64_t counted = json_is_object(latest)
                          ? json_integer_value(json_object_get(latest, "step"))
                          : -1;
    json_decref(latest);
    if (step <= counted) {
        fprintf(stderr, "brambled: job %lld attempt %d: %s says it resumes from step %lld, "
                        "not newer than the newest counted (%lld): ignored\n",
                (long long)id, attempt, n->name, (long long)step, (long long)counted);
        return;
    }
    if (br_job_set_resume(job, path, step) < 0)
        return;
    char was[32] = "none";
    if (counted >= 0)
        snprintf(was, sizeof(was), "step %lld", (long long)counted);
    br_coord_event(c, id, n->name, br_job_state_name(job->state),
                   "attempt %d resumes from %s (step %lld), newer than the newest counted "
                   "(%s): written by the previous attempt after its last report",
                   attempt, path, (long long)step, was);
}

/* Whether node n was given the job's attempt; when not, m (its job.started or
 * job.exited) is refused with EPERM and logged: such a node writes nothing into
 * the job. */
static int given(br_coord_t *c, br_msg_t *m, const br_node_t *n, json_int_t job, int attempt)
{
    if (br_store_attempt_node_ran(c->store, job, attempt, n->name, NULL) == 1)
        return 1;
    br_err_t err;
    fprintf(stderr, "brambled: %s from %s for job %lld attempt %d: not its attempt, "
                    "refused\n", br_msg_type(m), n->name, (long long)job, attempt);
    br_errf(&err, EPERM, "job %lld attempt %d never ran on %s", (long long)job, attempt,
            n->name);
    br_reply_fail(c, m, &err);
    return 0;
}

void br_api_job_outputs(br_coord_t *c, br_msg_t *m, const br_caller_t *who)
{
    json_int_t id;
    int attempt;
    json_t *listing, *summary, *job = NULL, *full = NULL;
    br_err_t err;
    if (br_msg_unpack(m, &err, "{s:I, s:i, s:o, s:o}", "job", &id, "attempt", &attempt,
                      "listing", &listing, "manifest", &summary) < 0)
        goto fail;
    br_node_t *n = caller_node(c, m, who);
    if (!n) {
        br_errf(&err, ENOENT, "no node named '%s'", who->name);
        goto fail;
    }
    if (!given(c, m, n, id, attempt))
        return; /* (answered) */
    if (!(job = br_store_job_get(c->store, id, &err)))
        goto fail;
    /* the owner's: within their --user-store-quota, held in their name */
    const char *owner = json_string_value(json_object_get(job, "owner"));
    br_caller_t as = {BR_PRINCIPAL_ADMIN, "", json_integer_value(json_object_get(job, "owner_id"))};
    int64_t uid = 0;
    if (owner && br_store_principal_id(c->store, BR_PRINCIPAL_USER, owner, &uid, NULL) == 0 &&
        uid == as.id)
        as.kind = BR_PRINCIPAL_USER;
    br_strlcpy(as.name, owner ? owner : "", sizeof(as.name));
    /* (sent by the node, which runs the owner's job: its files count as the node's) */
    if (!(full = br_api_uploaded_tree(c, &as, who, listing, summary, &err)) ||
        br_store_output_add(c->store, id, attempt, n->name, full, listing, as.id, &err) < 0) {
        if (err.errnum != ENOMEM) /* the owner hears why */
            br_coord_event(c, id, n->name, json_string_value(json_object_get(job, "state")),
                           "the outputs attempt %d left on %s are not kept: %s", attempt,
                           n->name, err.text);
        goto fail;
    }
    char sz[32];
    br_coord_event(c, id, n->name, json_string_value(json_object_get(job, "state")),
                   "attempt %d left %lld output file(s) on %s, %s, kept", attempt,
                   (long long)json_integer_value(json_object_get(full, "files")), n->name,
                   br_format_size((uint64_t)json_integer_value(json_object_get(full, "bytes")),
                                  sz, sizeof(sz)));
    json_decref(full);
    json_decref(job);
    br_reply_ok(c, m, json_object());
    return;
fail:
    json_decref(full);
    json_decref(job);
    br_reply_fail(c, m, &err);
}

/* The event that says where a rank's trees (code, data sets) came from, and the
 * job's trees counted as held by n from now. All 0: they were in n's cache
 * (not said again for a gang's rank whose fetch was said already: prefetched). */
static void trees_event(br_coord_t *c, br_node_t *n, json_int_t job, int attempt,
                        json_int_t received, json_int_t deduped, double seconds,
                        const json_t *peers, int prefetch)
{
    char r[32], d[32];
    br_job_t *j = br_jobtab_find(c->jobs, job);
    int has_code = j && json_is_object(json_object_get(j->spec, "code"));
    int has_data = j && json_object_size(json_object_get(j->spec, "data")) > 0;
    json_t *image = j ? br_jobs_image_variant(j, n) : NULL;
    if (has_data) /* the node holds them now: others may read them there */
        br_node_trees_add(n, json_object_get(j->spec, "data"));
    if (image) {
        json_t *one = json_pack("{s:O}", "image", image);
        br_node_trees_add(n, one);
        json_decref(one);
    }
    if (has_code) { /* (its code too: a gang's other ranks read it there) */
        json_t *one = json_pack("{s:O}", "code", json_object_get(j->spec, "code"));
        br_node_trees_add(n, one);
        json_decref(one);
    }
    char what[64];
    snprintf(what, sizeof(what), "its %s%s%s%s%s", has_code ? "code" : "",
             has_code && (has_data || image) ? (has_data && image ? ", " : " and ") : "",
             has_data ? "data sets" : "", has_data && image ? " and " : "",
             image ? "image" : "");
    br_format_size((uint64_t)received, r, sizeof(r));
    br_format_size((uint64_t)(deduped > 0 ? deduped : 0), d, sizeof(d));
    int rank = j ? br_job_rank_on(j, n->name, 1) : -1;
    if (received == 0 && deduped == 0 && seconds == 0) {
        if (prefetch || !j || !br_jobs_prefetched(j, rank))
            br_coord_event(c, job, n->name, "starting", "attempt %d: %s %s in %s's cache",
                           attempt, what, has_data || (has_code && image) ? "were" : "was",
                           n->name);
        return;
    }
    char src[200] = "";
    size_t i;
    json_t *p;
    json_array_foreach(json_is_array(peers) ? peers : NULL, i, p)
        if (json_is_string(p) && strlen(src) + json_string_length(p) + 8 < sizeof(src))
            snprintf(src + strlen(src), sizeof(src) - strlen(src), "%s%s", i ? ", " : " from ",
                     json_string_value(p));
    /* (its code staged there while it was uploaded: most of it came before the job) */
    const char *stage = has_code ? br_stages_node_of(c->stages, json_string_value(json_object_get(
                                       json_object_get(j->spec, "code"), "hash")))
                                 : NULL;
    int staged = stage && strcmp(stage, n->name) == 0;
    br_coord_event(c, job, n->name, "starting", "attempt %d: %s fetched to %s%s in %.1f s%s: "
                   "%s sent, %s found there", attempt, what, n->name, src, seconds,
                   staged ? ", most of it as it was uploaded" : "", r, d);
}

void br_api_job_fetched(br_coord_t *c, br_msg_t *m, const br_caller_t *who)
{
    json_int_t job, received = 0, deduped = 0;
    int attempt;
    double seconds = 0;
    json_t *peers = NULL;
    br_err_t err;
    if (br_msg_unpack(m, &err, "{s:I, s:i, s:{s:I, s:I, s:F, s?o}}", "job", &job, "attempt",
                      &attempt, "code", "received", &received, "deduped", &deduped, "seconds",
                      &seconds, "from", &peers) < 0) {
        br_reply_fail(c, m, &err);
        return;
    }
    br_node_t *n = caller_node(c, m, who);
    if (n && !given(c, m, n, job, attempt))
        return; /* (answered) */
    if (n) {
        trees_event(c, n, job, attempt, received, deduped, seconds, peers, 1);
        br_jobs_fetched(c, job, attempt, n);
    }
    br_reply_ok(c, m, json_object());
}

void br_api_job_started(br_coord_t *c, br_msg_t *m, const br_caller_t *who)
{
    json_int_t job, pid, step = -1;
    int attempt, port = 0;
    const char *path = NULL;
    json_int_t received = -1, deduped = 0;
    double seconds = 0;
    json_t *peers = NULL; /* the nodes its trees were read from */
    br_err_t err;
    if (br_msg_unpack(m, &err, "{s:I, s:i, s:I, s?i, s?{s:s, s:I}, s?{s:I, s:I, s:F, s?o}}",
                      "job", &job, "attempt", &attempt, "pid", &pid, "port", &port, "resumed",
                      "path", &path, "step", &step, "code", "received", &received, "deduped",
                      &deduped, "seconds", &seconds, "from", &peers) < 0) {
        br_reply_fail(c, m, &err);
        return;
    }
    if (port < 0 || port > 65535) {
        br_errf(&err, EINVAL, "job.started: port %d is not a TCP port", port);
        br_reply_fail(c, m, &err);
        return;
    }
    if (path && (path[0] != '/' || strlen(path) > 4096 || step < 0)) {
        br_errf(&err, EINVAL, "job.started: resumed needs an absolute path (at most 4096 "
                              "bytes) and a step of 0 or more");
        br_reply_fail(c, m, &err);
        return;
    }
    br_node_t *n = caller_node(c, m, who);
    if (n && !given(c, m, n, job, attempt))
        return; /* (answered) */
    if (n && path) /* before the start: it sends the other ranks' orders */
        resumed_newer(c, n, job, attempt, path, step);
    if (n && received >= 0) /* where its code and data sets came from */
        trees_event(c, n, job, attempt, received, deduped, seconds, peers, 0);
    if (n)
        br_jobs_started(c, job, attempt, n, port);
    br_reply_ok(c, m, json_object());
}

void br_api_job_exited(br_coord_t *c, br_msg_t *m, const br_caller_t *who)
{
    json_int_t job;
    int attempt;
    json_t *code, *sig;
    const char *reason, *fault = NULL;
    json_int_t lost = 0;
    br_err_t err;
    if (br_msg_unpack(m, &err, "{s:I, s:i, s:o, s:o, s:s, s?s, s?I}", "job", &job, "attempt",
                      &attempt, "exit_code", &code, "signal", &sig, "reason", &reason,
                      "fault", &fault, "log_dropped", &lost) < 0) {
        br_reply_fail(c, m, &err);
        return;
    }
    br_node_t *n = caller_node(c, m, who);
    if (n && !given(c, m, n, job, attempt))
        return; /* (answered) */
    if (n)
        br_jobs_log_lost(c, job, attempt, n->name, lost);
    if (n && br_store_attempt_exited(c->store, job, attempt, n->name, NULL) == 0) {
        br_reply_ok(c, m, json_object()); /* a resend: taken already */
        return;
    }
    if (n && fault && strcmp(fault, "node_full") == 0)
        br_jobs_node_full(c, job, attempt, n, reason);
    else if (n && fault &&
        (strcmp(fault, "checkpoint_not_visible") == 0 || strcmp(fault, "port_busy") == 0 ||
         strcmp(fault, "job_user") == 0))
        br_jobs_not_here(c, job, attempt, n, reason);
    else if (n && fault && strcmp(fault, "image") == 0)
        br_jobs_image_failed(c, job, attempt, n, reason);
    else if (n && fault && strcmp(fault, "hung") == 0) {
        br_stats_hung(c->stats);
        br_jobs_hung(c, job, attempt, n,
                     json_is_integer(code) ? (int)json_integer_value(code) : -1,
                     json_is_integer(sig) ? (int)json_integer_value(sig) : -1, reason);
    } else if (n)
        br_jobs_exited(c, job, attempt, n,
                       json_is_integer(code) ? (int)json_integer_value(code) : -1,
                       json_is_integer(sig) ? (int)json_integer_value(sig) : -1, reason);
    br_reply_ok(c, m, json_object());
}

/* 64 lowercase hex digits: a BLAKE2b-256 hash. */
static int hash_hex(const char *s)
{
    return s && strlen(s) == 64 && strspn(s, "0123456789abcdef") == 64;
}

/* A manifest entry's path: relative, no empty, "." or ".." component. */
static int safe_relpath(const char *p)
{
    if (!*p || *p == '/')
        return 0;
    for (const char *c = p; *c;) {
        size_t n = strcspn(c, "/");
        if (n == 0 || (n == 1 && c[0] == '.') || (n == 2 && c[0] == '.' && c[1] == '.'))
            return 0;
        c += n;
        if (*c == '/' && !*++c)
            return 0; /* a trailing '/' */
    }
    return 1;
}

/* Checked strictly (agent/manifest.h builds it): copies of the checkpoint will be
 * verified and restored by it. */
int br_api_check_manifest(const json_t *mf, br_err_t *err)
{
    const char *hash, *root;
    json_int_t files, bytes;
    json_t *entries, *e;
    int truncated = 0;
    json_error_t je;
    json_t *listing = NULL;
    if (json_unpack_ex((json_t *)mf, &je, JSON_STRICT, "{s:s, s:s, s:I, s:I, s:o, s?b, s?o}",
                       "hash", &hash, "root", &root, "files", &files, "bytes", &bytes,
                       "entries", &entries, "truncated", &truncated, "listing",
                       &listing) < 0)
        return br_errf(err, EPROTO, "job.checkpoint: manifest: %s", je.text);
    const char *lhash;
    int64_t lsize;
    if (listing && (!truncated || br_manifest_listing(mf, &lhash, &lsize, err) < 0 ||
                    json_object_size(listing) != 2))
        return br_errf(err, EPROTO, "job.checkpoint: manifest: a bad listing (only a "
                                    "truncated manifest names one: {\"hash\", \"size\"})");
    size_t listed = json_array_size(entries);
    if (!hash_hex(hash) || (strcmp(root, "dir") != 0 && strcmp(root, "file") != 0) ||
        files < 0 || bytes < 0 || !json_is_array(entries) ||
        (json_int_t)listed > files || ((json_int_t)listed < files && !truncated) ||
        (strcmp(root, "file") == 0 && files != 1))
        return br_errf(err, EPROTO,
                       "job.checkpoint: manifest: bad hash, root, files, "
                       "bytes or entries");
    size_t i;
    json_array_foreach(entries, i, e) {
        const char *path, *fhash = NULL, *link = NULL;
        json_int_t size;
        int mode;
        if (json_unpack_ex(e, &je, JSON_STRICT, "{s:s, s:I, s:i, s?s, s?s}", "path",
                           &path, "size", &size, "mode", &mode, "hash", &fhash, "link",
                           &link) < 0)
            return br_errf(err, EPROTO, "job.checkpoint: manifest entry %zu: %s", i,
                           je.text);
        if (!safe_relpath(path) || size < 0 || mode < 0 || mode > 07777 ||
            !(fhash ? !link && hash_hex(fhash) : link != NULL))
            return br_errf(err, EPROTO,
                           "job.checkpoint: manifest entry %zu: bad path, "
                           "size, mode, hash or link",
                           i);
    }
    return 0;
}

void br_api_job_checkpoint(br_coord_t *c, br_msg_t *m, const br_caller_t *who)
{
    json_int_t job, step, size;
    int attempt;
    const char *path, *refused = NULL;
    json_t *manifest = NULL;
    double time;
    br_err_t err;
    if (br_msg_unpack(m, &err, "{s:I, s:i, s:s, s:I, s:I, s:F, s?o, s?s}", "job", &job,
                      "attempt", &attempt, "path", &path, "step", &step, "size", &size,
                      "time", &time, "manifest", &manifest, "refused", &refused) < 0 ||
        (manifest && br_api_check_manifest(manifest, &err) < 0)) {
        br_reply_fail(c, m, &err);
        return;
    }
    br_node_t *n = caller_node(c, m, who);
    if (!n ||
        br_jobs_checkpoint(c, job, attempt, n, path, step, size,
                           (int64_t)(time * 1000.0), manifest, refused, &err) < 0) {
        if (!n)
            br_errf(&err, ENOENT, "node '%s' is not registered", who->name);
        br_reply_fail(c, m, &err);
        return;
    }
    br_reply_ok(c, m, json_object());
}

/* A chunk of output: answered {} once stored (or seen before), so that the agent
 * keeps it until then; a store that cannot take it (the disk is full) refuses it,
 * and the agent sends it again. An agent that predates the answer sends events. */
void br_api_job_log(br_coord_t *c, br_msg_t *m, const br_caller_t *who)
{
    json_int_t job, seq;
    int attempt, rank, stream;
    br_err_t err;
    size_t len;
    const void *data = br_msg_data(m, &len);
    if (br_msg_unpack(m, &err, "{s:I, s:i, s:i, s:i, s:I}", "job", &job, "attempt",
                      &attempt, "rank", &rank, "stream", &stream, "seq", &seq) < 0 ||
        !data || (stream != 1 && stream != 2)) {
        fprintf(stderr, "brambled: bad job.log from %s\n", who->name);
        if (!data || (stream != 1 && stream != 2))
            br_errf(&err, EPROTO, "job.log: %s", !data ? "no data frame" : "stream is 1 or 2");
        br_reply_fail(c, m, &err);
        return;
    }
    if (!br_jobs_log_allowed(c, job, attempt, who->name)) {
        fprintf(stderr, "brambled: job.log from %s for job %lld attempt %d: not its "
                        "attempt, dropped\n",
                who->name, (long long)job, attempt);
        br_errf(&err, EPERM, "job.log: job %lld attempt %d never ran on %s", (long long)job,
                attempt, who->name);
        br_reply_fail(c, m, &err);
        return;
    }
    if (br_store_log_add(c->store, job, attempt, rank, stream, seq, br_now_ms(), data, len,
                         &err) < 0 ||
        br_store_log_cap(c->store, job, c->cfg.log_max_per_job, &err) < 0) {
        fprintf(stderr, "brambled: log of job %lld not stored: %s\n", (long long)job,
                err.text);
        br_reply_fail(c, m, &err);
        return;
    }
    if (br_watchers_count(c->watchers))
        br_coord_news(c, job, 1);
    br_devenv_touch(c, job); /* (output is use: a dev environment is not idle) */
    br_reply_ok(c, m, json_object());
}
