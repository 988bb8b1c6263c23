/* replica.c - the coordinator's replica orders, carried out by holder and puller. */
#include "replica.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include "cache.h"
#include "holder.h"
#include "jobuser.h"
#include "listing.h"
#include "manifest.h"
#include "puller.h"
#include "util.h"
#include "worker.h"

struct br_replica {
    const br_settings_t *s;
    br_listings_t *listings; /* whole manifests too big for a report */
    br_holder_t *holder; /* NULL: serves nothing (--replica-port off) */
    br_puller_t *puller;
    int64_t used;    /* bytes in the store, each file once */
    int64_t disk_at; /* when free disk was last asked for (monotonic ms) */
    /* statvfs on a thread of its own: a stuck file system (a dead NFS server
     * under a checkpoint dir) never holds the agent's loop. Under disk.mu: */
    br_worker_t disk;
    json_t *disk_ask; /* ["dir"...] to look at (the store first, or null), or NULL */
    json_t
        *disk_got; /* {"store": free|null, "dirs": [[dir, free]...]}, not yet taken */
    int disk_busy; /* the thread looks now */
};

/* --- the store ------------------------------------------------------------------ */

/* Remove from the store what pulls cut short by a crash or a kill left: the
 * staging directories (".bramble-pull-NAME" and its ".tmp") in each replica's
 * directory (DIR/<job>/<hash>/), and the directories left empty. Called at start,
 * before any pull runs, so none of them is in use. How many entries went. */
