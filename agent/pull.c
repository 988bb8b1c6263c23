/* pull.c - builds a checkpoint from a holder's files and local copies (pull.h). */
#include "pull.h"
#include "beneath.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <sodium.h>
#include <zmq.h>

#include "fsid.h"
#include "holder.h"
#include "listing.h"
#include "manifest.h"
#include "msg.h"
#include "sock.h"
#include "util.h"

/*
 * Layout, for a destination P/NAME:
 *   P/.bramble-pull-NAME/      the checkpoint as it is built (hidden: no pattern
 *                              matches it), renamed to P/NAME at the end (exchanged
 *                              with an old P/NAME, which is then removed)
 *   P/.bramble-pull-NAME.tmp/  files on their way in, named by their hash
 * Everything below the staging directory is opened relative to its parent's
 * descriptor with O_NOFOLLOW, so no path in a manifest (already refused when it has
 * "..", is absolute, or is empty) and no symlink the manifest creates can lead a
 * write outside it. Files get the manifest's permission bits without setuid, setgid
 * and sticky.
 */

#define COPY_BUF (1 << 20)
#define HEARTBEAT_MS                                                                \
    1000                 /* a ZMTP PING this often; no answer for stall_ms: dropped \
                          */
#define SILENT_TIMES 12  /* a live link with no answer for 12 stall_ms: dropped too */
#define BUSY_WAIT_MS 250 /* a busy holder is asked again after this */
#define BUSY_MAX 1200    /* ... this many times for one file (5 minutes), at most */
#define NOT_YET_MS 20    /* a file still on its way to the holder: asked again after */
#define HASH_LEN crypto_generichash_BYTES
/* The coordinator sends the holder its grant and this node its order at once, on
 * two links: a holder that refuses our key this soon after we first connected may
 * not have the grant yet, so the pull connects again 50 ms later instead of
 * failing. */
#define GRANT_WAIT_MS 1000
#define MON_EVENTS                                              \
    (ZMQ_EVENT_DISCONNECTED | ZMQ_EVENT_HANDSHAKE_FAILED_AUTH | \
     ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL | ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL)

typedef struct {
    const br_pull_req_t *r;
    void *ctx, *sock, *mon;
    const atomic_int *cancel;
    br_err_t *err;
    int stage, tmp, old, index; /* directory fds, -1 when none */
    int seals;                  /* BR_PULL_SEAL_DIR's fd, -1 when none */
    int old_file;               /* a one-file checkpoint's old copy, or -1 */
    int spare;                  /* the spare copy being built (r->spare), or -1 */
    char stage_path[PATH_MAX], tmp_path[PATH_MAX], spare_path[PATH_MAX];
    uint32_t seq;
    int64_t written, stall_ms;
    int64_t connected_ms; /* monotonic ms of the first connect (0: none yet) */
    int listing; /* fetching the manifest's whole listing: not the checkpoint's bytes */
    unsigned char *buf;
    br_pull_stats_t st;
} pull_t;

static int is_full(int e)
{
    return e == ENOSPC || e == EDQUOT || e == EFBIG;
}

static int cancelled(const pull_t *p)
{
    return p->cancel && atomic_load(p->cancel);
}

static void rm_path(const char *path)
{
    br_rm_tree(AT_FDCWD, path);
}

/* The directory that holds rel's last component, made (0755) as needed beneath
 * root; *name points at that component. The fd, or -1 with err. */
