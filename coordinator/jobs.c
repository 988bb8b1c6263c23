/* jobs.c - job life on the coordinator: place, start, exit, cancel, node loss. */
#include "jobs.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "util.h"

static const char *const current_states[] = {"starting", "running", NULL};

static void update(br_coord_t *c, int64_t id, json_t *fields)
{
    br_err_t err;
    if (br_store_job_update(c->store, id, fields, &err) < 0)
        fprintf(stderr, "brambled: job %lld not updated: %s\n", (long long)id, err.text);
    json_decref(fields);
}

static void hold(br_node_t *n, json_t *assign, int sign)
{
    if (!n || !json_is_object(assign))
        return;
    n->cpus_used += sign * (int)json_integer_value(json_object_get(assign, "cpus"));
    n->memory_used +=
        (uint64_t)(sign * json_integer_value(json_object_get(assign, "memory")));
    size_t i;
    json_t *g;
    json_array_foreach(json_object_get(assign, "gpus"), i, g) {
        json_int_t idx = json_integer_value(g);
        if (idx >= 0 && idx < BR_NODE_MAX_GPUS)
            n->gpu_jobs[idx] += sign;
    }
    if (n->cpus_used < 0)
        n->cpus_used = 0;
}

static br_node_t *job_node(br_coord_t *c, json_t *job)
{
    const char *name = json_string_value(json_array_get(json_object_get(job, "nodes"), 0));
    return name ? br_nodes_find(c->nodes, name) : NULL;
}

