/* nccl_probe.c - bramble-nccl-probe: NCCL all-reduce bus bandwidth across the GPUs
 * of a gang job (one process per GPU), a minimal all_reduce_perf. See
 * docs/probe-nccl.md for what it measures and how to run it.
 *
 * Reading order: options and environment, the TCP bootstrap that hands rank 0's
 * ncclUniqueId to the other ranks (plain sockets, no CUDA: testable without GPUs
 * through the hidden --bootstrap-only mode), then the GPU part (device, buffers,
 * one timed size), the sweep and main.
 *
 * Exit status: 0 measured, 1 failed at run time (bootstrap, CUDA, NCCL, wrong
 * result), 2 bad usage, missing environment or no CUDA device. */
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include <cuda_runtime.h>
#include <nccl.h>

#include "probe_boot.h"

#define PROG "bramble-nccl-probe"
#define ID_BYTES 128           /* sizeof(ncclUniqueId), checked below */
#define HELLO_MAGIC "BRNCCLP1" /* first 8 bytes a rank sends to rank 0 */
#define HELLO_BYTES 16         /* magic, rank (u32 BE), world size (u32 BE) */
#define CHUNK_BYTES (1u << 20) /* host staging buffer for fill and check */

_Static_assert(sizeof(ncclUniqueId) == ID_BYTES, "ncclUniqueId is 128 bytes");

typedef struct {
    size_t min_bytes, max_bytes;
    int iters, warmup, timeout_s;
    int human, bootstrap_only;
} opts_t;

typedef struct {
    int rank, world, local_rank, nnodes;
    const char *master_addr, *master_port, *node_name, *cuda_visible;
} env_t;

/* ---- options and environment */

/* ---- options and environment */

static void usage(FILE *f)
{
    fprintf(
        f,
        "usage: " PROG
        " [--min-bytes N] [--max-bytes N] [--iters N] [--warmup N]\n"
        "       [--timeout SECONDS] [--human]\n"
        "\n"
        "Measures NCCL all-reduce (float, sum) bus bandwidth across the processes\n"
        "of a gang job, one process per GPU, like nccl-tests' all_reduce_perf.\n"
        "Sizes double from --min-bytes (default 8) to --max-bytes (default 256M);\n"
        "sizes take K, M, G suffixes (powers of 1024) and must be multiples of 4.\n"
        "\n"
        "  --iters N        timed all-reduces per size (default 20)\n"
        "  --warmup N       untimed all-reduces per size before timing (default 5)\n"
        "  --timeout S      how long ranks wait for each other at start (default 60)\n"
        "  --human          an aligned table instead of JSON lines\n"
        "  --help           this text\n"
        "\n"
        "Environment (bramble sets it for a gang with tasks_per_node: gpus):\n"
        "  RANK, WORLD_SIZE          required\n"
        "  MASTER_ADDR, MASTER_PORT  required when WORLD_SIZE > 1: rank 0 serves the\n"
        "                            NCCL id on MASTER_PORT, the others connect there\n"
        "  LOCAL_RANK                GPU to use when several are visible (default 0)\n"
        "  NNODES, BRAMBLE_NODE_NAME reported only\n"
        "\n"
        "Output (rank 0): one JSON line per size\n"
        "  {\"bytes\":..,\"time_us\":..,\"algbw_gbs\":..,\"busbw_gbs\":..}\n"
        "then {\"result\":\"ok\",\"ranks\":..,\"nodes\":..,\"peak_busbw_gbs\":..,"
        "\"at_bytes\":..,\"nccl_version\":\"x.y.z\"}.\n"
        "busbw = algbw * 2(n-1)/n, as nccl-tests define it. GB/s are 1e9 bytes/s.\n"
        "\n"
        "Exit status: 0 measured; 1 failed (bootstrap, CUDA, NCCL, wrong result);\n"
        "2 bad usage, missing environment or no CUDA device.\n");
}

/* "256M", "1K", "4096" -> bytes; -1 when malformed. */
static int parse_size(const char *s, size_t *out)
{
    uint64_t v;
    if (probe_parse_size(s, SIZE_MAX >> 31, &v) < 0)
        return -1;
    *out = (size_t)v;
    return 0;
}

enum { O_MIN = 256, O_MAX, O_ITERS, O_WARMUP, O_TIMEOUT, O_HUMAN, O_BOOT };

