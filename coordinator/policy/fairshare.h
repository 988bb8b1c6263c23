/* fairshare.h - the order in which a scheduling pass considers the pending jobs,
 * and the users' limits that hold a job back.
 *
 * Each pending job gets one score, the sum of three parts:
 * - priority: its spec's priority (capped by its owner's max-priority) x 1000;
 * - fair share: 1000 x 2^-(U/S), where U is its owner's use, the larger of their
 *   part of all users' GPU time and of all CPU time (decayed by the half-life,
 *   usage.h, with what they hold now counted one charge interval ahead), and S is
 *   their part of all users' shares;
 * - age: one point for each 10 minutes waited, at most BR_FAIRSHARE_AGE_MAX.
 * The highest score goes first; on a tie, the owner with fewer jobs running, then
 * the older job. A priority step (1000) outweighs any fair share and age.
 *
 * As a pass places a job, its owner's use grows by what the job holds and their
 * fair share is worked out again before their next job is considered, so that
 * one pass shares out what is free among users instead of giving it all to the
 * first of them.
 *
 * Limits (usage.h), counted with what this pass placed so far: a job whose owner
 * is at max-jobs, would go over max-gpus, or used up gpu-hours-week (a job with
 * GPUs) waits, with that limit as its reason. The admin has no limits. */
#ifndef BRAMBLE_FAIRSHARE_H
#define BRAMBLE_FAIRSHARE_H

#include <stddef.h>
#include <stdint.h>

#include "job.h"
#include "usage.h"

#define BR_FAIRSHARE_AGE_MAX 500.0
#define BR_FAIRSHARE_AGE_STEP_MS (10 * 60 * 1000)

typedef struct {
    double priority, fairshare, age, total;
} br_score_t;

typedef struct br_fairshare br_fairshare_t;

/* The order of jobs[0..n-1] (borrowed) with the users' standing in u
 * (br_usage_standing done); u NULL: priority, then age, then id alone. NULL
 * when out of memory. */
br_fairshare_t *br_fairshare_new(br_usage_t *u, br_job_t *const *jobs, size_t n,
                                 int64_t now_ms);
void br_fairshare_destroy(br_fairshare_t **f);

/* The next job to consider, with its score; NULL when every job was given.
 * *limit is filled when a limit of its owner holds it back ("waiting: ..."),
 * else emptied. */
br_job_t *br_fairshare_next(br_fairshare_t *f, br_score_t *score, char *limit,
                            size_t len);
/* The job br_fairshare_next gave last was placed, holding gpus and cpus. */
void br_fairshare_placed(br_fairshare_t *f, int gpus, int cpus);

#endif
