/* usage.c - the ledger: what each job and user used and cost, and each user's
 * limits (usage.h). */
#include "usage.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "coord.h"
#include "hooks.h"
#include "jobs.h"
#include "nodes.h"
#include "util.h"

struct br_usage {
    br_user_use_t *users; /* by id */
    size_t n;
    int64_t half_life_ms;
    int64_t charged_mono; /* when every live job was last charged */
    int64_t week_at;      /* wall ms the week sums were read from the store */
};

void br_limits_none(br_limits_t *l)
{
    *l = (br_limits_t){.share = 1, .max_gpus = -1, .max_jobs = -1, .max_pending = -1,
                       .gpu_hours_week = -1, .max_priority = BR_NO_CAP, .rpm = -1};
}

static int get_int(const json_t *o, const char *key, int lo, int hi, int *out,
                   br_err_t *err)
{
    const json_t *v = json_object_get(o, key);
    if (!v || json_is_null(v))
        return 0;
    if (!json_is_integer(v) || json_integer_value(v) < lo || json_integer_value(v) > hi)
        return br_errf(err, EINVAL, "%s must be a whole number from %d to %d", key, lo, hi);
    *out = (int)json_integer_value(v);
    return 0;
}

static int get_real(const json_t *o, const char *key, double lo, double hi, double *out,
                    br_err_t *err)
{
    const json_t *v = json_object_get(o, key);
    if (!v || json_is_null(v))
        return 0;
    if (!json_is_number(v) || !(json_number_value(v) >= lo && json_number_value(v) <= hi))
        return br_errf(err, EINVAL, "%s must be a number from %g to %g", key, lo, hi);
    *out = json_number_value(v);
    return 0;
}

int br_limits_parse(const json_t *o, br_limits_t *l, br_err_t *err)
{
    static const char *const keys[] = {"share",          "max_gpus",     "max_jobs",
                                       "max_pending",    "gpu_hours_week", "max_priority",
                                       "rpm",            NULL};
    br_limits_none(l);
    if (!o || json_is_null(o))
        return 0;
    if (!json_is_object(o))
        return br_errf(err, EINVAL, "limits must be an object");
    const char *k;
    json_t *v;
    json_object_foreach((json_t *)o, k, v) {
        size_t i = 0;
        while (keys[i] && strcmp(keys[i], k) != 0)
            i++;
        if (!keys[i])
            return br_errf(err, EINVAL, "unknown limit '%.40s' (share, max_gpus, max_jobs, "
                                        "max_pending, gpu_hours_week, max_priority, rpm)",
                                k);
    }
    return get_real(o, "share", 0.001, 1e6, &l->share, err) < 0 ||
                   get_int(o, "max_gpus", 0, 1 << 20, &l->max_gpus, err) < 0 ||
                   get_int(o, "max_jobs", 0, 1 << 24, &l->max_jobs, err) < 0 ||
                   get_int(o, "max_pending", 0, 1 << 24, &l->max_pending, err) < 0 ||
                   get_real(o, "gpu_hours_week", 0, 1e9, &l->gpu_hours_week, err) < 0 ||
                   get_int(o, "max_priority", -1000, 1000, &l->max_priority, err) < 0 ||
                   get_int(o, "rpm", 1, 1000000, &l->rpm, err) < 0
               ? -1
               : 0;
}

json_t *br_limits_json(const br_limits_t *l)
{
    json_t *o = json_object();
    if (l->share != 1)
        json_object_set_new(o, "share", json_real(l->share));
    if (l->max_gpus >= 0)
        json_object_set_new(o, "max_gpus", json_integer(l->max_gpus));
    if (l->max_jobs >= 0)
        json_object_set_new(o, "max_jobs", json_integer(l->max_jobs));
    if (l->max_pending >= 0)
        json_object_set_new(o, "max_pending", json_integer(l->max_pending));
    if (l->gpu_hours_week >= 0)
        json_object_set_new(o, "gpu_hours_week", json_real(l->gpu_hours_week));
    if (l->max_priority != BR_NO_CAP)
        json_object_set_new(o, "max_priority", json_integer(l->max_priority));
    if (l->rpm >= 0)
        json_object_set_new(o, "rpm", json_integer(l->rpm));
    return o;
}

double br_usage_decay(const br_usage_t *u, int64_t at_ms, int64_t now_ms)
{
    if (now_ms <= at_ms)
        return 1;
    return exp2(-(double)(now_ms - at_ms) / (double)u->half_life_ms);
}

