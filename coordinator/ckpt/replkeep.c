/* replkeep.c - the retention of ended jobs' replicas, and their purge (replkeep.h). */
#include "replkeep.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "replicas.h"
#include "util.h"
#include "hooks.h"

#define EXPIRE_MS 60000 /* expired replicas are looked for this often at most */
#define EXPIRE_BITE 64  /* ... and at most this many dropped per tick */

struct br_replkeep {
    int64_t expire_at; /* monotonic ms of the next look for expired replicas */
};

br_replkeep_t *br_replkeep_new(void)
{
    return calloc(1, sizeof(br_replkeep_t));
}

void br_replkeep_destroy(br_replkeep_t **kp)
{
    if (kp) {
        free(*kp);
        *kp = NULL;
    }
}

/* Once a second, after the start-up grace: a bite of the expired replicas. */
static void on_tick(br_coord_t *c, br_hook_arg_t *a, void *ctx)
{
    (void)a;
    br_replkeep_t *k = ctx;
    int64_t now = br_mono_ms(), keep = c->cfg.replica_retention_ms;
    if (now - c->started_mono < c->cfg.grace_ms || keep <= 0 || now < k->expire_at)
        return;
    int64_t every = keep / 2 < 1000        ? 1000
                    : keep / 2 > EXPIRE_MS ? EXPIRE_MS
                                           : keep / 2;
    int n = br_replkeep_expire(c, keep, EXPIRE_BITE);
    k->expire_at = n >= EXPIRE_BITE ? now : now + every; /* more left: next tick */
}

int br_replkeep_init(br_coord_t *c)
{
    return br_hooks_add(c->hooks, BR_HOOK_TICK, on_tick, c->replkeep);
}

int br_replkeep_expire(br_coord_t *c, int64_t retention_ms, int bite)
{
    br_err_t err;
    json_t *rows =
        br_store_replica_expired(c->store, br_now_ms() - retention_ms, 0, bite, &err);
    if (!rows) {
        fprintf(stderr, "brambled: expiring replicas: %s\n", err.text);
        return -1;
    }
    char d[32], why[128];
    if (retention_ms % 86400000 == 0) /* as the flag is mostly given: 7d */
        snprintf(d, sizeof(d), "%lldd", (long long)(retention_ms / 86400000));
    else
        br_format_duration(retention_ms, d, sizeof(d));
    snprintf(why, sizeof(why), "the job ended more than %s ago (--replica-retention)",
             d);
    size_t i;
    json_t *row;
    json_array_foreach (rows, i, row)
        br_replicas_drop(c, json_integer_value(json_object_get(row, "job")), row, why);
    int n = (int)json_array_size(rows);
    json_decref(rows);
    return n;
}

int br_replkeep_purge(br_coord_t *c, const json_t *job, int *dropped, int *forgotten,
                      br_err_t *err)
{
    int64_t id = json_integer_value(json_object_get(job, "id"));
    if (!json_is_integer(json_object_get(job, "ended")))
        return br_errf(err, EBUSY,
                       "job %lld is %s: only a job that has ended can be purged (cancel "
                       "it first: bramble cancel %lld)",
                       (long long)id, json_string_value(json_object_get(job, "state")),
                       (long long)id);
    json_t *rows = br_store_replica_list(c->store, id, err);
    if (!rows)
        return -1;
    int told = 0;
    size_t i;
    json_t *row;
    json_array_foreach (rows, i, row)
        told += br_replicas_drop(c, id, row, "the job was purged (bramble job purge)");
    br_replicas_purged(c, id);
    *dropped = told;
    *forgotten = (int)json_array_size(rows) - told;
    json_decref(rows);
    return 0;
}
