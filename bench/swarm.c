/* swarm.c - one process plays N agents against a real coordinator, to measure what
 * the coordinator's core costs at scale: each simulated agent joins with a real
 * token over CURVE under its own key pair, says hello, heartbeats at the chosen
 * interval and answers job orders at once (started, then exited 0, or held running
 * with --hold). It prints, for the coordinator under test (--coordinator-pid): CPU
 * per heartbeat and in all, resident memory, and submit-to-start latency of a batch
 * of trivial jobs (p50, p99); and, since the coordinator answers a heartbeat only as
 * often as the agent's fence time needs (PROTOCOL.md), the round trip of the
 * answered ones (p50, p99) and the longest any agent went without an answer: a
 * coordinator that falls behind shows there. Sockets are watched through their
 * ZMQ_FD in one epoll set, so 10,000 agents cost this process O(ready) work, not
 * O(N), per wake. */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <zmq.h>

#include "client.h"
#include "cred.h"
#include "msg.h"
#include "sock.h"
#include "token.h"
#include "util.h"
#include "wgkey.h"

typedef struct {
    void *sock;
    char name[64];
    char pub[BR_KEY_LEN + 1], sec[BR_KEY_LEN + 1];
    int joined;       /* its node.join was answered */
    int64_t next_hb;  /* monotonic ms */
    uint32_t hb_seq;  /* of its last heartbeat */
    int64_t hb_us, answered_us; /* when it went; when one was last answered */
    json_t *held;     /* tasks it reports running (--hold) */
} sim_t;

typedef struct {
    int64_t id;
    int64_t sent_us, run_us; /* submit sent; job.run received */
} job_time_t;

typedef struct {
    int64_t id, at_us;
} run_seen_t; /* a job.run that came before its submit's answer */

static struct {
    const br_cred_t *admin;
    char token[BR_TOKEN_MAX], join_pub[BR_KEY_LEN + 1], join_sec[BR_KEY_LEN + 1];
    sim_t *sims;
    int n, hold, overlay, no_ping;
    uint64_t lists, entries; /* overlay peer lists received, and their peers */
    uint64_t deltas, changed; /* ... changes to them received, and the peers changed */
    int ep;
    void *ctx;
    int64_t hb_ms;
    uint64_t heartbeats, answered, runs, refusals;
    int64_t *rtt_us; /* round trips of answered heartbeats (the last one sent) */
    int64_t *at_us;  /* ... and when each answer came (monotonic) */
    size_t nrtt;
    uint64_t late;   /* answers to an earlier heartbeat than the last */
    int64_t gap_us;  /* the longest an agent went without an answer */
    job_time_t *jobs;
    int njobs;
    run_seen_t *early;
    int nearly;
} S;

#define RTT_MAX 4000000

static void die(const char *what, const char *why)
{
    fprintf(stderr, "swarm: %s: %s\n", what, why);
    exit(1);
}

static void watch(sim_t *a)
{
    int fd;
    size_t len = sizeof(fd);
    if (zmq_getsockopt(a->sock, ZMQ_FD, &fd, &len) < 0)
        die("ZMQ_FD", zmq_strerror(errno));
    struct epoll_event ev = {.events = EPOLLIN, .data.ptr = a};
    if (epoll_ctl(S.ep, EPOLL_CTL_ADD, fd, &ev) < 0)
        die("epoll_ctl", strerror(errno));
}

static void *dial(const char *pub, const char *sec)
{
    br_err_t err;
    /* pinged as an agent's connection is (unless --no-ping) */
    void *s = br_sock_client_hb(S.ctx, S.admin->endpoint, S.admin->server_public_key, pub,
                                sec, S.no_ping ? 0 : BR_AGENT_PING_MS,
                                S.no_ping ? 0 : BR_AGENT_DEAD_MS, &err);
    if (!s)
        die("connect", err.text);
    int hwm = 100000;
    zmq_setsockopt(s, ZMQ_SNDHWM, &hwm, sizeof(hwm));
    return s;
}

