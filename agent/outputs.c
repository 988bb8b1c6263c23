/* outputs.c - an attempt's outputs, found, hashed and sent on a thread of their own. */
#include "outputs.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "client.h"
#include "fsid.h"
#include "ignore.h"
#include "mfbuild.h"
#include "upload.h"
#include "util.h"
#include "workq.h"

#define ANSWER_MS 60000 /* the coordinator's answer to one request */

typedef struct {
    br_wqnode_t node;
    int64_t job;
    int attempt;
    char dir[PATH_MAX];
    json_t *patterns;
    uid_t uid;
    gid_t gid;
    json_t *result;
} out_job_t;

struct br_outputs {
    br_workq_t q;
    const br_cred_t *cred;
};

typedef struct {
    br_mfbuild_t *b;
    br_ignore_t *ig;
    const char *root;
    br_err_t *err;
} walk_t;

/* Add what below the directory fd (at rel, "" for the root) is an output; all: every
 * file (a directory a pattern matched). */
static int walk(walk_t *w, int fd, const char *rel, int depth, int all)
{
    DIR *d = fdopendir(fd);
    if (!d) {
        close(fd);
        return br_errf(w->err, errno, "%s/%s: %s", w->root, rel, strerror(errno));
    }
    int rc = 0;
    struct dirent *de;
    while (rc == 0 && (de = readdir(d))) {
        if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
            continue;
        char child[PATH_MAX], src[PATH_MAX * 2];
        struct stat st;
        if ((size_t)snprintf(child, sizeof(child), "%s%s%s", rel, *rel ? "/" : "",
                             de->d_name) >= sizeof(child) ||
            fstatat(dirfd(d), de->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0)
            continue;
        if (S_ISDIR(st.st_mode) && depth < BR_MANIFEST_MAX_DEPTH) {
            int sub = openat(dirfd(d), de->d_name,
                             O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
            if (sub >= 0)
                rc = walk(w, sub, child, depth + 1, all || br_ignore_match(w->ig, child, 1, 0));
        } else if (S_ISREG(st.st_mode) && (all || br_ignore_match(w->ig, child, 0, 0))) {
            int f = openat(dirfd(d), de->d_name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
            struct stat fst;
            snprintf(src, sizeof(src), "%s/%s", w->root, child);
            if (f < 0 || fstat(f, &fst) < 0)
                rc = br_errf(w->err, errno, "%s: %s", child, strerror(errno));
            else
                rc = br_mfbuild_file(w->b, f, &fst, child, src, w->err);
            if (f >= 0)
                close(f);
        }
    }
    closedir(d);
    return rc;
}

static const char *source(void *arg, const char *path)
{
    return br_mfbuild_src(arg, path);
}

/* Find, hash and send one attempt's outputs; the result. */
static json_t *keep(br_outputs_t *o, out_job_t *j, const atomic_int *cancel)
{
    br_err_t err = {0};
    json_t *m = NULL, *listing = NULL, *summary = NULL, *res = NULL;
    br_upload_stats_t st = {0};
    br_client_t *client = NULL;
    br_fsid_t *as = br_fsid_new(j->uid, j->gid, &err);
    br_mfbuild_t *b = br_mfbuild_new(cancel, &err);
    br_ignore_t *ig = br_ignore_new(&err);
    char *text = NULL;
    size_t tlen = 0;
    size_t i;
    json_t *p;
    json_array_foreach(j->patterns, i, p) { /* one pattern a line, as a .gitignore */
        size_t k = strlen(json_string_value(p));
        char *t = realloc(text, tlen + k + 2);
        if (!t)
            break;
        text = t;
        memcpy(text + tlen, json_string_value(p), k);
        tlen += k;
        text[tlen++] = '\n';
    }
    if (!as || !b || !ig || br_ignore_push(ig, "", text ? text : "", tlen, 0, &err) < 0 ||
        br_fsid_enter(as, &err) < 0)
        goto out;
    walk_t w = {.b = b, .ig = ig, .root = j->dir, .err = &err};
    int fd = open(j->dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    int rc = fd < 0 ? br_errf(&err, errno, "%s: %s", j->dir, strerror(errno))
                    : walk(&w, fd, "", 0, 0);
    if (rc == 0 && br_mfbuild_count(b) > 0 && (m = br_mfbuild_json(b, "dir", &err)) &&
        (client = br_client_new_cred(o->cred, &err))) {
        br_upload_t u = {.client = client, .timeout_ms = ANSWER_MS, .manifest = m,
                         .source = source, .arg = b};
        char path[PATH_MAX];
        if (br_upload_run(&u, &listing, &summary, &st, path, sizeof(path), &err) == 0) {
            json_t *r = br_client_call(client, "job.outputs",
                                       json_pack("{s:I, s:i, s:O, s:O}", "job",
                                                 (json_int_t)j->job, "attempt", j->attempt,
                                                 "listing", listing, "manifest", summary),
                                       ANSWER_MS, &err);
            if (r)
                res = json_pack("{s:I, s:I, s:I}", "files", (json_int_t)st.files, "bytes",
                                (json_int_t)st.bytes, "sent", (json_int_t)st.sent);
            json_decref(r);
        } else if (path[0]) {
            br_err_prefix(&err, "%s", path);
        }
    } else if (rc == 0 && br_mfbuild_count(b) == 0) {
        res = json_pack("{s:i, s:i, s:i}", "files", 0, "bytes", 0, "sent", 0);
    }
    br_fsid_leave(as);
out:
    if (!res)
        res = json_pack("{s:s}", "error", err.text[0] ? err.text : "out of memory");
    br_client_destroy(&client);
    json_decref(m);
    json_decref(listing);
    json_decref(summary);
    br_ignore_destroy(&ig);
    br_mfbuild_destroy(&b);
    br_fsid_destroy(&as);
    free(text);
    return res;
}

static out_job_t *job_of(br_wqnode_t *n)
{
    return n ? BR_WQ_JOB(n, out_job_t, node) : NULL;
}

static void job_work(void *owner, br_wqnode_t *n)
{
    br_outputs_t *o = owner;
    out_job_t *j = job_of(n);
    j->result = keep(o, j, &o->q.w.cancel);
}

static void job_free(br_wqnode_t *n)
{
    out_job_t *j = job_of(n);
    json_decref(j->patterns);
    json_decref(j->result);
    free(j);
}

static const br_workq_ops_t ops = {NULL, job_work, NULL, job_free};

br_outputs_t *br_outputs_new(const br_cred_t *cred, br_err_t *err)
{
    br_outputs_t *o = calloc(1, sizeof(*o));
    if (!o)
        return br_errp(err, ENOMEM, "out of memory");
    o->cred = cred;
    int rc = br_workq_init(&o->q, "outputs", &ops, o, err);
    if (rc < 0 || br_workq_start(&o->q, err) < 0) {
        br_workq_fini(&o->q);
        free(o);
        return NULL;
    }
    return o;
}

void br_outputs_destroy(br_outputs_t **op)
{
    if (!op || !*op)
        return;
    br_workq_fini(&(*op)->q);
    free(*op);
    *op = NULL;
}

int br_outputs_fd(const br_outputs_t *o)
{
    return br_workq_fd(&o->q);
}

int br_outputs_submit(br_outputs_t *o, int64_t job, int attempt, const char *dir,
                      const json_t *patterns, uid_t uid, gid_t gid, br_err_t *err)
{
    out_job_t *j = calloc(1, sizeof(*j));
    if (!j)
        return br_errf(err, ENOMEM, "out of memory");
    *j = (out_job_t){.job = job, .attempt = attempt, .uid = uid, .gid = gid,
                     .patterns = json_deep_copy(patterns)};
    br_strlcpy(j->dir, dir, sizeof(j->dir));
    pthread_mutex_lock(&o->q.w.mu);
    br_workq_add(&o->q, NULL, &j->node);
    pthread_mutex_unlock(&o->q.w.mu);
    return 0;
}

json_t *br_outputs_take(br_outputs_t *o)
{
    out_job_t *j = job_of(br_workq_take(&o->q));
    if (!j)
        return NULL;
    json_t *r = j->result ? json_incref(j->result) : json_pack("{s:s}", "error", "cancelled");
    json_object_set_new(r, "job", json_integer(j->job));
    json_object_set_new(r, "attempt", json_integer(j->attempt));
    job_free(&j->node);
    return r;
}
