/* job.c - a current job in memory: read from its store row, written back whole. */
#include "job.h"

#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>

#include "jsontext.h"
#include "spec.h"
#include "util.h"

static const char *const state_names[BR_JOB_STATES] = {
    [BR_JOB_PENDING] = "pending",     [BR_JOB_STARTING] = "starting",
    [BR_JOB_RUNNING] = "running",     [BR_JOB_COMPLETED] = "completed",
    [BR_JOB_FAILED] = "failed",       [BR_JOB_CANCELLED] = "cancelled",
};
static const char *const rank_names[] = {"placed", "started", "done"};

const char *br_job_state_name(br_job_state_t s)
{
    return (unsigned)s < BR_JOB_STATES ? state_names[s] : "unknown";
}

int br_job_state_parse(const char *name)
{
    for (int i = 0; name && i < BR_JOB_STATES; i++)
        if (strcmp(name, state_names[i]) == 0)
            return i;
    return -1;
}

int br_job_state_live(br_job_state_t s)
{
    return s == BR_JOB_STARTING || s == BR_JOB_RUNNING;
}

int br_job_state_ended(br_job_state_t s)
{
    return s == BR_JOB_COMPLETED || s == BR_JOB_FAILED || s == BR_JOB_CANCELLED;
}

#define TO(s) (1u << (s))
static const unsigned moves[BR_JOB_STATES] = {
    [BR_JOB_PENDING] = TO(BR_JOB_STARTING) | TO(BR_JOB_FAILED) | TO(BR_JOB_CANCELLED),
    [BR_JOB_STARTING] = TO(BR_JOB_RUNNING) | TO(BR_JOB_PENDING) | TO(BR_JOB_COMPLETED) |
                        TO(BR_JOB_FAILED) | TO(BR_JOB_CANCELLED),
    [BR_JOB_RUNNING] = TO(BR_JOB_PENDING) | TO(BR_JOB_COMPLETED) | TO(BR_JOB_FAILED) |
                       TO(BR_JOB_CANCELLED),
};

int br_job_state_move_ok(br_job_state_t from, br_job_state_t to, int runs_nothing)
{
    if ((unsigned)from >= BR_JOB_STATES || (unsigned)to >= BR_JOB_STATES)
        return 0;
    if (from == BR_JOB_PENDING && to == BR_JOB_RUNNING)
        return runs_nothing;
    return (moves[from] & TO(to)) != 0;
}

static int64_t int_or(const json_t *o, const char *key, int64_t dflt)
{
    json_t *v = json_object_get(o, key);
    return json_is_integer(v) ? (int64_t)json_integer_value(v) : dflt;
}

static const char *str_or(const json_t *o, const char *key)
{
    const char *v = json_string_value(json_object_get(o, key));
    return v ? v : "";
}

static char *dup_or_null(const char *s)
{
    return s ? strdup(s) : NULL;
}

static void clear_ranks(br_job_t *job)
{
    for (int r = 0; r < job->nranks; r++)
        json_decref(job->ranks[r].share);
    free(job->ranks);
    job->ranks = NULL;
    job->nranks = 0;
}

int br_job_set_ranks(br_job_t *job, const char *const *nodes, json_t *const *shares,
                     int count)
{
    br_rank_t *ranks = count > 0 ? calloc((size_t)count, sizeof(*ranks)) : NULL;
    if (count > 0 && !ranks)
        return -1;
    for (int r = 0; r < count; r++) {
        br_strlcpy(ranks[r].node, nodes[r] ? nodes[r] : "", sizeof(ranks[r].node));
        ranks[r].share = json_deep_copy(shares[r]);
        if (!ranks[r].share)
            ranks[r].share = json_object();
        json_object_del(ranks[r].share, "node"); /* (the store's form carries them) */
        json_object_del(ranks[r].share, "state");
        ranks[r].state = BR_RANK_PLACED;
        ranks[r].job = job;
        ranks[r].index = r;
    }
    clear_ranks(job);
    job->ranks = ranks;
    job->nranks = count;
    job->port = 0;
    return 0;
}