static void send_body(sim_t *a, br_msg_kind_t kind, const char *type, uint32_t seq,
                      json_t *body)
{
    br_msg_t *m = br_msg_new(kind, type, seq);
    br_msg_set_body(m, body);
    if (br_msg_send(a->sock, m, NULL) < 0 && errno != EAGAIN)
        die(type, zmq_strerror(errno));
    br_msg_destroy(&m);
}

static void hello(sim_t *a)
{
    json_t *inv = json_pack("{s:s, s:s, s:i, s:I, s:s, s:s, s:s}", "hostname", a->name,
                            "arch", "x86_64", "cpus", 64, "memory",
                            (json_int_t)256 << 30, "os", "swarm", "kernel", "swarm",
                            "agent_version", "swarm");
    if (S.overlay) { /* a WireGuard key of its own, as an agent with the overlay says */
        char priv[BR_WGKEY_B64], pub[BR_WGKEY_B64];
        br_err_t err;
        br_wgkey_private(priv);
        if (br_wgkey_public(priv, pub, &err) < 0)
            die("overlay key", err.text);
        json_object_set_new(inv, "overlay",
                            json_pack("{s:s, s:s, s:b, s:i, s:[s], s:b}", "mode", "userspace",
                                      "pubkey", pub, "relay", 0, "port", 51820, "lan",
                                      "192.168.7.2", "deltas", 1));
    }
    send_body(a, BR_MSG_REQUEST, "node.hello", 1,
              json_pack("{s:o, s:[], s:{}, s:f, s:[]}", "inventory", inv, "gpus", "labels",
                        "cost_per_hour", 0.0, "tasks"));
}

static job_time_t *job_time(int64_t id)
{
    for (int i = S.njobs - 1; i >= 0; i--)
        if (S.jobs[i].id == id)
            return &S.jobs[i];
    return NULL;
}

/* An order from the coordinator: answer it, and start or end the job at once. */
static void on_order(sim_t *a, br_msg_t *m)
{
    br_msg_t *r = br_msg_reply(m);
    br_msg_send(a->sock, r, NULL);
    br_msg_destroy(&r);
    if (strcmp(br_msg_type(m), "job.run") != 0)
        return;
    json_t *b = br_msg_body(m);
    json_int_t job = json_integer_value(json_object_get(b, "job"));
    json_int_t attempt = json_integer_value(json_object_get(b, "attempt"));
    job_time_t *t = job_time(job);
    if (t && !t->run_us)
        t->run_us = br_mono_us();
    else if (!t && S.early)
        S.early[S.nearly++ % 100000] = (run_seen_t){job, br_mono_us()};
    S.runs++;
    send_body(a, BR_MSG_REQUEST, "job.started", 2,
              json_pack("{s:I, s:I, s:i}", "job", job, "attempt", attempt, "pid", 1));
    if (S.hold)
        json_array_append_new(a->held, json_pack("{s:I, s:I, s:s}", "job", job, "attempt",
                                                 attempt, "state", "running"));
    else
        send_body(a, BR_MSG_REQUEST, "job.exited", 3,
                  json_pack("{s:I, s:I, s:i, s:n, s:s}", "job", job, "attempt", attempt,
                            "exit_code", 0, "signal", "reason", ""));
}

static void drain(sim_t *a)
{
    for (;;) {
        br_msg_t *m = NULL;
        br_err_t err;
        if (br_msg_recv(a->sock, 0, ZMQ_DONTWAIT, &m, &err) < 0) {
            br_msg_destroy(&m);
            if (errno == EAGAIN)
                return;
            continue;
        }
        json_t *peers = json_object_get(br_msg_body(m), "overlay_peers");
        if (json_is_array(peers)) {
            S.lists++;
            S.entries += json_array_size(peers);
        }
        json_t *delta = json_object_get(br_msg_body(m), "overlay_peers_delta");
        if (json_is_object(delta)) {
            S.deltas++;
            S.changed += json_array_size(json_object_get(delta, "set")) +
                         json_array_size(json_object_get(delta, "gone"));
        }
        if (br_msg_kind(m) == BR_MSG_REQUEST)
            on_order(a, m);
        else if (strcmp(br_msg_type(m), "node.join") == 0) {
            if (br_msg_check(m, &err) < 0)
                die("join", err.text);
            a->joined = 1;
        } else if (strcmp(br_msg_type(m), "node.heartbeat") == 0) {
            int64_t now = br_mono_us();
            S.answered++;
            if (br_msg_seq(m) != a->hb_seq)
                S.late++;
            else if (S.rtt_us && S.nrtt < RTT_MAX) { /* (counted from answers_begin) */
                S.at_us[S.nrtt] = now;
                S.rtt_us[S.nrtt++] = now - a->hb_us;
            }
            if (a->answered_us && now - a->answered_us > S.gap_us)
                S.gap_us = now - a->answered_us;
            a->answered_us = now;
        } else if (br_msg_check(m, &err) < 0 && !S.refusals++) {
            fprintf(stderr, "swarm: %s refused: %s\n", br_msg_type(m), err.text);
        }
        br_msg_destroy(&m);
    }
}

