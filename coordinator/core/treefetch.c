/* treefetch.c - a starting job's tree fetches, for job show (treefetch.h). */
#include "treefetch.h"

#include <string.h>

/* The job's slot: {node: {hash: {"kind", "name"?, "from"?, "bytes", "done", "at",
 * "done_at"?}}} (at, done_at: monotonic ms ordered, last heard). */
static int slot(void)
{
    static int s = -1;
    if (s < 0)
        s = br_job_aux_slot("treefetch");
    return s;
}

static void free_json(void *p)
{
    json_decref(p);
}

static json_t *all_of(br_job_t *job, int make)
{
    json_t *all = br_job_aux_get(job, slot());
    if (!all && make && (all = json_object()))
        br_job_aux_set(job, slot(), all, free_json);
    return all;
}

void br_treefetch_ordered(br_job_t *job, const char *node, const char *kind,
                          const char *name, const char *hash, int64_t bytes,
                          const char *from, int64_t now_ms)
{
    if (!hash || !node || !kind)
        return;
    json_t *all = all_of(job, 1), *n = all ? json_object_get(all, node) : NULL;
    if (all && !n)
        json_object_set_new(all, node, n = json_object());
    json_t *e = n ? json_object_get(n, hash) : NULL;
    if (n && !e)
        json_object_set_new(n, hash,
                            e = json_pack("{s:I, s:I}", "done", (json_int_t)0, "at",
                                          (json_int_t)now_ms));
    if (!e)
        return;
    json_object_set_new(e, "kind", json_string(kind));
    if (name)
        json_object_set_new(e, "name", json_string(name));
    json_object_set_new(e, "from", from ? json_string(from) : json_null());
    json_object_set_new(e, "bytes", json_integer(bytes));
}

void br_treefetch_forget(br_job_t *job)
{
    br_job_aux_set(job, slot(), NULL, NULL);
}

int br_treefetch_progress(br_job_t *job, const char *node, const char *hash, int64_t done,
                          int64_t now_ms)
{
    json_t *e = json_object_get(json_object_get(all_of(job, 0), node), hash);
    if (!e || job->state != BR_JOB_STARTING)
        return 0;
    json_object_set_new(e, "done", json_integer(done));
    json_object_set_new(e, "done_at", json_integer(now_ms));
    return 1;
}

json_t *br_treefetch_list(const br_job_t *job, int64_t now_ms)
{
    json_t *out = json_array(), *n, *e;
    json_t *all = job && job->state == BR_JOB_STARTING ? br_job_aux_get(job, slot()) : NULL;
    const char *node, *hash;
    json_object_foreach(all, node, n)
        json_object_foreach(n, hash, e) {
            int64_t at = json_integer_value(json_object_get(e, "at"));
            int64_t done_at = json_integer_value(json_object_get(e, "done_at"));
            json_int_t done = json_integer_value(json_object_get(e, "done"));
            json_t *from = json_object_get(e, "from");
            json_t *t = json_pack("{s:O, s:s, s:s, s:I, s:O, s:f}", "kind",
                                  json_object_get(e, "kind"), "from",
                                  json_is_string(from) ? json_string_value(from)
                                                       : "the coordinator",
                                  "to", node, "done", done, "bytes",
                                  json_object_get(e, "bytes"), "seconds",
                                  (double)(now_ms - at) / 1000.0);
            if (!t)
                continue;
            if (json_object_get(e, "name"))
                json_object_set(t, "name", json_object_get(e, "name"));
            if (done_at > at && done > 0)
                json_object_set_new(t, "rate", json_real((double)done * 1000.0 /
                                                         (double)(done_at - at)));
            json_array_append_new(out, t);
        }
    return out;
}
