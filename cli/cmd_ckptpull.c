/* cmd_ckptpull.c - bramble checkpoint pull JOB [--step N] DEST: a job's counted
 * checkpoint, fetched to this machine through the coordinator (checkpoint.open,
 * checkpoint.read, checkpoint.close; docs/checkpoints.md, "Getting a checkpoint
 * back") and verified file by file against its manifest.
 *
 * It is built in DEST/.bramble-pull-NAME and renamed to DEST/NAME once every file
 * is there and verified, so DEST/NAME is whole or absent. Each file arrives in a
 * temporary file beside its place, is hashed as it comes, fsynced, and renamed into
 * place only when its hash matches. Every path is opened component by component
 * below the staging directory with O_NOFOLLOW, so a link the checkpoint holds is
 * recreated as a link and never written through. When the node it reads from is
 * lost, the pull is opened again on another copy and goes on; one that fails keeps
 * what it verified, and the next pull of the same checkpoint goes on from it. When
 * the copy read from is gone (its node answers ENOENT, or ESTALE: changed since it
 * was counted), the job's list of checkpoints says whether any other copy is left,
 * and the error says so. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <sodium.h>

#include "cli.h"
#include "manifest_check.h"
#include "util.h"

#define READ_TIMEOUT_MS 60000 /* more than the coordinator's 30 s for a holder */
#define BUSY_TRIES 40         /* answers of EAGAIN in a row before giving up */
#define PART ".bramble-part"  /* a file on its way in: NAME.bramble-part */
#define REOPEN_TRIES 2        /* holders lost in one pull before it gives up */

typedef struct {
    cli_t *cli;
    br_client_t *client;
    const char *xfer, *from;
    int progress;     /* stderr is a terminal: show how far it is */
    int gone;         /* a read was answered ENOENT or ESTALE: that copy is gone */
    int64_t total, done, fetched, kept;
    int64_t started, shown;
    br_err_t err;
} pull_t;

static void show(pull_t *p, int last)
{
    if (!p->progress)
        return;
    int64_t now = br_mono_ms();
    if (!last && now - p->shown < 100)
        return;
    p->shown = now;
    double s = (double)(now - p->started) / 1000.0;
    fprintf(stderr, "\rpulling from %s: %.1f of %.1f MiB (%d%%), %.1f MB/s   ", p->from,
            (double)p->done / 1048576.0, (double)p->total / 1048576.0,
            p->total ? (int)(100 * p->done / p->total) : 100,
            s > 0 ? (double)p->fetched / 1e6 / s : 0.0);
    if (last)
        fputc('\n', stderr);
}

/* The directory holding path (relative, checked) below root, made where missing;
 * *leaf its last component. Each step is opened with O_NOFOLLOW: a link on the way
 * is refused (ELOOP or ENOTDIR). A descriptor, or -1 with err. */