static void wait_ready(int64_t timeout_ms)
{
    struct epoll_event ev[256];
    int n = epoll_wait(S.ep, ev, 256, (int)timeout_ms);
    for (int i = 0; i < n; i++)
        drain(ev[i].data.ptr);
}

/* Join every simulated agent, at most `window` joins in flight. */
static void join_all(int window)
{
    br_token_t t;
    br_err_t err;
    if (br_token_decode(S.token, &t, &err) < 0)
        die("token", err.text);
    br_token_join_keypair(t.secret, S.join_pub, S.join_sec);
    int next = 0, done = 0;
    while (done < S.n) {
        while (next < S.n && next - done < window) {
            sim_t *a = &S.sims[next++];
            if (br_keypair(a->pub, a->sec, &err) < 0)
                die("keypair", err.text);
            a->sock = dial(S.join_pub, S.join_sec);
            watch(a);
            send_body(a, BR_MSG_REQUEST, "node.join", 9,
                      json_pack("{s:s, s:s, s:s, s:{}, s:f}", "token", S.token, "public_key",
                                a->pub, "name", a->name, "labels", "cost_per_hour", 0.0));
            drain(a);
        }
        wait_ready(100);
        for (int i = done; i < next; i++) {
            sim_t *a = &S.sims[i];
            if (a->joined == 1) { /* reconnect under its own key, then hello */
                br_sock_close(&a->sock);
                a->sock = dial(a->pub, a->sec);
                watch(a);
                hello(a);
                a->joined = 2;
            }
        }
        while (done < next && S.sims[done].joined == 2)
            done++;
    }
}

static int64_t cpu_ticks(int pid)
{
    char path[64], buf[2048];
    snprintf(path, sizeof(path), "/proc/%d/stat", pid);
    FILE *f = fopen(path, "re");
    if (!f || !fgets(buf, sizeof(buf), f))
        die(path, "cannot read");
    fclose(f);
    unsigned long long ut = 0, st = 0;
    char *p = strrchr(buf, ')');
    if (!p || sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu", &ut,
                     &st) != 2)
        die(path, "cannot parse");
    return (int64_t)(ut + st);
}

static long rss_kib(int pid)
{
    char path[64], line[256];
    long kib = -1;
    snprintf(path, sizeof(path), "/proc/%d/status", pid);
    FILE *f = fopen(path, "re");
    while (f && fgets(line, sizeof(line), f))
        if (sscanf(line, "VmRSS: %ld", &kib) == 1)
            break;
    if (f)
        fclose(f);
    return kib;
}

static int by_value(const void *x, const void *y)
{
    int64_t a = *(const int64_t *)x, b = *(const int64_t *)y;
    return a < b ? -1 : a > b;
}

/* From here on, count the answers to heartbeats afresh. */
static void answers_begin(void)
{
    if ((!S.rtt_us && !(S.rtt_us = malloc(RTT_MAX * sizeof(*S.rtt_us)))) ||
        (!S.at_us && !(S.at_us = malloc(RTT_MAX * sizeof(*S.at_us)))))
        die("swarm", "out of memory");
    S.nrtt = 0;
    S.late = 0;
    S.gap_us = 0;
    S.answered = 0;
}

/* With SWARM_RTT_LOG=PREFIX set, each answer since answers_begin, in the order they
 * came, into PREFIX.PID: "when round-trip" (us, monotonic and us) a line; where a
 * percentile comes from (a stall of the coordinator's loop, a busy second) shows
 * there. */