/* The placement of row ({"ranks": [...], "port"}; null when it has none). */
static int read_assign(br_job_t *job, const json_t *row)
{
    json_t *assign = json_object_get(row, "assign");
    json_t *ranks = json_object_get(assign, "ranks");
    size_t n = json_array_size(ranks);
    const char **nodes = calloc(n ? n : 1, sizeof(*nodes));
    json_t **shares = calloc(n ? n : 1, sizeof(*shares));
    int rc = nodes && shares ? 0 : -1;
    for (size_t r = 0; rc == 0 && r < n; r++) {
        shares[r] = json_array_get(ranks, r);
        nodes[r] = json_string_value(json_object_get(shares[r], "node"));
    }
    if (rc == 0)
        rc = br_job_set_ranks(job, nodes, shares, (int)n);
    for (size_t r = 0; rc == 0 && r < n; r++) {
        const char *st = json_string_value(json_object_get(shares[r], "state"));
        job->ranks[r].state = st && strcmp(st, "done") == 0      ? BR_RANK_DONE
                              : st && strcmp(st, "started") == 0 ? BR_RANK_STARTED
                                                                 : BR_RANK_PLACED;
    }
    if (rc == 0)
        job->port = (int)int_or(assign, "port", 0);
    free(nodes);
    free(shares);
    return rc;
}

static void read_bookkeeping(br_job_t *job, const json_t *row)
{
    job->restarts = (int)int_or(row, "restarts", 0);
    job->not_before = int_or(row, "not_before", 0);
    job->fresh_after = int_or(row, "fresh_after", 0);
    job->lost_at = int_or(row, "lost_at", 0);
    job->service = int_or(row, "service", 0);
    job->replica = (int)int_or(row, "replica", 0);
    job->replicas = (int)int_or(row, "replicas", -1);
    job->gpu_ms = int_or(row, "gpu_ms", 0);
    job->cpu_ms = int_or(row, "cpu_ms", 0);
    job->cost_micros = int_or(row, "cost_micros", 0);
    job->charged = int_or(row, "charged", 0);
    job->placement = dup_or_null(json_string_value(json_object_get(row, "placement")));
    size_t i;
    json_t *e;
    json_array_foreach(json_object_get(row, "exclude"), i, e) {
        if (json_is_string(e))
            br_job_exclude(job, json_string_value(e));
    }
}

br_job_t *br_job_from_row(const json_t *row, br_err_t *err)
{
    return br_job_from_row_id(row, int_or(row, "id", 0), err);
}

br_job_t *br_job_from_row_id(const json_t *row, int64_t id, br_err_t *err)
{
    br_job_t *job = calloc(1, sizeof(*job));
    if (!job)
        return br_errp(err, ENOMEM, "job: out of memory");
    const char *state = json_string_value(json_object_get(row, "state"));
    int s = br_job_state_parse(state);
    json_t *spec = json_object_get(row, "spec");
    job->id = id;
    job->held.rank = -1;
    if (s < 0 || job->id <= 0 || !json_is_object(spec)) {
        const char *what = s < 0 ? "a known state" : job->id <= 0 ? "an id" : "a spec";
        free(job);
        return br_errp(err, EINVAL, "job %lld: a stored row without %s",
                       (long long)id, what);
    }
    job->state = (br_job_state_t)s;
    job->name = strdup(str_or(row, "name"));
    job->owner = strdup(str_or(row, "owner"));
    job->owner_id = int_or(row, "owner_id", 0);
    br_strlcpy(job->kind, str_or(row, "kind"), sizeof(job->kind));
    job->attempt = (int)int_or(row, "attempt", 1);
    job->spec = json_incref((json_t *)spec);
    job->submitted = int_or(row, "submitted", 0);
    job->started = int_or(row, "started", 0);
    job->ended = int_or(row, "ended", 0);
    job->exit_code = (int)int_or(row, "exit_code", -1);
    job->signal = (int)int_or(row, "signal", -1);
    job->reason = dup_or_null(json_string_value(json_object_get(row, "reason")));
    job->priority = (int)int_or(spec, "priority", 0);
    job->time_limit = int_or(spec, "time_limit", 0);
    job->preemptible = json_is_true(json_object_get(spec, "preemptible"));
    json_t *pre = json_object_get(spec, "preempt");
    job->preempt_signal = (int)int_or(pre, "signal", SIGUSR1);
    job->preempt_grace = int_or(pre, "grace", 120000);
    json_t *res = json_object_get(spec, "resources");
    if (json_is_string(json_object_get(spec, "image"))) {
        /* where it may go hangs on its image too: nodes that run containers, of the
         * architectures of its loaded image's variants */
        json_t *archs = json_array(), *v;
        size_t i;
        json_array_foreach(json_object_get(json_object_get(spec, "image_archive"),
                                           "variants"), i, v)
            json_array_append_new(archs, json_pack("[O, O]", json_object_get(v, "arch"),
                                                   json_object_get(v, "variant")));
        json_t *key = json_pack("{s:O, s:o}", "resources", res ? res : json_null(),
                                "image_archs", archs);
        job->shape = key ? br_jsontext(key, BR_JSONTEXT_SORT_KEYS, NULL) : NULL;
        json_decref(key);
    } else {
        job->shape = br_jsontext(res ? res : json_null(), BR_JSONTEXT_SORT_KEYS, NULL);
    }
    read_bookkeeping(job, row);
    job->array_of = int_or(row, "array_of", 0);
    job->array_index = job->array_of > 0 ? (int)int_or(row, "array_index", 0) : -1;
    json_t *array = json_object_get(spec, "array");
    job->array_count = (int)int_or(array, "count", 0);
    job->array_max = (int)int_or(array, "max", 0);
    json_t *after = json_object_get(spec, "after");
    job->after = json_array_size(after) ? calloc(json_array_size(after), sizeof(br_after_t))
                                        : NULL;
    size_t i;
    json_t *e;
    json_array_foreach(after, i, e) {
        int on = br_after_on_parse(json_string_value(json_object_get(e, "on")));
        if (!job->after || on < 0 || !json_is_integer(json_object_get(e, "job")))
            continue;
        job->after[job->nafter++] = (br_after_t){int_or(e, "job", 0), on, BR_AFTER_WAITING};
    }
    if (!job->name || !job->owner || !job->shape || read_assign(job, row) < 0) {
        br_job_destroy(&job);
        return br_errp(err, ENOMEM, "job: out of memory");
    }
    return job;
}