static int parent_of(pull_t *p, int root, const char *path, char *buf, const char **leaf)
{
    br_strlcpy(buf, path, PATH_MAX);
    int dfd = dup(root);
    char *s = buf, *slash;
    while (dfd >= 0 && (slash = strchr(s, '/'))) {
        *slash = 0;
        if (mkdirat(dfd, s, 0755) < 0 && errno != EEXIST) {
            br_errf(&p->err, errno, "%s: %s", path, strerror(errno));
            close(dfd);
            return -1;
        }
        int next = openat(dfd, s, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (next < 0)
            br_errf(&p->err, errno, "%s: %s", path, strerror(errno));
        close(dfd);
        dfd = next;
        s = slash + 1;
    }
    if (dfd < 0 && !p->err.errnum)
        br_errf(&p->err, errno, "%s: %s", path, strerror(errno));
    *leaf = s;
    return dfd;
}

/* Ask for the chunk of path at off: its seq. */
static int ask(pull_t *p, const char *path, const char *hex, int64_t off, uint32_t *seq)
{
    return br_client_send(p->client, "checkpoint.read",
                          json_pack("{s:s, s:s, s:s, s:I}", "xfer", p->xfer, "path", path,
                                    "hash", hex, "offset", (json_int_t)off),
                          seq, &p->err);
}

/* The reads of a file in flight on the connection, oldest first. */
typedef struct {
    uint32_t seq[BR_XFER_WINDOW];
    int head, n;
} window_t;

/* Let the answers of the reads in flight go (waiting up to timeout_ms for each), so
 * that the connection's window is empty again. */
static void let_go(pull_t *p, window_t *w, int timeout_ms)
{
    for (; w->n; w->n--, w->head = (w->head + 1) % BR_XFER_WINDOW) {
        br_msg_t *skip = NULL;
        br_err_t e2;
        br_client_recv(p->client, w->seq[w->head], timeout_ms, &skip, &e2);
        br_msg_destroy(&skip);
    }
}

/* Fetch file path (size, hash hex) into fd from the start; its bytes hashed into
 * hs. 0, or -1 with err (the reads still in flight then let go). */
static int fetch(pull_t *p, int fd, const char *path, const char *hex, int64_t size,
                 crypto_generichash_state *hs)
{
    window_t w = {.head = 0};
    int busy = 0, rc = 0;
    int64_t asked = 0, got = 0;
    while (rc == 0 && got < size) {
        while (rc == 0 && w.n < BR_XFER_WINDOW && asked < size) {
            rc = ask(p, path, hex, asked, &w.seq[(w.head + w.n) % BR_XFER_WINDOW]);
            w.n += rc == 0;
            asked += BR_XFER_CHUNK;
        }
        if (rc < 0)
            break;
        br_msg_t *m = NULL;
        rc = br_client_recv(p->client, w.seq[w.head], READ_TIMEOUT_MS, &m, &p->err);
        w.head = (w.head + 1) % BR_XFER_WINDOW;
        w.n--;
        if (rc < 0 && p->err.errnum == EAGAIN && ++busy <= BUSY_TRIES) {
            /* busy: let what is in flight come, then ask again from what we hold */
            let_go(p, &w, READ_TIMEOUT_MS);
            usleep(250000);
            asked = got;
            rc = 0;
            continue;
        }
        if (rc < 0) {
            p->gone = p->err.errnum == ENOENT || p->err.errnum == ESTALE;
            break;
        }
        busy = 0;
        size_t len = 0;
        const void *data = br_msg_data(m, &len);
        json_int_t off = -1;
        json_unpack(br_msg_body(m), "{s:I}", "offset", &off);
        if (off != got || (int64_t)len > size - got || len == 0)
            rc = br_errf(&p->err, EPROTO, "%s: %s sent a chunk that was not asked for",
                         path[0] ? path : "the manifest's listing", p->from);
        else if (br_write_all(fd, data, len) < 0)
            rc = br_errf(&p->err, errno, "%s: %s", path, strerror(errno));
        else {
            crypto_generichash_update(hs, data, len);
            got += (int64_t)len;
            p->done += (int64_t)len;
            p->fetched += (int64_t)len;
            show(p, 0);
        }
        br_msg_destroy(&m);
    }
    if (rc < 0) /* a pull opened again then starts with the window empty */
        let_go(p, &w, 2000);
    return rc;
}

/* The whole manifest that m (checkpoint.open's) stands for: m itself when it is
 * whole, else its listing (PROTOCOL.md section 11, the path "") fetched through the
 * coordinator and checked by its hash and against m. A new reference, or NULL with
 * err. */
static json_t *whole_manifest(pull_t *p, const json_t *m)
{
    const char *lhash;
    int64_t lsize;
    int lr = br_manifest_listing(m, &lhash, &lsize, &p->err);
    if (lr <= 0)
        return lr < 0 || br_manifest_verify(m, &p->err) < 0 ? NULL : json_incref((json_t *)m);
    int fd = memfd_create("bramble-listing", MFD_CLOEXEC);
    char *text = fd >= 0 ? malloc((size_t)lsize) : NULL;
    json_t *whole = NULL;
    crypto_generichash_state hs;
    crypto_generichash_init(&hs, NULL, 0, BR_MANIFEST_HASH_LEN);
    if (!text)
        br_errf(&p->err, errno ? errno : ENOMEM, "the manifest's listing: %s",
                strerror(errno ? errno : ENOMEM));
    else if (fetch(p, fd, "", lhash, lsize, &hs) == 0) {
        if (!br_manifest_hashes_to(&hs, lhash))
            br_errf(&p->err, EBADMSG, "the manifest's listing %s sent is not the one "
                    "counted", p->from);
        else if (pread(fd, text, (size_t)lsize, 0) != (ssize_t)lsize)
            br_errf(&p->err, errno, "the manifest's listing: %s", strerror(errno));
        else
            whole = br_manifest_from_listing(m, text, (size_t)lsize, &p->err);
    }
    free(text);
    if (fd >= 0)
        close(fd);
    p->done = p->fetched = 0; /* the checkpoint's own bytes from here */
    return whole;
}

/* One file of the manifest into place below root (the staging dir, or for a
 * one-file checkpoint the directory its staging file lies in, with path its name). */
static int add_file(pull_t *p, int root, const char *path, const char *hex, int64_t size,
                    int mode)
{
    char buf[PATH_MAX], tmp[NAME_MAX + 1];
    const char *leaf;
    int dfd = parent_of(p, root, path, buf, &leaf);
    if (dfd < 0)
        return -1;
    if (br_manifest_file_holds(dfd, leaf, size, hex)) { /* from a pull that stopped */
        p->done += size;
        p->kept += size;
        close(dfd);
        return 0;
    }
    if ((size_t)snprintf(tmp, sizeof(tmp), "%s" PART, leaf) >= sizeof(tmp)) {
        close(dfd);
        return br_errf(&p->err, ENAMETOOLONG, "%s: name too long", path);
    }
    int fd = openat(dfd, tmp, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (fd < 0) {
        br_errf(&p->err, errno, "%s: %s", path, strerror(errno));
        close(dfd);
        return -1;
    }
    crypto_generichash_state hs;
    crypto_generichash_init(&hs, NULL, 0, BR_MANIFEST_HASH_LEN);
    int rc = fetch(p, fd, path, hex, size, &hs);
    if (rc == 0 && !br_manifest_hashes_to(&hs, hex))
        rc = br_errf(&p->err, EBADMSG, "%s: the bytes %s sent do not match the manifest's "
                     "hash (its copy is damaged): nothing of it was kept", path, p->from);
    if (rc == 0 && (fchmod(fd, (mode_t)mode & 07777) < 0 || fsync(fd) < 0))
        rc = br_errf(&p->err, errno, "%s: %s", path, strerror(errno));
    close(fd);
    if (rc == 0 && renameat(dfd, tmp, dfd, leaf) < 0)
        rc = br_errf(&p->err, errno, "%s: %s", path, strerror(errno));
    if (rc < 0)
        unlinkat(dfd, tmp, 0);
    close(dfd);
    return rc;
}

static int add_link(pull_t *p, int root, const char *path, const char *target)
{
    char buf[PATH_MAX];
    const char *leaf;
    int dfd = parent_of(p, root, path, buf, &leaf);
    if (dfd < 0)
        return -1;
    unlinkat(dfd, leaf, 0); /* (a link from a pull that stopped) */
    int rc = symlinkat(target, dfd, leaf) < 0
                 ? br_errf(&p->err, errno, "%s: %s", path, strerror(errno))
                 : 0;
    close(dfd);
    return rc;
}

/* Every entry of manifest m into the staging place stage (a directory for a
 * checkpoint that is one, else a file) inside dest. */
static int build(pull_t *p, int dest, const char *stage, const json_t *m)
{
    int is_dir = strcmp(json_string_value(json_object_get(m, "root")), "dir") == 0;
    int root = dest;
    if (is_dir) {
        if (mkdirat(dest, stage, 0755) < 0 && errno != EEXIST)
            return br_errf(&p->err, errno, "%s: %s", stage, strerror(errno));
        root = openat(dest, stage, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (root < 0)
            return br_errf(&p->err, errno, "%s: %s", stage, strerror(errno));
    }
    size_t i;
    json_t *e;
    int rc = 0;
    json_array_foreach (json_object_get(m, "entries"), i, e) {
        const char *path = is_dir ? json_string_value(json_object_get(e, "path")) : stage;
        const char *link = json_string_value(json_object_get(e, "link"));
        rc = link ? add_link(p, root, path, link)
                  : add_file(p, root, path, json_string_value(json_object_get(e, "hash")),
                             json_integer_value(json_object_get(e, "size")),
                             (int)json_integer_value(json_object_get(e, "mode")));
        if (rc < 0)
            break;
    }
    if (rc == 0 && fsync(root) < 0)
        rc = br_errf(&p->err, errno, "%s: %s", stage, strerror(errno));
    if (is_dir)
        close(root);
    return rc;
}

/* The nodes other than from that hold a copy of cp ("node-1 (wrote it), node-3")
 * into buf; how many. */
static int other_copies(const json_t *cp, const char *from, char *buf, size_t len)
{
    size_t i, used = 0;
    int n = 0;
    json_t *c;
    buf[0] = 0;
    json_array_foreach (json_object_get(cp, "copies"), i, c) {
        const char *node = json_string_value(json_object_get(c, "node"));
        if (!node || strcmp(node, from) == 0)
            continue;
        int k = snprintf(buf + used, len - used, "%s%s%s", n ? ", " : "", node,
                         json_is_true(json_object_get(c, "writer")) ? " (wrote it)" : "");
        if (k < 0 || (size_t)k >= len - used)
            break;
        used += (size_t)k;
        n++;
    }
    return n;
}

/* Older checkpoints than step that a replica holds ("step 25 on node-2, ...") into
 * buf; how many. */
static int older_replicas(const json_t *cps, json_int_t step, char *buf, size_t len)
{
    size_t i, j, used = 0;
    int n = 0;
    json_t *cp, *c;
    buf[0] = 0;
    json_array_foreach (cps, i, cp) {
        json_int_t s = json_integer_value(json_object_get(cp, "step"));
        if (s >= step)
            continue;
        json_array_foreach (json_object_get(cp, "copies"), j, c) {
            if (json_is_true(json_object_get(c, "writer")))
                continue;
            int k = snprintf(buf + used, len - used, "%sstep %lld on %s", n ? ", " : "",
                             (long long)s, json_string_value(json_object_get(c, "node")));
            if (k < 0 || (size_t)k >= len - used)
                return n;
            used += (size_t)k;
            n++;
            break;
        }
    }
    return n;
}

/* The checkpoint at step with manifest hash in cps (job.show's), or NULL. */
static const json_t *listed(const json_t *cps, json_int_t step, const char *hash)
{
    size_t i;
    json_t *cp;
    json_array_foreach (cps, i, cp) {
        const char *h =
            json_string_value(json_object_get(json_object_get(cp, "manifest"), "hash"));
        if (json_integer_value(json_object_get(cp, "step")) == step && h && hash &&
            strcmp(h, hash) == 0)
            return cp;
    }
    return NULL;
}

/* The copy the pull read from (open: checkpoint.open's answer) is gone or changed:
 * the error says so, and whether the job's list of checkpoints has another copy. */
static int fail_gone(pull_t *p, long id, const json_t *open)
{
    json_int_t step = json_integer_value(json_object_get(open, "step"));
    const char *path = json_string_value(json_object_get(open, "path"));
    const char *hash = json_string_value(json_object_get(json_object_get(open, "manifest"),
                                                         "hash"));
    int replica = json_is_true(json_object_get(open, "replica"));
    int changed = p->err.errnum == ESTALE;
    char what[PATH_MAX + 256], others[1024], older[1024];
    if (replica)
        snprintf(what, sizeof(what), "%s's replica %s", p->from,
                 changed ? "has changed since it was counted" : "is gone");
    else
        snprintf(what, sizeof(what), "%s %s on %s, which wrote it%s", path ? path : "?",
                 changed ? "has changed" : "is gone", p->from,
                 changed ? ", since it was counted" : "");
    json_t *show = br_client_call(p->client, "job.show",
                                  json_pack("{s:I}", "id", (json_int_t)id),
                                  p->cli->timeout_ms, NULL);
    const json_t *cps = json_object_get(json_object_get(show, "job"), "checkpoints");
    const json_t *mine = listed(cps, step, hash);
    int n = mine ? other_copies(mine, p->from, others, sizeof(others)) : 0;
    if (!show || n)
        cli_fail(p->cli, "job %ld's checkpoint step %lld: %s\n  (%s: %s)%s%s", id,
                 (long long)step, what, p->from, p->err.text, n ? "\n  other copies: " : "",
                 n ? others : "");
    else
        cli_fail(p->cli, "no copy of job %ld's checkpoint step %lld is left: %s, and no "
                 "other node holds a replica\n  (%s: %s)", id, (long long)step, what,
                 p->from, p->err.text);
    if (n && !replica) /* the coordinator reads the writer first while it is ready */
        fprintf(stderr, "  a pull reads %s's copy while %s is ready: drain it for the "
                "pull (bramble node drain %s; pull again; bramble node undrain %s)\n",
                p->from, p->from, p->from, p->from);
    else if (show && older_replicas(cps, step, older, sizeof(older)))
        fprintf(stderr, "  older checkpoints with a replica: %s (pull one with --step "
                "STEP)\n", older);
    json_decref(show);
    return CLI_FAIL;
}

int cli_checkpoint_pull(cli_t *cli, int argc, char **argv)
{
    static const char *names[] = {"job ID", "DEST"};
    const char *pos[2];
    long id, step = -1;
    int json = 0;
    if (cli_step_args(cli, argc, argv, 2, names, pos, &step, &json) != 0 ||
        cli_parse_long(cli, "job ID", pos[0], 1, LONG_MAX, &id) != 0)
        return CLI_USAGE;
    const char *destdir = pos[1];
    br_err_t merr = {0};
    if (br_mkdir_p(destdir, 0755, &merr) < 0) /* with its parents, as mkdir -p */
        return cli_fail(cli, "%s", merr.text);
    int dest = open(destdir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dest < 0)
        return cli_fail(cli, "%s: %s", destdir, strerror(errno));
    json_t *body = json_pack("{s:I}", "job", (json_int_t)id);
    if (step >= 0)
        json_object_set_new(body, "step", json_integer(step));
    json_t *r = cli_call(cli, "checkpoint.open", body);
    if (!r) {
        close(dest);
        return CLI_FAIL;
    }
    pull_t p = {.cli = cli,
                .client = cli_client(cli),
                .xfer = json_string_value(json_object_get(r, "xfer")),
                .from = json_string_value(json_object_get(r, "from")),
                .progress = !json && isatty(2),
                .started = br_mono_ms()};
    const json_t *sum = json_object_get(r, "manifest");
    json_t *m = NULL; /* the whole manifest */
    const char *path = json_string_value(json_object_get(r, "path"));
    const char *name = path ? strrchr(path, '/') : NULL;
    name = name ? name + 1 : path;
    char stage[NAME_MAX + 1];
    struct stat st;
    int rc = CLI_FAIL;
    json_t *reopened = NULL; /* the answer of a pull opened again (p's strings in it) */
    if (!p.xfer || !p.from || !name) {
        cli_fail(cli, "the coordinator's answer is not usable: no pull, path or holder");
    } else if (!(m = whole_manifest(&p, sum))) {
        if (p.gone)
            fail_gone(&p, id, r);
        else
            cli_fail(cli, "checkpoint step %lld of job %ld: %s",
                     (long long)json_integer_value(json_object_get(r, "step")), id,
                     p.err.text);
    } else if (!br_manifest_path_ok(name) ||
               (size_t)snprintf(stage, sizeof(stage), ".bramble-pull-%s", name) >=
                   sizeof(stage)) {
        cli_fail(cli, "the checkpoint's name '%s' cannot be a file name here", name);
    } else if (fstatat(dest, name, &st, AT_SYMLINK_NOFOLLOW) == 0) {
        cli_fail(cli, "%s/%s exists already: remove it, or pull into another directory",
                 destdir, name);
    } else {
        p.total = json_integer_value(json_object_get(m, "bytes"));
        int built, tries = 0;
        while ((built = build(&p, dest, stage, m)) < 0 && p.err.errnum == EHOSTUNREACH &&
               tries++ < REOPEN_TRIES) {
            /* the holder was lost mid-pull: on from another copy of the same
             * checkpoint, keeping what was verified */
            json_t *r2 = br_client_call(
                p.client, "checkpoint.open",
                json_pack("{s:I, s:O}", "job", (json_int_t)id, "step",
                          json_object_get(r, "step")),
                cli->timeout_ms, NULL);
            const char *h2 =
                json_string_value(json_object_get(json_object_get(r2, "manifest"), "hash"));
            if (!h2 || strcmp(h2, json_string_value(json_object_get(m, "hash"))) != 0 ||
                !json_string_value(json_object_get(r2, "xfer")) ||
                !json_string_value(json_object_get(r2, "from"))) {
                json_decref(r2);
                break;
            }
            fprintf(stderr, "%sbramble: checkpoint: %s; going on from %s's copy\n",
                    p.progress ? "\n" : "", p.err.text,
                    json_string_value(json_object_get(r2, "from")));
            json_decref(reopened);
            reopened = r2;
            p.xfer = json_string_value(json_object_get(r2, "xfer"));
            p.from = json_string_value(json_object_get(r2, "from"));
            p.done = p.kept = 0;
            p.err = (br_err_t){0};
        }
        if (built < 0) {
            if (p.progress)
                fputc('\n', stderr);
            if (p.gone) { /* (an empty staging dir is no help to anyone) */
                unlinkat(dest, stage, AT_REMOVEDIR);
                fail_gone(&p, id, r);
            } else
                cli_fail(cli, "%s (what was verified is kept in %s/%s; pulling again goes "
                         "on from it)", p.err.text, destdir, stage);
        } else if (renameat(dest, stage, dest, name) < 0 || fsync(dest) < 0) {
            cli_fail(cli, "%s/%s: %s", destdir, name, strerror(errno));
        } else {
            show(&p, 1);
            rc = CLI_OK;
        }
    }
    /* the grant is withdrawn now rather than when the pull has been idle a minute */
    json_t *closed = br_client_call(p.client, "checkpoint.close",
                                    json_pack("{s:s}", "xfer", p.xfer ? p.xfer : ""),
                                    cli->timeout_ms, NULL);
    json_decref(closed);
    if (rc == CLI_OK) {
        double s = (double)(br_mono_ms() - p.started) / 1000.0;
        long long files = json_integer_value(json_object_get(m, "files"));
        char where[PATH_MAX];
        snprintf(where, sizeof(where), "%s/%s", destdir, name);
        if (json) {
            json_t *out = json_pack(
                "{s:I, s:I, s:s, s:s, s:s, s:I, s:I, s:I, s:I, s:f}", "job", (json_int_t)id,
                "step", json_integer_value(json_object_get(r, "step")), "path", where,
                "from", p.from, "hash", json_string_value(json_object_get(m, "hash")),
                "files", (json_int_t)files, "bytes", (json_int_t)p.total, "received",
                (json_int_t)p.fetched, "kept", (json_int_t)p.kept, "seconds", s);
            cli_print_json(out);
            json_decref(out);
        } else {
            char size[32], rate[32];
            br_format_size((uint64_t)p.total, size, sizeof(size));
            br_format_size(s > 0 ? (uint64_t)((double)p.fetched / s) : 0, rate, sizeof(rate));
            printf("pulled checkpoint step %lld of job %ld from %s into %s: %lld file%s, "
                   "%s, verified (%s/s)\n",
                   (long long)json_integer_value(json_object_get(r, "step")), id, p.from,
                   where, files, files == 1 ? "" : "s", size, rate);
        }
    }
    json_decref(reopened);
    json_decref(m);
    json_decref(r);
    close(dest);
    return rc;
}
