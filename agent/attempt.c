/* attempt.c - one attempt of a job on this node: its tasks, log batching per rank,
 * exit report. */
#include "attempt.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "logbuf.h"
#include "util.h"

typedef struct {
    int rank;
    br_task_t *task;
    int64_t seq[2]; /* next log chunk number of stdout, stderr */
    int lingering;  /* its leader ended while the attempt was asked to stop, and
                       processes of its tree still run their handlers */
    int64_t leader_ended; /* monotonic ms its leader ended then (0: it did not) */
} proc_t;

struct br_attempt {
    int64_t job;
    int attempt;
    int n;
    proc_t *procs;
    br_ckpt_t *ckpt;
    br_logbuf_t *log; /* output not taken yet */
    int64_t log_retry_at; /* no output is sent before (monotonic ms) */
    int64_t log_held_since; /* its end waits for its output since, or 0 */
    int64_t log_said; /* dropped bytes last said */
    int frozen;
    int port;
    int replica; /* a service's replica: not fenced */
    br_health_t *health;
    br_hang_t *hang; /* NULL: no progress.timeout */
    uint32_t report_seq;
    char reason[200];
    int64_t kill_at; /* monotonic ms: br_attempt_stop's grace ends (0: none) */
};

/* "KEY=VALUE" entries of base, then of over (later entries win in br_task_start). */
static char **env_array(json_t *base, json_t *over)
{
    size_t n = json_object_size(base) + json_object_size(over), i = 0;
    char **arr = calloc(n + 1, sizeof(char *));
    json_t *objs[2] = {base, over};
    const char *k;
    json_t *v;
    if (!arr)
        return NULL;
    for (int o = 0; o < 2; o++) {
        json_object_foreach(objs[o], k, v) {
            if (json_is_string(v) && asprintf(&arr[i], "%s=%s", k, json_string_value(v)) > 0)
                i++;
        }
    }
    return arr;
}

static void env_free(char **arr)
{
    for (size_t i = 0; arr && arr[i]; i++)
        free(arr[i]);
    free(arr);
}

static int start_task(const br_attempt_opts_t *o, proc_t *p, json_t *own_env,
                      br_err_t *err)
{
    char tag[160];
    snprintf(tag, sizeof(tag), "%s/%lld.%d.%d", o->node, (long long)o->job, o->attempt,
             p->rank);
    char **env = env_array(o->env, own_env);
    if (!env)
        return br_errf(err, ENOMEM, "out of memory");
    /* the same tag may be another cluster's on this host: the agent's id tells */
    char also[96] = "";
    const char *id = json_string_value(json_object_get(o->env, "BRAMBLE_AGENT_ID"));
    if (id)
        snprintf(also, sizeof(also), "BRAMBLE_AGENT_ID=%s", id);
    char exit_path[PATH_MAX] = "";
    if (o->exit_dir)
        snprintf(exit_path, sizeof(exit_path), "%s/%lld.%d.%d.exit", o->exit_dir,
                 (long long)o->job, o->attempt, p->rank);
    br_task_opts_t to = {.command = o->command,
                         .workdir = o->workdir,
                         .env = (const char *const *)env,
                         .user = o->user,
                         .tag = tag,
                         .also = also[0] ? also : NULL,
                         .exit_path = exit_path[0] ? exit_path : NULL,
                         .mounts = o->mounts};
    p->task = br_task_start(&to, err);
    env_free(env);
    return p->task ? 0 : -1;
}

/* An attempt with room for n tasks, its log buffer and its checkpoint watcher. */
static br_attempt_t *attempt_new(const br_attempt_opts_t *o, size_t n, br_err_t *err)
{
    if (n < 1 || n > BR_ATTEMPT_MAX_TASKS)
        return br_errp(err, EINVAL, "an attempt runs 1 to %d tasks on a node, not %zu",
                       BR_ATTEMPT_MAX_TASKS, n);
    br_attempt_t *a = calloc(1, sizeof(*a));
    if (!a || !(a->procs = calloc(n, sizeof(proc_t)))) {
        free(a);
        return br_errp(err, ENOMEM, "out of memory");
    }
    a->job = o->job;
    a->attempt = o->attempt;
    if (!(a->log = br_logbuf_new(BR_LOG_BUFFER, BR_LOG_CHUNK))) {
        br_attempt_destroy(&a);
        return br_errp(err, ENOMEM, "out of memory");
    }
    json_t *ck = o->checkpoint;
    if (json_is_object(ck)) {
        /* watch from before the start, so nothing the attempt writes is missed */
        a->ckpt = br_ckpt_new(json_string_value(json_object_get(ck, "dir")),
                              json_string_value(json_object_get(ck, "pattern")),
                              json_string_value(json_object_get(ck, "complete_file")),
                              BR_CKPT_STABLE_MS, err);
        if (!a->ckpt) {
            br_attempt_destroy(&a);
            return NULL;
        }
    }
    return a;
}