static void answers_log(void)
{
    const char *prefix = getenv("SWARM_RTT_LOG");
    if (!prefix || !*prefix)
        return;
    char path[4200];
    snprintf(path, sizeof(path), "%s.%d", prefix, (int)getpid());
    FILE *f = fopen(path, "w");
    if (!f) {
        fprintf(stderr, "swarm: %s: %s\n", path, strerror(errno));
        return;
    }
    for (size_t i = 0; i < S.nrtt; i++)
        fprintf(f, "%lld %lld\n", (long long)S.at_us[i], (long long)S.rtt_us[i]);
    fclose(f);
}

/* The answers since answers_begin, as "p50 p99 gap late" (us, us, us, count). */
static int answers_line(char *line, size_t len)
{
    answers_log();
    qsort(S.rtt_us, S.nrtt, sizeof(*S.rtt_us), by_value);
    return snprintf(line, len, "%lld %lld %lld %llu",
                    (long long)(S.nrtt ? S.rtt_us[S.nrtt / 2] : -1),
                    (long long)(S.nrtt ? S.rtt_us[S.nrtt * 99 / 100] : -1),
                    (long long)S.gap_us, (unsigned long long)S.late);
}

/* Print the answers' figures: lines from answers_line, one per process. */
static void print_answers(char lines[][96], int n, int64_t hb_ms)
{
    long long p50 = -1, p99 = -1, gap = 0, v[3];
    unsigned long long late = 0, l;
    for (int k = 0; k < n; k++)
        if (sscanf(lines[k], "%lld %lld %lld %llu", &v[0], &v[1], &v[2], &l) == 4) {
            p50 = v[0] > p50 ? v[0] : p50;
            p99 = v[1] > p99 ? v[1] : p99;
            gap = v[2] > gap ? v[2] : gap;
            late += l;
        }
    printf("answered heartbeats: round trip p50 %.1f ms, p99 %.1f ms (the worst of %d "
           "process%s), %llu answered after a later heartbeat; the longest an agent went "
           "without an answer: %.1f s (heartbeat %.1f s)\n",
           p50 / 1000.0, p99 / 1000.0, n, n == 1 ? "" : "es", late, gap / 1e6,
           hb_ms / 1000.0);
}

/* Heartbeat every agent on its own schedule for ms milliseconds. */
static void run_for(int64_t ms)
{
    int64_t end = br_mono_ms() + ms;
    for (int64_t now = br_mono_ms(); now < end; now = br_mono_ms()) {
        int64_t soonest = end;
        for (int i = 0; i < S.n; i++) {
            sim_t *a = &S.sims[i];
            if (a->next_hb <= now) {
                a->hb_seq = a->hb_seq < 1000 ? 1000 : a->hb_seq + 1;
                a->hb_us = br_mono_us();
                send_body(a, BR_MSG_REQUEST, "node.heartbeat", a->hb_seq,
                          json_pack("{s:O}", "tasks", a->held));
                S.heartbeats++;
                a->next_hb += S.hb_ms;
                drain(a);
            }
            if (a->next_hb < soonest)
                soonest = a->next_hb;
        }
        int64_t wait = soonest - br_mono_ms();
        wait_ready(wait < 0 ? 0 : wait > 50 ? 50 : wait);
    }
}