void br_usage_add(br_usage_t *u, br_user_use_t *who, int64_t gpu_ms, int64_t cpu_ms,
                  int64_t now_ms)
{
    double k = br_usage_decay(u, who->decayed_at, now_ms);
    who->gpu_decayed = who->gpu_decayed * k + (double)gpu_ms;
    who->cpu_decayed = who->cpu_decayed * k + (double)cpu_ms;
    if (now_ms > who->decayed_at)
        who->decayed_at = now_ms;
    who->week_gpu_ms += gpu_ms;
}

static int by_id(const void *a, const void *b)
{
    int64_t x = ((const br_user_use_t *)a)->id, y = ((const br_user_use_t *)b)->id;
    return x < y ? -1 : x > y;
}

br_user_use_t *br_usage_user(br_usage_t *u, int64_t id)
{
    br_user_use_t key = {.id = id};
    return u && u->n && id > 0 ? bsearch(&key, u->users, u->n, sizeof(key), by_id) : NULL;
}

br_user_use_t *br_usage_users(br_usage_t *u, size_t *n)
{
    *n = u->n;
    return u->users;
}

/* The users and their limits from the store, keeping what is known of their use. */
static int load_users(br_usage_t *u, br_store_t *store, br_err_t *err)
{
    json_t *rows = br_store_sharers(store, err);
    if (!rows)
        return -1;
    size_t n = json_array_size(rows), i;
    br_user_use_t *users = calloc(n ? n : 1, sizeof(*users));
    if (!users) {
        json_decref(rows);
        return br_errf(err, ENOMEM, "out of memory");
    }
    json_t *row;
    json_array_foreach(rows, i, row) {
        br_user_use_t *x = &users[i];
        x->id = json_integer_value(json_object_get(row, "id"));
        br_strlcpy(x->name, json_string_value(json_object_get(row, "name")), sizeof(x->name));
        x->admin = strcmp(json_string_value(json_object_get(row, "kind")), "admin") == 0;
        br_err_t bad;
        if (br_limits_parse(json_object_get(row, "limits"), &x->lim, &bad) < 0) {
            fprintf(stderr, "brambled: user %s: stored limits ignored: %s\n", x->name,
                    bad.text);
            br_limits_none(&x->lim);
        }
        const br_user_use_t *old = br_usage_user(u, x->id);
        if (old) { /* what they used is kept */
            x->gpu_decayed = old->gpu_decayed;
            x->cpu_decayed = old->cpu_decayed;
            x->decayed_at = old->decayed_at;
            x->week_gpu_ms = old->week_gpu_ms;
        }
    }
    json_decref(rows);
    qsort(users, n, sizeof(*users), by_id);
    free(u->users);
    u->users = users;
    u->n = n;
    return 0;
}

/* Each user's use from the store's hours: decayed (each hour counted at its
 * middle) and over the last week. */
static int load_use(br_usage_t *u, br_store_t *store, int64_t now_ms, br_err_t *err)
{
    /* hours older than 30 half-lives weigh less than a billionth */
    int64_t from = now_ms - 30 * u->half_life_ms, week = now_ms - BR_USAGE_WEEK_MS;
    if (week < from)
        from = week;
    json_t *rows = br_store_usage_since(store, from / BR_USAGE_HOUR_MS, err);
    if (!rows)
        return -1;
    for (size_t i = 0; i < u->n; i++) {
        u->users[i].gpu_decayed = u->users[i].cpu_decayed = 0;
        u->users[i].decayed_at = now_ms;
        u->users[i].week_gpu_ms = 0;
    }
    size_t i;
    json_t *row;
    json_array_foreach(rows, i, row) {
        br_user_use_t *x = br_usage_user(u, json_integer_value(json_object_get(row, "principal")));
        if (!x)
            continue; /* a removed user */
        int64_t hour = json_integer_value(json_object_get(row, "hour"));
        int64_t gpu = json_integer_value(json_object_get(row, "gpu_ms"));
        double k = br_usage_decay(u, hour * BR_USAGE_HOUR_MS + BR_USAGE_HOUR_MS / 2, now_ms);
        x->gpu_decayed += k * (double)gpu;
        x->cpu_decayed += k * (double)json_integer_value(json_object_get(row, "cpu_ms"));
        if ((hour + 1) * BR_USAGE_HOUR_MS > week)
            x->week_gpu_ms += gpu;
    }
    json_decref(rows);
    u->week_at = now_ms;
    return 0;
}