br_attempt_t *br_attempt_start(const br_attempt_opts_t *o, br_err_t *err)
{
    size_t n = o->tasks ? json_array_size(o->tasks) : 1;
    br_attempt_t *a = attempt_new(o, n, err);
    if (!a)
        return NULL;
    for (size_t i = 0; i < n; i++) {
        json_t *t = o->tasks ? json_array_get(o->tasks, i) : NULL;
        proc_t *p = &a->procs[i];
        p->rank = t ? (int)json_integer_value(json_object_get(t, "rank")) : o->default_rank;
        if (start_task(o, p, t ? json_object_get(t, "env") : NULL, err) < 0) {
            br_attempt_kill(a, 5000); /* all or nothing */
            br_attempt_destroy(&a);
            return NULL;
        }
        a->n++;
    }
    return a;
}

json_t *br_attempt_saved(const br_attempt_t *a)
{
    json_t *tasks = json_array();
    for (int i = 0; i < a->n; i++) {
        br_task_t *t = a->procs[i].task;
        json_t *o = json_pack("{s:i, s:s, s:i, s:i, s:I, s:I, s:I}", "rank", a->procs[i].rank,
                              "tag", br_task_tag(t), "pid", (int)br_task_pid(t), "waiter",
                              (int)br_task_waiter(t), "waiter_start",
                              (json_int_t)br_task_waiter_start(t), "uid",
                              (json_int_t)br_task_uid(t), "gid", (json_int_t)br_task_gid(t));
        if (br_task_also(t))
            json_object_set_new(o, "also", json_string(br_task_also(t)));
        if (br_task_exit_path(t))
            json_object_set_new(o, "exit", json_string(br_task_exit_path(t)));
        json_array_append_new(tasks, o);
    }
    return tasks;
}

br_attempt_t *br_attempt_adopt(const br_attempt_opts_t *o, json_t *saved, br_err_t *err)
{
    size_t n = json_is_array(saved) ? json_array_size(saved) : 0;
    br_attempt_t *a = attempt_new(o, n, err);
    if (!a)
        return NULL;
    /* chunks go on from numbers above any the previous agent can have used (the
     * coordinator keeps chunks in arrival order and drops a number it has) */
    int64_t base = br_now_ms() * 1000;
    for (size_t i = 0; i < n; i++) {
        json_t *t = json_array_get(saved, i);
        json_int_t pid = 0, waiter = 0, start = 0, uid = -1, gid = -1;
        const char *tag = NULL, *also = NULL, *exit_path = NULL;
        int rank = -1;
        if (json_unpack(t, "{s:i, s:s, s:I, s:I, s:I, s:I, s:I, s?s, s?s}", "rank", &rank,
                        "tag", &tag, "pid", &pid, "waiter", &waiter, "waiter_start", &start,
                        "uid", &uid, "gid", &gid, "also", &also, "exit", &exit_path) < 0) {
            br_errf(err, EPROTO, "task %zu: not a saved task", i);
            goto fail;
        }
        br_task_saved_t sv = {.tag = tag,
                              .also = also,
                              .exit_path = exit_path,
                              .pid = (pid_t)pid,
                              .waiter = (pid_t)waiter,
                              .waiter_start = (uint64_t)start,
                              .uid = (uid_t)uid,
                              .gid = (gid_t)gid};
        proc_t *p = &a->procs[i];
        p->rank = rank;
        p->seq[0] = p->seq[1] = base;
        if (!(p->task = br_task_adopt(&sv, err)))
            goto fail;
        a->n++;
    }
    return a;
fail:
    br_attempt_destroy(&a); /* its processes are left to the caller */
    return NULL;
}