static const char *aux_owners[BR_JOB_AUX_MAX]; /* the modules' names, by slot */

int br_job_aux_slot(const char *owner)
{
    return br_aux_slot(aux_owners, BR_JOB_AUX_MAX, owner);
}

void *br_job_aux_get(const br_job_t *job, int slot)
{
    return slot >= 0 && slot < BR_JOB_AUX_MAX ? job->aux[slot].data : NULL;
}

void br_job_aux_set(br_job_t *job, int slot, void *data, void (*free_fn)(void *data))
{
    if (slot >= 0 && slot < BR_JOB_AUX_MAX)
        br_aux_set(&job->aux[slot], data, free_fn);
}

void br_job_destroy(br_job_t **jp)
{
    br_job_t *job = jp ? *jp : NULL;
    if (!job)
        return;
    clear_ranks(job);
    for (int i = 0; i < job->nexclude; i++)
        free(job->exclude[i]);
    free(job->exclude);
    free(job->placement);
    free(job->resume_from);
    free(job->reason);
    free(job->owner);
    free(job->name);
    free(job->shape);
    free(job->after);
    for (int i = 0; i < BR_JOB_AUX_MAX; i++)
        br_job_aux_set(job, i, NULL, NULL);
    json_decref(job->spec);
    free(job);
    *jp = NULL;
}

json_t *br_job_assign(const br_job_t *job)
{
    if (job->nranks == 0)
        return json_null();
    json_t *ranks = json_array();
    for (int r = 0; r < job->nranks; r++) {
        json_t *o = json_deep_copy(job->ranks[r].share);
        json_object_set_new(o, "node", json_string(job->ranks[r].node));
        json_object_set_new(o, "state", json_string(rank_names[job->ranks[r].state]));
        json_array_append_new(ranks, o);
    }
    return json_pack("{s:o, s:i}", "ranks", ranks, "port", job->port);
}

static json_t *opt_int(int64_t v, int64_t none)
{
    return v != none ? json_integer(v) : json_null();
}