static int parent_of(pull_t *p, const char *rel, const char **name)
{
    char part[PATH_MAX];
    int dfd = dup(p->stage);
    const char *c = rel;
    for (;;) {
        size_t k = strcspn(c, "/");
        if (c[k] == '\0' || dfd < 0) {
            *name = c;
            return dfd >= 0 ? dfd : br_errf(p->err, errno, "%s", strerror(errno));
        }
        memcpy(part, c, k);
        part[k] = '\0';
        if (mkdirat(dfd, part, 0755) < 0 && errno != EEXIST) {
            int e = errno;
            close(dfd);
            return br_errf(p->err, e, "%s: %s", rel, strerror(e));
        }
        int fd = openat(dfd, part, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        int e = errno;
        close(dfd);
        if (fd < 0)
            return br_errf(
                p->err, e, "%s: %s", rel,
                e == ELOOP || e == ENOTDIR ? "a link or file on the way" : strerror(e));
        dfd = fd;
        c += k + 1;
    }
}

/* Open rel beneath the directory fd dfd (not taken over) as a regular file of
 * size bytes, never through a symlink; -1 when there is none such. */
static int open_old(int dfd, const char *rel, json_int_t size)
{
    int dup_fd = dup(dfd);
    int cur = dup_fd >= 0 ? br_open_beneath(dup_fd, rel, NULL) : -1;
    struct stat st;
    if (cur >= 0 &&
        (fstat(cur, &st) < 0 || !S_ISREG(st.st_mode) || st.st_size != size)) {
        close(cur);
        cur = -1;
    }
    if (cur >= 0)
        fcntl(cur, F_SETFL, fcntl(cur, F_GETFL) & ~O_NONBLOCK);
    return cur;
}

/* Count n more bytes written; -1 with err past the limit. */
/* n more bytes of the checkpoint are in place: what br_pull_req_t.progress shows. */
static void done(pull_t *p, uint64_t n)
{
    if (p->r->progress && !p->listing)
        atomic_fetch_add(p->r->progress, (long long)n);
}

static int charge(pull_t *p, size_t n)
{
    p->written += (int64_t)n;
    if (p->r->limit >= 0 && p->written > p->r->limit)
        return br_errf(p->err, ENOSPC, "the replica quota is used up");
    return 0;
}

/* The temporary file for hash hex, its length in *have, its first *have bytes
 * hashed into hs. */
static int open_tmp(pull_t *p, const char *hex, json_int_t size, int64_t *have,
                    crypto_generichash_state *hs)
{
    int fd = openat(p->tmp, hex, O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) < 0) {
        int e = errno;
        if (fd >= 0)
            close(fd);
        return br_errf(p->err, e, "%s/%s: %s", p->tmp_path, hex, strerror(e));
    }
    *have = st.st_size <= size ? st.st_size : 0;
    if (st.st_size > size && ftruncate(fd, 0) < 0) {
        close(fd);
        return br_errf(p->err, errno, "%s: %s", hex, strerror(errno));
    }
    crypto_generichash_init(hs, NULL, 0, HASH_LEN);
    for (int64_t off = 0; off < *have;) {
        size_t want = *have - off < COPY_BUF ? (size_t)(*have - off) : COPY_BUF;
        ssize_t k = pread(fd, p->buf, want, off);
        if (k <= 0) { /* cannot read back what was kept: start again */
            if (ftruncate(fd, 0) < 0) {
                close(fd);
                return br_errf(p->err, errno, "%s: %s", hex, strerror(errno));
            }
            crypto_generichash_init(hs, NULL, 0, HASH_LEN);
            *have = 0;
            break;
        }
        crypto_generichash_update(hs, p->buf, (unsigned long long)k);
        off += k;
    }
    if (lseek(fd, *have, SEEK_SET) < 0) {
        close(fd);
        return br_errf(p->err, errno, "%s: %s", hex, strerror(errno));
    }
    return fd;
}

/* store's seal of index entry hex, gone with the entry. */
static void unseal_at(const char *store, const char *hex)
{
    char path[PATH_MAX + 100];
    snprintf(path, sizeof(path), "%s/%s/%s", store, BR_PULL_SEAL_DIR, hex);
    unlink(path);
}