void br_attempt_destroy(br_attempt_t **ap)
{
    br_attempt_t *a = ap ? *ap : NULL;
    if (!a)
        return;
    br_ckpt_destroy(&a->ckpt);
    br_logbuf_destroy(&a->log);
    br_health_destroy(&a->health);
    br_hang_destroy(&a->hang);
    for (int i = 0; i < a->n; i++)
        br_task_destroy(&a->procs[i].task);
    free(a->procs);
    free(a);
    *ap = NULL;
}

int64_t br_attempt_job(const br_attempt_t *a)
{
    return a->job;
}

int br_attempt_number(const br_attempt_t *a)
{
    return a->attempt;
}

int br_attempt_ntasks(const br_attempt_t *a)
{
    return a->n;
}

br_task_t *br_attempt_task_of_rank(br_attempt_t *a, int rank)
{
    for (int i = 0; i < a->n; i++)
        if (a->procs[i].rank == rank)
            return a->procs[i].task;
    return NULL;
}

int br_attempt_rank_at(const br_attempt_t *a, int i)
{
    return i >= 0 && i < a->n ? a->procs[i].rank : -1;
}

pid_t br_attempt_pid(const br_attempt_t *a)
{
    return a->n ? br_task_pid(a->procs[0].task) : -1;
}

void br_attempt_set_port(br_attempt_t *a, int port)
{
    a->port = port;
}

int br_attempt_port(const br_attempt_t *a)
{
    return a->port;
}

void br_attempt_set_replica(br_attempt_t *a, int replica)
{
    a->replica = replica;
}

int br_attempt_is_replica(const br_attempt_t *a)
{
    return a->replica;
}

void br_attempt_set_health(br_attempt_t *a, br_health_t *h)
{
    br_health_destroy(&a->health);
    a->health = h;
}

br_health_t *br_attempt_health(br_attempt_t *a)
{
    return a->health;
}

void br_attempt_set_hang(br_attempt_t *a, br_hang_t *h)
{
    br_hang_destroy(&a->hang);
    a->hang = h;
    br_hang_frozen(h, a->frozen, br_mono_ms());
}

br_hang_t *br_attempt_hang(br_attempt_t *a)
{
    return a->hang;
}

int br_attempt_has_tag(const br_attempt_t *a, const char *tag)
{
    for (int i = 0; i < a->n; i++)
        if (strcmp(br_task_tag(a->procs[i].task), tag) == 0)
            return 1;
    return 0;
}

/* Task i is over, its whole tree: when it failed, the node's part of the gang ends
 * with it. */
static void task_gone(br_attempt_t *a, int i)
{
    br_task_t *t = a->procs[i].task;
    int code = -1, sig = -1;
    br_task_done(t, &code, &sig);
    if (a->n > 1 && (code != 0 || sig >= 0) && !a->reason[0]) {
        char why[160];
        if (sig >= 0)
            snprintf(why, sizeof(why), "rank %d: killed by signal %d (%s)", a->procs[i].rank,
                     sig, strsignal(sig));
        else
            snprintf(why, sizeof(why), "rank %d: exit code %d", a->procs[i].rank, code);
        br_attempt_set_reason(a, why);
        br_attempt_kill(a, 5000);
    }
}

/* Task i's process ended: what it left running goes too, unless the attempt was
 * asked to stop and is in its grace. Then the leader is often only the wrapping
 * shell, which the signal ended while the job's own processes handle it: they get
 * the rest of the grace, and the task is over once the last of them ended. */
static void task_ended(br_attempt_t *a, int i)
{
    br_task_t *t = a->procs[i].task;
    if (a->kill_at && !a->frozen && br_task_tree_count(t) > 0) {
        a->procs[i].lingering = 1;
        a->procs[i].leader_ended = br_mono_ms();
        return;
    }
    br_task_kill_tree(t, 2000);
    task_gone(a, i);
}

