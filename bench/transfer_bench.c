/* transfer_bench.c - how fast a checkpoint moves from node to node: a holder
 * (agent/holder.c) and a puller (agent/puller.c) over CURVE, as the agents run them,
 * and the rate the pull reached. The pull is a replica's (into a replica store,
 * indexed by hash) or, with --restore, a restore's (into the job's checkpoint dir,
 * as the job's user). By default both run here on loopback; with --serve FILE one
 * side holds and writes what the other needs to FILE, and --pull FILE (--connect
 * tcp://ADDR:PORT) pulls from it, so the two can run in two network namespaces
 * joined by a veth with `tc qdisc ... tbf` on it (bench/transfer_veth.sh).
 * docs/benchmarks.md. */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <sodium.h>
#include <zmq.h>

#include "cred.h"
#include "holder.h"
#include "manifest.h"
#include "pull.h"
#include "util.h"

static volatile sig_atomic_t stop;

static void on_signal(int sig)
{
    (void)sig;
    stop = 1;
}

static void usage(FILE *f)
{
    fprintf(
        f,
        "usage: bramble-bench-transfer [--size 512MiB] [--files 8] [--rate 0]\n"
        "                              [--dir /tmp] [--keep]\n"
        "       bramble-bench-transfer --serve FILE [--listen tcp://0.0.0.0:0] ...\n"
        "       bramble-bench-transfer --pull FILE [--connect tcp://ADDR:PORT]\n"
        "                              [--restore [--user UID:GID]]\n"
        "Makes a checkpoint of --files random files, --size in all, under --dir,\n"
        "and pulls it (loopback), then pulls it again (all deduplicated).\n"
        "The pull is a replica's (into a replica store, indexed by hash), or with\n"
        "--restore a restore's: into a job's checkpoint dir, as the job's user\n"
        "(--user; default 65534:65534 when run as root, else this user).\n"
        "--rate caps what the holder sends (bytes/s, e.g. 40MB; 0: none).\n");
}

