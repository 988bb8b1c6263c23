/* sendtree.c - a packed tree sent into the content store, as the CLI shows it. */
#include "sendtree.h"

#include <errno.h>
#include <fcntl.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "client.h"
#include "upload.h"
#include "util.h"

#define UPLOAD_TIMEOUT_MS 60000 /* an answer to one chunk (the store fsyncs) */
#define SHOW_AFTER_MS 1000      /* a progress line for uploads longer than this */
#define LARGEST 5
#define STAGE_MIN (1 << 20)     /* an upload this big has its job's code staged */
#define STAGE_TIMEOUT_MS 5000   /* (best effort: the upload goes on without) */

typedef struct {
    br_pack_t *p;
    int progress, shown_any;
    int staged; /* code.stage was sent */
    int64_t started, shown, done, total;
    br_client_t *client;
    const json_t *stage; /* {"spec", "sets"} of the job, or NULL */
} show_t;

static void show(show_t *s, int last)
{
    int64_t now = br_mono_ms();
    if (!s->progress || (!last && (now - s->started < SHOW_AFTER_MS || now - s->shown < 200)))
        return;
    if (last && !s->shown_any)
        return;
    s->shown = now;
    s->shown_any = 1;
    double secs = (double)(now - s->started) / 1000.0;
    double rate = secs > 0 ? (double)s->done / secs : 0;
    double left = rate > 0 ? (double)(s->total - s->done) / rate : 0;
    fprintf(stderr, "\ruploading: %.1f of %.1f MiB (%d%%), %.1f MB/s, %.0fs left   ",
            (double)s->done / 1048576.0, (double)s->total / 1048576.0,
            s->total ? (int)(100 * s->done / s->total) : 100, rate / 1e6,
            last ? 0.0 : left);
    if (last)
        fputc('\n', stderr);
}

static void progress(void *arg, int64_t done, int64_t total)
{
    show_t *s = arg;
    s->done = done;
    s->total = total;
    show(s, 0);
}

/* What the store lacks is known: when it is much, the node the job would go to now
 * fetches the files as they are stored (code.stage), so that little is left to
 * fetch once the job is submitted. Best effort: a coordinator that predates it, or
 * no node that fits now, and the node fetches the code once the job is placed. */
static void lacking(void *arg, const json_t *listing, const json_t *summary, int64_t bytes)
{
    show_t *s = arg;
    if (!s->stage || s->staged || bytes < STAGE_MIN)
        return;
    s->staged = 1;
    json_t *body = json_deep_copy(s->stage);
    br_err_t err;
    if (!body || json_object_set(body, "listing", (json_t *)listing) < 0 ||
        json_object_set(body, "manifest", (json_t *)summary) < 0) {
        json_decref(body);
        return;
    }
    json_decref(br_client_call(s->client, "code.stage", body, STAGE_TIMEOUT_MS, &err));
}

static const char *source(void *arg, const char *path)
{
    return br_pack_source(((show_t *)arg)->p, path);
}

/* "a (1.2 GiB), b (3 MiB)": the largest files of the tree. */
static const char *largest(br_pack_t *p, char *buf, size_t len)
{
    const char *path[LARGEST];
    int64_t size[LARGEST];
    size_t n = br_pack_largest(p, LARGEST, path, size), used = 0;
    buf[0] = 0;
    for (size_t i = 0; i < n && used < len; i++) {
        char sz[32];
        int w = snprintf(buf + used, len - used, "%s%s (%s)", i ? ", " : "", path[i],
                         br_format_size((uint64_t)size[i], sz, sizeof(sz)));
        used += w > 0 ? (size_t)w : 0;
    }
    return buf;
}

int cli_upload(cli_t *cli, br_pack_t *p, int progress_shown, const json_t *stage,
               json_t **listing, json_t **summary, cli_upload_t *st)
{
    br_err_t err;
    *listing = *summary = NULL;
    const json_t *m = br_pack_manifest(p, &err);
    if (!m)
        return cli_fail(cli, "%s", err.text);
    br_client_t *client = cli_client(cli);
    if (!client)
        return CLI_FAIL;
    show_t s = {.p = p, .progress = progress_shown, .started = br_mono_ms(),
                .client = client, .stage = stage};
    br_upload_t u = {.client = client,
                     .timeout_ms = cli->timeout_given ? cli->timeout_ms : UPLOAD_TIMEOUT_MS,
                     .manifest = m,
                     .source = source, .progress = progress, .lacking = lacking, .arg = &s};
    char path[4200];
    if (br_upload_run(&u, listing, summary, st, path, sizeof(path), &err) == 0) {
        show(&s, 1);
        return CLI_OK;
    }
    if (s.shown_any)
        fputc('\n', stderr);
    if (err.errnum == EBADMSG && path[0])
        return cli_fail(cli, "%s changed after it was hashed (the store found other bytes): "
                             "send it again once it is written",
                        path);
    if (err.errnum == EDQUOT && !strstr(err.text, "largest")) {
        char big[700];
        return cli_fail(cli, "%s; the tree's largest files: %s. Leave out what is not "
                             "needed with .brambleignore",
                        err.text, largest(p, big, sizeof(big)));
    }
    if (err.errnum == ETIMEDOUT && s.total > 0) {
        char a[32], b[32];
        return cli_fail(cli, "the upload stalled with %s of %s sent: %s. The store keeps "
                             "what it took: the same command again goes on from there",
                        br_format_size((uint64_t)s.done, a, sizeof(a)),
                        br_format_size((uint64_t)s.total, b, sizeof(b)), err.text);
    }
    return cli_fail(cli, "%s%s%s", path[0] ? path : "", path[0] ? ": " : "", err.text);
}

void cli_upload_say_left_out(const br_pack_t *p)
{
    const char *const *names;
    size_t n = br_pack_left_out(p, &names);
    if (!n)
        return;
    fprintf(stderr, "left out by %s: ", br_pack_in_git(p) ? ".gitignore/.brambleignore"
                                                           : ".brambleignore");
    for (size_t i = 0; i < n && i < BR_PACK_LEFT_OUT; i++)
        fprintf(stderr, "%s%s", i ? ", " : "", names[i]);
    fprintf(stderr, n > BR_PACK_LEFT_OUT ? " and %zu more\n" : "\n",
            n - BR_PACK_LEFT_OUT);
}
