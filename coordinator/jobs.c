/* jobs.c - job life on the coordinator: place, start, exit, cancel, node loss. */
#include "jobs.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "ckptdir.h"
#include "services.h"
#include "util.h"

static const char *const current_states[] = {"starting", "running", NULL};

static void update(br_coord_t *c, int64_t id, json_t *fields)
{
    br_err_t err;
    if (br_store_job_update(c->store, id, fields, &err) < 0)
        fprintf(stderr, "brambled: job %lld not updated: %s\n", (long long)id, err.text);
    json_decref(fields);
}

/* --- placement bookkeeping ("assign", see jobs.h) ------------------------------ */

/* The job's rank objects (borrowed). A placement stored by an older coordinator (one
 * share object, one node) is brought to the current form in place. */
static json_t *ranks_of(json_t *job)
{
    json_t *assign = json_object_get(job, "assign");
    if (json_is_object(assign) && json_is_array(json_object_get(assign, "ranks")))
        return json_object_get(assign, "ranks");
    json_t *ranks = json_array();
    if (json_is_object(assign)) {
        json_t *r = json_deep_copy(assign);
        const char *node = json_string_value(json_array_get(json_object_get(job, "nodes"), 0));
        const char *st = json_string_value(json_object_get(job, "state"));
        json_object_set_new(r, "node", json_string(node ? node : ""));
        json_object_set_new(r, "state", json_string(st && strcmp(st, "running") == 0
                                                        ? "started"
                                                        : "placed"));
        json_array_append_new(ranks, r);
    }
    json_object_set_new(job, "assign", json_pack("{s:o, s:i}", "ranks", ranks, "port", 0));
    return ranks;
}

static int rank_count(json_t *job)
{
    return (int)json_array_size(ranks_of(job));
}

static const char *rank_state(json_t *job, int r)
{
    const char *st = json_string_value(json_object_get(json_array_get(ranks_of(job), (size_t)r),
                                                       "state"));
    return st ? st : "placed";
}

static void set_rank_state(json_t *job, int r, const char *state)
{
    json_object_set_new(json_array_get(ranks_of(job), (size_t)r), "state", json_string(state));
}

static int gang_port(json_t *job)
{
    ranks_of(job);
    return (int)json_integer_value(json_object_get(json_object_get(job, "assign"), "port"));
}

/* The rank node n runs in job, or -1. */
static int rank_on(json_t *job, const br_node_t *n)
{
    size_t i;
    json_t *r;
    json_array_foreach(ranks_of(job), i, r) {
        const char *node = json_string_value(json_object_get(r, "node"));
        if (n && node && strcmp(node, n->name) == 0)
            return (int)i;
    }
    return -1;
}

static br_node_t *rank_node(br_coord_t *c, json_t *job, int r)
{
    const char *name =
        json_string_value(json_object_get(json_array_get(ranks_of(job), (size_t)r), "node"));
    return name ? br_nodes_find(c->nodes, name) : NULL;
}

static void save_assign(br_coord_t *c, json_t *job)
{
    update(c, json_integer_value(json_object_get(job, "id")),
           json_pack("{s:O}", "assign", json_object_get(job, "assign")));
}

/* "a, b, c": the job's nodes in rank order. */
static const char *node_list(json_t *job, const char *sep, char *buf, size_t len)
{
    size_t i, off = 0;
    json_t *r;
    buf[0] = '\0';
    json_array_foreach(ranks_of(job), i, r) {
        int w = snprintf(buf + off, len - off, "%s%s", i ? sep : "",
                         json_string_value(json_object_get(r, "node")));
        if (w < 0 || (size_t)w >= len - off)
            break;
        off += (size_t)w;
    }
    return buf;
}

/* Processes per node: tasks_per_node, where "gpus" means one per GPU. */
static int tasks_per_node(json_t *spec)
{
    json_t *res = json_object_get(spec, "resources");
    json_t *t = json_object_get(res, "tasks_per_node");
    if (json_is_string(t))
        return (int)json_integer_value(json_object_get(res, "gpus"));
    return json_is_integer(t) && json_integer_value(t) > 0 ? (int)json_integer_value(t) : 1;
}

int br_jobs_world_size(json_t *spec)
{
    json_int_t nodes =
        json_integer_value(json_object_get(json_object_get(spec, "resources"), "nodes"));
    return (int)(nodes > 1 ? nodes : 1) * tasks_per_node(spec);
}

int br_jobs_restore(br_coord_t *c, br_err_t *err)
{
    json_t *jobs = br_store_job_list(c->store, current_states, 0, err);
    if (!jobs)
        return -1;
    size_t i, k;
    json_t *job, *r;
    json_array_foreach(jobs, i, job) {
        json_array_foreach(ranks_of(job), k, r) {
            if (strcmp(rank_state(job, (int)k), "done") != 0)
                br_node_hold(rank_node(c, job, (int)k), r, 1);
        }
    }
    json_decref(jobs);
    return 0;
}