/* One option for probe_getopt; nonzero for a bad value. */
static int take_opt(void *ctx, int c, const char *arg)
{
    opts_t *o = ctx;
    switch (c) {
    case O_MIN:
        return parse_size(arg, &o->min_bytes);
    case O_MAX:
        return parse_size(arg, &o->max_bytes);
    case O_ITERS:
        return probe_parse_count(arg, 1, INT_MAX, &o->iters);
    case O_WARMUP:
        return probe_parse_count(arg, 0, INT_MAX, &o->warmup);
    case O_TIMEOUT:
        return probe_parse_count(arg, 1, INT_MAX, &o->timeout_s);
    case O_HUMAN:
        o->human = 1;
        break;
    case O_BOOT:
        o->bootstrap_only = 1;
        break;
    }
    return 0;
}

/* 0: run; 1: --help printed; -1: usage error printed. */
static int parse_args(int argc, char **argv, opts_t *o)
{
    static const struct option longopts[] = {
        {"min-bytes", required_argument, NULL, O_MIN},
        {"max-bytes", required_argument, NULL, O_MAX},
        {"iters", required_argument, NULL, O_ITERS},
        {"warmup", required_argument, NULL, O_WARMUP},
        {"timeout", required_argument, NULL, O_TIMEOUT},
        {"human", no_argument, NULL, O_HUMAN},
        {"bootstrap-only", no_argument, NULL, O_BOOT}, /* hidden: tests */
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    *o = (opts_t){.min_bytes = 8,
                  .max_bytes = 256u << 20,
                  .iters = 20,
                  .warmup = 5,
                  .timeout_s = 60};
    int r = probe_getopt(argc, argv, longopts, take_opt, o, usage);
    if (r != 0)
        return r;
    if (o->min_bytes < 4 || o->min_bytes % 4 || o->max_bytes % 4)
        return probe_errf(
            "--min-bytes and --max-bytes must be multiples of 4, at least 4");
    if (o->min_bytes > o->max_bytes)
        return probe_errf("--min-bytes (%zu) is larger than --max-bytes (%zu)",
                          o->min_bytes, o->max_bytes);
    return 0;
}

static int read_env(env_t *e)
{
    *e = (env_t){0};
    if (probe_env_int("WORLD_SIZE", 1, 0, 1, 1 << 20, &e->world) < 0 ||
        probe_env_int("RANK", 1, 0, 0, e->world - 1, &e->rank) < 0 ||
        probe_env_int("LOCAL_RANK", 0, 0, 0, 1 << 20, &e->local_rank) < 0 ||
        probe_env_int("NNODES", 0, 1, 1, 1 << 20, &e->nnodes) < 0)
        return -1;
    probe_log_rank(e->rank);
    e->node_name = getenv("BRAMBLE_NODE_NAME");
    e->cuda_visible = getenv("CUDA_VISIBLE_DEVICES");
    /* with WORLD_SIZE 1, nobody to exchange the id with */
    return probe_env_master(e->world, &e->master_addr, &e->master_port);
}

/* ---- bootstrap (probe_boot.h): rank 0 serves the 128-byte id over TCP on
 * MASTER_PORT. A rank connects and sends HELLO_MAGIC, its rank and the world size
 * (u32, big endian); rank 0 checks them and answers with the id, then closes. */

/* Rank 0: hand the id to the world - 1 other ranks before the deadline. */
static int boot_serve(probe_boot_t *b, int world, const unsigned char *id,
                      int64_t deadline)
{
    while (probe_boot_taken(b) < world - 1) {
        unsigned char hello[HELLO_BYTES];
        uint32_t r;
        int c = probe_boot_accept(b, deadline, hello, NULL, &r);
        if (c < 0)
            return -1;
        int64_t peer_deadline = probe_now_ms() + PROBE_PEER_TIMEOUT_MS;
        if (peer_deadline > deadline)
            peer_deadline = deadline;
        if (probe_sock_xfer(c, (void *)id, ID_BYTES, 1, peer_deadline) < 0)
            probe_errf("sending the id to rank %" PRIu32 ": %s", r, strerror(errno));
        else
            probe_boot_take(b, r);
        probe_sock_close(c);
    }
    return 0;
}

/* Ranks > 0: fetch the id from rank 0, retrying the connection until the
 * deadline (rank 0 may start later). */
static int boot_fetch(const env_t *e, unsigned char *id, int64_t deadline,
                      int timeout_s)
{
    int fd = probe_join(e->master_addr, e->master_port, deadline, timeout_s);
    if (fd < 0)
        return -1;
    unsigned char hello[HELLO_BYTES];
    memcpy(hello, HELLO_MAGIC, 8);
    probe_put32(hello + 8, (uint32_t)e->rank);
    probe_put32(hello + 12, (uint32_t)e->world);
    int rc = 0;
    if (probe_sock_xfer(fd, hello, sizeof(hello), 1, deadline) < 0 ||
        probe_sock_xfer(fd, id, ID_BYTES, 0, deadline) < 0)
        rc = probe_errf(
            "fetching the NCCL id from %s:%s: %s (rank 0 refuses a wrong "
            "WORLD_SIZE or a duplicate RANK: is this rank 0 of the same job?)",
            e->master_addr, e->master_port, strerror(errno));
    probe_sock_close(fd);
    return rc;
}

/* The whole exchange. Rank 0 listens first, then makes the id with make_id (NCCL,
 * or random bytes for --bootstrap-only) and serves it. */
static int bootstrap(const env_t *e, int timeout_s, int (*make_id)(unsigned char *),
                     unsigned char *id)
{
    int64_t deadline = probe_now_ms() + (int64_t)timeout_s * 1000;
    if (e->rank != 0)
        return boot_fetch(e, id, deadline, timeout_s);
    probe_boot_t *b = NULL;
    probe_boot_cfg_t cfg = {.port = e->world > 1 ? atoi(e->master_port) : 0,
                            .world = e->world,
                            .timeout_s = timeout_s,
                            .magic = HELLO_MAGIC,
                            .hello_bytes = HELLO_BYTES,
                            .done_what = "fetched the NCCL id"};
    if (e->world > 1 && !(b = probe_boot_new(&cfg)))
        return -1;
    int rc = make_id(id);
    if (rc == 0 && e->world > 1)
        rc = boot_serve(b, e->world, id, deadline);
    probe_boot_destroy(&b);
    return rc;
}

static int random_id(unsigned char *id)
{
    size_t got = 0;
    while (got < ID_BYTES) {
        ssize_t n = getrandom(id + got, ID_BYTES - got, 0);
        if (n < 0 && errno != EINTR)
            return probe_errf("getrandom: %s", strerror(errno));
        if (n > 0)
            got += (size_t)n;
    }
    return 0;
}

static int nccl_id(unsigned char *id)
{
    ncclUniqueId u;
    ncclResult_t r = ncclGetUniqueId(&u);
    if (r != ncclSuccess)
        return probe_errf("ncclGetUniqueId: %s", ncclGetErrorString(r));
    memcpy(id, u.internal, ID_BYTES);
    return 0;
}

/* FNV-1a, to compare ids across ranks without printing them. */
static uint64_t id_hash(const unsigned char *id)
{
    uint64_t h = 14695981039346656037ull;
    for (int i = 0; i < ID_BYTES; i++)
        h = (h ^ id[i]) * 1099511628211ull;
    return h;
}

/* ---- the GPU part */

typedef struct {
    ncclComm_t comm;
    cudaStream_t stream;
    cudaEvent_t start, stop, done;
    float *send, *recv;
    double *dtime; /* one double on the device: the time, max over ranks */
    void *host;    /* CHUNK_BYTES staging buffer */
} gpu_t;

static int cuda_ok(cudaError_t r, const char *what)
{
    if (r == cudaSuccess)
        return 0;
    return probe_errf("%s: %s", what, cudaGetErrorString(r));
}

static int nccl_ok(ncclResult_t r, ncclComm_t comm, const char *what)
{
    if (r == ncclSuccess)
        return 0;
#if NCCL_VERSION_CODE >= NCCL_VERSION(2, 13, 0)
    const char *last = ncclGetLastError(comm);
    if (last && *last)
        return probe_errf("%s: %s (%s)", what, ncclGetErrorString(r), last);
#endif
    return probe_errf("%s: %s", what, ncclGetErrorString(r));
}

/* Device 0 when one GPU is visible (bramble's case), LOCAL_RANK when several.
 * Exit status 2 for the caller when there is none. */
static int pick_device(const env_t *e, int *dev)
{
    int n = 0;
    cudaError_t r = cudaGetDeviceCount(&n);
    const char *cvd = e->cuda_visible ? e->cuda_visible : "<unset>";
    if (r != cudaSuccess || n == 0) {
        fprintf(stderr, PROG ": no CUDA device visible (CUDA_VISIBLE_DEVICES=%s)%s%s\n",
                cvd, r != cudaSuccess ? ": " : "",
                r != cudaSuccess ? cudaGetErrorString(r) : "");
        return -1;
    }
    *dev = n == 1 ? 0 : e->local_rank;
    if (*dev >= n)
        return probe_errf(
            "LOCAL_RANK=%d but only %d CUDA devices are visible "
            "(CUDA_VISIBLE_DEVICES=%s)",
            e->local_rank, n, cvd);
    return 0;
}

/* Wait for an event while watching the communicator, so a dead peer ends the
 * probe with NCCL's error instead of hanging it. */
static int gpu_wait(gpu_t *g, cudaEvent_t ev)
{
    for (;;) {
        cudaError_t r = cudaEventQuery(ev);
        if (r == cudaSuccess)
            return 0;
        if (r != cudaErrorNotReady)
            return cuda_ok(r, "waiting for the GPU");
        ncclResult_t ae;
        if (nccl_ok(ncclCommGetAsyncError(g->comm, &ae), g->comm,
                    "ncclCommGetAsyncError"))
            return -1;
        if (ae != ncclSuccess && ae != ncclInProgress)
            return nccl_ok(ae, g->comm, "all-reduce");
        probe_sleep_us(20);
    }
}

static int gpu_sync(gpu_t *g)
{
    if (cuda_ok(cudaEventRecord(g->done, g->stream), "cudaEventRecord"))
        return -1;
    return gpu_wait(g, g->done);
}

/* Buffers, stream and events; the communicator is made by the caller. */
static int gpu_alloc(gpu_t *g, size_t bytes)
{
    if (cuda_ok(cudaStreamCreateWithFlags(&g->stream, cudaStreamNonBlocking),
                "cudaStreamCreate") ||
        cuda_ok(cudaEventCreate(&g->start), "cudaEventCreate") ||
        cuda_ok(cudaEventCreate(&g->stop), "cudaEventCreate") ||
        cuda_ok(cudaEventCreateWithFlags(&g->done, cudaEventDisableTiming),
                "cudaEventCreate") ||
        cuda_ok(cudaMalloc((void **)&g->send, bytes), "cudaMalloc (send buffer)") ||
        cuda_ok(cudaMalloc((void **)&g->recv, bytes), "cudaMalloc (receive buffer)") ||
        cuda_ok(cudaMalloc((void **)&g->dtime, sizeof(double)), "cudaMalloc") ||
        cuda_ok(cudaMallocHost(&g->host, CHUNK_BYTES), "cudaMallocHost"))
        return -1;
    return 0;
}

/* Reverse of gpu_alloc and ncclCommInitRank; aborts the communicator after a
 * failure (a peer may be gone), finalizes it otherwise. */
static int gpu_free(gpu_t *g, int failed)
{
    int rc = 0;
    if (g->comm) {
        if (failed) {
            rc |= nccl_ok(ncclCommAbort(g->comm), NULL, "ncclCommAbort");
        } else {
            rc |= nccl_ok(ncclCommFinalize(g->comm), g->comm, "ncclCommFinalize");
            rc |= nccl_ok(ncclCommDestroy(g->comm), NULL, "ncclCommDestroy");
        }
    }
    if (g->host)
        rc |= cuda_ok(cudaFreeHost(g->host), "cudaFreeHost");
    if (g->dtime)
        rc |= cuda_ok(cudaFree(g->dtime), "cudaFree");
    if (g->recv)
        rc |= cuda_ok(cudaFree(g->recv), "cudaFree");
    if (g->send)
        rc |= cuda_ok(cudaFree(g->send), "cudaFree");
    if (g->done)
        rc |= cuda_ok(cudaEventDestroy(g->done), "cudaEventDestroy");
    if (g->stop)
        rc |= cuda_ok(cudaEventDestroy(g->stop), "cudaEventDestroy");
    if (g->start)
        rc |= cuda_ok(cudaEventDestroy(g->start), "cudaEventDestroy");
    if (g->stream)
        rc |= cuda_ok(cudaStreamDestroy(g->stream), "cudaStreamDestroy");
    *g = (gpu_t){0};
    return rc ? -1 : 0;
}

/* A copy on the probe's stream, waited for (the host buffer is pinned; a plain
 * cudaMemcpy would run on the legacy stream, unordered with ours). */
static int copy(gpu_t *g, void *dst, const void *src, size_t n, enum cudaMemcpyKind k)
{
    if (cuda_ok(cudaMemcpyAsync(dst, src, n, k, g->stream), "cudaMemcpyAsync"))
        return -1;
    return gpu_sync(g);
}

/* The send buffer holds rank + 1 everywhere (no kernels: copied in chunks). */
static int gpu_fill(gpu_t *g, size_t bytes, float value)
{
    float *h = g->host;
    for (size_t i = 0; i < CHUNK_BYTES / sizeof(float); i++)
        h[i] = value;
    for (size_t off = 0; off < bytes; off += CHUNK_BYTES) {
        size_t n = bytes - off < CHUNK_BYTES ? bytes - off : CHUNK_BYTES;
        if (copy(g, (char *)g->send + off, h, n, cudaMemcpyHostToDevice) < 0)
            return -1;
    }
    return 0;
}

/* Every one of the first `bytes` of recv must be the expected sum. */
static int gpu_check(gpu_t *g, size_t bytes, float expect)
{
    const float *h = g->host;
    for (size_t off = 0; off < bytes; off += CHUNK_BYTES) {
        size_t n = bytes - off < CHUNK_BYTES ? bytes - off : CHUNK_BYTES;
        if (copy(g, g->host, (char *)g->recv + off, n, cudaMemcpyDeviceToHost) < 0)
            return -1;
        for (size_t i = 0; i < n / sizeof(float); i++)
            if (h[i] != expect)
                return probe_errf(
                    "wrong all-reduce result at %zu bytes: element %zu is %g, "
                    "expected %g",
                    bytes, off / sizeof(float) + i, (double)h[i], (double)expect);
    }
    return 0;
}

static int allreduce(gpu_t *g, size_t bytes)
{
    return nccl_ok(ncclAllReduce(g->send, g->recv, bytes / sizeof(float), ncclFloat,
                                 ncclSum, g->comm, g->stream),
                   g->comm, "ncclAllReduce");
}

/* One size: warm-up, `iters` timed all-reduces, the result checked; the time per
 * all-reduce in microseconds, the slowest rank's (all ranks get it). */
static int time_size(gpu_t *g, const opts_t *o, int world, size_t bytes, double *us)
{
    for (int i = 0; i < o->warmup; i++)
        if (allreduce(g, bytes) < 0)
            return -1;
    if (cuda_ok(cudaMemsetAsync(g->recv, 0, bytes, g->stream), "cudaMemset") ||
        cuda_ok(cudaEventRecord(g->start, g->stream), "cudaEventRecord"))
        return -1;
    for (int i = 0; i < o->iters; i++)
        if (allreduce(g, bytes) < 0)
            return -1;
    float ms = 0;
    if (cuda_ok(cudaEventRecord(g->stop, g->stream), "cudaEventRecord") ||
        gpu_wait(g, g->stop) < 0 ||
        cuda_ok(cudaEventElapsedTime(&ms, g->start, g->stop), "cudaEventElapsedTime"))
        return -1;
    /* every iteration wrote the same sum: check the last one */
    if (gpu_check(g, bytes, (float)world * (float)(world + 1) / 2.0f) < 0)
        return -1;
    double *t = g->host; /* pinned: the copies below are ordered on the stream */
    *t = (double)ms * 1000.0 / o->iters;
    if (cuda_ok(
            cudaMemcpyAsync(g->dtime, t, sizeof(*t), cudaMemcpyHostToDevice, g->stream),
            "cudaMemcpyAsync") ||
        nccl_ok(ncclAllReduce(g->dtime, g->dtime, 1, ncclDouble, ncclMax, g->comm,
                              g->stream),
                g->comm, "ncclAllReduce (time)") ||
        copy(g, t, g->dtime, sizeof(*t), cudaMemcpyDeviceToHost) < 0)
        return -1;
    *us = *t;
    return 0;
}

static void nccl_version(char *buf, size_t len)
{
    int v = 0;
    if (ncclGetVersion(&v) != ncclSuccess)
        snprintf(buf, len, "unknown");
    else if (v >= 10000) /* 2.9 and later: X*10000 + Y*100 + Z */
        snprintf(buf, len, "%d.%d.%d", v / 10000, v % 10000 / 100, v % 100);
    else
        snprintf(buf, len, "%d.%d.%d", v / 1000, v % 1000 / 100, v % 100);
}

/* The sweep; rank 0 prints. Bus bandwidth as nccl-tests define it for
 * all-reduce: busbw = algbw * 2(n-1)/n, see
 * https://github.com/NVIDIA/nccl-tests/blob/master/doc/PERFORMANCE.md */
static int sweep(gpu_t *g, const opts_t *o, const env_t *e)
{
    char ver[32];
    nccl_version(ver, sizeof(ver));
    int print = e->rank == 0;
    if (print && o->human)
        printf("# " PROG
               ": %d ranks on %d nodes, NCCL %s, float sum, out of place\n"
               "# %14s %12s %12s %12s\n",
               e->world, e->nnodes, ver, "bytes", "time(us)", "algbw(GB/s)",
               "busbw(GB/s)");
    double factor = 2.0 * (e->world - 1) / e->world, peak = -1;
    size_t at = 0;
    for (size_t b = o->min_bytes; b <= o->max_bytes; b *= 2) {
        double us;
        if (time_size(g, o, e->world, b, &us) < 0)
            return -1;
        double algbw = us > 0 ? (double)b / (us * 1e-6) / 1e9 : 0;
        double busbw = algbw * factor;
        if (busbw > peak) {
            peak = busbw;
            at = b;
        }
        if (print && o->human)
            printf("  %14zu %12.2f %12.2f %12.2f\n", b, us, algbw, busbw);
        else if (print)
            printf(
                "{\"bytes\":%zu,\"time_us\":%.3f,\"algbw_gbs\":%.3f,"
                "\"busbw_gbs\":%.3f}\n",
                b, us, algbw, busbw);
        fflush(stdout);
        if (b > SIZE_MAX / 2)
            break;
    }
    if (print && o->human)
        printf("# peak bus bandwidth %.2f GB/s at %zu bytes\n", peak, at);
    else if (print)
        printf(
            "{\"result\":\"ok\",\"ranks\":%d,\"nodes\":%d,\"peak_busbw_gbs\":%.3f,"
            "\"at_bytes\":%zu,\"nccl_version\":\"%s\"}\n",
            e->world, e->nnodes, peak, at, ver);
    fflush(stdout);
    return 0;
}

static int run_nccl(const opts_t *o, const env_t *e, int dev)
{
    gpu_t g = {0};
    unsigned char id[ID_BYTES];
    ncclUniqueId u;
    int rc = -1;
    if (cuda_ok(cudaSetDevice(dev), "cudaSetDevice") ||
        bootstrap(e, o->timeout_s, nccl_id, id) < 0)
        goto done;
    memcpy(u.internal, id, ID_BYTES);
    if (nccl_ok(ncclCommInitRank(&g.comm, e->world, u, e->rank), NULL,
                "ncclCommInitRank"))
        goto done;
    if (gpu_alloc(&g, o->max_bytes) < 0 ||
        gpu_fill(&g, o->max_bytes, e->rank + 1.0f) < 0 || sweep(&g, o, e) < 0)
        goto done;
    rc = 0;
done:
    if (gpu_free(&g, rc < 0) < 0)
        rc = -1;
    return rc;
}

int main(int argc, char **argv)
{
    opts_t o;
    env_t e;
    probe_log_init(PROG, "a gang job with tasks_per_node: gpus");
    int r = parse_args(argc, argv, &o);
    if (r != 0)
        return r > 0 ? 0 : PROBE_EXIT_USAGE;
    if (read_env(&e) < 0)
        return PROBE_EXIT_USAGE;
    if (o.bootstrap_only) {
        unsigned char id[ID_BYTES];
        if (bootstrap(&e, o.timeout_s, random_id, id) < 0)
            return 1;
        printf("{\"rank\":%d,\"id_hash\":\"%016" PRIx64 "\"}\n", e.rank, id_hash(id));
        return fflush(stdout) == 0 ? 0 : 1;
    }
    int dev;
    if (pick_device(&e, &dev) < 0)
        return PROBE_EXIT_USAGE;
    return run_nccl(&o, &e, dev) == 0 ? 0 : 1;
}