int64_t br_pull_index_used(const char *store, int forget)
{
    char idx[PATH_MAX];
    snprintf(idx, sizeof(idx), "%s/%s", store, BR_PULL_HASH_DIR);
    DIR *d = opendir(idx);
    if (!d)
        return 0;
    int64_t sum = 0;
    struct dirent *de;
    while ((de = readdir(d))) {
        struct stat st;
        if (de->d_name[0] == '.' ||
            fstatat(dirfd(d), de->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0 || !S_ISREG(st.st_mode))
            continue;
        if (forget && st.st_nlink == 1 && unlinkat(dirfd(d), de->d_name, 0) == 0) {
            unseal_at(store, de->d_name);
            continue;
        }
        sum += st.st_size;
    }
    closedir(d);
    return sum;
}

void br_pull_index_drop(const char *store, const char *hex)
{
    char path[PATH_MAX + 100];
    snprintf(path, sizeof(path), "%s/%s/%s", store, BR_PULL_HASH_DIR, hex);
    unlink(path);
    unseal_at(store, hex);
}

/* A file's seal, as its entry in BR_PULL_SEAL_DIR keeps it: its inode, size and
 * modification time to the nanosecond (not its change time, which each tree that
 * links it moves on). */
static void seal_text(const struct stat *st, char *buf, size_t len)
{
    snprintf(buf, len, "%llx:%llx:%llx.%lx", (unsigned long long)st->st_ino,
             (unsigned long long)st->st_size, (unsigned long long)st->st_mtim.tv_sec,
             (long)st->st_mtim.tv_nsec);
}

/* Index entry hex was verified (hashed) just now: its seal kept (not synced: a seal
 * lost only means the file is hashed again). */
static void seal(pull_t *p, const char *hex)
{
    struct stat st;
    char text[128], tmp[128];
    if (p->seals < 0 || fstatat(p->index, hex, &st, AT_SYMLINK_NOFOLLOW) < 0)
        return;
    seal_text(&st, text, sizeof(text));
    snprintf(tmp, sizeof(tmp), "%.80s.tmp", hex);
    int fd = openat(p->seals, tmp, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC,
                    0600);
    if (fd < 0)
        return;
    size_t len = strlen(text);
    int ok = write(fd, text, len) == (ssize_t)len;
    close(fd);
    if (!ok || renameat(p->seals, tmp, p->seals, hex) < 0)
        unlinkat(p->seals, tmp, 0);
}

/* Whether the index's file src (entry hex) is as it was when it was last verified:
 * its seal kept and unchanged. Nothing writes the store's files in place, so one
 * whose inode, size or modification time moved was written (a damaged disk's rot
 * that leaves them alone is not seen: as for the trees, docs/files.md). */
static int sealed(pull_t *p, int src, const char *hex)
{
    struct stat st;
    char want[128], got[128];
    if (p->seals < 0 || fstat(src, &st) < 0)
        return 0;
    int fd = openat(p->seals, hex, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0)
        return 0;
    ssize_t n = read(fd, got, sizeof(got) - 1);
    close(fd);
    if (n <= 0)
        return 0;
    got[n] = '\0';
    seal_text(&st, want, sizeof(want));
    return strcmp(want, got) == 0;
}

/* Compare the finished hash with hex, then fsync, chmod and rename the temporary
 * file into place as name in pfd. 0; 1 when the hash differs (the file is removed);
 * -1 with err. */
static int install(pull_t *p, int fd, crypto_generichash_state *hs, const char *hex,
                   int pfd, const char *name, int mode)
{
    if (!br_manifest_hashes_to(hs, hex)) {
        close(fd);
        unlinkat(p->tmp, hex, 0);
        return 1;
    }
    int rc = fchmod(fd, (mode_t)(mode & 0777)) < 0 || fsync(fd) < 0 ? -1 : 0;
    int e = errno;
    close(fd);
    if (rc == 0 && renameat(p->tmp, hex, pfd, name) < 0) {
        rc = -1;
        e = errno;
    }
    if (rc < 0)
        return br_errf(p->err, e, "%s: %s", name, strerror(e));
    if (p->r->in_store && p->index >= 0) {
        if (linkat(pfd, name, p->index, hex, 0) == 0)
            seal(p, hex); /* (verified just now) */
        else if (errno != EEXIST)
            fprintf(stderr, "bramble-agent: replica: indexing %s: %s\n", name,
                    strerror(errno));
    }
    return 0;
}

/* Copy the open file src (taken over) into the temporary file for hex and install
 * it when its hash is right. 0 installed, 1 not (the bytes differ), -1 with err. */
static int copy_in(pull_t *p, int src, const char *hex, json_int_t size, int pfd,
                   const char *name, int mode)
{
    crypto_generichash_state hs;
    int64_t have;
    int fd = open_tmp(p, hex, size, &have, &hs);
    if (fd < 0 || (have && ftruncate(fd, 0) < 0) || lseek(fd, 0, SEEK_SET) < 0) {
        int rc = fd < 0 ? -1 : br_errf(p->err, errno, "%s: %s", hex, strerror(errno));
        if (fd >= 0)
            close(fd);
        close(src);
        return rc;
    }
    crypto_generichash_init(&hs, NULL, 0, HASH_LEN);
    for (json_int_t off = 0; off < size;) {
        ssize_t k = read(src, p->buf, COPY_BUF);
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0 || off + k > size)
            break;
        int e = br_write_all(fd, p->buf, (size_t)k) < 0 ? errno : 0;
        if (e || charge(p, (size_t)k) < 0) {
            close(fd);
            close(src);
            return e ? br_errf(p->err, e, "%s: %s", name, strerror(e)) : -1;
        }
        crypto_generichash_update(&hs, p->buf, (unsigned long long)k);
        off += k;
    }
    close(src);
    return install(p, fd, &hs, hex, pfd, name, mode);
}

/* Whether the size bytes of fd hash to hex (read through p's buffer). */
static int holds(pull_t *p, int fd, const char *hex, json_int_t size)
{
    crypto_generichash_state hs;
    json_int_t off = 0;
    crypto_generichash_init(&hs, NULL, 0, HASH_LEN);
    while (off < size) {
        ssize_t k = pread(fd, p->buf, COPY_BUF, off);
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0)
            break;
        crypto_generichash_update(&hs, p->buf, (unsigned long long)k);
        off += k;
    }
    return br_manifest_hashes_to(&hs, hex) && off == size;
}

/* The old copy's file src (taken over) holds the bytes of hex: link it into place
 * (the old copy is removed once the new one is in), or copy it where it cannot be
 * linked. 0 in place, 1 its bytes differ, -1 with err. */
static int adopt_old(pull_t *p, int src, const char *hex, json_int_t size, int pfd,
                     const char *name, int mode)
{
    char proc[64];
    if (!holds(p, src, hex, size)) {
        close(src);
        return 1;
    }
    snprintf(proc, sizeof(proc), "/proc/self/fd/%d", src);
    if (linkat(AT_FDCWD, proc, pfd, name, AT_SYMLINK_FOLLOW) == 0) {
        int rc = fchmod(src, (mode_t)(mode & 0777)) < 0
                     ? br_errf(p->err, errno, "%s: %s", name, strerror(errno))
                     : 0;
        close(src);
        return rc;
    }
    if (lseek(src, 0, SEEK_SET) < 0) {
        close(src);
        return 1;
    }
    return copy_in(p, src, hex, size, pfd, name, mode);
}

/* --- the network ------------------------------------------------------------------ */

static void disconnect(pull_t *p)
{
    br_sock_close(&p->mon);
    br_sock_close(&p->sock);
}

