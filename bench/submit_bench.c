/* submit_bench.c - how fast the coordinator accepts submissions over one connection
 * (one request at a time, or many in flight), and how long a batch of trivial jobs
 * takes from the first submit to the last completion. Prints its figures. */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <zmq.h>

#include "client.h"
#include "cred.h"
#include "msg.h"
#include "sock.h"
#include "util.h"

static json_t *submit_body(const char *prefix, int i, const char *command)
{
    char spec[512];
    snprintf(spec, sizeof(spec), "name: %s-%d\ncommand: %s\n", prefix, i, command);
    return json_pack("{s:s, s:[]}", "spec", spec, "sets");
}

/* One request at a time: each waits for its acknowledgement (a durable commit). */
static double run_loop(br_client_t *c, int n, const char *prefix, const char *command)
{
    br_err_t err;
    int64_t t0 = br_mono_us();
    for (int i = 0; i < n; i++) {
        json_t *r = br_client_call(c, "job.submit", submit_body(prefix, i, command), 30000,
                                   &err);
        if (!r) {
            fprintf(stderr, "submit %d: %s\n", i, err.text);
            exit(1);
        }
        json_decref(r);
    }
    return (double)(br_mono_us() - t0) / 1e6;
}

/* Many in flight on one DEALER: the coordinator commits them in shared batches. */
static double run_pipelined(const br_cred_t *cred, int n, const char *prefix,
                            const char *command)
{
    br_err_t err;
    void *ctx = zmq_ctx_new();
    void *s = br_sock_client(ctx, cred->endpoint, cred->server_public_key,
                             cred->public_key, cred->secret_key, &err);
    if (!s) {
        fprintf(stderr, "%s\n", err.text);
        exit(1);
    }
    /* connected and past the CURVE handshake before the clock starts: the figure
     * is the submissions', not the connection's */
    br_msg_t *ping = br_msg_new(BR_MSG_REQUEST, "ping", 0);
    br_msg_t *pong = NULL;
    zmq_pollitem_t pi = {s, 0, ZMQ_POLLIN, 0};
    if (br_msg_send(s, ping, &err) < 0 || zmq_poll(&pi, 1, 30000) <= 0 ||
        br_msg_recv(s, 0, 0, &pong, &err) < 0 || br_msg_check(pong, &err) < 0) {
        fprintf(stderr, "pipelined: ping: %s\n", err.text);
        exit(1);
    }
    br_msg_destroy(&ping);
    br_msg_destroy(&pong);
    int64_t t0 = br_mono_us();
    for (int i = 0; i < n; i++) {
        br_msg_t *m = br_msg_new(BR_MSG_REQUEST, "job.submit", (uint32_t)i + 1);
        br_msg_set_body(m, submit_body(prefix, i, command));
        br_msg_send(s, m, NULL);
        br_msg_destroy(&m);
    }
    for (int got = 0; got < n;) {
        zmq_pollitem_t it = {s, 0, ZMQ_POLLIN, 0};
        if (zmq_poll(&it, 1, 30000) <= 0) {
            fprintf(stderr, "pipelined: only %d of %d answers\n", got, n);
            exit(1);
        }
        br_msg_t *m = NULL;
        if (br_msg_recv(s, 0, 0, &m, &err) == 0) {
            if (br_msg_check(m, &err) < 0) {
                fprintf(stderr, "pipelined submit: %s\n", err.text);
                exit(1);
            }
            got++;
        }
        br_msg_destroy(&m);
    }
    double secs = (double)(br_mono_us() - t0) / 1e6;
    br_sock_close(&s);
    zmq_ctx_term(ctx);
    return secs;
}

/* Wait until every job named prefix-* has ended, looking once a second; returns
 * the latest end time (s). */