int br_usage_users_again(br_usage_t *u, br_store_t *store, br_err_t *err)
{
    return load_users(u, store, err);
}

int br_usage_load(br_usage_t *u, br_store_t *store, int64_t now_ms, br_err_t *err)
{
    return load_users(u, store, err) < 0 || load_use(u, store, now_ms, err) < 0 ? -1 : 0;
}

/* What job's ranks held from from_ms to to_ms: GPU and CPU ms, cost in millionths. */
static void held(br_coord_t *c, const br_job_t *job, int64_t from_ms, int64_t to_ms,
                 int64_t *gpu_ms, int64_t *cpu_ms, double *cost)
{
    int64_t dt = to_ms > from_ms ? to_ms - from_ms : 0;
    *gpu_ms = *cpu_ms = 0;
    *cost = 0;
    for (int r = 0; r < job->nranks; r++) {
        if (job->ranks[r].state == BR_RANK_DONE)
            continue;
        int gpus, cpus;
        br_node_share_size(job->ranks[r].share, &gpus, &cpus);
        *gpu_ms += dt * gpus;
        *cpu_ms += dt * cpus;
        br_node_t *n = br_nodes_find(c->nodes, job->ranks[r].node);
        double rate = n ? br_node_cost_per_hour(n) : 0;
        if (rate > 0) {
            int ng = br_node_gpu_count(n), nc = br_node_cpus(n);
            double part = ng > 0 ? (double)gpus / ng : 0;
            if (nc > 0 && (double)cpus / nc > part)
                part = (double)cpus / nc;
            *cost += rate * (part > 1 ? 1 : part) * (double)dt / BR_USAGE_HOUR_MS * 1e6;
        }
    }
}

void br_usage_charge(br_coord_t *c, br_job_t *job, int64_t now_ms)
{
    if (!job->charged || !br_job_state_live(job->state) || now_ms <= job->charged)
        return;
    int64_t gpu_ms, cpu_ms;
    double cost; /* millionths */
    held(c, job, job->charged, now_ms, &gpu_ms, &cpu_ms, &cost);
    job->charged = now_ms;
    job->gpu_ms += gpu_ms;
    job->cpu_ms += cpu_ms;
    job->cost_micros += llround(cost);
    br_user_use_t *who = c->usage ? br_usage_user(c->usage, job->owner_id) : NULL;
    if (who)
        br_usage_add(c->usage, who, gpu_ms, cpu_ms, now_ms);
    br_err_t err;
    if (job->owner_id > 0 &&
        br_store_usage_add(c->store, job->owner_id, now_ms / BR_USAGE_HOUR_MS, gpu_ms,
                           cpu_ms, llround(cost), &err) < 0)
        fprintf(stderr, "brambled: job %lld: usage not recorded: %s\n", (long long)job->id,
                err.text);
}

void br_usage_standing(br_usage_t *u, br_jobtab_t *jobs, int64_t now_ms)
{
    for (size_t i = 0; i < u->n; i++) {
        br_user_use_t *x = &u->users[i];
        double k = br_usage_decay(u, x->decayed_at, now_ms);
        x->gpu_now = x->gpu_decayed * k;
        x->cpu_now = x->cpu_decayed * k;
        x->gpus_held = x->jobs_live = x->jobs_pending = 0;
    }
    for (br_job_t *job = br_jobtab_first(jobs); job; job = job->next) {
        br_user_use_t *x = br_usage_user(u, job->owner_id);
        if (!x)
            continue;
        if (job->state == BR_JOB_PENDING) {
            x->jobs_pending++;
            continue;
        }
        if (!br_job_state_live(job->state))
            continue;
        x->jobs_live++;
        for (int r = 0; r < job->nranks; r++) {
            if (job->ranks[r].state == BR_RANK_DONE)
                continue;
            int gpus, cpus;
            br_node_share_size(job->ranks[r].share, &gpus, &cpus);
            x->gpus_held += gpus;
            /* held until the next charge, at least */
            x->gpu_now += (double)gpus * BR_USAGE_CHARGE_MS;
            x->cpu_now += (double)cpus * BR_USAGE_CHARGE_MS;
        }
    }
}