static int connect_holder(pull_t *p)
{
    const br_pull_req_t *r = p->r;
    /* the link's life by ZMTP heartbeats; a slow holder is not a dead one */
    /* watched from before it connects: a refusal of the first handshake is seen */
    p->sock = br_sock_client_watched(p->ctx, r->endpoint, r->server_key, r->public_key,
                                     r->secret_key, HEARTBEAT_MS, (int)p->stall_ms,
                                     MON_EVENTS, &p->mon, p->err);
    if (!p->sock)
        return -1;
    if (!p->connected_ms)
        p->connected_ms = br_mono_ms();
    /* a send never blocks: with the link down libzmq may have no pipe to queue a
     * request in, and a send that waits for one would hold this thread (and whoever
     * joins it: the agent stopping) for as long as the holder is out of reach */
    int zero = 0;
    zmq_setsockopt(p->sock, ZMQ_SNDTIMEO, &zero, sizeof(zero));
    return 0;
}

/* Ask for the chunk of path at off: 0 asked, 1 not now (the link has no room: ask
 * again after the next poll), -1 with err. */
static int ask(pull_t *p, const char *path, const char *hex, int64_t off)
{
    br_msg_t *m = br_msg_new(BR_MSG_REQUEST, "ckpt.read", p->seq + 1);
    if (!m)
        return br_errf(p->err, ENOMEM, "out of memory");
    br_msg_set_body(m, json_pack("{s:s, s:s, s:s, s:I}", "grant", p->r->grant, "path",
                                 path, "hash", hex, "offset", (json_int_t)off));
    br_err_t e2;
    int rc = br_msg_send(p->sock, m, &e2);
    br_msg_destroy(&m);
    if (rc == 0)
        p->seq++;
    else if (errno == EAGAIN)
        rc = 1;
    else
        *p->err = e2;
    return rc;
}

/* The holder broke the rules: say so in the log, with its name, and fail. */
static int bad_peer(pull_t *p, int errnum, const char *what, const char *path)
{
    if (!path[0])
        path = "the manifest's whole listing";
    fprintf(stderr, "bramble-agent: replica: refused %s (%s): %s in %s\n",
            p->r->peer_name ? p->r->peer_name : "the holder", p->r->endpoint, what,
            path);
    return br_errf(p->err, errnum, "%s sent %s in %.64s",
                   p->r->peer_name ? p->r->peer_name : "the holder", what, path);
}

/* One answer: 1 taken (its bytes written), 2 the holder is busy, 3 the holder has
 * not all of the file yet (EINPROGRESS: an upload it serves as it comes), 0 stale
 * or none, -1 with err. */
static int take_answer(pull_t *p, int fd, crypto_generichash_state *hs,
                       const char *path, json_int_t size, int64_t *got,
                       uint32_t first_seq)
{
    br_msg_t *m = NULL;
    br_err_t e2;
    if (br_msg_recv(p->sock, 0, ZMQ_DONTWAIT, &m, &e2) < 0) {
        br_msg_destroy(&m);
        return errno == EAGAIN ? 0 : bad_peer(p, EPROTO, "a malformed message", path);
    }
    int rc = 0;
    size_t len = 0;
    const unsigned char *data = br_msg_data(m, &len);
    json_int_t off = -1;
    if (br_msg_kind(m) != BR_MSG_RESPONSE || br_msg_seq(m) < first_seq) {
        rc = 0; /* an answer to a request from before a reconnect */
    } else if (br_msg_check(m, p->err) < 0) {
        rc = -1;
        if (p->err->errnum == EAGAIN) /* busy: ask again later */
            rc = 2, *p->err = (br_err_t){0};
        else if (p->err->errnum == EINPROGRESS) /* on its way: ask again soon */
            rc = 3, *p->err = (br_err_t){0};
        else
            br_err_prefix(p->err, "%s", p->r->peer_name ? p->r->peer_name : "holder");
    } else if (json_unpack(br_msg_body(m), "{s:I}", "offset", &off) < 0 || off != *got)
        rc = bad_peer(p, EPROTO, "a chunk at an offset not asked for", path);
    else if (len > BR_XFER_CHUNK || off + (json_int_t)len > size)
        rc = bad_peer(p, EBADMSG, "bytes beyond the manifest's size", path);
    else if (len == 0 && off < size)
        rc = bad_peer(p, EPROTO, "an empty chunk", path);
    else if (br_write_all(fd, data, len) < 0)
        rc = br_errf(p->err, errno, "%s: %s", path, strerror(errno));
    else if (charge(p, len) < 0)
        rc = -1;
    else {
        crypto_generichash_update(hs, data, len);
        *got += (int64_t)len;
        p->st.bytes_received += p->listing ? 0 : len; /* the checkpoint's own bytes */
        done(p, len);
        rc = 1;
    }
    br_msg_destroy(&m);
    return rc;
}

/* Fetch entry path (hash hex, size bytes) into its temporary file, resuming from
 * what that holds, and install it as name in pfd. */