int br_attempt_check_lingering(br_attempt_t *a)
{
    int n = 0;
    for (int i = 0; i < a->n; i++)
        if (a->procs[i].lingering && br_task_tree_count(a->procs[i].task) == 0) {
            a->procs[i].lingering = 0;
            int code = -1, sig = -1;
            br_task_done(a->procs[i].task, &code, &sig);
            char why[160], how[48];
            if (sig >= 0)
                snprintf(how, sizeof(how), "killed by signal %d", sig);
            else
                snprintf(how, sizeof(how), "exit code %d", code);
            snprintf(why, sizeof(why), "/bin/sh ended (%s) and its processes %.1fs later, "
                                       "within the grace",
                     how, (double)(br_mono_ms() - a->procs[i].leader_ended) / 1000.0);
            if (br_attempt_done(a)) /* (not before: the grace's kill waits on no reason) */
                br_attempt_set_reason(a, why);
            task_gone(a, i);
            n++;
        }
    return n;
}

int br_attempt_reaped(br_attempt_t *a, pid_t pid, int status)
{
    for (int i = 0; i < a->n; i++)
        if (br_task_reaped(a->procs[i].task, pid, status)) {
            task_ended(a, i);
            return 1;
        }
    return 0;
}

int br_attempt_check_adopted(br_attempt_t *a)
{
    int n = 0;
    for (int i = 0; i < a->n; i++)
        if (br_task_check_adopted(a->procs[i].task)) {
            task_ended(a, i);
            n++;
        }
    return n;
}

int br_attempt_wait_fds(const br_attempt_t *a, int *fds, int max)
{
    int n = 0;
    for (int i = 0; i < a->n && n < max; i++)
        if (br_task_wait_fd(a->procs[i].task) >= 0)
            fds[n++] = br_task_wait_fd(a->procs[i].task);
    return n;
}

int br_attempt_fds(const br_attempt_t *a, int *fds, int max)
{
    int n = 0;
    for (int i = 0; i < a->n; i++)
        for (int s = 1; s <= 2; s++) {
            int fd = br_task_fd(a->procs[i].task, s);
            if (fd >= 0 && n < max)
                fds[n++] = fd;
        }
    return n;
}

/* 1 once every task's stdout and stderr reached EOF. */
static int pipes_closed(const br_attempt_t *a)
{
    for (int i = 0; i < a->n; i++)
        if (br_task_fd(a->procs[i].task, 1) >= 0 || br_task_fd(a->procs[i].task, 2) >= 0)
            return 0;
    return 1;
}

/* Read what a stream has now (a bounded amount per wake) into the log buffer. */
static void read_stream(br_attempt_t *a, int i, int stream)
{
    static char buf[BR_LOG_CHUNK];
    br_task_t *t = a->procs[i].task;
    for (int rounds = 0; rounds < 16 && br_task_fd(t, stream) >= 0; rounds++) {
        ssize_t n = br_task_read(t, stream, buf, sizeof(buf));
        if (n <= 0)
            break;
        int64_t now = br_mono_ms();
        br_logbuf_put(a->log, i, stream, buf, (size_t)n, now);
        br_hang_activity(a->hang, BR_HANG_OUTPUT, -1, now); /* it is not hung */
    }
}

void br_attempt_read(br_attempt_t *a, br_attempt_log_fn fn, void *arg)
{
    for (int i = 0; i < a->n; i++)
        for (int stream = 1; stream <= 2; stream++)
            read_stream(a, i, stream);
    br_attempt_flush(a, 0, fn, arg);
}

void br_attempt_flush(br_attempt_t *a, int force, br_attempt_log_fn fn, void *arg)
{
    br_logchunk_t c;
    int64_t now = br_mono_ms();
    if (now < a->log_retry_at)
        return; /* the coordinator could not store it: not yet again */
    int64_t sent = br_logbuf_oldest_sent(a->log);
    if (sent >= 0 && now - sent >= BR_LOG_ANSWER_MS)
        br_logbuf_resend(a->log); /* lost on the way, or the coordinator restarted */
    /* once the pipes closed, nothing more will join a chunk: ship it now */
    while (br_logbuf_peek(a->log, now, BR_LOG_DELAY_MS, force || pipes_closed(a), &c)) {
        proc_t *p = &a->procs[c.task];
        int64_t seq = c.seq >= 0 ? c.seq : p->seq[c.stream - 1];
        int64_t tag = fn(arg, a, p->rank, c.stream, seq, c.data, c.len);
        if (tag < 0)
            return;
        if (c.seq < 0)
            p->seq[c.stream - 1]++;
        if (tag == 0)
            br_logbuf_pop(a->log);
        else
            br_logbuf_sent(a->log, seq, (uint32_t)tag, now);
    }
}