static int sweep_unfinished(const char *store)
{
    int n = 0, sd = open(store, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    DIR *jobs = sd >= 0 ? fdopendir(sd) : NULL;
    struct dirent *je, *he, *e;
    if (!jobs) {
        if (sd >= 0)
            close(sd);
        return 0;
    }
    while ((je = readdir(jobs))) {
        if (je->d_name[0] < '1' || je->d_name[0] > '9') /* (job ids; not .by-hash) */
            continue;
        int jd = openat(dirfd(jobs), je->d_name,
                        O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        DIR *hashes = jd >= 0 ? fdopendir(jd) : NULL;
        if (!hashes) {
            if (jd >= 0)
                close(jd);
            continue;
        }
        while ((he = readdir(hashes))) {
            if (he->d_name[0] == '.')
                continue;
            int hd = openat(dirfd(hashes), he->d_name,
                            O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
            DIR *one = hd >= 0 ? fdopendir(hd) : NULL;
            if (!one) {
                if (hd >= 0)
                    close(hd);
                continue;
            }
            while ((e = readdir(one)))
                if (strncmp(e->d_name, ".bramble-pull-", 14) == 0) {
                    br_rm_tree(dirfd(one), e->d_name);
                    n++;
                }
            closedir(one);
            unlinkat(dirfd(hashes), he->d_name, AT_REMOVEDIR); /* when empty */
        }
        closedir(hashes);
        unlinkat(dirfd(jobs), je->d_name, AT_REMOVEDIR); /* when empty */
    }
    closedir(jobs);
    return n;
}

static int hex64(const char *s)
{
    if (!s || strlen(s) != 64)
        return 0;
    for (; *s; s++)
        if (!((*s >= '0' && *s <= '9') || (*s >= 'a' && *s <= 'f')))
            return 0;
    return 1;
}

/* Where the store keeps the replica of checkpoint path (job's, manifest m). */
static int replica_path(const br_replica_t *r, json_int_t job, const json_t *m,
                        const char *path, char *buf, size_t len, br_err_t *err)
{
    const char *hash = json_string_value(json_object_get(m, "hash"));
    const char *base = strrchr(path, '/');
    base = base ? base + 1 : path;
    if (job < 1 || !hex64(hash) || !br_manifest_path_ok(base) ||
        (size_t)snprintf(buf, len, "%s/%lld/%s/%s", r->s->replica_dir, (long long)job,
                         hash, base) >= len)
        return br_errf(err, EINVAL, "no replica path for job %lld, checkpoint %.64s",
                       (long long)job, path);
    return 0;
}

/* Whom a job's files are read and written as (jobuser.h), as job.run would. */
static int job_identity(const br_replica_t *r, json_int_t owner_id,
                        const char *unix_user, uid_t *uid, gid_t *gid, br_err_t *err)
{
    br_jobusers_opts_t o = {.job_user = r->s->job_user,
                            .first = r->s->job_uid_first,
                            .last = r->s->job_uid_last,
                            .allow_root = r->s->allow_root_jobs,
                            .data_dir = r->s->data_dir,
                            .agent_uid = geteuid()};
    br_jobusers_t *users = br_jobusers_new(&o, err);
    br_jobuser_t who = {0};
    int rc = users ? br_jobusers_resolve(users, owner_id, unix_user, &who, err) : -1;
    br_jobusers_destroy(&users);
    *uid = who.uid;
    *gid = who.gid;
    return rc;
}

/* --- life ----------------------------------------------------------------------- */

static br_holder_t *serve_on(const br_settings_t *s, br_err_t *err)
{
    char ep[64];
    snprintf(ep, sizeof(ep), "tcp://0.0.0.0:%d", s->replica_port);
    br_holder_t *h =
        br_holder_new(ep, s->cred.secret_key, (uint64_t)s->replica_bandwidth, err);
    if (!h && err->errnum == EADDRINUSE && s->replica_port == BR_REPLICA_PORT) {
        fprintf(stderr,
                "bramble-agent: replica port %d is taken; serving checkpoints on "
                "any free port\n",
                s->replica_port);
        h = br_holder_new("tcp://0.0.0.0:0", s->cred.secret_key,
                          (uint64_t)s->replica_bandwidth, err);
    }
    return h;
}

static void *disk_run(void *arg);

br_replica_t *br_replica_new(const br_settings_t *s, br_err_t *err)
{
    br_replica_t *r = calloc(1, sizeof(*r));
    if (!r)
        return br_errp(err, ENOMEM, "out of memory");
    r->s = s;
    char dir[PATH_MAX];
    snprintf(dir, sizeof(dir), "%s/manifests", s->data_dir);
    if (br_worker_init(&r->disk, "disk", err) < 0 ||
        br_worker_start(&r->disk, disk_run, r, err) < 0 ||
        !(r->listings = br_listings_new(dir, err)))
        goto fail;
    if (s->replica_quota != 0 && br_mkdir_p(s->replica_dir, 0700, err) < 0)
        goto fail;
    if (s->replica_port >= 0 && !(r->holder = serve_on(s, err)))
        goto fail;
    if (!(r->puller = br_puller_new(err)))
        goto fail;
    if (s->replica_quota != 0) {
        int left = sweep_unfinished(s->replica_dir);
        if (left > 0)
            fprintf(stderr,
                    "bramble-agent: removed %d leftover%s of unfinished pulls from the "
                    "replica store %s\n",
                    left, left == 1 ? "" : "s", s->replica_dir);
        /* (their files, and files no replica holds, leave .by-hash too) */
        r->used = br_pull_index_used(s->replica_dir, left > 0);
    }
    return r;
fail:
    br_err_prefix(err, "replicas");
    br_replica_destroy(&r);
    return NULL;
}

void br_replica_destroy(br_replica_t **rp)
{
    br_replica_t *r = rp ? *rp : NULL;
    if (!r)
        return;
    int saved = errno;
    br_holder_destroy(&r->holder);
    br_puller_destroy(&r->puller);
    br_worker_stop(&r->disk);
    br_worker_fini(&r->disk);
    json_decref(r->disk_ask);
    json_decref(r->disk_got);
    br_listings_destroy(&r->listings);
    free(r);
    *rp = NULL;
    errno = saved;
}

int br_replica_port(const br_replica_t *r)
{
    return r->holder ? br_holder_port(r->holder) : -1;
}

int br_replica_fd(const br_replica_t *r)
{
    return br_puller_fd(r->puller);
}

/* --- orders --------------------------------------------------------------------- */

int br_replica_serve(br_replica_t *r, const br_msg_t *m, struct br_cache *cache,
                     br_err_t *err)
{
    const char *grant, *peer, *key, *path, *dir = NULL, *unix_user = NULL;
    json_int_t job, ttl, owner_id = 0;
    json_t *manifest;
    int replica = 0, cached = 0;
    if (br_msg_unpack(m, err, "{s:s, s:I, s:s, s:s, s:I, s:o, s:s, s?s, s?I, s?s, s?b, s?b}",
                      "grant", &grant, "job", &job, "peer", &peer, "peer_key", &key,
                      "ttl", &ttl, "manifest", &manifest, "path", &path, "dir", &dir,
                      "owner_id", &owner_id, "unix_user", &unix_user, "replica",
                      &replica, "cache", &cached) < 0)
        return -1;
    if (!r->holder)
        return br_errf(err, ENOTSUP,
                       "this node serves no checkpoints (--replica-port off)");
    if (ttl <= 0) { /* withdrawn */
        br_holder_revoke(r->holder, grant);
        return 0;
    }
    const char *mhash = json_string_value(json_object_get(manifest, "hash"));
    if (mhash && br_holder_renew(r->holder, grant, key, mhash, ttl))
        return 0; /* held already: a big manifest is not read again */
    char where[PATH_MAX], listing[PATH_MAX];
    json_t *whole = br_listings_whole(br_listings_dir(r->listings), manifest, listing,
                                      sizeof(listing), err);
    if (!whole)
        return -1;
    br_grant_t g = {.id = grant,
                    .peer_key = key,
                    .peer_name = peer,
                    .dir = dir,
                    .path = path,
                    .manifest = whole,
                    .ttl_ms = ttl};
    if (listing[0]) { /* served as the path "" (PROTOCOL.md section 11) */
        g.listing = listing;
        br_manifest_listing(manifest, &g.listing_hash, &g.listing_size, err);
    }
    int rc = 0;
    char trees[PATH_MAX];
    if (cached) { /* a tree in the cache, whole (cache.h), read as the agent */
        if (!cache || !br_cache_has(cache, mhash))
            rc = br_errf(err, ENOENT, "tree %.16s... is not in this node's cache",
                         mhash ? mhash : "?");
        br_cache_tree_path(cache, mhash ? mhash : "", where, sizeof(where));
        snprintf(trees, sizeof(trees), "%s/trees", br_cache_dir(cache));
        g.dir = trees;
        g.path = where;
    } else if (replica) { /* our copy in the store, read as the agent */
        rc = replica_path(r, job, manifest, path, where, sizeof(where), err);
        g.dir = r->s->replica_dir;
        g.path = where;
    } else if (path[0] != '/' || (dir && dir[0] != '/')) {
        rc = br_errf(err, EINVAL, "ckpt.serve: path and dir must be absolute");
    } else {
        rc = job_identity(r, owner_id, unix_user, &g.uid, &g.gid, err);
        g.as_user = 1;
    }
    if (rc == 0)
        rc = br_holder_grant(r->holder, &g, err);
    json_decref(whole);
    return rc;
}

int br_replica_fetch(br_replica_t *r, const br_msg_t *m, br_err_t *err)
{
    const char *grant, *path, *node, *addr, *key, *dir = NULL, *unix_user = NULL;
    json_int_t job, owner_id = 0, step = -1;
    json_t *manifest;
    int port, restore = 0;
    if (br_msg_unpack(
            m, err,
            "{s:I, s?I, s:s, s:{s:s, s:s, s:i, s:s}, s:o, s:s, s?b, s?s, s?I, s?s}",
            "job", &job, "step", &step, "grant", &grant, "from", "node", &node, "addr",
            &addr, "port", &port, "key", &key, "manifest", &manifest, "path", &path,
            "restore", &restore, "dir", &dir, "owner_id", &owner_id, "unix_user",
            &unix_user) < 0)
        return -1;
    const char *lhash;
    int64_t lsize;
    int lr = br_manifest_listing(manifest, &lhash, &lsize, err);
    if (lr < 0 || (lr == 0 && br_manifest_verify(manifest, err) < 0))
        return -1; /* a truncated one is checked once its listing is here (pull.h) */
    char dest[PATH_MAX], ep[BR_ENDPOINT_MAX];
    if (port < 1 || port > 65535 || !*addr || strpbrk(addr, "/ ") ||
        (size_t)snprintf(ep, sizeof(ep),
                         strchr(addr, ':') ? "tcp://[%s]:%d" : "tcp://%s:%d", addr,
                         port) >= sizeof(ep))
        return br_errf(err, EINVAL, "ckpt.fetch: from: a bad address or port");
    br_pull_req_t q = {.endpoint = ep,
                       .server_key = key,
                       .public_key = r->s->cred.public_key,
                       .secret_key = r->s->cred.secret_key,
                       .peer_name = node,
                       .grant = grant,
                       .manifest = manifest,
                       .listings = br_listings_dir(r->listings),
                       .dest = dest,
                       .limit = -1,
                       .store = r->s->replica_quota != 0 ? r->s->replica_dir : NULL};
    if (!restore) {
        if (r->s->replica_quota == 0)
            return br_errf(err, ENOSPC,
                           "this node holds no replicas (--replica-quota 0)");
        if (replica_path(r, job, manifest, path, dest, sizeof(dest), err) < 0)
            return -1;
        q.in_store = 1;
        if (r->s->replica_quota > 0)
            q.limit = r->s->replica_quota > r->used ? r->s->replica_quota - r->used : 0;
    } else {
        size_t n = dir ? strlen(dir) : 0;
        while (n > 1 && dir[n - 1] == '/')
            n--;
        if (path[0] != '/' || !br_manifest_path_ok(path + 1) ||
            (dir && (strncmp(path, dir, n) != 0 || path[n] != '/')) ||
            strlen(path) >= sizeof(dest))
            return br_errf(err, EINVAL,
                           "ckpt.fetch: %.64s is not a path inside the "
                           "checkpoint dir",
                           path);
        br_strlcpy(dest, path, sizeof(dest));
        if (job_identity(r, owner_id, unix_user, &q.uid, &q.gid, err) < 0)
            return -1;
        q.as_user = 1;
        q.urgent = 1; /* a job waits for it */
    }
    if (!restore) { /* a newer checkpoint's copy leaves out the older ones waiting */
        q.group = job;
        q.order = step;
    }
    q.tag = json_pack("{s:I, s:I, s:s, s:s, s:b}", "job", job, "step", step, "hash",
                      json_string_value(json_object_get(manifest, "hash")), "path",
                      path, "restore", restore);
    int rc = br_puller_submit(r->puller, &q, err);
    json_decref(q.tag);
    return rc;
}

int br_replica_pull_tree(br_replica_t *r, int64_t job, int attempt, const json_t *manifest,
                         const char *grant, const json_t *from, const char *dest,
                         const char *spare, const char *store, int64_t limit, br_err_t *err)
{
    const br_cred_t *cred = &r->s->cred;
    char ep[BR_ENDPOINT_MAX];
    const char *node = json_string_value(json_object_get(from, "node"));
    const char *addr = json_string_value(json_object_get(from, "addr"));
    const char *key = json_string_value(json_object_get(from, "key"));
    int port = (int)json_integer_value(json_object_get(from, "port"));
    if (from && (!node || !addr || !key || !json_is_string(json_object_get(from, "grant")) ||
                 port < 1 || port > 65535 || !*addr || strpbrk(addr, "/ ") ||
                 (size_t)snprintf(ep, sizeof(ep),
                                  strchr(addr, ':') ? "tcp://[%s]:%d" : "tcp://%s:%d", addr,
                                  port) >= sizeof(ep)))
        return br_errf(err, EINVAL, "from: {\"node\", \"addr\", \"port\", \"key\", "
                                    "\"grant\"}");
    br_pull_req_t q = {.endpoint = from ? ep : cred->endpoint,
                       .server_key = from ? key : cred->server_public_key,
                       .public_key = cred->public_key,
                       .secret_key = cred->secret_key,
                       .peer_name = from ? node : "the coordinator",
                       .grant = from ? json_string_value(json_object_get(from, "grant")) : grant,
                       .manifest = manifest,
                       .listings = br_listings_dir(r->listings),
                       .dest = dest,
                       .spare = spare,
                       .store = store,
                       .in_store = 1,
                       .limit = limit,
                       .quota_name = "the node's cache (--cache-quota)",
                       /* a job waits for it; a tree staged while it is uploaded
                        * (job 0) waits for the upload, and must hold up no restore */
                       .urgent = job > 0};
    q.tag = json_pack("{s:b, s:I, s:i, s:s, s:s, s:b}", "code", 1, "job", (json_int_t)job,
                      "attempt", attempt, "hash",
                      json_string_value(json_object_get(manifest, "hash")), "path", dest,
                      "restore", 0);
    if (from)
        json_object_set_new(q.tag, "from", json_string(node));
    int rc = br_puller_submit(r->puller, &q, err);
    json_decref(q.tag);
    return rc;
}

void br_replica_hurry_tree(br_replica_t *r, const char *dest)
{
    br_puller_hurry(r->puller, dest);
}

br_listings_t *br_replica_listings(br_replica_t *r)
{
    return r->listings;
}

json_t *br_replica_progress(br_replica_t *r)
{
    long long done = 0;
    json_t *tag = r->puller ? br_puller_progress(r->puller, &done) : NULL;
    json_t *o = tag ? json_pack("{s:O, s:O, s:O, s:I}", "job", json_object_get(tag, "job"),
                                "hash", json_object_get(tag, "hash"), "restore",
                                json_object_get(tag, "restore"), "done",
                                (json_int_t)done)
                    : NULL;
    json_decref(tag);
    return o;
}

int br_replica_drop(br_replica_t *r, const br_msg_t *m, br_err_t *err)
{
    json_int_t job;
    const char *hash = NULL;
    if (br_msg_unpack(m, err, "{s:I, s?s}", "job", &job, "hash", &hash) < 0)
        return -1;
    if (job < 1 || (hash && !hex64(hash)))
        return br_errf(err, EINVAL,
                       "ckpt.drop: a job id and a manifest hash are needed");
    char jd[PATH_MAX];
    snprintf(jd, sizeof(jd), "%s/%lld", r->s->replica_dir, (long long)job);
    if (hash) {
        int fd = open(jd, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (fd >= 0) {
            br_rm_tree(fd, hash);
            close(fd);
        }
        rmdir(jd); /* when it was the job's last */
    } else
        br_rm_tree(AT_FDCWD, jd);
    r->used = br_pull_index_used(r->s->replica_dir, 1);
    return 0;
}

json_t *br_replica_take(br_replica_t *r)
{
    json_t *tag = NULL, *res = NULL;
    br_err_t err = {0};
    if (br_puller_take(r->puller, &tag, &res, &err) <= 0)
        return NULL;
    json_t *body = tag;
    if (res) {
        json_object_set(body, "received", json_object_get(res, "received"));
        json_object_set(body, "deduped", json_object_get(res, "deduped"));
    } else {
        json_object_set_new(body, "errnum", json_integer(err.errnum));
        json_object_set_new(body, "error", json_string(err.text));
        const char *hash = json_string_value(json_object_get(body, "hash"));
        json_int_t job = json_integer_value(json_object_get(body, "job"));
        char d[PATH_MAX];
        if (!json_is_true(json_object_get(body, "restore")) &&
            !json_is_true(json_object_get(body, "code")) && hex64(hash) && job > 0 &&
            (size_t)snprintf(d, sizeof(d), "%s/%lld/%s", r->s->replica_dir,
                             (long long)job, hash) < sizeof(d) &&
            rmdir(d) == 0) { /* the replica's directories the failed pull made, empty */
            *strrchr(d, '/') = '\0';
            rmdir(d); /* (the job's, when it holds nothing else) */
        }
    }
    json_decref(res);
    if (!json_is_true(json_object_get(body, "restore")) &&
        !json_is_true(json_object_get(body, "code")) && r->s->replica_quota != 0)
        r->used = br_pull_index_used(r->s->replica_dir, 0);
    return body;
}

/* --- disk ----------------------------------------------------------------------- */

static json_int_t free_bytes(const char *path)
{
    struct statvfs v;
    if (statvfs(path, &v) < 0)
        return -1;
    return (json_int_t)v.f_bavail * (json_int_t)v.f_frsize;
}

/* The disk thread: each ask's dirs looked at, the answer left for the loop. */
static void *disk_run(void *arg)
{
    br_replica_t *r = arg;
    pthread_mutex_lock(&r->disk.mu);
    for (;;) {
        while (!r->disk.stop && !r->disk_ask)
            pthread_cond_wait(&r->disk.cv, &r->disk.mu);
        if (r->disk.stop)
            break;
        json_t *ask = r->disk_ask; /* ours alone from here */
        r->disk_ask = NULL;
        r->disk_busy = 1;
        pthread_mutex_unlock(&r->disk.mu);
        json_t *dirs = json_array(), *store = json_null(), *d;
        size_t i;
        json_array_foreach (ask, i, d) {
            json_int_t f = json_is_string(d) ? free_bytes(json_string_value(d)) : -1;
            if (i == 0)
                store = f >= 0 ? json_integer(f) : json_null();
            else if (f >= 0)
                json_array_append_new(dirs, json_pack("[O, I]", d, f));
        }
        json_t *got = json_pack("{s:o, s:o}", "store", store, "dirs", dirs);
        json_decref(ask);
        pthread_mutex_lock(&r->disk.mu);
        r->disk_busy = 0;
        json_decref(r->disk_got);
        r->disk_got = got;
    }
    pthread_mutex_unlock(&r->disk.mu);
    return NULL;
}

/* The heartbeat's "disk" from what the thread found. */
static json_t *disk_body(const br_replica_t *r, json_t *got)
{
    json_t *d = json_object(), *ck = json_array(), *e;
    json_t *rep = json_pack("{s:I, s:I}", "quota", (json_int_t)r->s->replica_quota,
                            "used", (json_int_t)r->used);
    json_t *f = json_object_get(got, "store");
    if (json_is_integer(f))
        json_object_set(rep, "free", f);
    json_object_set_new(d, "replicas", rep);
    size_t i;
    json_array_foreach (json_object_get(got, "dirs"), i, e)
        json_array_append_new(ck, json_pack("{s:O, s:O}", "dir", json_array_get(e, 0),
                                            "free", json_array_get(e, 1)));
    json_object_set_new(d, "checkpoints", ck);
    return d;
}

json_t *br_replica_disk(br_replica_t *r, const char *const *dirs, int n, int64_t now_ms)
{
    json_t *got, *ask = NULL;
    if (!r->disk_at || now_ms - r->disk_at >= BR_REPLICA_DISK_MS) {
        ask = json_array();
        json_array_append_new(ask, r->s->replica_quota != 0
                                       ? json_string(r->s->replica_dir)
                                       : json_null());
        for (int i = 0; i < n && i < 64; i++) {
            int dup = 0;
            for (int j = 0; j < i && !dup; j++)
                dup = strcmp(dirs[i], dirs[j]) == 0;
            if (!dup)
                json_array_append_new(ask, json_string(dirs[i]));
        }
    }
    pthread_mutex_lock(&r->disk.mu);
    got = r->disk_got;
    r->disk_got = NULL;
    if (ask && !r->disk_ask && !r->disk_busy) { /* (one stuck look: no more asks) */
        r->disk_ask = ask;
        ask = NULL;
        r->disk_at = now_ms;
        pthread_cond_signal(&r->disk.cv);
    }
    pthread_mutex_unlock(&r->disk.mu);
    json_decref(ask);
    json_t *d = got ? disk_body(r, got) : NULL;
    json_decref(got);
    return d;
}