static int fetch(pull_t *p, const char *path, const char *hex, json_int_t size, int pfd,
                 const char *name, int mode)
{
    crypto_generichash_state hs;
    int64_t got;
    int fd = open_tmp(p, hex, size, &got, &hs);
    if (fd < 0)
        return -1;
    if (!p->sock && connect_holder(p) < 0) {
        close(fd);
        return -1;
    }
    int64_t asked = got, last = br_mono_ms();
    int inflight = 0, tries = 0, busies = 0;
    int window = BR_XFER_WINDOW; /* 1 while the holder has not all of it yet */
    uint32_t first_seq = p->seq + 1;
    while (got < size) {
        int rc = 0;
        if (cancelled(p))
            rc = br_errf(p->err, ECANCELED, "cancelled");
        while (rc == 0 && inflight < window && asked < size) {
            if ((rc = ask(p, path, hex, asked)) != 0)
                break;
            asked += BR_XFER_CHUNK;
            inflight++;
        }
        rc = rc > 0 ? 0 : rc; /* not now: the poll below waits, then it asks again */
        zmq_pollitem_t it[2] = {{p->sock, 0, ZMQ_POLLIN, 0},
                                {p->mon, 0, ZMQ_POLLIN, 0}};
        if (rc == 0 && zmq_poll(it, p->mon ? 2 : 1, 100) < 0 && errno != EINTR)
            rc = br_errf(p->err, errno, "poll: %s", zmq_strerror(errno));
        int ev = rc == 0 ? br_sock_monitor_take(p->mon) : 0;
        /* refused in the first second: the grant may be on its way (see there) */
        int early = (ev & ZMQ_EVENT_HANDSHAKE_FAILED_AUTH) &&
                    br_mono_ms() - p->connected_ms < GRANT_WAIT_MS;
        if ((ev & ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL) ||
            ((ev & ZMQ_EVENT_HANDSHAKE_FAILED_AUTH) && !early))
            rc = br_errf(p->err, EACCES, "%s refused this node's key (no grant?)",
                         p->r->peer_name ? p->r->peer_name : p->r->endpoint);
        int busy = 0, not_yet = 0;
        while (rc == 0 &&
               (rc = take_answer(p, fd, &hs, path, size, &got, first_seq)) > 0) {
            busy |= rc == 2;
            not_yet |= rc == 3;
            if (rc == 3) /* the answers still in flight may be of later bytes: let go */
                first_seq = p->seq + 1;
            window = rc == 3 ? 1 : rc == 1 ? BR_XFER_WINDOW : window; /* (one ask, not 8) */
            inflight -= rc == 1;
            last = br_mono_ms();
            tries = rc == 1 ? 0 : tries;
            rc = 0;
        }
        if (rc == 0 && busy && ++busies > BUSY_MAX)
            rc = br_errf(p->err, ETIMEDOUT, "%s stayed busy",
                         p->r->peer_name ? p->r->peer_name : p->r->endpoint);
        if (rc < 0) {
            close(fd);
            return -1;
        }
        if (not_yet && !busy && !early) {
            /* the holder has not all of it yet: on the same link, ask afresh from what
             * we hold in a moment (the answers to what is in flight are let go) */
            for (int ms = 0; ms < NOT_YET_MS && !cancelled(p); ms += 10)
                usleep(10000);
            asked = got;
            inflight = 0;
            first_seq = p->seq + 1;
            continue;
        }
        if (busy || early) /* come back a little later, asking afresh from what we hold */
            for (int ms = 0; ms < (busy ? BUSY_WAIT_MS : 50) && !cancelled(p); ms += 10)
                usleep(10000);
        if (busy || early || (ev & ZMQ_EVENT_DISCONNECTED) ||
            br_mono_ms() - last > SILENT_TIMES * p->stall_ms) {
            /* a dropped or silent link: a fresh connection, asking from what we hold */
            if (!busy && !early && ++tries > BR_PULL_RETRIES) {
                close(fd);
                return br_errf(p->err, ETIMEDOUT, "%s does not answer",
                               p->r->peer_name ? p->r->peer_name : p->r->endpoint);
            }
            disconnect(p);
            if (connect_holder(p) < 0) {
                close(fd);
                return -1;
            }
            p->st.resumes += !busy && !early;
            asked = got;
            inflight = 0;
            first_seq = p->seq + 1;
            last = br_mono_ms();
        }
    }
    int rc = install(p, fd, &hs, hex, pfd, name, mode);
    if (rc == 1)
        return bad_peer(p, EBADMSG, "bytes that are not in the manifest (wrong hash)",
                        path);
    p->st.files_fetched += rc == 0 && !p->listing;
    return rc;
}

/* --- building --------------------------------------------------------------------- */

static int add_link(pull_t *p, int pfd, const char *name, const char *target)
{
    char cur[PATH_MAX];
    ssize_t k = readlinkat(pfd, name, cur, sizeof(cur) - 1);
    if (k >= 0) {
        cur[k] = '\0';
        if (strcmp(cur, target) == 0)
            return 0;
    }
    if (k >= 0 || errno == EINVAL) /* another link, or not a link */
        unlinkat(pfd, name, 0);
    if (symlinkat(target, pfd, name) < 0)
        return br_errf(p->err, errno, "%s: %s", name, strerror(errno));
    return 0;
}