int br_usage_admit(br_usage_t *u, br_jobtab_t *jobs, int64_t owner, const json_t *spec,
                   br_err_t *err)
{
    const br_user_use_t *x = br_usage_user(u, owner);
    if (!x || x->admin)
        return 0;
    int prio = (int)json_integer_value(json_object_get(spec, "priority"));
    if (x->lim.max_priority != BR_NO_CAP && prio > x->lim.max_priority)
        return br_errf(err, EPERM, "priority %d is over your limit max-priority %d", prio,
                       x->lim.max_priority);
    int gpus = br_job_gpus(spec);
    if (x->lim.max_gpus >= 0 && gpus > x->lim.max_gpus)
        return br_errf(err, EDQUOT, "the job needs %d GPUs, over your limit max-gpus %d: "
                                    "it could never start", gpus, x->lim.max_gpus);
    if (x->lim.max_pending >= 0) {
        int pending = 0;
        /* an array adds a pending job per task */
        json_int_t adding = json_integer_value(
            json_object_get(json_object_get(spec, "array"), "count"));
        if (adding < 1)
            adding = 1;
        for (br_job_t *job = br_jobtab_first(jobs); job; job = job->next)
            pending += job->owner_id == owner && job->state == BR_JOB_PENDING;
        if (pending + adding > x->lim.max_pending && adding > 1)
            return br_errf(err, EDQUOT, "the array adds %lld pending jobs to your %d, over "
                                        "your limit max-pending %d: submit fewer tasks, or "
                                        "wait for some to start",
                           (long long)adding, pending, x->lim.max_pending);
        if (pending + adding > x->lim.max_pending)
            return br_errf(err, EDQUOT, "you have %d jobs pending, your limit max-pending is "
                                        "%d: wait for some to start or cancel some",
                           pending, x->lim.max_pending);
    }
    return 0;
}

/* A report's row: the user's name and id (taken out before it is sent), nothing
 * used yet. NULL when out of memory. */
static json_t *report_row(json_t *name, int64_t id)
{
    return json_pack("{s:O, s:I, s:f, s:f, s:f, s:i}", "user", name, "principal",
                     (json_int_t)id, "gpu_hours", 0.0, "cpu_hours", 0.0, "cost", 0.0,
                     "running", 0);
}

/* Add ms GPU, ms CPU and millionths of cost to row's hours and cost. */
static void report_add(json_t *row, double gpu_ms, double cpu_ms, double cost_micros)
{
    static const char *const to[] = {"gpu_hours", "cpu_hours", "cost"};
    const double add[] = {gpu_ms / BR_USAGE_HOUR_MS, cpu_ms / BR_USAGE_HOUR_MS,
                          cost_micros / 1e6};
    for (int k = 0; k < 3; k++)
        json_object_set_new(
            row, to[k],
            json_real(json_real_value(json_object_get(row, to[k])) + add[k]));
}

/* The store's hours since since_ms, summed by user (rows keep "principal"). */
static json_t *report_hours(br_store_t *store, int64_t since_ms, int64_t only_id,
                            br_err_t *err)
{
    json_t *rows = br_store_usage_since(store, since_ms / BR_USAGE_HOUR_MS, err);
    if (!rows)
        return NULL;
    json_t *out = json_array(), *last = NULL;
    int64_t last_id = 0;
    size_t i;
    json_t *row;
    json_array_foreach(rows, i, row) {
        int64_t id = json_integer_value(json_object_get(row, "principal"));
        if (only_id > 0 && id != only_id)
            continue;
        if (!last || id != last_id) {
            last = report_row(json_object_get(row, "name"), id);
            if (!last || json_array_append_new(out, last) < 0) {
                json_decref(rows);
                json_decref(out);
                return br_errp(err, ENOMEM, "out of memory");
            }
            last_id = id;
        }
        report_add(last, (double)json_integer_value(json_object_get(row, "gpu_ms")),
                   (double)json_integer_value(json_object_get(row, "cpu_ms")),
                   (double)json_integer_value(json_object_get(row, "cost_micros")));
    }
    json_decref(rows);
    return out;
}

/* rows, their ids taken out: the report as sent. */
static json_t *report_done(json_t *rows)
{
    size_t i;
    json_t *row;
    json_array_foreach(rows, i, row)
        json_object_del(row, "principal");
    return rows;
}

json_t *br_usage_report(br_store_t *store, int64_t since_ms, int64_t only_id,
                        br_err_t *err)
{
    json_t *rows = report_hours(store, since_ms, only_id, err);
    return rows ? report_done(rows) : NULL;
}

