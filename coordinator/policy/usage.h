/* usage.h - what each user used and what it cost, and what each may use: the
 * ledger behind fair share (fairshare.h), quotas and `bramble usage`.
 *
 * A job is charged for what its ranks hold, from its placement until its attempt
 * is over: every BR_USAGE_CHARGE_MS while it holds them, and once at the end.
 * The charge is GPU and CPU milliseconds, and the cost: for each rank, its node's
 * cost per hour (nodes.h) times the larger of the rank's share of that node's
 * GPUs and of its CPUs. It goes into the job's row (job.h: gpu_ms, cpu_ms,
 * cost_micros, charged) and into its owner's hour in the store, in the wake's
 * transaction.
 *
 * In memory, for the admin and each user (by principal id): the limits and share
 * set with `bramble user set`; what they used, decayed by the fair-share half-
 * life; and their GPU milliseconds over the last 7 days, worked out again from
 * the store's hours every BR_USAGE_WEEK_REFRESH_MS and added to as charged. */
#ifndef BRAMBLE_USAGE_H
#define BRAMBLE_USAGE_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#include "err.h"
#include "job.h"
#include "jobtab.h"
#include "store.h"

struct br_coord;

#define BR_USAGE_CHARGE_MS 30000
#define BR_USAGE_WEEK_MS (7LL * 24 * 3600 * 1000)
#define BR_USAGE_WEEK_REFRESH_MS (10LL * 60 * 1000)
#define BR_USAGE_HOUR_MS 3600000LL

/* A user's limits: what `bramble user set` sets, as the store keeps them
 * ({"share", "max_gpus", "max_jobs", "max_pending", "gpu_hours_week",
 * "max_priority", "rpm"}, each absent when not set). */
typedef struct {
    double share;          /* their weight in fair share: > 0, 1 by default */
    int max_gpus;          /* GPUs held at once; -1: no limit */
    int max_jobs;          /* jobs starting or running at once; -1 */
    int max_pending;       /* jobs pending at once; -1 */
    double gpu_hours_week; /* GPU-hours over the last 7 days; -1 */
    int max_priority;      /* the highest spec priority; BR_NO_CAP: none */
    int rpm;               /* requests a minute through each gateway; -1 */
} br_limits_t;
#define BR_NO_CAP 1000000

/* No limits, an equal share. */
void br_limits_none(br_limits_t *l);
/* From the store's (or a request's) object; a key of the wrong type or out of
 * range is an error naming it. NULL or null: none. */
int br_limits_parse(const json_t *o, br_limits_t *l, br_err_t *err);
/* As the store keeps them: only what is set. New reference. */
json_t *br_limits_json(const br_limits_t *l);

/* One user's ledger, and their standing for a scheduling pass. */
typedef struct {
    int64_t id;
    char name[64];
    int admin;
    br_limits_t lim;
    double gpu_decayed, cpu_decayed; /* ms, as of decayed_at */
    int64_t decayed_at;
    int64_t week_gpu_ms; /* over the last 7 days */
    /* br_usage_standing's */
    double gpu_now, cpu_now; /* decayed to now, plus what they hold until the next
                              * charge (jobs just placed count at once) */
    int gpus_held, jobs_live, jobs_pending;
} br_user_use_t;

typedef struct br_usage br_usage_t;

/* c: the coordinator, whose hooks it joins (a charge when an attempt is over and
 * every BR_USAGE_CHARGE_MS; the ledger read again after a rollback); NULL: a
 * bare ledger (tests). NULL when out of memory. */
br_usage_t *br_usage_new(struct br_coord *c, int64_t half_life_ms);
void br_usage_destroy(br_usage_t **u);

/* Read the users, their limits and what they used from the store. */
int br_usage_load(br_usage_t *u, br_store_t *store, int64_t now_ms, br_err_t *err);
/* Read the users and their limits again (one was added, removed or set), keeping
 * what is known of their use: cheap, for user.add and user.set. */
int br_usage_users_again(br_usage_t *u, br_store_t *store, br_err_t *err);
/* A user's ledger (NULL: no such user, or a job of no owner). */
br_user_use_t *br_usage_user(br_usage_t *u, int64_t id);
/* All of them, by id. */
br_user_use_t *br_usage_users(br_usage_t *u, size_t *n);
/* Add a use to a user's ledger, as of now_ms (tests and charges). */
void br_usage_add(br_usage_t *u, br_user_use_t *who, int64_t gpu_ms, int64_t cpu_ms,
                  int64_t now_ms);
/* The decay: what a use of 1 at at_ms weighs at now_ms. */
double br_usage_decay(const br_usage_t *u, int64_t at_ms, int64_t now_ms);

/* Charge job up to now (memory, row and owner's hour): what it held since
 * job->charged. No-op for a job that holds nothing. */
void br_usage_charge(struct br_coord *c, br_job_t *job, int64_t now_ms);

/* Work out each user's standing from the current jobs: what they hold and run
 * now, what waits, and their use decayed to now_ms plus what they hold for one
 * charge interval ahead. */
void br_usage_standing(br_usage_t *u, br_jobtab_t *jobs, int64_t now_ms);

/* A submission of spec by owner that a hard limit refuses: max_pending (counted
 * in jobs), a job that asks for more GPUs than max_gpus, a priority over
 * max_priority. -1 with err naming the limit; 0 when it may be queued. */
int br_usage_admit(br_usage_t *u, br_jobtab_t *jobs, int64_t owner, const json_t *spec,
                   br_err_t *err);

/* What users used since since_ms, as the store's hours have it: [{"user",
 * "gpu_hours", "cpu_hours", "cost", "running": 0}] by user; only_id > 0: that user
 * alone. */
json_t *br_usage_report(br_store_t *store, int64_t since_ms, int64_t only_id,
                        br_err_t *err);
/* The same for `bramble usage`, with what live jobs held since they were last
 * charged, up to now_ms, added (without charging them): "running" is how many of
 * the user's jobs are starting or running now, and a user with such jobs has a row
 * even before their first charge. */
json_t *br_usage_show(struct br_coord *c, int64_t since_ms, int64_t only_id,
                      int64_t now_ms, br_err_t *err);

#endif