/* One file of the manifest: already there, at hand locally, or fetched. */
static int add_file(pull_t *p, const char *path, int pfd, const char *name,
                    const char *hex, json_int_t size, int mode)
{
    struct stat st;
    if (fstatat(pfd, name, &st, AT_SYMLINK_NOFOLLOW) == 0) {
        if (S_ISREG(st.st_mode) && st.st_size == size) { /* verified when renamed */
            p->st.bytes_deduped += (uint64_t)size;
            done(p, (uint64_t)size);
            p->st.files_deduped++;
            return 0;
        }
        if (S_ISDIR(st.st_mode))
            br_rm_tree(pfd, name);
        else
            unlinkat(pfd, name, 0);
    }
    int src = -1, rc;
    if (p->old >= 0)
        src = open_old(p->old, path, size);
    else if (p->old_file >= 0 && fstat(p->old_file, &st) == 0 && st.st_size == size)
        src = dup(p->old_file);
    if (src >= 0 && (rc = adopt_old(p, src, hex, size, pfd, name, mode)) <= 0) {
        if (rc == 0) {
            p->st.bytes_deduped += (uint64_t)size;
            done(p, (uint64_t)size);
            p->st.files_deduped++;
        }
        return rc;
    }
    if (p->index >= 0 && fstatat(p->index, hex, &st, AT_SYMLINK_NOFOLLOW) == 0 &&
        S_ISREG(st.st_mode) && st.st_size == size) {
        src = openat(p->index, hex, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
        if (src < 0) {
            rc = 1;
        } else if (p->r->in_store) {
            /* the copy by hash is checked before another tree takes it: a file
             * changed in place on this disk (its size kept) is fetched again, and its
             * damaged copy goes (the trees that share it find theirs changed) */
            int was = sealed(p, src, hex), good = was || holds(p, src, hex, size);
            close(src);
            if (good && !was)
                seal(p, hex); /* (hashed again: sealed from now) */
            else if (!good) {
                unlinkat(p->index, hex, 0);
                if (p->seals >= 0)
                    unlinkat(p->seals, hex, 0);
            }
            rc = good && linkat(p->index, hex, pfd, name, 0) == 0 ? 0 : 1;
        } else {
            rc = copy_in(p, src, hex, size, pfd, name, mode); /* (hashes as it copies) */
        }
        if (rc == 0) {
            p->st.bytes_deduped += (uint64_t)size;
            done(p, (uint64_t)size);
            p->st.files_deduped++;
        }
        if (rc <= 0)
            return rc;
    }
    return fetch(p, path, hex, size, pfd, name, mode);
}

/* The spare copy cannot be made: let it go (the pull goes on). */
static void spare_lost(pull_t *p, const char *path)
{
    fprintf(stderr, "bramble-agent: a working copy of %s, made as it is fetched: %s: %s "
                    "(it is made once the tree is here)\n",
            p->r->dest, path, strerror(errno));
    close(p->spare);
    p->spare = -1;
    rm_path(p->spare_path);
}

/* Entry e (path) is in place in the staging dir (its file name in pfd): into the
 * spare copy too, while its bytes are in the page cache. */
static void spare_add(pull_t *p, json_t *e, const char *path, int pfd, const char *name)
{
    char part[PATH_MAX];
    for (const char *s = strchr(path, '/'); s; s = strchr(s + 1, '/')) {
        snprintf(part, sizeof(part), "%.*s", (int)(s - path), path);
        if (mkdirat(p->spare, part, 0755) < 0 && errno != EEXIST)
            return spare_lost(p, part);
    }
    const char *link = json_string_value(json_object_get(e, "link"));
    if (link) {
        if (symlinkat(link, p->spare, path) < 0)
            spare_lost(p, path);
        return;
    }
    int src = openat(pfd, name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
    int out = openat(p->spare, path, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC,
                     0600);
    int ok = src >= 0 && out >= 0 && br_copy_all(src, out, p->buf, COPY_BUF) == 0 &&
             fchmod(out, (mode_t)json_integer_value(json_object_get(e, "mode")) & 0777) == 0;
    int saved = errno;
    if (src >= 0)
        close(src);
    if (out >= 0)
        close(out);
    errno = saved;
    if (!ok)
        spare_lost(p, path);
}

static int add_entry(pull_t *p, json_t *e)
{
    const char *path = json_string_value(json_object_get(e, "path")), *name = NULL;
    json_t *hash = json_object_get(e, "hash");
    int pfd = parent_of(p, path, &name);
    if (pfd < 0)
        return -1;
    int rc =
        hash ? add_file(p, path, pfd, name, json_string_value(hash),
                        json_integer_value(json_object_get(e, "size")),
                        (int)json_integer_value(json_object_get(e, "mode")))
             : add_link(p, pfd, name, json_string_value(json_object_get(e, "link")));
    if (rc == 0 && hash && fsync(pfd) < 0)
        rc = br_errf(p->err, errno, "%s: %s", path, strerror(errno));
    if (rc == 0 && p->spare >= 0)
        spare_add(p, e, path, pfd, name);
    close(pfd);
    return rc;
}

/* Bytes the files still to get would take, counting neither those in the staging
 * directory nor those the store can link. */
static int64_t to_write(pull_t *p, json_t *entries)
{
    int64_t n = 0;
    for (size_t i = 0; i < json_array_size(entries); i++) {
        json_t *e = json_array_get(entries, i);
        json_t *h = json_object_get(e, "hash");
        json_int_t size = json_integer_value(json_object_get(e, "size"));
        struct stat st;
        if (!h || (p->r->in_store && p->index >= 0 &&
                   fstatat(p->index, json_string_value(h), &st, 0) == 0 &&
                   st.st_size == size))
            continue;
        n += size;
    }
    return n;
}

/* Rename the finished staging directory (or its one file) into place. */
static int publish(pull_t *p, const json_t *m)
{
    const char *dest = p->r->dest;
    if (fsync(p->stage) < 0)
        return br_errf(p->err, errno, "%s: %s", p->stage_path, strerror(errno));
    if (strcmp(json_string_value(json_object_get(m, "root")), "file") == 0) {
        const char *name = json_string_value(
            json_object_get(json_array_get(json_object_get(m, "entries"), 0), "path"));
        if (renameat(p->stage, name, AT_FDCWD, dest) < 0)
            return br_errf(p->err, errno, "%s: %s", dest, strerror(errno));
        rm_path(p->stage_path);
        return 0;
    }
    if (rename(p->stage_path, dest) == 0)
        return 0;
    if (errno != EEXIST && errno != ENOTEMPTY && errno != ENOTDIR && errno != EISDIR)
        return br_errf(p->err, errno, "%s: %s", dest, strerror(errno));
    /* an old copy is there: swap them at once, then remove the old one */
    if (renameat2(AT_FDCWD, p->stage_path, AT_FDCWD, dest, RENAME_EXCHANGE) < 0)
        return br_errf(p->err, errno, "%s: %s", dest, strerror(errno));
    rm_path(p->stage_path);
    return 0;
}

static int open_dir(pull_t *p, const char *path, int make, mode_t mode)
{
    if (make && mkdir(path, mode) < 0 && errno != EEXIST)
        return br_errf(p->err, errno, "%s: %s", path, strerror(errno));
    int fd = open(path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0 && make)
        return br_errf(p->err, errno, "%s: %s", path, strerror(errno));
    return fd;
}

static int setup(pull_t *p, const json_t *m)
{
    const br_pull_req_t *r = p->r;
    char parent[PATH_MAX];
    const char *slash = strrchr(r->dest, '/');
    if (!slash || !slash[1] || r->dest[0] != '/' || strlen(r->dest) >= PATH_MAX - 32)
        return br_errf(p->err, EINVAL, "destination %s: an absolute path is needed",
                       r->dest);
    snprintf(parent, sizeof(parent), "%.*s", (int)(slash - r->dest), r->dest);
    if (!parent[0])
        strcpy(parent, "/");
    snprintf(p->stage_path, sizeof(p->stage_path), "%s/.bramble-pull-%s", parent,
             slash + 1);
    snprintf(p->tmp_path, sizeof(p->tmp_path), "%s.tmp", p->stage_path);
    mode_t mode = r->in_store ? 0700 : 0755;
    if (br_mkdir_p(parent, mode, p->err) < 0 ||
        (p->stage = open_dir(p, p->stage_path, 1, mode)) < 0 ||
        (p->tmp = open_dir(p, p->tmp_path, 1, 0700)) < 0)
        return -1;
    if (strcmp(json_string_value(json_object_get(m, "root")), "dir") == 0) {
        p->old = open_dir(p, r->dest, 0, 0);
        if (r->spare && (size_t)snprintf(p->spare_path, sizeof(p->spare_path), "%s.part",
                                         r->spare) < sizeof(p->spare_path)) {
            rm_path(p->spare_path); /* made afresh: what a stopped run left is not known */
            p->spare = mkdir(p->spare_path, 0700) == 0 ? open_dir(p, p->spare_path, 0, 0) : -1;
        }
    } else
        p->old_file = open(r->dest, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
    if (r->store) {
        char idx[PATH_MAX];
        snprintf(idx, sizeof(idx), "%s/%s", r->store, BR_PULL_HASH_DIR);
        if (r->in_store && br_mkdir_p(idx, 0700, p->err) < 0)
            return -1;
        p->index = open_dir(p, idx, 0, 0);
        snprintf(idx, sizeof(idx), "%s/%s", r->store, BR_PULL_SEAL_DIR);
        if (r->in_store && p->index >= 0 && (mkdir(idx, 0700) == 0 || errno == EEXIST))
            p->seals = open_dir(p, idx, 0, 0); /* (none: files are hashed again) */
    }
    return 0;
}

static json_t *pull(pull_t *p, const json_t *m)
{
    json_t *entries = json_object_get(m, "entries");
    if (setup(p, m) < 0)
        return NULL;
    int64_t need = to_write(p, entries);
    if (p->r->limit >= 0 && need > p->r->limit)
        return br_errp(p->err, ENOSPC,
                       "%lld bytes do not fit in %s "
                       "(%lld bytes left)",
                       (long long)need,
                       p->r->quota_name ? p->r->quota_name : "the replica quota",
                       (long long)p->r->limit);
    for (size_t i = 0; i < json_array_size(entries); i++)
        if (cancelled(p))
            return br_errp(p->err, ECANCELED, "cancelled");
        else if (add_entry(p, json_array_get(entries, i)) < 0)
            return NULL;
    if (publish(p, m) < 0)
        return NULL;
    if (p->spare >= 0) { /* whole: it may be a working dir now */
        close(p->spare);
        p->spare = -1;
        rm_path(p->r->spare);
        if (rename(p->spare_path, p->r->spare) < 0)
            rm_path(p->spare_path);
    }
    rm_path(p->tmp_path);
    char parent[PATH_MAX];
    snprintf(parent, sizeof(parent), "%s/..", p->stage_path);
    int pfd = open(parent, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (pfd >= 0) { /* the rename itself is durable */
        fsync(pfd);
        close(pfd);
    }
    return json_pack(
        "{s:I, s:I, s:I, s:I, s:I}", "files",
        json_object_get(m, "files") ? json_integer_value(json_object_get(m, "files"))
                                    : 0,
        "bytes", json_integer_value(json_object_get(m, "bytes")), "received",
        (json_int_t)p->st.bytes_received, "deduped", (json_int_t)p->st.bytes_deduped,
        "resumes", (json_int_t)p->st.resumes);
}

/* The whole manifest of a truncated one: the listing kept here already, else
 * fetched from the holder (the path "" of the grant, PROTOCOL.md section 11) into
 * the listings directory as the agent, checked by its hash, and kept there. */
static json_t *fetch_listing(pull_t *p, const char *lhash, int64_t lsize)
{
    const char *dir = p->r->listings;
    const char *mhash = json_string_value(json_object_get(p->r->manifest, "hash"));
    br_err_t e2;
    if (!dir)
        return br_errp(p->err, ENOTSUP, "a truncated manifest, and no place to keep its "
                                        "whole listing");
    json_t *m = br_listings_whole(dir, p->r->manifest, NULL, 0, &e2);
    if (m || (e2.errnum != ENOENT && e2.errnum != EBADMSG)) {
        if (!m)
            *p->err = e2;
        return m;
    }
    char name[2 * HASH_LEN + 8];
    snprintf(name, sizeof(name), "%s.json", mhash);
    if ((p->tmp = open_dir(p, dir, 0, 0)) < 0)
        return br_errp(p->err, errno, "%s: %s", dir, strerror(errno));
    br_strlcpy(p->tmp_path, dir, sizeof(p->tmp_path));
    p->listing = 1;
    int rc = fetch(p, "", lhash, lsize, p->tmp, name, 0600);
    p->listing = 0;
    close(p->tmp);
    p->tmp = -1;
    p->tmp_path[0] = '\0';
    return rc < 0 ? NULL : br_listings_whole(dir, p->r->manifest, NULL, 0, p->err);
}

json_t *br_pull_run(void *ctx, const br_pull_req_t *r, const atomic_int *cancel,
                    br_pull_stats_t *st, br_err_t *err)
{
    pull_t p = {.r = r,
                .ctx = ctx,
                .cancel = cancel,
                .err = err,
                .stage = -1,
                .tmp = -1,
                .old = -1,
                .index = -1,
                .seals = -1,
                .old_file = -1,
                .spare = -1,
                .stall_ms = r->stall_ms > 0 ? r->stall_ms : BR_PULL_STALL_MS};
    if (!r->endpoint || !r->server_key || !r->public_key || !r->secret_key ||
        !r->grant || !r->dest)
        return br_errp(err, EINVAL,
                       "pull: a holder, keys, a grant and a destination "
                       "are needed");
    const char *lhash;
    int64_t lsize;
    int lr = br_manifest_listing(r->manifest, &lhash, &lsize, err);
    if (lr < 0 || (lr == 0 && br_manifest_verify(r->manifest, err) < 0))
        return NULL;
    br_fsid_t *as = r->as_user ? br_fsid_new(r->uid, r->gid, err) : NULL;
    if (r->as_user && !as)
        return NULL;
    json_t *res = NULL, *whole = NULL;
    if (!(p.buf = malloc(COPY_BUF)))
        br_errf(err, ENOMEM, "out of memory");
    else if ((lr == 0 || (whole = fetch_listing(&p, lhash, lsize))) &&
             br_fsid_enter(as, err) == 0) {
        res = pull(&p, whole ? whole : r->manifest);
        if (!res && is_full(err->errnum)) { /* leave nothing of it behind */
            rm_path(p.stage_path);
            rm_path(p.tmp_path);
        }
        br_fsid_leave(as);
    }
    disconnect(&p);
    if (!res && p.spare_path[0]) /* a spare only whole trees leave */
        rm_path(p.spare_path);
    int fds[] = {p.stage, p.tmp, p.old, p.index, p.old_file, p.spare, p.seals};
    for (size_t i = 0; i < sizeof(fds) / sizeof(fds[0]); i++)
        if (fds[i] >= 0)
            close(fds[i]);
    free(p.buf);
    json_decref(whole);
    br_fsid_destroy(&as);
    if (st) {
        st->bytes_received += p.st.bytes_received;
        st->bytes_deduped += p.st.bytes_deduped;
        st->files_fetched += p.st.files_fetched;
        st->files_deduped += p.st.files_deduped;
        st->resumes += p.st.resumes;
    }
    return res;
}