int br_attempt_log_answered(br_attempt_t *a, uint32_t tag, int errnum, int64_t now)
{
    if (!br_logbuf_holds(a->log, tag))
        return 0;
    if (errnum == 0 || errnum == EPERM || errnum == ENOENT) {
        br_logbuf_taken(a->log, tag);
    } else {
        br_logbuf_refused(a->log, tag); /* (one let go: lost) */
        br_logbuf_resend(a->log);
        a->log_retry_at = now + BR_LOG_RETRY_MS;
    }
    return 1;
}

void br_attempt_log_resend(br_attempt_t *a)
{
    br_logbuf_resend(a->log);
    a->log_retry_at = 0;
}

int br_attempt_log_holds_exit(br_attempt_t *a, int64_t now, int64_t max_ms)
{
    if (!br_logbuf_bytes(a->log) && !br_logbuf_let_go(a->log))
        return 0; /* nothing kept, no answer awaited */
    if (!a->log_held_since)
        a->log_held_since = now;
    if (now - a->log_held_since < max_ms)
        return 1;
    br_logbuf_drop_all(a->log);
    return 0;
}

int64_t br_attempt_log_dropped(const br_attempt_t *a)
{
    return br_logbuf_dropped(a->log);
}

int br_attempt_log_dropped_news(br_attempt_t *a)
{
    int64_t d = br_logbuf_dropped(a->log);
    if (d == a->log_said)
        return 0;
    a->log_said = d;
    return 1;
}

int br_attempt_done(const br_attempt_t *a)
{
    for (int i = 0; i < a->n; i++)
        if (!br_task_done(a->procs[i].task, NULL, NULL) || a->procs[i].lingering)
            return 0;
    return 1;
}

int br_attempt_finished(const br_attempt_t *a)
{
    return br_attempt_done(a) && pipes_closed(a);
}

void br_attempt_status(const br_attempt_t *a, int *exit_code, int *signal)
{
    *exit_code = 0;
    *signal = -1;
    /* a task that failed on its own comes before those stopped because of it */
    for (int pass = 0; pass < 2; pass++)
        for (int i = 0; i < a->n; i++) {
            int code = -1, sig = -1;
            br_task_done(a->procs[i].task, &code, &sig);
            if ((pass == 0 && code > 0) || (pass == 1 && sig >= 0)) {
                *exit_code = code;
                *signal = sig;
                return;
            }
        }
}

int br_attempt_kill(br_attempt_t *a, int timeout_ms)
{
    int rc = 0;
    for (int i = 0; i < a->n; i++) {
        if (br_task_kill_tree(a->procs[i].task, timeout_ms) < 0)
            rc = -1;
        a->procs[i].lingering = 0; /* its tree is gone: nothing is left to wait for */
    }
    return rc;
}

int br_attempt_stop(br_attempt_t *a, int sig, int64_t grace_ms, int64_t now)
{
    int sent = 0;
    for (int i = 0; i < a->n; i++) {
        int n = br_task_signal(a->procs[i].task, sig);
        sent += n > 0 ? n : 0;
    }
    if (!a->kill_at || now + grace_ms < a->kill_at) /* (a second order never extends it) */
        a->kill_at = now + (grace_ms > 0 ? grace_ms : 0);
    return sent;
}

int br_attempt_stop_due(const br_attempt_t *a, int64_t now)
{
    return a->kill_at && now >= a->kill_at && !a->frozen;
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
    if (a->frozen || br_attempt_done(a))
        return 0;
    a->frozen = 1;
    br_hang_frozen(a->hang, 1, br_mono_ms());
    int rc = 0;
    for (int i = 0; i < a->n; i++)
        if (br_task_freeze(a->procs[i].task) < 0)
            rc = -1;
    return rc;
}

int br_attempt_thaw(br_attempt_t *a)
{
    if (!a->frozen)
        return 0;
    a->frozen = 0;
    br_hang_frozen(a->hang, 0, br_mono_ms());
    int rc = 0;
    for (int i = 0; i < a->n; i++)
        if (br_task_thaw(a->procs[i].task) < 0)
            rc = -1;
    return rc;
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
    if (!a->reason[0])
        br_strlcpy(a->reason, reason, sizeof(a->reason));
}

const char *br_attempt_reason(const br_attempt_t *a)
{
    return a->reason;
}