/* Submit n trivial jobs pipelined over the admin's own connection. */
static void submit_jobs(int n)
{
    br_err_t err;
    void *s = br_sock_client(S.ctx, S.admin->endpoint, S.admin->server_public_key,
                             S.admin->public_key, S.admin->secret_key, &err);
    if (!s)
        die("admin", err.text);
    int64_t *sent = calloc((size_t)n, sizeof(*sent));
    S.jobs = calloc((size_t)n, sizeof(*S.jobs));
    S.early = calloc(100000, sizeof(*S.early));
    for (int i = 0; i < n; i++) {
        char spec[128];
        snprintf(spec, sizeof(spec), "name: swarm-%d-%d\ncommand: \"true\"\n", (int)getpid(), i);
        br_msg_t *m = br_msg_new(BR_MSG_REQUEST, "job.submit", (uint32_t)i + 1);
        br_msg_set_body(m, json_pack("{s:s, s:[]}", "spec", spec, "sets"));
        sent[i] = br_mono_us();
        br_msg_send(s, m, NULL);
        br_msg_destroy(&m);
    }
    for (int got = 0; got < n;) {
        zmq_pollitem_t it = {s, 0, ZMQ_POLLIN, 0};
        if (zmq_poll(&it, 1, 10) == 0) {
            wait_ready(0); /* orders may already come */
            continue;
        }
        br_msg_t *m = NULL;
        if (br_msg_recv(s, 0, 0, &m, &err) == 0 && br_msg_check(m, &err) == 0) {
            uint32_t i = br_msg_seq(m) - 1;
            S.jobs[S.njobs++] = (job_time_t){
                json_integer_value(json_object_get(br_msg_body(m), "id")), sent[i], 0};
            got++;
        } else if (m) {
            die("submit", err.text);
        }
        br_msg_destroy(&m);
    }
    for (int i = 0; i < S.nearly && i < 100000; i++) { /* orders that beat the answers */
        job_time_t *t = job_time(S.early[i].id);
        if (t && !t->run_us)
            t->run_us = S.early[i].at_us;
    }
    free(sent);
    br_sock_close(&s);
}

/* Make this process's slice of the swarm: agents [first, first + n). */
static void make_sims(int first, int n)
{
    S.n = n;
    S.ctx = zmq_ctx_new();
    zmq_ctx_set(S.ctx, ZMQ_IO_THREADS, 2);
    zmq_ctx_set(S.ctx, ZMQ_MAX_SOCKETS, 2 * S.n + 64);
    S.ep = epoll_create1(EPOLL_CLOEXEC);
    S.sims = calloc((size_t)S.n, sizeof(*S.sims));
    for (int i = 0; i < S.n; i++) {
        snprintf(S.sims[i].name, sizeof(S.sims[i].name), "swarm-%d-%d", (int)getppid(),
                 first + i);
        S.sims[i].held = json_array();
    }
}

static void free_sims(void)
{
    for (int i = 0; i < S.n; i++) {
        br_sock_close(&S.sims[i].sock);
        json_decref(S.sims[i].held);
    }
    free(S.sims);
    close(S.ep);
    zmq_ctx_term(S.ctx);
}

static void schedule(void)
{
    int64_t start = br_mono_ms();
    for (int i = 0; i < S.n; i++) /* spread over one interval */
        S.sims[i].next_hb = start + (int64_t)i * S.hb_ms / S.n;
}

/* A process holds at most this many simulated agents (two descriptors each). */
#define PER_PROC 8000

/* A swarm bigger than one process's descriptors allow: `procs` children play a
 * slice each; they join, say ready, wait for the word, settle and heartbeat for
 * measure_ms, and send back what they counted, while this process measures the
 * coordinator over the same window. */