/* The row of user id in rows (by id), added with name when there is none yet. */
static json_t *report_row_of(json_t *rows, int64_t id, const char *name)
{
    size_t i;
    json_t *row;
    json_array_foreach(rows, i, row) {
        int64_t at = json_integer_value(json_object_get(row, "principal"));
        if (at == id)
            return row;
        if (at > id)
            break;
    }
    json_t *who = json_string(name ? name : "?");
    json_t *fresh = who ? report_row(who, id) : NULL;
    json_decref(who);
    return fresh && json_array_insert_new(rows, i, fresh) == 0 ? fresh : NULL;
}

json_t *br_usage_show(br_coord_t *c, int64_t since_ms, int64_t only_id, int64_t now_ms,
                      br_err_t *err)
{
    json_t *rows = report_hours(c->store, since_ms, only_id, err);
    if (!rows)
        return NULL;
    for (br_job_t *job = br_jobtab_first(c->jobs); job; job = job->next) {
        if (!job->charged || !br_job_state_live(job->state) || job->owner_id <= 0 ||
            (only_id > 0 && job->owner_id != only_id))
            continue;
        const br_user_use_t *x =
            c->usage ? br_usage_user(c->usage, job->owner_id) : NULL;
        json_t *row = report_row_of(rows, job->owner_id, x ? x->name : job->owner);
        if (!row) {
            json_decref(rows);
            return br_errp(err, ENOMEM, "out of memory");
        }
        int64_t gpu_ms, cpu_ms;
        double cost;
        held(c, job, job->charged > since_ms ? job->charged : since_ms, now_ms, &gpu_ms,
             &cpu_ms, &cost);
        report_add(row, (double)gpu_ms, (double)cpu_ms, cost);
        json_int_t running = json_integer_value(json_object_get(row, "running"));
        json_object_set_new(row, "running", json_integer(running + 1));
    }
    return report_done(rows);
}

/* --- with the coordinator ------------------------------------------------------- */

static void on_releasing(br_coord_t *c, br_hook_arg_t *a, void *ctx)
{
    (void)ctx;
    br_usage_charge(c, a->job, br_now_ms());
}

static void on_tick(br_coord_t *c, br_hook_arg_t *a, void *ctx)
{
    (void)a;
    br_usage_t *u = ctx;
    int64_t mono = br_mono_ms(), now = br_now_ms();
    if (mono - u->charged_mono >= BR_USAGE_CHARGE_MS) {
        u->charged_mono = mono;
        for (br_job_t *job = br_jobtab_first(c->jobs); job; job = job->next)
            if (job->charged && br_job_state_live(job->state)) {
                br_usage_charge(c, job, now);
                br_job_save(c, job);
            }
    }
    br_err_t err;
    if (now - u->week_at >= BR_USAGE_WEEK_REFRESH_MS && load_use(u, c->store, now, &err) < 0)
        fprintf(stderr, "brambled: usage not read again: %s\n", err.text);
}

/* After a rollback what was charged in memory may not be in the store: read it
 * again (at start too). */
static void on_loaded(br_coord_t *c, br_hook_arg_t *a, void *ctx)
{
    (void)a;
    br_err_t err;
    int64_t now = br_now_ms();
    if (br_usage_load(ctx, c->store, now, &err) < 0)
        fprintf(stderr, "brambled: users' usage not read: %s\n", err.text);
    for (br_job_t *job = br_jobtab_first(c->jobs); job; job = job->next)
        if (br_job_state_live(job->state) && !job->charged)
            job->charged = now; /* placed before jobs were charged: from now on */
}

br_usage_t *br_usage_new(br_coord_t *c, int64_t half_life_ms)
{
    br_usage_t *u = calloc(1, sizeof(*u));
    if (!u)
        return NULL;
    u->half_life_ms = half_life_ms > 0 ? half_life_ms : 7LL * 24 * 3600 * 1000;
    u->charged_mono = br_mono_ms();
    if (c && (br_hooks_add(c->hooks, BR_HOOK_RELEASING, on_releasing, u) < 0 ||
              br_hooks_add(c->hooks, BR_HOOK_TICK, on_tick, u) < 0 ||
              br_hooks_add(c->hooks, BR_HOOK_LOADED, on_loaded, u) < 0)) {
        free(u);
        return NULL;
    }
    return u;
}

void br_usage_destroy(br_usage_t **u)
{
    if (u && *u) {
        free((*u)->users);
        free(*u);
        *u = NULL;
    }
}