int br_jobs_rehold(br_coord_t *c, br_err_t *err)
{
    for (br_node_t *n = br_nodes_first(c->nodes); n; n = n->next)
        br_node_release_all(n);
    return br_jobs_restore(c, err);
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
static json_t *job_env(br_coord_t *c, json_t *job, int r)
{
    json_t *spec = json_object_get(job, "spec");
    json_t *env = json_deep_copy(json_object_get(spec, "env"));
    if (!json_is_object(env)) {
        json_decref(env);
        env = json_object();
    }
    char gpus[512], nodes[4096];
    json_t *share = json_array_get(ranks_of(job), (size_t)r);
    json_t *g = json_object_get(share, "gpus");
    br_node_t *master = rank_node(c, job, 0);
    const char *addr = master ? json_string_value(json_object_get(master->info, "address"))
                              : NULL;
    json_t *ckpt = json_object_get(spec, "checkpoint");
    set_env(env, "BRAMBLE_JOB_ID", "%lld", (long long)json_integer_value(json_object_get(job, "id")));
    json_t *replica = json_object_get(json_object_get(job, "extra"), "replica");
    if (br_services_is_replica(job)) { /* named after its service */
        set_env(env, "BRAMBLE_JOB_NAME", "%s", json_string_value(json_object_get(spec, "name")));
        set_env(env, "BRAMBLE_REPLICA", "%lld", (long long)json_integer_value(replica));
    } else {
        set_env(env, "BRAMBLE_JOB_NAME", "%s", json_string_value(json_object_get(job, "name")));
    }
    set_env(env, "BRAMBLE_ATTEMPT", "%lld",
            (long long)json_integer_value(json_object_get(job, "attempt")));
    set_env(env, "BRAMBLE_NODE_NAME", "%s",
            json_string_value(json_object_get(share, "node")));
    set_env(env, "BRAMBLE_NODELIST", "%s", node_list(job, ",", nodes, sizeof(nodes)));
    set_env(env, "MASTER_ADDR", "%s", addr && *addr ? addr : "127.0.0.1");
    if (gang_port(job) > 0) /* else rank 0's agent chooses it */
        set_env(env, "MASTER_PORT", "%d", gang_port(job));
    set_env(env, "NNODES", "%d", rank_count(job));
    set_env(env, "NODE_RANK", "%d", r);
    set_env(env, "NPROC_PER_NODE", "%d", tasks_per_node(spec));
    set_env(env, "CUDA_VISIBLE_DEVICES", "%s",
            gpu_list(g, 0, json_array_size(g), gpus, sizeof(gpus)));
    set_env(env, "CUDA_DEVICE_ORDER", "PCI_BUS_ID"); /* NVML order = CUDA order */
    ckpt = br_ckptdir_section(spec, json_integer_value(json_object_get(job, "id")));
    set_env(env, "BRAMBLE_CHECKPOINT_DIR", "%s",
            ckpt ? json_string_value(json_object_get(ckpt, "dir")) : "");
    json_decref(ckpt); /* (the expanded copy) */
    /* the newest complete checkpoint of a current attempt (only those are stored) */
    json_t *latest = br_store_checkpoint_latest(
        c->store, json_integer_value(json_object_get(job, "id")), NULL);
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

/* The processes rank r's node starts, with their own variables: one per node (rank
 * r, nothing more), or with tasks_per_node > 1 one per task as srun does: RANK,
 * LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE and the task's own share of the GPUs. */
static json_t *rank_tasks(json_t *job, int r)
{
    int per = tasks_per_node(json_object_get(job, "spec"));
    json_t *tasks = json_array();
    if (per <= 1) {
        json_array_append_new(tasks, json_pack("{s:i, s:{}}", "rank", r, "env"));
        return tasks;
    }
    json_t *g = json_object_get(json_array_get(ranks_of(job), (size_t)r), "gpus");
    size_t each = json_array_size(g) / (size_t)per;
    for (int l = 0; l < per; l++) {
        char rank[16], local[16], world[16], lworld[16], gpus[512];
        snprintf(rank, sizeof(rank), "%d", r * per + l);
        snprintf(local, sizeof(local), "%d", l);
        snprintf(world, sizeof(world), "%d", rank_count(job) * per);
        snprintf(lworld, sizeof(lworld), "%d", per);
        gpu_list(g, (size_t)l * each, each, gpus, sizeof(gpus));
        json_array_append_new(
            tasks, json_pack("{s:i, s:{s:s, s:s, s:s, s:s, s:s}}", "rank", r * per + l, "env",
                             "RANK", rank, "LOCAL_RANK", local, "WORLD_SIZE", world,
                             "LOCAL_WORLD_SIZE", lworld, "CUDA_VISIBLE_DEVICES", gpus));
    }
    return tasks;
}

static void run_key(char *key, size_t len, int64_t id, int attempt, int r)
{
    snprintf(key, len, "%lld.%d.%d", (long long)id, attempt, r);
}

/* Send the job.run order for rank r of job's current attempt (announce: say in the
 * job's events where it resumes from). This coordinator remembers what it sent. */
static void send_run(br_coord_t *c, json_t *job, int r, int announce)
{
    int64_t id = json_integer_value(json_object_get(job, "id"));
    int attempt = (int)json_integer_value(json_object_get(job, "attempt"));
    br_node_t *n = rank_node(c, job, r);
    json_t *spec = json_object_get(job, "spec");
    json_t *workdir = json_object_get(spec, "workdir");
    json_t *ckpt = json_object_get(spec, "checkpoint");
    if (!n)
        return;
    json_t *env = job_env(c, job, r);
    const char *from = json_string_value(json_object_get(env, "BRAMBLE_RESUME_FROM"));
    if (announce && r == 0 && from && *from)
        br_coord_event(c, id, n->name, "starting", "attempt %d resumes from %s (step %s)",
                       attempt, from,
                       json_string_value(json_object_get(env, "BRAMBLE_RESUME_STEP")));
    json_t *body = json_pack("{s:I, s:i, s:s, s:i, s:s, s:O, s:o, s:o}", "job",
                             (json_int_t)id, "attempt", attempt, "name",
                             json_string_value(json_object_get(job, "name")), "rank", r,
                             "command", json_string_value(json_object_get(spec, "command")),
                             "workdir", workdir ? workdir : json_null(), "env", env,
                             "tasks", rank_tasks(job, r));
    json_t *owner_id = json_object_get(job, "owner_id");
    if (json_is_integer(owner_id)) { /* whose job: the agent runs each owner as its own uid */
        char unix_user[64];
        json_object_set(body, "owner_id", owner_id);
        if (br_store_unix_user_get(c->store, json_integer_value(owner_id), unix_user,
                                   sizeof(unix_user), NULL) == 0 && unix_user[0])
            json_object_set_new(body, "unix_user", json_string(unix_user));
    }
    if (json_is_object(ckpt) && r == 0) /* rank 0's checkpoints are the gang's */
        json_object_set_new(body, "checkpoint", br_ckptdir_section(spec, id));
    json_t *service = json_object_get(spec, "service");
    if (br_services_is_replica(job) && json_is_object(service)) /* its PORT and health */
        json_object_set_new(body, "service",
                            json_pack("{s:O, s:O, s:O, s:O}", "port",
                                      json_object_get(service, "port"), "health",
                                      json_object_get(service, "health"), "interval",
                                      json_object_get(service, "interval"), "grace",
                                      json_object_get(service, "grace")));
    br_coord_send_node(c, n, "job.run", body);
    char key[64];
    run_key(key, sizeof(key), id, attempt, r);
    json_object_set_new(c->runs_sent, key, json_true());
}

static int run_sent(br_coord_t *c, json_t *job, int r)
{
    char key[64];
    run_key(key, sizeof(key), json_integer_value(json_object_get(job, "id")),
            (int)json_integer_value(json_object_get(job, "attempt")), r);
    return json_object_get(c->runs_sent, key) != NULL;
}

/* The order for rank r has done its work (it started or ended): forget it. */
static void forget_run(br_coord_t *c, json_t *job, int r)
{
    char key[64];
    run_key(key, sizeof(key), json_integer_value(json_object_get(job, "id")),
            (int)json_integer_value(json_object_get(job, "attempt")), r);
    json_object_del(c->runs_sent, key);
}

/* The job's own bookkeeping ("extra"): restarts used, nodes excluded, placement. New ref. */
static json_t *job_extra(json_t *job)
{
    json_t *x = json_object_get(job, "extra");
    return json_is_object(x) ? json_deep_copy(x) : json_object();
}

int br_jobs_place(br_coord_t *c, json_t *job, br_node_t *const *nodes,
                  json_t *const *assign, int count, const char *how)
{
    int64_t id = json_integer_value(json_object_get(job, "id"));
    int attempt = (int)json_integer_value(json_object_get(job, "attempt"));
    json_t *names = json_array(), *ranks = json_array();
    for (int r = 0; r < count; r++) {
        json_t *share = json_deep_copy(assign[r]);
        json_object_set_new(share, "node", json_string(nodes[r]->name));
        json_object_set_new(share, "state", json_string("placed"));
        json_array_append_new(ranks, share);
        json_array_append_new(names, json_string(nodes[r]->name));
        br_err_t err;
        if (br_store_attempt_node_add(c->store, id, attempt, nodes[r]->name, &err) < 0)
            fprintf(stderr, "brambled: job %lld: %s\n", (long long)id, err.text);
    }
    json_object_set_new(job, "assign", json_pack("{s:o, s:i}", "ranks", ranks, "port", 0));
    json_object_set_new(job, "nodes", names);
    json_t *extra = job_extra(job);
    if (how && *how)
        json_object_set_new(extra, "placement", json_string(how));
    else
        json_object_del(extra, "placement");
    update(c, id, json_pack("{s:s, s:O, s:O, s:n, s:o}", "state", "starting", "nodes", names,
                            "assign", json_object_get(job, "assign"), "reason", "extra",
                            extra));
    if (attempt == 1) /* a fresh job: does its checkpoint dir hold another's steps? */
        br_ckptdir_check_shared(c, job);
    char list[1024];
    br_coord_event(c, id, nodes[0]->name, "starting", "attempt %d placed on %s%s%s%s",
                   attempt, node_list(job, ", ", list, sizeof(list)), how && *how ? " (" : "",
                   how && *how ? how : "", how && *how ? ")" : "");
    send_run(c, job, 0, 1);
    return 0;
}

int br_jobs_log_allowed(br_coord_t *c, int64_t id, int attempt, const char *node)
{
    json_t *job = br_store_job_get(c->store, id, NULL);
    json_int_t current = json_integer_value(json_object_get(job, "attempt"));
    int mine = 0;
    size_t i;
    json_t *name;
    json_array_foreach(json_object_get(job, "nodes"), i, name) {
        if (json_is_string(name) && strcmp(json_string_value(name), node) == 0)
            mine = 1;
    }
    /* the current attempt's output only from its nodes; a superseded attempt's last
     * output, shipped after a partition healed, is still worth keeping, but only
     * from a node that was given that attempt */
    int ok = job && ((attempt == current && mine) ||
                     (attempt >= 1 && attempt < current &&
                      br_store_attempt_node_ran(c->store, id, attempt, node, NULL) == 1));
    json_decref(job);
    return ok;
}

/* The job if attempt is its current attempt and it is in a current state, and (when
 * n is given) n runs one of its ranks that has not finished. */
static json_t *current_job(br_coord_t *c, int64_t id, int attempt, br_node_t *n)
{
    json_t *job = br_store_job_get(c->store, id, NULL);
    if (!job)
        return NULL;
    const char *state = json_string_value(json_object_get(job, "state"));
    int r = n ? rank_on(job, n) : 0;
    if (json_integer_value(json_object_get(job, "attempt")) != attempt ||
        (strcmp(state, "starting") != 0 && strcmp(state, "running") != 0) || r < 0 ||
        (n && strcmp(rank_state(job, r), "done") == 0)) {
        json_decref(job);
        return NULL;
    }
    return job;
}

/* The job runs (again): its wait since submission when this is its first run, its
 * recovery since a node loss when one sent it back (extra "lost_at", dropped now
 * through fields, the update that marks it running). */
static void measure_start(br_coord_t *c, json_t *job, json_t *fields)
{
    int64_t now = br_now_ms();
    json_t *extra = json_object_get(job, "extra");
    json_int_t lost = json_integer_value(json_object_get(extra, "lost_at"));
    if (json_integer_value(json_object_get(job, "started")) == 0) { /* never ran */
        json_int_t submitted = json_integer_value(json_object_get(job, "submitted"));
        br_stats_observe(c->stats, BR_STAT_QUEUE_WAIT, (double)(now - submitted) / 1000.0);
    }
    if (lost > 0) {
        json_t *x = json_deep_copy(extra);
        json_object_del(x, "lost_at");
        json_object_set_new(fields, "extra", x);
        br_stats_observe(c->stats, BR_STAT_RECOVERY, (double)(now - lost) / 1000.0);
    }
}

/* Rank r runs: once rank 0 runs, the port it chose goes to the other ranks; once
 * every rank runs, so does the job. */
static void rank_started(br_coord_t *c, json_t *job, int r, int port)
{
    int64_t id = json_integer_value(json_object_get(job, "id"));
    int attempt = (int)json_integer_value(json_object_get(job, "attempt"));
    forget_run(c, job, r);
    if (strcmp(rank_state(job, r), "placed") != 0)
        return;
    set_rank_state(job, r, "started");
    if (r == 0 && port > 0 && gang_port(job) == 0) { /* a gang's, or a replica's PORT */
        json_object_set_new(json_object_get(job, "assign"), "port", json_integer(port));
        for (int k = 1; k < rank_count(job); k++)
            send_run(c, job, k, 0);
    }
    int all = 1;
    for (int k = 0; k < rank_count(job); k++)
        all &= strcmp(rank_state(job, k), "placed") != 0;
    save_assign(c, job);
    if (all && strcmp(json_string_value(json_object_get(job, "state")), "starting") == 0) {
        char list[1024];
        json_t *fields = json_pack("{s:s, s:I}", "state", "running", "started",
                                   (json_int_t)br_now_ms());
        measure_start(c, job, fields);
        update(c, id, fields);
        br_coord_event(c, id, rank_node(c, job, 0) ? rank_node(c, job, 0)->name : NULL,
                       "running", "attempt %d running on %s", attempt,
                       node_list(job, ", ", list, sizeof(list)));
    }
}

void br_jobs_started(br_coord_t *c, int64_t id, int attempt, br_node_t *n, int port)
{
    json_t *job = current_job(c, id, attempt, n);
    if (!job)
        return;
    rank_started(c, job, rank_on(job, n), port);
    json_decref(job);
}

static int restart_allowed(json_t *job, const char *cause)
{
    json_t *restart = json_object_get(json_object_get(job, "spec"), "restart");
    json_int_t max = json_integer_value(json_object_get(restart, "max"));
    json_t *extra = job_extra(job);
    json_int_t used = json_integer_value(json_object_get(extra, "restarts"));
    json_decref(extra);
    size_t i;
    json_t *on;
    json_array_foreach(json_object_get(restart, "on"), i, on) {
        if (json_is_string(on) && strcmp(json_string_value(on), cause) == 0)
            return used < max;
    }
    return 0;
}

/* Back to pending as the next attempt; counts a restart unless it was the node's
 * fault that the attempt could not run (then the node is excluded instead). fresh:
 * place it only on nodes heard from after now (see scheduler.h). */
static void requeue(br_coord_t *c, json_t *job, const char *reason, json_t *ec,
                    json_t *sig, const char *exclude, int fresh, int64_t delay_ms)
{
    int64_t id = json_integer_value(json_object_get(job, "id"));
    int attempt = (int)json_integer_value(json_object_get(job, "attempt"));
    json_t *extra = job_extra(job);
    if (delay_ms > 0) /* not placed again before then (scheduler.c) */
        json_object_set_new(extra, "not_before", json_integer(br_now_ms() + delay_ms));
    else
        json_object_del(extra, "not_before");
    if (fresh)
        json_object_set_new(extra, "fresh_after", json_integer(br_now_ms()));
    else
        json_object_del(extra, "fresh_after");
    if (exclude) {
        json_t *ex = json_object_get(extra, "exclude");
        if (!json_is_array(ex))
            json_object_set_new(extra, "exclude", ex = json_array());
        json_array_append_new(ex, json_string(exclude));
    } else {
        json_object_set_new(extra, "restarts",
                            json_integer(json_integer_value(json_object_get(extra, "restarts")) + 1));
    }
    update(c, id, json_pack("{s:s, s:i, s:[], s:n, s:o, s:o, s:s, s:o}", "state", "pending",
                            "attempt", attempt + 1, "nodes", "assign", "exit_code", ec,
                            "signal", sig, "reason", reason, "extra", extra));
    c->sched_needed = 1;
}

/* Stop every rank of job that has not finished: release what it holds and order its
 * node (all but skip, whose rank is already gone) to kill it. */
static void stop_ranks(br_coord_t *c, json_t *job, const br_node_t *skip)
{
    int64_t id = json_integer_value(json_object_get(job, "id"));
    int attempt = (int)json_integer_value(json_object_get(job, "attempt"));
    for (int r = 0; r < rank_count(job); r++) {
        forget_run(c, job, r);
        if (strcmp(rank_state(job, r), "done") == 0)
            continue;
        br_node_t *n = rank_node(c, job, r);
        br_node_hold(n, json_array_get(ranks_of(job), (size_t)r), -1);
        if (n && n != skip)
            br_coord_send_node(c, n, "job.kill",
                               json_pack("{s:I, s:i}", "job", (json_int_t)id, "attempt", attempt));
    }
}

/* Note when the job lost its node, in the extra a requeue keeps, so that the time
 * until it runs again can be measured (measure_start). A second loss before then
 * keeps the first time. */
static void mark_lost(json_t *job)
{
    json_t *x = json_object_get(job, "extra");
    if (!json_is_object(x)) {
        x = json_object();
        json_object_set_new(job, "extra", x);
    }
    if (!json_object_get(x, "lost_at"))
        json_object_set_new(x, "lost_at", json_integer(br_now_ms()));
}

/* The current attempt of job ended because of node n (cause NULL: every rank
 * completed): stop what still runs, then restart it per policy, or settle it.
 * exclude: requeue without counting a restart, never again on n. */
static void end_attempt(br_coord_t *c, json_t *job, br_node_t *n, const char *cause,
                        int exit_code, int signal, const char *reason, int exclude)
{
    int64_t id = json_integer_value(json_object_get(job, "id"));
    int attempt = (int)json_integer_value(json_object_get(job, "attempt"));
    const char *node = n ? n->name : NULL;
    char why[600];
    int others = 0;
    for (int r = 0; r < rank_count(job); r++)
        others += rank_node(c, job, r) != n && strcmp(rank_state(job, r), "done") != 0;
    if (cause && rank_count(job) > 1 && tasks_per_node(json_object_get(job, "spec")) > 1)
        /* the agent's reason names the process's rank */
        snprintf(why, sizeof(why), "on %s: %s; stopped the gang on the other %d node%s",
                 node ? node : "?", reason, others, others == 1 ? "" : "s");
    else if (cause && rank_count(job) > 1)
        snprintf(why, sizeof(why), "rank %d on %s: %s; stopped the other %d rank%s",
                 rank_on(job, n), node ? node : "?", reason, others, others == 1 ? "" : "s");
    else
        snprintf(why, sizeof(why), "%s", reason ? reason : "");
    if (cause && strcmp(cause, "node_lost") == 0)
        mark_lost(job);
    stop_ranks(c, job, n);
    json_t *ec = exit_code >= 0 ? json_integer(exit_code) : json_null();
    json_t *sig = signal >= 0 ? json_integer(signal) : json_null();
    if (br_services_is_replica(job) && !exclude) {
        /* a service runs until cancelled: its replica starts again, after a backoff
         * unless its node was lost */
        json_int_t restarts =
            json_integer_value(json_object_get(json_object_get(job, "extra"), "restarts")) + 1;
        int64_t delay = cause && strcmp(cause, "node_lost") == 0
                            ? 0
                            : br_services_backoff_ms(restarts);
        char text[700];
        snprintf(text, sizeof(text), "%s", cause ? why : "exited 0 (a service runs until "
                                                           "cancelled)");
        br_services_forget(c, id);
        requeue(c, job, text, ec, sig, NULL, 0, delay);
        br_coord_event(c, id, node, "pending", "%s; starting it again as attempt %d in %.1fs",
                       text, attempt + 1, (double)delay / 1000.0);
    } else if (!cause) {
        update(c, id, json_pack("{s:s, s:I, s:o, s:o, s:n}", "state", "completed", "ended",
                                (json_int_t)br_now_ms(), "exit_code", ec, "signal", sig,
                                "reason"));
        br_coord_event(c, id, node, "completed", "attempt %d exited 0%s", attempt,
                       rank_count(job) > 1 ? " on every rank" : "");
    } else if (exclude) {
        requeue(c, job, why, ec, sig, node, 0, 0);
        br_coord_event(c, id, node, "pending", "%s; trying another node as attempt %d", why,
                       attempt + 1);
    } else if (restart_allowed(job, cause)) {
        /* a gang's rank often fails because a peer's node just died, before that
         * node is known to be lost: restart only on nodes that speak up after it */
        requeue(c, job, why, ec, sig, NULL,
                rank_count(job) > 1 && strcmp(cause, "nonzero_exit") == 0, 0);
        br_coord_event(c, id, node, "pending", "%s; restarting as attempt %d (%s)", why,
                       attempt + 1, cause);
    } else {
        update(c, id, json_pack("{s:s, s:I, s:o, s:o, s:s}", "state", "failed", "ended",
                                (json_int_t)br_now_ms(), "exit_code", ec, "signal", sig,
                                "reason", why));
        br_coord_event(c, id, node, "failed", "%s", why);
    }
    c->sched_needed = 1;
}

void br_jobs_exited(br_coord_t *c, int64_t id, int attempt, br_node_t *n, int exit_code,
                    int signal, const char *reason)
{
    json_t *job = current_job(c, id, attempt, n);
    if (!job) {
        br_coord_event(c, id, n->name, "exited", "attempt %d ended (no longer current)",
                       attempt);
        return;
    }
    int r = rank_on(job, n);
    char why[300];
    if (reason && *reason)
        snprintf(why, sizeof(why), "%s", reason);
    else if (signal >= 0)
        snprintf(why, sizeof(why), "killed by signal %d (%s)", signal, strsignal(signal));
    else
        snprintf(why, sizeof(why), "exit code %d", exit_code);
    int ok = exit_code == 0 && signal < 0 && !(reason && *reason);
    if (!ok) {
        end_attempt(c, job, n, "nonzero_exit", exit_code, signal, why, 0);
    } else {
        /* this rank is done and frees its node; the job when every rank is */
        br_node_hold(n, json_array_get(ranks_of(job), (size_t)r), -1);
        forget_run(c, job, r);
        set_rank_state(job, r, "done");
        int left = 0;
        for (int k = 0; k < rank_count(job); k++)
            left += strcmp(rank_state(job, k), "done") != 0;
        if (left == 0) {
            end_attempt(c, job, n, NULL, 0, -1, NULL, 0);
        } else {
            save_assign(c, job);
            br_coord_event(c, id, n->name, json_string_value(json_object_get(job, "state")),
                           "rank %d exited 0 on %s; %d to go", r, n->name, left);
            c->sched_needed = 1;
        }
    }
    json_decref(job);
}

void br_jobs_not_here(br_coord_t *c, int64_t id, int attempt, br_node_t *n,
                      const char *reason)
{
    json_t *job = current_job(c, id, attempt, n);
    if (!job)
        return;
    end_attempt(c, job, n, "not_here", -1, -1, reason, 1);
    json_decref(job);
}

void br_jobs_node_full(br_coord_t *c, int64_t id, int attempt, br_node_t *n,
                       const char *reason)
{
    json_t *job = current_job(c, id, attempt, n);
    if (!job)
        return;
    char why[300];
    snprintf(why, sizeof(why), "%s refused attempt %d: %s", n->name, attempt, reason);
    stop_ranks(c, job, n);
    requeue(c, job, why, json_null(), json_null(), NULL, 0, 1000);
    br_coord_event(c, id, n->name, "pending", "%s; placing it again as attempt %d", why,
                   attempt + 1);
    c->sched_needed = 1;
    json_decref(job);
}

int br_jobs_checkpoint(br_coord_t *c, int64_t id, int attempt, br_node_t *n,
                       const char *path, int64_t step, int64_t size, int64_t time_ms,
                       const json_t *manifest, const char *refused, br_err_t *err)
{
    json_t *job = current_job(c, id, attempt, n);
    if (!job) /* a superseded attempt's checkpoint never counts */
        return br_errf(err, ESTALE,
                       "attempt %d of job %lld is not current on %s: checkpoint not counted",
                       attempt, (long long)id, n->name);
    int r = rank_on(job, n);
    char state[32];
    br_strlcpy(state, json_string_value(json_object_get(job, "state")), sizeof(state));
    json_decref(job);
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
            br_coord_event(c, id, n->name, state, "%s", why);
        return seen < 0 ? -1 : 0;
    }
    const json_t *m = manifest;
    if (json_is_true(json_object_get(m, "truncated")))
        fprintf(stderr,
                "brambled: job %lld: the manifest of checkpoint %s lists %zu of "
                "its %lld files (the rest did not fit in the report); all are "
                "in its hash\n",
                (long long)id, path, json_array_size(json_object_get(m, "entries")),
                (long long)json_integer_value(json_object_get(m, "files")));
    return br_store_checkpoint_add(c->store, id, attempt, n->name, path, step, size,
                                   time_ms, manifest, err);
}

int64_t br_jobs_fence_ms(const br_coord_t *c)
{
    return c->cfg.node_timeout_ms * 3 / 5;
}

json_t *br_jobs_cancel(br_coord_t *c, int64_t id, br_err_t *err)
{
    json_t *job = br_store_job_get(c->store, id, err);
    if (!job)
        return NULL;
    const char *state = json_string_value(json_object_get(job, "state"));
    int current = strcmp(state, "starting") == 0 || strcmp(state, "running") == 0;
    if (!current && strcmp(state, "pending") != 0) {
        /* the text first: state points into job */
        br_errf(err, EINVAL, "job %lld has already ended (%s); nothing to cancel",
                (long long)id, state);
        json_decref(job);
        return NULL;
    }
    br_node_t *n = current ? rank_node(c, job, 0) : NULL;
    if (current)
        stop_ranks(c, job, NULL);
    update(c, id, json_pack("{s:s, s:I, s:s}", "state", "cancelled", "ended",
                            (json_int_t)br_now_ms(), "reason", "cancelled by request"));
    br_services_forget(c, id);
    br_coord_event(c, id, n ? n->name : NULL, "cancelled", "cancelled by request");
    c->sched_needed = 1;
    json_decref(job);
    return br_store_job_get(c->store, id, err);
}

void br_jobs_node_gone(br_coord_t *c, br_node_t *n, const char *reason)
{
    json_t *jobs = br_store_job_list(c->store, current_states, 0, NULL);
    size_t i;
    json_t *job;
    json_array_foreach(jobs, i, job) {
        int r = rank_on(job, n);
        if (r >= 0 && strcmp(rank_state(job, r), "done") != 0)
            end_attempt(c, job, n, "node_lost", -1, -1, reason, 0);
    }
    json_decref(jobs);
}

static int by_name(const void *a, const void *b)
{
    return strcmp((*(br_node_t *const *)a)->name, (*(br_node_t *const *)b)->name);
}

/* The nodes silent for longer than the node timeout, in name order; only those and
 * the first one heard from since are looked at. NULL when there are none. */
static br_node_t **silent_nodes(br_coord_t *c, int64_t now, size_t *count)
{
    br_node_t **due = NULL, *n, *next;
    size_t len = 0, cap = 0;
    for (n = br_nodes_oldest(c->nodes); n; n = next) {
        next = n->seen_next;
        if (strcmp(n->state, "lost") == 0) { /* out of the order until heard from */
            br_nodes_unseen(c->nodes, n);
            continue;
        }
        if (now - n->last_seen_mono <= c->cfg.node_timeout_ms)
            break; /* and every node after it was heard from later */
        if (len == cap) {
            br_node_t **nd = realloc(due, (cap = cap ? 2 * cap : 16) * sizeof(*nd));
            if (!nd)
                break; /* the rest next wake */
            due = nd;
        }
        due[len++] = n;
    }
    if (len > 1)
        qsort(due, len, sizeof(*due), by_name);
    *count = len;
    return due;
}

void br_jobs_check_nodes(br_coord_t *c)
{
    int64_t now = br_mono_ms();
    if (now - c->started_mono < c->cfg.grace_ms)
        return;
    size_t count;
    br_node_t **due = silent_nodes(c, now, &count);
    for (size_t i = 0; i < count; i++) {
        br_node_t *n = due[i];
        char reason[128];
        snprintf(reason, sizeof(reason), "node %s lost (silent for %.1fs)", n->name,
                 (double)(now - n->last_seen_mono) / 1000.0);
        br_node_set_state(n, "lost");
        br_nodes_unseen(c->nodes, n);
        n->route_len = 0;
        c->peers_version++; /* no one probes it any more */
        br_netmap_forget(c->netmap, n->name);
        br_coord_save_node(c, n);
        br_coord_event(c, 0, n->name, "lost", "%s", reason);
        br_jobs_node_gone(c, n, reason);
    }
    free(due);
}

void br_jobs_check_limits(br_coord_t *c)
{
    static const char *const running[] = {"running", NULL};
    int64_t now = br_now_ms();
    json_t *jobs = br_store_job_list(c->store, running, 0, NULL);
    size_t i;
    json_t *job;
    json_array_foreach(jobs, i, job) {
        json_int_t limit =
            json_integer_value(json_object_get(json_object_get(job, "spec"), "time_limit"));
        json_int_t started = json_integer_value(json_object_get(job, "started"));
        if (limit <= 0 || !started || now - started < limit || br_services_is_replica(job))
            continue; /* (a service's replicas run until it is cancelled) */
        int64_t id = json_integer_value(json_object_get(job, "id"));
        br_node_t *n = rank_node(c, job, 0);
        char limit_text[32], reason[96];
        snprintf(reason, sizeof(reason), "time limit %s reached",
                 br_format_duration(limit, limit_text, sizeof(limit_text)));
        stop_ranks(c, job, NULL);
        update(c, id, json_pack("{s:s, s:I, s:s}", "state", "failed", "ended",
                                (json_int_t)now, "reason", reason));
        br_coord_event(c, id, n ? n->name : NULL, "failed", "%s", reason);
        c->sched_needed = 1;
    }
    json_decref(jobs);
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
    if (n->attempts == 0 && json_array_size(tasks) == 0)
        return; /* nothing current is placed here, and it runs nothing: all agree */
    json_t *jobs = br_store_job_list_node(c->store, n->name, NULL);
    size_t i;
    json_t *job;
    /* current ranks here that the node does not run any more */
    json_array_foreach(jobs, i, job) {
        int r = rank_on(job, n);
        if (r < 0 || strcmp(rank_state(job, r), "done") == 0)
            continue;
        int64_t id = json_integer_value(json_object_get(job, "id"));
        int attempt = (int)json_integer_value(json_object_get(job, "attempt"));
        const char *rs = rank_state(job, r);
        json_t *t = find_task(tasks, id, attempt);
        json_int_t lost = json_integer_value(json_object_get(t, "log_dropped"));
        if (lost > 0) /* output its agent could not ship */
            br_store_log_lost_set(c->store, id, attempt, n->name, lost, NULL);
        if (t) { /* it runs: a start report lost on the way counts as made now */
            if (strcmp(rs, "placed") == 0)
                rank_started(c, job, r, (int)json_integer_value(json_object_get(t, "port")));
            if (br_services_is_replica(job))
                br_services_health(c, job, n,
                                   json_string_value(json_object_get(t, "health"))
                                       ? json_string_value(json_object_get(t, "health"))
                                       : "healthy"); /* no check: running is healthy */
            continue;
        }
        if (strcmp(rs, "placed") == 0 && !run_sent(c, job, r)) {
            /* placed by a coordinator that died before its order left (or, for ranks
             * above 0, rank 0 has not said its port yet): send it when it can go
             * (never twice: the agent ignores an order for an attempt it runs) */
            if (r == 0 || gang_port(job) > 0)
                send_run(c, job, r, 0);
        } else if (full || strcmp(rs, "started") == 0) {
            end_attempt(c, job, n, "node_lost", -1, -1, "the agent no longer runs it", 0);
        }
    }
    /* attempts the node runs that are not current: stop them */
    json_t *t;
    json_array_foreach(tasks, i, t) {
        int64_t id = json_integer_value(json_object_get(t, "job"));
        int attempt = (int)json_integer_value(json_object_get(t, "attempt"));
        const char *st = json_string_value(json_object_get(t, "state"));
        json_t *cur = current_job(c, id, attempt, n);
        int live = st && (strcmp(st, "running") == 0 || strcmp(st, "frozen") == 0);
        if (!cur && live) /* superseded: it must not go on */
            br_coord_send_node(c, n, "job.kill",
                               json_pack("{s:I, s:i}", "job", (json_int_t)id, "attempt", attempt));
        else if (cur && st && strcmp(st, "frozen") == 0) /* still its own: go on */
            br_coord_send_node(c, n, "job.thaw",
                               json_pack("{s:I, s:i}", "job", (json_int_t)id, "attempt", attempt));
        json_decref(cur);
    }
    json_decref(jobs);
}

json_t *br_jobs_public(json_t *job)
{
    json_t *o = json_deep_copy(job);
    json_object_del(o, "spec_yaml");
    json_object_del(o, "assign");
    json_t *placement = json_object_get(json_object_get(job, "extra"), "placement");
    if (json_is_string(placement)) /* why a gang went where it went */
        json_object_set(o, "placement", placement);
    json_object_del(o, "extra");
    static const char *times[] = {"submitted", "started", "ended"};
    for (size_t i = 0; i < 3; i++)
        json_object_set_new(o, times[i], br_time_json(json_object_get(job, times[i])));
    return o;
}