json_t *br_job_fields(const br_job_t *job)
{
    json_t *nodes = json_array();
    for (int r = 0; r < job->nranks; r++)
        json_array_append_new(nodes, json_string(job->ranks[r].node));
    json_t *exclude = json_null();
    if (job->nexclude) {
        exclude = json_array();
        for (int i = 0; i < job->nexclude; i++)
            json_array_append_new(exclude, json_string(job->exclude[i]));
    }
    return json_pack("{s:s, s:i, s:o, s:o, s:o, s:o, s:o, s:o, s:o,"
                     " s:i, s:o, s:o, s:o, s:o, s:o, s:o, s:o, s:o, s:I, s:I, s:I, s:o}",
                     "state", br_job_state_name(job->state), "attempt", job->attempt,
                     "nodes", nodes, "assign", br_job_assign(job), "started",
                     opt_int(job->started, 0), "ended", opt_int(job->ended, 0),
                     "exit_code", opt_int(job->exit_code, -1), "signal",
                     opt_int(job->signal, -1), "reason",
                     job->reason ? json_string(job->reason) : json_null(), "restarts",
                     job->restarts, "not_before", opt_int(job->not_before, 0),
                     "fresh_after", opt_int(job->fresh_after, 0), "lost_at",
                     opt_int(job->lost_at, 0), "exclude", exclude, "placement",
                     job->placement ? json_string(job->placement) : json_null(),
                     "service", opt_int(job->service, 0), "replica",
                     job->service > 0 ? json_integer(job->replica) : json_null(),
                     "replicas", opt_int(job->replicas, -1), "gpu_ms",
                     (json_int_t)job->gpu_ms, "cpu_ms", (json_int_t)job->cpu_ms,
                     "cost_micros", (json_int_t)job->cost_micros, "charged",
                     opt_int(job->charged, 0));
}

int br_job_rank_on(const br_job_t *job, const char *node, int live_only)
{
    for (int r = 0; node && r < job->nranks; r++)
        if (strcmp(job->ranks[r].node, node) == 0 &&
            (!live_only || job->ranks[r].state != BR_RANK_DONE))
            return r;
    return -1;
}

int br_job_ranks_left(const br_job_t *job)
{
    int left = 0;
    for (int r = 0; r < job->nranks; r++)
        left += job->ranks[r].state != BR_RANK_DONE;
    return left;
}

int br_job_set_reason(br_job_t *job, const char *reason)
{
    if ((!reason && !job->reason) || (reason && job->reason && strcmp(reason, job->reason) == 0))
        return 0;
    char *copy = dup_or_null(reason);
    if (reason && !copy)
        return 0; /* out of memory: the old reason stays */
    free(job->reason);
    job->reason = copy;
    return 1;
}

int br_job_set_resume(br_job_t *job, const char *path, int64_t step)
{
    char *from = strdup(path);
    if (!from)
        return -1;
    free(job->resume_from);
    job->resume_from = from;
    job->resume_step = step;
    job->resume_attempt = job->attempt;
    return 0;
}

int br_job_excluded(const br_job_t *job, const char *node)
{
    for (int i = 0; i < job->nexclude; i++)
        if (strcmp(job->exclude[i], node) == 0)
            return 1;
    return 0;
}

void br_job_exclude(br_job_t *job, const char *node)
{
    if (br_job_excluded(job, node))
        return;
    char **ex = realloc(job->exclude, (size_t)(job->nexclude + 1) * sizeof(*ex));
    if (!ex)
        return;
    job->exclude = ex;
    if ((ex[job->nexclude] = strdup(node)))
        job->nexclude++;
}

const br_after_t *br_job_waits_for(const br_job_t *job)
{
    for (int i = 0; i < job->nafter; i++)
        if (job->after[i].state != BR_AFTER_MET)
            return &job->after[i];
    return NULL;
}

int br_job_tasks_per_node(const json_t *spec)
{
    json_t *res = json_object_get(spec, "resources");
    json_t *t = json_object_get(res, "tasks_per_node");
    if (json_is_string(t))
        return (int)json_integer_value(json_object_get(res, "gpus"));
    return json_is_integer(t) && json_integer_value(t) > 0 ? (int)json_integer_value(t) : 1;
}

int br_job_gpus(const json_t *spec)
{
    const json_t *res = json_object_get(spec, "resources");
    json_int_t nodes = json_integer_value(json_object_get(res, "nodes"));
    return (int)json_integer_value(json_object_get(res, "gpus")) * (int)(nodes > 1 ? nodes : 1);
}

int br_job_world_size(const json_t *spec)
{
    json_int_t nodes =
        json_integer_value(json_object_get(json_object_get(spec, "resources"), "nodes"));
    return (int)(nodes > 1 ? nodes : 1) * br_job_tasks_per_node(spec);
}