/* files random files, size bytes in all, in dir/checkpoint-1. */
static int make_checkpoint(const char *path, uint64_t size, int files)
{
    br_err_t err;
    if (br_mkdir_p(path, 0755, &err) < 0) {
        fprintf(stderr, "bramble-bench-transfer: %s\n", err.text);
        return -1;
    }
    unsigned char *buf = malloc(1 << 20);
    for (int i = 0; i < files; i++) {
        char p[PATH_MAX];
        snprintf(p, sizeof(p), "%s/shard-%03d.bin", path, i);
        int fd = open(p, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
        if (fd < 0) {
            perror(p);
            free(buf);
            return -1;
        }
        for (uint64_t left = size / (uint64_t)files; left;) {
            size_t n = left < (1 << 20) ? (size_t)left : (1 << 20);
            randombytes_buf(buf, n);
            if (write(fd, buf, n) != (ssize_t)n) {
                perror(p);
                close(fd);
                free(buf);
                return -1;
            }
            left -= n;
        }
        close(fd);
    }
    free(buf);
    return 0;
}

/* Where the pull writes, under root: a replica goes to the replica store (as
 * agent/replica.c names it: STORE/JOB/HASH/NAME, linked into STORE/.by-hash); a
 * restore to the job's checkpoint dir, which belongs to the job's user, who writes
 * it (the node has a replica store too, empty here). */
static int set_dest(br_pull_req_t *r, const char *root, int restore, uid_t uid,
                    gid_t gid, char *dest, size_t dlen, char *store, size_t slen)
{
    const char *hash = json_string_value(json_object_get(r->manifest, "hash"));
    snprintf(store, slen, "%s/replicas", root);
    r->store = store;
    r->dest = dest;
    if (!restore) {
        snprintf(dest, dlen, "%s/1/%s/checkpoint-1", store, hash ? hash : "x");
        r->in_store = 1;
        return 0;
    }
    char job[PATH_MAX];
    snprintf(job, sizeof(job), "%s/job-ckpt", root);
    snprintf(dest, dlen, "%s/checkpoint-1", job);
    if (chmod(root, 0755) < 0 || mkdir(job, 0755) < 0 || chown(job, uid, gid) < 0) {
        perror(job);
        return -1;
    }
    r->as_user = 1;
    r->uid = uid;
    r->gid = gid;
    return 0;
}

static int pull_once(const char *what, br_pull_req_t *r)
{
    br_err_t err;
    void *ctx = zmq_ctx_new();
    int64_t t0 = br_mono_us();
    json_t *res = br_pull_run(ctx, r, NULL, NULL, &err);
    int64_t us = br_mono_us() - t0;
    zmq_ctx_term(ctx);
    if (!res) {
        fprintf(stderr, "bramble-bench-transfer: pull: %s\n", err.text);
        return -1;
    }
    json_int_t bytes = json_integer_value(json_object_get(res, "bytes"));
    json_int_t got = json_integer_value(json_object_get(res, "received"));
    printf(
        "%-7s files %lld  bytes %lld  received %lld  deduped %lld  seconds %.3f  "
        "MB/s %.1f  Mbit/s %.0f\n",
        what, (long long)json_integer_value(json_object_get(res, "files")),
        (long long)bytes, (long long)got,
        (long long)json_integer_value(json_object_get(res, "deduped")),
        (double)us / 1e6, us ? (double)got / (double)us : 0.0,
        us ? 8.0 * (double)got / (double)us : 0.0);
    json_decref(res);
    return 0;
}

int main(int argc, char **argv)
{
    static const struct option opts[] = {{"size", required_argument, NULL, 's'},
                                         {"files", required_argument, NULL, 'f'},
                                         {"rate", required_argument, NULL, 'r'},
                                         {"dir", required_argument, NULL, 'd'},
                                         {"serve", required_argument, NULL, 'S'},
                                         {"pull", required_argument, NULL, 'P'},
                                         {"listen", required_argument, NULL, 'l'},
                                         {"connect", required_argument, NULL, 'c'},
                                         {"keep", no_argument, NULL, 'k'},
                                         {"restore", no_argument, NULL, 'R'},
                                         {"user", required_argument, NULL, 'u'},
                                         {"help", no_argument, NULL, 'h'},
                                         {NULL, 0, NULL, 0}};
    uint64_t size = 512ull << 20, rate = 0;
    int files = 8, keep = 0, restore = 0, o;
    uid_t uid = geteuid() == 0 ? 65534 : geteuid();
    gid_t gid = geteuid() == 0 ? 65534 : getegid();
    const char *dir = "/tmp", *serve = NULL, *pullf = NULL,
               *listen = "tcp://127.0.0.1:0", *connect = NULL;
    br_err_t err;
    while ((o = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        switch (o) {
        case 's':
        case 'r':
            if (br_parse_size(optarg, o == 's' ? &size : &rate, &err) < 0) {
                fprintf(stderr, "bramble-bench-transfer: %s\n", err.text);
                return 2;
            }
            break;
        case 'f':
            files = atoi(optarg);
            break;
        case 'd':
            dir = optarg;
            break;
        case 'S':
            serve = optarg;
            break;
        case 'P':
            pullf = optarg;
            break;
        case 'l':
            listen = optarg;
            break;
        case 'c':
            connect = optarg;
            break;
        case 'k':
            keep = 1;
            break;
        case 'R':
            restore = 1;
            break;
        case 'u': {
            unsigned long u, g;
            if (sscanf(optarg, "%lu:%lu", &u, &g) != 2) {
                usage(stderr);
                return 2;
            }
            uid = (uid_t)u;
            gid = (gid_t)g;
            break;
        }
        case 'h':
            usage(stdout);
            return 0;
        default:
            usage(stderr);
            return 2;
        }
    }
    if (files < 1 || size < (uint64_t)files || optind < argc) {
        usage(stderr);
        return 2;
    }
    if (sodium_init() < 0)
        return 1;
    char root[PATH_MAX], ckdir[PATH_MAX], ckpt[PATH_MAX], dest[PATH_MAX],
        store[PATH_MAX];
    snprintf(root, sizeof(root), "%s/bramble-bench-transfer.XXXXXX", dir);
    if (!mkdtemp(root)) {
        perror(root);
        return 1;
    }
    snprintf(ckdir, sizeof(ckdir), "%s/ckpt", root);
    snprintf(ckpt, sizeof(ckpt), "%s/checkpoint-1", ckdir);
    int rc = 1;
    br_holder_t *h = NULL;
    json_t *m = NULL, *info = NULL;
    char hpub[41], hsec[41], ppub[41], psec[41], ep[300];
    if (pullf) { /* the other side made it all: read what it wrote */
        json_error_t je;
        const char *e, *k, *cp, *cs;
        if (!(info = json_load_file(pullf, 0, &je)) ||
            json_unpack(info, "{s:s, s:s, s:s, s:s, s:o}", "endpoint", &e, "server_key",
                        &k, "public_key", &cp, "secret_key", &cs, "manifest", &m) < 0) {
            fprintf(stderr, "bramble-bench-transfer: %s: not what --serve wrote\n",
                    pullf);
            m = NULL;
            goto done;
        }
        br_pull_req_t r = {.endpoint = connect ? connect : e,
                           .server_key = k,
                           .public_key = cp,
                           .secret_key = cs,
                           .peer_name = "holder",
                           .grant = "bench",
                           .manifest = m,
                           .limit = -1};
        rc = set_dest(&r, root, restore, uid, gid, dest, sizeof(dest), store,
                      sizeof(store)) < 0 ||
             pull_once(restore ? "restore" : "replica", &r) < 0;
        m = NULL; /* info's */
        goto done;
    }
    printf("making %d files, %llu bytes, in %s\n", files, (unsigned long long)size,
           ckpt);
    if (make_checkpoint(ckpt, size, files) < 0 || br_keypair(hpub, hsec, &err) < 0 ||
        br_keypair(ppub, psec, &err) < 0)
        goto done;
    if (!(m = br_manifest_build(ckdir, ckpt, NULL, NULL, &err)) ||
        !(h = br_holder_new(serve ? listen : "tcp://127.0.0.1:0", hsec, rate, &err))) {
        fprintf(stderr, "bramble-bench-transfer: %s\n", err.text);
        goto done;
    }
    br_grant_t g = {.id = "bench",
                    .peer_key = ppub,
                    .peer_name = "puller",
                    .dir = ckdir,
                    .path = ckpt,
                    .manifest = m,
                    .ttl_ms = 24 * 3600 * 1000};
    if (br_holder_grant(h, &g, &err) < 0) {
        fprintf(stderr, "bramble-bench-transfer: %s\n", err.text);
        goto done;
    }
    snprintf(ep, sizeof(ep), "tcp://127.0.0.1:%d", br_holder_port(h));
    if (serve) {
        info = json_pack("{s:s, s:s, s:s, s:s, s:O}", "endpoint", ep, "server_key",
                         hpub, "public_key", ppub, "secret_key", psec, "manifest", m);
        char *text = json_dumps(info, JSON_COMPACT);
        if (!text || br_write_file(serve, text, strlen(text), 0600, &err) < 0) {
            fprintf(stderr, "bramble-bench-transfer: %s: %s\n", serve, err.text);
            free(text);
            goto done;
        }
        free(text);
        printf("serving on port %d; pull with --pull %s --connect tcp://ADDR:%d\n",
               br_holder_port(h), serve, br_holder_port(h));
        fflush(stdout);
        signal(SIGINT, on_signal);
        signal(SIGTERM, on_signal);
        while (!stop)
            pause();
        rc = 0;
        goto done;
    }
    br_pull_req_t r = {.endpoint = ep,
                       .server_key = hpub,
                       .public_key = ppub,
                       .secret_key = psec,
                       .peer_name = "holder",
                       .grant = "bench",
                       .manifest = m,
                       .limit = -1};
    rc = set_dest(&r, root, restore, uid, gid, dest, sizeof(dest), store,
                  sizeof(store)) < 0 ||
         pull_once(restore ? "restore" : "replica", &r) < 0 ||
         pull_once("again", &r) < 0;
    br_holder_stats_t st;
    br_holder_stats(h, &st);
    printf("holder sent %llu bytes in %llu chunks\n", (unsigned long long)st.bytes_sent,
           (unsigned long long)st.chunks_sent);
done:
    br_holder_destroy(&h);
    json_decref(info);
    json_decref(m);
    if (!keep)
        br_rm_tree(AT_FDCWD, root);
    return rc;
}