static void run_children(int total, int procs, int pid, int64_t measure_ms)
{
    int up[64][2], down[64][2];
    int per = (total + procs - 1) / procs;
    int64_t t0 = br_mono_ms();
    for (int k = 0; k < procs; k++) {
        if (pipe(up[k]) < 0 || pipe(down[k]) < 0)
            die("pipe", strerror(errno));
        pid_t child = fork();
        if (child < 0)
            die("fork", strerror(errno));
        if (child == 0) {
            char go;
            int first = k * per, n = first + per > total ? total - first : per;
            make_sims(first, n);
            join_all(200);
            if (write(up[k][1], "R", 1) != 1 || read(down[k][0], &go, 1) != 1)
                _exit(1);
            schedule();
            run_for(2 * S.hb_ms);
            uint64_t hb0 = S.heartbeats;
            answers_begin();
            run_for(measure_ms);
            char line[160], figures[96];
            answers_line(figures, sizeof(figures));
            int len = snprintf(line, sizeof(line), "%llu %llu %s\n",
                               (unsigned long long)(S.heartbeats - hb0),
                               (unsigned long long)S.answered, figures);
            if (write(up[k][1], line, (size_t)len) != len)
                _exit(1);
            free_sims();
            _exit(0);
        }
        close(up[k][1]); /* (so that a child that dies reads as one) */
        close(down[k][0]);
    }
    for (int k = 0; k < procs; k++) {
        char r;
        if (read(up[k][0], &r, 1) != 1)
            die("swarm", "a child died while joining");
    }
    printf("joined %d agents in %.1f s (%d processes)\n", total,
           (double)(br_mono_ms() - t0) / 1000.0, procs);
    fflush(stdout); /* (swarm.sh starts what runs beside on this line) */
    for (int k = 0; k < procs; k++)
        if (write(down[k][1], "G", 1) != 1)
            die("swarm", "a child is gone");
    struct timespec settle = {(time_t)(2 * S.hb_ms / 1000), (long)(2 * S.hb_ms % 1000) * 1000000};
    nanosleep(&settle, NULL);
    int64_t c0 = cpu_ticks(pid), w0 = br_mono_us();
    uint64_t hbs = 0, ans = 0;
    char figures[64][96];
    for (int k = 0; k < procs; k++) {
        char line[160] = "";
        ssize_t n = read(up[k][0], line, sizeof(line) - 1);
        unsigned long long h = 0, a = 0;
        int at = 0;
        if (n <= 0 || sscanf(line, "%llu %llu %n", &h, &a, &at) != 2)
            die("swarm", "a child sent no figures");
        snprintf(figures[k], sizeof(figures[k]), "%s", line + at);
        hbs += h;
        ans += a;
    }
    int64_t c1 = cpu_ticks(pid), w1 = br_mono_us();
    double cpu_s = (double)(c1 - c0) / (double)sysconf(_SC_CLK_TCK);
    double wall_s = (double)(w1 - w0) / 1e6;
    printf("agents %d, heartbeat %lld ms, no jobs running: %llu heartbeats in %.1f s "
           "(%llu answered)\n",
           total, (long long)S.hb_ms, (unsigned long long)hbs, wall_s,
           (unsigned long long)ans);
    printf("coordinator CPU: %.1f%% of one core, %.0f us per heartbeat; RSS %.1f MiB\n",
           100.0 * cpu_s / wall_s, hbs ? 1e6 * cpu_s / (double)hbs : 0.0,
           rss_kib(pid) / 1024.0);
    print_answers(figures, procs, S.hb_ms);
    while (wait(NULL) > 0)
        ;
}

