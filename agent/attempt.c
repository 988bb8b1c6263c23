/* attempt.c - one attempt of a job on this node: task, log batching, exit report. */
#include "attempt.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util.h"

typedef struct {
    char buf[BR_LOG_CHUNK];
    size_t len;
    int64_t first_ms; /* monotonic time of the oldest buffered byte */
    int64_t seq;
} stream_buf_t;

struct br_attempt {
    int64_t job;
    int attempt;
    int rank;
    br_task_t *task;
    br_ckpt_t *ckpt;
    int frozen;
    stream_buf_t out[2];
    uint32_t report_seq;
    char reason[200];
};

static char **env_array(json_t *env)
{
    size_t n = json_object_size(env), i = 0;
    char **arr = calloc(n + 1, sizeof(char *));
    const char *k;
    json_t *v;
    if (!arr)
        return NULL;
    json_object_foreach(env, k, v) {
        if (json_is_string(v) && asprintf(&arr[i], "%s=%s", k, json_string_value(v)) > 0)
            i++;
    }
    return arr;
}

static void env_free(char **arr)
{
    for (size_t i = 0; arr && arr[i]; i++)
        free(arr[i]);
    free(arr);
}

br_attempt_t *br_attempt_start(const br_attempt_opts_t *o, br_err_t *err)
{
    br_attempt_t *a = calloc(1, sizeof(*a));
    if (!a)
        return br_errp(err, ENOMEM, "out of memory");
    a->job = o->job;
    a->attempt = o->attempt;
    a->rank = o->rank;
    char tag[160];
    snprintf(tag, sizeof(tag), "%s/%lld.%d.%d", o->node, (long long)o->job, o->attempt,
             o->rank);
    char **env = env_array(o->env);
    br_task_opts_t to = {.command = o->command,
                         .workdir = o->workdir,
                         .env = (const char *const *)env,
                         .user = o->user,
                         .tag = tag};
    json_t *ck = o->checkpoint;
    if (json_is_object(ck)) {
        /* watch from before the start, so nothing the attempt writes is missed */
        a->ckpt = br_ckpt_new(json_string_value(json_object_get(ck, "dir")),
                              json_string_value(json_object_get(ck, "pattern")),
                              json_string_value(json_object_get(ck, "complete_file")),
                              BR_CKPT_STABLE_MS, err);
        if (!a->ckpt) {
            env_free(env);
            free(a);
            return NULL;
        }
    }
    a->task = env ? br_task_start(&to, err) : NULL;
    env_free(env);
    if (!a->task) {
        br_ckpt_destroy(&a->ckpt);
        free(a);
        return NULL;
    }
    return a;
}

void br_attempt_destroy(br_attempt_t **a)
{
    if (a && *a) {
        br_ckpt_destroy(&(*a)->ckpt);
        br_task_destroy(&(*a)->task);
        free(*a);
        *a = NULL;
    }
}

int64_t br_attempt_job(const br_attempt_t *a)
{
    return a->job;
}

int br_attempt_number(const br_attempt_t *a)
{
    return a->attempt;
}

int br_attempt_rank(const br_attempt_t *a)
{
    return a->rank;
}

pid_t br_attempt_pid(const br_attempt_t *a)
{
    return br_task_pid(a->task);
}

br_task_t *br_attempt_task(br_attempt_t *a)
{
    return a->task;
}

static void ship(br_attempt_t *a, int stream, br_attempt_log_fn fn, void *arg)
{
    stream_buf_t *s = &a->out[stream - 1];
    if (s->len == 0)
        return;
    fn(arg, a, stream, s->seq++, s->buf, s->len);
    s->len = 0;
}

void br_attempt_read(br_attempt_t *a, int stream, br_attempt_log_fn fn, void *arg)
{
    stream_buf_t *s = &a->out[stream - 1];
    for (int rounds = 0; rounds < 16; rounds++) {
        if (s->len == sizeof(s->buf))
            ship(a, stream, fn, arg);
        ssize_t n = br_task_read(a->task, stream, s->buf + s->len, sizeof(s->buf) - s->len);
        if (n <= 0)
            break;
        if (s->len == 0)
            s->first_ms = br_mono_ms();
        s->len += (size_t)n;
    }
    if (s->len == sizeof(s->buf) || br_task_fd(a->task, stream) < 0)
        ship(a, stream, fn, arg);
}

void br_attempt_flush(br_attempt_t *a, int force, br_attempt_log_fn fn, void *arg)
{
    int64_t now = br_mono_ms();
    for (int stream = 1; stream <= 2; stream++) {
        stream_buf_t *s = &a->out[stream - 1];
        if (s->len && (force || now - s->first_ms >= BR_LOG_DELAY_MS))
            ship(a, stream, fn, arg);
    }
}

int br_attempt_finished(const br_attempt_t *a)
{
    return br_task_done(a->task, NULL, NULL) && br_task_fd(a->task, 1) < 0 &&
           br_task_fd(a->task, 2) < 0;
}

br_ckpt_t *br_attempt_ckpt(br_attempt_t *a)
{
    return a->ckpt;
}

int br_attempt_frozen(const br_attempt_t *a)
{
    return a->frozen;
}

int br_attempt_freeze(br_attempt_t *a)
{
    if (a->frozen || br_task_done(a->task, NULL, NULL))
        return 0;
    a->frozen = 1;
    return br_task_freeze(a->task) < 0 ? -1 : 0;
}

int br_attempt_thaw(br_attempt_t *a)
{
    if (!a->frozen)
        return 0;
    a->frozen = 0;
    return br_task_thaw(a->task) < 0 ? -1 : 0;
}

uint32_t br_attempt_report_seq(const br_attempt_t *a)
{
    return a->report_seq;
}

void br_attempt_set_report_seq(br_attempt_t *a, uint32_t seq)
{
    a->report_seq = seq;
}

void br_attempt_set_reason(br_attempt_t *a, const char *reason)
{
    br_strlcpy(a->reason, reason, sizeof(a->reason));
}

const char *br_attempt_reason(const br_attempt_t *a)
{
    return a->reason;
}