static double wait_done(br_client_t *c, const char *prefix, int n)
{
    br_err_t err;
    size_t plen = strlen(prefix);
    for (;;) {
        json_t *r = br_client_call(c, "job.list", json_pack("{s:b}", "all", 1), 30000, &err);
        if (!r) {
            fprintf(stderr, "job.list: %s\n", err.text);
            exit(1);
        }
        int done = 0, failed = 0;
        double last = 0;
        size_t i;
        json_t *j;
        json_array_foreach(json_object_get(r, "jobs"), i, j) {
            const char *name = json_string_value(json_object_get(j, "name"));
            const char *st = json_string_value(json_object_get(j, "state"));
            if (strncmp(name, prefix, plen) != 0 || name[plen] != '-')
                continue;
            if (strcmp(st, "completed") == 0 || strcmp(st, "failed") == 0) {
                done++;
                failed += strcmp(st, "failed") == 0;
                double e = json_real_value(json_object_get(j, "ended"));
                if (e > last)
                    last = e;
            }
        }
        json_decref(r);
        if (done >= n) {
            if (failed)
                fprintf(stderr, "%d jobs failed\n", failed);
            return last;
        }
        /* the figure is the jobs' own end times, so a slow look costs it nothing;
         * listing every job ten times a second cost the coordinator more CPU than
         * the jobs did */
        struct timespec ts = {1, 0};
        nanosleep(&ts, NULL);
    }
}

static int by_value(const void *x, const void *y)
{
    double a = *(const double *)x, b = *(const double *)y;
    return (a > b) - (a < b);
}

int main(int argc, char **argv)
{
    int n = 500;
    const char *cred_path = NULL, *mode = "loop", *prefix = "bench", *command = "true";
    int wait = 0, batches = 1, o;
    static const struct option opts[] = {{"credential", required_argument, NULL, 'c'},
                                         {"batches", required_argument, NULL, 'b'},
                                         {"count", required_argument, NULL, 'n'},
                                         {"mode", required_argument, NULL, 'm'},
                                         {"prefix", required_argument, NULL, 'p'},
                                         {"command", required_argument, NULL, 'x'},
                                         {"wait", no_argument, NULL, 'w'},
                                         {NULL, 0, NULL, 0}};
    while ((o = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        switch (o) {
        case 'c': cred_path = optarg; break;
        case 'n': n = atoi(optarg); break;
        case 'm': mode = optarg; break;
        case 'p': prefix = optarg; break;
        case 'x': command = optarg; break;
        case 'w': wait = 1; break;
        case 'b': batches = atoi(optarg); break;
        default:
            fprintf(stderr, "usage: bramble-bench-submit --credential F [--count N] "
                            "[--mode loop|pipelined] [--batches K] [--prefix P] [--command CMD]\n"
                            "       [--wait]\n");
            return 2;
        }
    }
    char path[1024];
    br_cred_t cred;
    br_err_t err;
    if (br_cred_load(br_cred_path(cred_path, path, sizeof(path)), &cred, &err) < 0) {
        fprintf(stderr, "%s\n", err.text);
        return 1;
    }
    br_client_t *c = br_client_new_cred(&cred, &err);
    if (!c) {
        fprintf(stderr, "%s\n", err.text);
        return 1;
    }
    if (batches > 1) { /* K batches in a row (the queue grows), each one's rate */
        double *rate = calloc((size_t)batches, sizeof(*rate));
        for (int b = 0; rate && b < batches; b++) {
            char pb[256];
            snprintf(pb, sizeof(pb), "%s%d", prefix, b + 1);
            double secs = strcmp(mode, "pipelined") == 0 ? run_pipelined(&cred, n, pb, command)
                                                         : run_loop(c, n, pb, command);
            rate[b] = n / secs;
            printf("%s batch %d: %d submissions in %.3f s = %.0f/s\n", mode, b + 1, n, secs,
                   rate[b]);
        }
        if (rate) {
            qsort(rate, (size_t)batches, sizeof(*rate), by_value);
            printf("%s: %d batches of %d: median %.0f/s, lowest %.0f/s, highest %.0f/s\n",
                   mode, batches, n, rate[batches / 2], rate[0], rate[batches - 1]);
        }
        free(rate);
        br_client_destroy(&c);
        return 0;
    }
    double t_first = (double)br_now_ms() / 1000.0;
    double secs = strcmp(mode, "pipelined") == 0 ? run_pipelined(&cred, n, prefix, command)
                                                 : run_loop(c, n, prefix, command);
    printf("%s: %d submissions in %.3f s = %.0f/s\n", mode, n, secs, n / secs);
    if (wait) {
        double last = wait_done(c, prefix, n);
        printf("%s: %d jobs from first submit to last completion: %.2f s\n", mode, n,
               last - t_first);
    }
    br_client_destroy(&c);
    return 0;
}