int main(int argc, char **argv)
{
    const char *cred_path = NULL;
    int pid = 0, jobs = 0, o;
    int64_t measure_ms = 20000;
    S.n = 100;
    S.hb_ms = 1000;
    static const struct option opts[] = {{"credential", required_argument, NULL, 'c'},
                                         {"coordinator-pid", required_argument, NULL, 'p'},
                                         {"agents", required_argument, NULL, 'n'},
                                         {"heartbeat", required_argument, NULL, 'h'},
                                         {"measure", required_argument, NULL, 'm'},
                                         {"jobs", required_argument, NULL, 'j'},
                                         {"hold", no_argument, NULL, 'H'},
                                         {"overlay", no_argument, NULL, 'O'},
                                         {"no-ping", no_argument, NULL, 'P'},
                                         {NULL, 0, NULL, 0}};
    br_err_t err;
    while ((o = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        switch (o) {
        case 'c': cred_path = optarg; break;
        case 'p': pid = atoi(optarg); break;
        case 'n': S.n = atoi(optarg); break;
        case 'h':
        case 'm':
            if (br_parse_duration(optarg, o == 'h' ? &S.hb_ms : &measure_ms, &err) < 0)
                die(o == 'h' ? "--heartbeat" : "--measure", err.text);
            break;
        case 'j': jobs = atoi(optarg); break;
        case 'H': S.hold = 1; break;
        case 'O': S.overlay = 1; break;
        case 'P': S.no_ping = 1; break;
        default:
            fprintf(stderr, "usage: bramble-swarm --credential ADMIN --coordinator-pid PID "
                            "[--agents N] [--heartbeat 1s] [--measure 20s] [--jobs N] "
                            "[--hold] [--overlay] [--no-ping]\n");
            return 2;
        }
    }
    if (pid <= 0 || S.n <= 0)
        die("usage", "--coordinator-pid and --agents > 0 are needed");
    br_raise_nofile();
    char path[1024];
    br_cred_t admin;
    if (br_cred_load(br_cred_path(cred_path, path, sizeof(path)), &admin, &err) < 0)
        die("credential", err.text);
    S.admin = &admin;
    br_client_t *cl = br_client_new_cred(&admin, &err);
    json_t *r = cl ? br_client_call(cl, "token.create",
                                    json_pack("{s:I, s:i}", "ttl", (json_int_t)3600000,
                                              "uses", S.n),
                                    30000, &err)
                   : NULL;
    if (!r)
        die("token.create", err.text);
    br_strlcpy(S.token, json_string_value(json_object_get(r, "token")), sizeof(S.token));
    json_decref(r);
    int procs = (S.n + PER_PROC - 1) / PER_PROC;
    if (procs > 1) {
        if (jobs > 0 || S.hold)
            die("usage", "--jobs and --hold need at most 8000 agents (one process)");
        if (procs > 64)
            die("usage", "at most 512000 agents");
        fflush(stdout);
        run_children(S.n, procs, pid, measure_ms);
        br_client_destroy(&cl);
        return 0;
    }
    make_sims(0, S.n);
    int64_t t0 = br_mono_ms();
    join_all(200);
    printf("joined %d agents in %.1f s\n", S.n, (double)(br_mono_ms() - t0) / 1000.0);
    fflush(stdout); /* (swarm.sh starts what runs beside on this line) */
    schedule();
    run_for((S.overlay ? 10 : 2) * S.hb_ms); /* settle: every hello answered (and, with
                                               * the overlay, the news of every join) */
    if (jobs > 0) {
        submit_jobs(jobs);
        int64_t until = br_mono_ms() + 60000;
        while (S.runs < (uint64_t)jobs && br_mono_ms() < until)
            run_for(100);
        int64_t *lat = calloc((size_t)S.njobs, sizeof(*lat));
        int k = 0;
        for (int i = 0; i < S.njobs; i++)
            if (S.jobs[i].run_us)
                lat[k++] = S.jobs[i].run_us - S.jobs[i].sent_us;
        qsort(lat, (size_t)k, sizeof(*lat), by_value);
        if (k)
            printf("submit -> job.run at an agent: %d of %d jobs, p50 %.1f ms, p99 %.1f ms\n",
                   k, jobs, lat[k / 2] / 1000.0, lat[k * 99 / 100] / 1000.0);
        free(lat);
        run_for(2 * S.hb_ms); /* the exits and starts settle */
    }
    uint64_t hb0 = S.heartbeats;
    answers_begin();
    int64_t c0 = cpu_ticks(pid), w0 = br_mono_us();
    run_for(measure_ms);
    int64_t c1 = cpu_ticks(pid), w1 = br_mono_us();
    double cpu_s = (double)(c1 - c0) / (double)sysconf(_SC_CLK_TCK);
    double wall_s = (double)(w1 - w0) / 1e6;
    uint64_t hbs = S.heartbeats - hb0;
    printf("agents %d, heartbeat %lld ms, %s running: %llu heartbeats in %.1f s "
           "(%llu answered)\n",
           S.n, (long long)S.hb_ms, S.hold ? "jobs held" : "no jobs",
           (unsigned long long)hbs, wall_s, (unsigned long long)S.answered);
    printf("coordinator CPU: %.1f%% of one core, %.0f us per heartbeat; RSS %.1f MiB\n",
           100.0 * cpu_s / wall_s, hbs ? 1e6 * cpu_s / (double)hbs : 0.0,
           rss_kib(pid) / 1024.0);
    if (S.overlay)
        printf("overlay: %llu peer lists received (%llu peers in them) and %llu changes "
               "(%llu peers) since the first join\n", (unsigned long long)S.lists,
               (unsigned long long)S.entries, (unsigned long long)S.deltas,
               (unsigned long long)S.changed);
    char figures[1][96];
    answers_line(figures[0], sizeof(figures[0]));
    print_answers(figures, 1, S.hb_ms);
    free_sims();
    free(S.rtt_us);
    free(S.at_us);
    free(S.jobs);
    free(S.early);
    br_client_destroy(&cl);
    return 0;
}
