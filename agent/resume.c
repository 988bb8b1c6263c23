/* resume.c - a resuming attempt takes the newest complete checkpoint (resume.h). */
#include "resume.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>

#include "fsid.h"

int br_resume_check(const json_t *checkpoint, br_err_t *err)
{
    const json_t *after = json_object_get(checkpoint, "resume_after");
    if (after && (!json_is_integer(after) || json_integer_value(after) < 0))
        return br_errf(err, EPROTO, "job.run: checkpoint.resume_after must be unix ms "
                                    "(a whole number, 0 or more)");
    return 0;
}

/* The step env's BRAMBLE_RESUME_FROM and _STEP name: -1 when they name none, -2
 * when the step is not one. */
static int64_t ordered_step(const json_t *env)
{
    const char *from = json_string_value(json_object_get(env, "BRAMBLE_RESUME_FROM"));
    const char *step = json_string_value(json_object_get(env, "BRAMBLE_RESUME_STEP"));
    if (!from || !*from)
        return -1;
    char *end;
    errno = 0;
    long long v = step ? strtoll(step, &end, 10) : -1;
    return step && *step && !*end && !errno && v >= 0 ? (int64_t)v : -2;
}

int br_resume_newer(const json_t *checkpoint, json_t *env, uid_t uid, gid_t gid,
                    br_ckpt_found_t *found, br_err_t *err)
{
    const json_t *after = json_object_get(checkpoint, "resume_after");
    int64_t above = ordered_step(env);
    if (!after || above == -2)
        return 0;
    if (br_resume_check(checkpoint, err) < 0)
        return -1;
    br_fsid_t *as = br_fsid_new(uid, gid, err);
    if (!as)
        return -1;
    int rc = br_ckpt_newer(json_string_value(json_object_get(checkpoint, "dir")),
                           json_string_value(json_object_get(checkpoint, "pattern")),
                           json_string_value(json_object_get(checkpoint, "complete_file")),
                           above, json_integer_value(after), as, found, err);
    br_fsid_destroy(&as);
    if (rc != 1)
        return rc;
    char text[32];
    snprintf(text, sizeof(text), "%lld", (long long)found->step);
    json_t *path = json_string(found->path), *step = json_string(text);
    if (!path || !step) { /* the environment is text: a name jansson refuses stays out */
        json_decref(path);
        json_decref(step);
        return br_errf(err, EINVAL, "checkpoint %s: not a path an environment variable "
                                    "can carry (UTF-8 text)", found->path);
    }
    json_object_set_new(env, "BRAMBLE_RESUME_FROM", path);
    json_object_set_new(env, "BRAMBLE_RESUME_STEP", step);
    return 1;
}