int br_jobs_restore(br_coord_t *c, br_err_t *err)
{
    json_t *jobs = br_store_job_list(c->store, current_states, 0, err);
    if (!jobs)
        return -1;
    size_t i;
    json_t *job;
    json_array_foreach(jobs, i, job) hold(job_node(c, job), json_object_get(job, "assign"), 1);
    json_decref(jobs);
    return 0;
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

static json_t *job_env(br_coord_t *c, json_t *job, br_node_t *n, json_t *assign)
{
    json_t *spec = json_object_get(job, "spec");
    json_t *env = json_deep_copy(json_object_get(spec, "env"));
    if (!json_is_object(env)) {
        json_decref(env);
        env = json_object();
    }
    char gpus[512] = "";
    size_t i, off = 0;
    json_t *g;
    json_array_foreach(json_object_get(assign, "gpus"), i, g) off += (size_t)snprintf(
        gpus + off, sizeof(gpus) - off, "%s%lld", i ? "," : "", (long long)json_integer_value(g));
    const char *addr = json_string_value(json_object_get(n->info, "address"));
    json_t *ckpt = json_object_get(spec, "checkpoint");
    set_env(env, "BRAMBLE_JOB_ID", "%lld", (long long)json_integer_value(json_object_get(job, "id")));
    set_env(env, "BRAMBLE_JOB_NAME", "%s", json_string_value(json_object_get(job, "name")));
    set_env(env, "BRAMBLE_ATTEMPT", "%lld",
            (long long)json_integer_value(json_object_get(job, "attempt")));
    set_env(env, "BRAMBLE_NODE_NAME", "%s", n->name);
    set_env(env, "BRAMBLE_NODELIST", "%s", n->name);
    set_env(env, "MASTER_ADDR", "%s", addr && *addr ? addr : "127.0.0.1");
    set_env(env, "NNODES", "1");
    set_env(env, "NODE_RANK", "0");
    set_env(env, "NPROC_PER_NODE", "1");
    set_env(env, "CUDA_VISIBLE_DEVICES", "%s", gpus);
    set_env(env, "CUDA_DEVICE_ORDER", "PCI_BUS_ID"); /* NVML order = CUDA order */
    set_env(env, "BRAMBLE_CHECKPOINT_DIR", "%s",
            json_is_object(ckpt) ? json_string_value(json_object_get(ckpt, "dir")) : "");
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

/* Send the job.run order for job's current attempt on n (announce: say in the
 * job's events where it resumes from). This coordinator remembers what it sent. */
static void send_run(br_coord_t *c, json_t *job, br_node_t *n, json_t *assign,
                     int announce)
{
    int64_t id = json_integer_value(json_object_get(job, "id"));
    int attempt = (int)json_integer_value(json_object_get(job, "attempt"));
    json_t *spec = json_object_get(job, "spec");
    json_t *workdir = json_object_get(spec, "workdir");
    json_t *ckpt = json_object_get(spec, "checkpoint");
    json_t *env = job_env(c, job, n, assign);
    const char *from = json_string_value(json_object_get(env, "BRAMBLE_RESUME_FROM"));
    if (announce && from && *from)
        br_coord_event(c, id, n->name, "starting", "attempt %d resumes from %s (step %s)",
                       attempt, from,
                       json_string_value(json_object_get(env, "BRAMBLE_RESUME_STEP")));
    json_t *body = json_pack("{s:I, s:i, s:s, s:i, s:s, s:O, s:o}", "job", (json_int_t)id,
                             "attempt", attempt, "name",
                             json_string_value(json_object_get(job, "name")), "rank", 0,
                             "command", json_string_value(json_object_get(spec, "command")),
                             "workdir", workdir ? workdir : json_null(), "env", env);
    if (json_is_object(ckpt))
        json_object_set(body, "checkpoint", ckpt);
    br_coord_send_node(c, n, "job.run", body);
    char key[48];
    snprintf(key, sizeof(key), "%lld.%d", (long long)id, attempt);
    json_object_set_new(c->runs_sent, key, json_true());
}

/* The order has done its work (the attempt started or ended): forget it. */
static void forget_run(br_coord_t *c, int64_t id, int attempt)
{
    char key[48];
    snprintf(key, sizeof(key), "%lld.%d", (long long)id, attempt);
    json_object_del(c->runs_sent, key);
}

int br_jobs_place(br_coord_t *c, json_t *job, br_node_t *n, json_t *assign)
{
    int64_t id = json_integer_value(json_object_get(job, "id"));
    int attempt = (int)json_integer_value(json_object_get(job, "attempt"));
    update(c, id, json_pack("{s:s, s:[s], s:O, s:n}", "state", "starting", "nodes", n->name,
                            "assign", assign, "reason"));
    hold(n, assign, 1);
    br_coord_event(c, id, n->name, "starting", "attempt %d placed on %s", attempt, n->name);
    send_run(c, job, n, assign, 1);
    return 0;
}

int br_jobs_log_allowed(br_coord_t *c, int64_t id, int attempt, const char *node)
{
    json_t *job = br_store_job_get(c->store, id, NULL);
    const char *name = json_string_value(json_array_get(json_object_get(job, "nodes"), 0));
    json_int_t current = json_integer_value(json_object_get(job, "attempt"));
    /* the current attempt's output only from its node; a superseded attempt's last
     * output, shipped after a partition healed, is still worth keeping */
    int ok = job && ((attempt == current && name && strcmp(name, node) == 0) ||
                     (attempt >= 1 && attempt < current));
    json_decref(job);
    return ok;
}

/* The job if attempt is its current attempt, it is in a current state, and (when n is
 * given) it runs on n. */
static json_t *current_job(br_coord_t *c, int64_t id, int attempt, br_node_t *n)
{
    json_t *job = br_store_job_get(c->store, id, NULL);
    if (!job)
        return NULL;
    const char *state = json_string_value(json_object_get(job, "state"));
    if (json_integer_value(json_object_get(job, "attempt")) != attempt ||
        (strcmp(state, "starting") != 0 && strcmp(state, "running") != 0) ||
        (n && job_node(c, job) != n)) {
        json_decref(job);
        return NULL;
    }
    return job;
}

void br_jobs_started(br_coord_t *c, int64_t id, int attempt, br_node_t *n)
{
    json_t *job = current_job(c, id, attempt, n);
    if (!job)
        return;
    forget_run(c, id, attempt);
    if (strcmp(json_string_value(json_object_get(job, "state")), "starting") == 0) {
        update(c, id, json_pack("{s:s, s:I}", "state", "running", "started",
                                (json_int_t)br_now_ms()));
        br_coord_event(c, id, n->name, "running", "attempt %d running on %s", attempt,
                       n->name);
    }
    json_decref(job);
}

/* The job's own bookkeeping ("extra"): restarts used, nodes excluded. New ref. */
static json_t *job_extra(json_t *job)
{
    json_t *x = json_object_get(job, "extra");
    return json_is_object(x) ? json_deep_copy(x) : json_object();
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
 * fault that the attempt could not run (then the node is excluded instead). */
static void requeue(br_coord_t *c, json_t *job, const char *reason, json_t *ec,
                    json_t *sig, const char *exclude)
{
    int64_t id = json_integer_value(json_object_get(job, "id"));
    int attempt = (int)json_integer_value(json_object_get(job, "attempt"));
    json_t *extra = job_extra(job);
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

/* The current attempt of job ended: restart it per policy, or settle it. */
static void end_attempt(br_coord_t *c, json_t *job, br_node_t *n, const char *cause,
                        int exit_code, int signal, const char *reason)
{
    int64_t id = json_integer_value(json_object_get(job, "id"));
    int attempt = (int)json_integer_value(json_object_get(job, "attempt"));
    const char *node = n ? n->name : NULL;
    forget_run(c, id, attempt);
    hold(n, json_object_get(job, "assign"), -1);
    json_t *ec = exit_code >= 0 ? json_integer(exit_code) : json_null();
    json_t *sig = signal >= 0 ? json_integer(signal) : json_null();
    if (!cause) {
        update(c, id, json_pack("{s:s, s:I, s:o, s:o, s:n}", "state", "completed", "ended",
                                (json_int_t)br_now_ms(), "exit_code", ec, "signal", sig,
                                "reason"));
        br_coord_event(c, id, node, "completed", "attempt %d exited 0", attempt);
    } else if (restart_allowed(job, cause)) {
        requeue(c, job, reason, ec, sig, NULL);
        br_coord_event(c, id, node, "pending", "%s; restarting as attempt %d (%s)", reason,
                       attempt + 1, cause);
    } else {
        update(c, id, json_pack("{s:s, s:I, s:o, s:o, s:s}", "state", "failed", "ended",
                                (json_int_t)br_now_ms(), "exit_code", ec, "signal", sig,
                                "reason", reason));
        br_coord_event(c, id, node, "failed", "%s", reason);
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
    char why[300];
    if (reason && *reason)
        snprintf(why, sizeof(why), "%s", reason);
    else if (signal >= 0)
        snprintf(why, sizeof(why), "killed by signal %d (%s)", signal, strsignal(signal));
    else
        snprintf(why, sizeof(why), "exit code %d", exit_code);
    int ok = exit_code == 0 && signal < 0 && !(reason && *reason);
    end_attempt(c, job, n, ok ? NULL : "nonzero_exit", exit_code, signal, why);
    json_decref(job);
}

void br_jobs_not_here(br_coord_t *c, int64_t id, int attempt, br_node_t *n,
                      const char *reason)
{
    json_t *job = current_job(c, id, attempt, n);
    if (!job)
        return;
    hold(n, json_object_get(job, "assign"), -1);
    requeue(c, job, reason, json_null(), json_null(), n->name);
    br_coord_event(c, id, n->name, "pending", "%s; trying another node as attempt %d",
                   reason, attempt + 1);
    json_decref(job);
}

int br_jobs_checkpoint(br_coord_t *c, int64_t id, int attempt, br_node_t *n,
                       const char *path, int64_t step, int64_t size, int64_t time_ms,
                       br_err_t *err)
{
    json_t *job = current_job(c, id, attempt, n);
    if (!job) /* a superseded attempt's checkpoint never counts */
        return br_errf(err, ESTALE,
                       "attempt %d of job %lld is not current on %s: checkpoint not counted",
                       attempt, (long long)id, n->name);
    json_decref(job);
    return br_store_checkpoint_add(c->store, id, attempt, n->name, path, step, size,
                                   time_ms, err);
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
    int attempt = (int)json_integer_value(json_object_get(job, "attempt"));
    int current = strcmp(state, "starting") == 0 || strcmp(state, "running") == 0;
    if (!current && strcmp(state, "pending") != 0) {
        json_decref(job);
        br_errf(err, EINVAL, "job %lld has already ended (%s)", (long long)id, state);
        return NULL;
    }
    br_node_t *n = current ? job_node(c, job) : NULL;
    if (n) {
        hold(n, json_object_get(job, "assign"), -1);
        br_coord_send_node(c, n, "job.kill",
                           json_pack("{s:I, s:i}", "job", (json_int_t)id, "attempt", attempt));
    }
    update(c, id, json_pack("{s:s, s:I, s:s}", "state", "cancelled", "ended",
                            (json_int_t)br_now_ms(), "reason", "cancelled by request"));
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
        if (job_node(c, job) == n)
            end_attempt(c, job, n, "node_lost", -1, -1, reason);
    }
    json_decref(jobs);
}

void br_jobs_check_nodes(br_coord_t *c)
{
    int64_t now = br_mono_ms();
    if (now - c->started_mono < c->cfg.grace_ms)
        return;
    for (br_node_t *n = br_nodes_first(c->nodes); n; n = n->next) {
        if (strcmp(n->state, "lost") == 0 || now - n->last_seen_mono <= c->cfg.node_timeout_ms)
            continue;
        char reason[128];
        snprintf(reason, sizeof(reason), "node %s lost (silent for %.1fs)", n->name,
                 (double)(now - n->last_seen_mono) / 1000.0);
        br_node_set_state(n, "lost");
        n->route_len = 0;
        br_coord_save_node(c, n);
        br_coord_event(c, 0, n->name, "lost", "%s", reason);
        br_jobs_node_gone(c, n, reason);
    }
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
        if (limit <= 0 || !started || now - started < limit)
            continue;
        int64_t id = json_integer_value(json_object_get(job, "id"));
        int attempt = (int)json_integer_value(json_object_get(job, "attempt"));
        br_node_t *n = job_node(c, job);
        char limit_text[32], reason[96];
        snprintf(reason, sizeof(reason), "time limit %s reached",
                 br_format_duration(limit, limit_text, sizeof(limit_text)));
        if (n) {
            hold(n, json_object_get(job, "assign"), -1);
            br_coord_send_node(c, n, "job.kill",
                               json_pack("{s:I, s:i}", "job", (json_int_t)id, "attempt", attempt));
        }
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
    json_t *jobs = br_store_job_list(c->store, current_states, 0, NULL);
    size_t i;
    json_t *job;
    /* current attempts here that the node does not run any more */
    json_array_foreach(jobs, i, job) {
        if (job_node(c, job) != n)
            continue;
        const char *state = json_string_value(json_object_get(job, "state"));
        int64_t id = json_integer_value(json_object_get(job, "id"));
        int attempt = (int)json_integer_value(json_object_get(job, "attempt"));
        char key[48];
        snprintf(key, sizeof(key), "%lld.%d", (long long)id, attempt);
        int sent = json_object_get(c->runs_sent, key) != NULL;
        if (find_task(tasks, id, attempt))
            continue;
        if (strcmp(state, "starting") == 0 && !sent)
            /* placed by a coordinator that died before its order left: send it now
             * (never twice: the agent ignores an order for an attempt it runs) */
            send_run(c, job, n, json_object_get(job, "assign"), 0);
        else if (full || strcmp(state, "running") == 0)
            end_attempt(c, job, n, "node_lost", -1, -1, "the agent no longer runs it");
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
    json_object_del(o, "extra");
    static const char *times[] = {"submitted", "started", "ended"};
    for (size_t i = 0; i < 3; i++)
        json_object_set_new(o, times[i], br_time_json(json_object_get(job, times[i])));
    return o;
}
