/* main.c - bramble-gateway: flags, then the gateway's loop (gateway.h). */
#include <getopt.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cred.h"
#include "gateway.h"
#include "util.h"

static const char usage[] =
    "usage: bramble-gateway --credential FILE [--listen ADDR:PORT]\n"
    "                       [--tls-cert FILE --tls-key FILE] [--max-body SIZE]\n"
    "                       [--queue N] [--wait DURATION] [--client-timeout DURATION]\n"
    "                       [--upstream-timeout DURATION] [--max-connections N]\n"
    "\n"
    "The OpenAI-compatible endpoint in front of every service with a service.model:\n"
    "routes POST /v1/... by its JSON \"model\", balances over the healthy replicas,\n"
    "retries a refused connection on another one, and keeps serving from the last\n"
    "routing table while the coordinator is away (docs/gateway.md).\n"
    "\n"
    "  --credential FILE     the gateway's credential (bramble gateway add NAME)\n"
    "  --listen ADDR:PORT    where clients connect (default 127.0.0.1:7780; PORT 0:\n"
    "                        any free port, printed on the first line)\n"
    "  --tls-cert, --tls-key serve HTTPS with this PEM certificate and key\n"
    "  --max-body SIZE       the largest request body (default 32MiB; past it, 413)\n"
    "  --queue N             requests that may wait for each service's replicas\n"
    "                        (default 256; past it, 429 with Retry-After)\n"
    "  --wait DURATION       how long a request waits for a replica (default 5m),\n"
    "                        then 503\n"
    "  --client-timeout D    a client must send its whole request within this\n"
    "                        (default 60s); idle connections close after it too\n"
    "  --upstream-timeout D  a replica that sends nothing this long is given up\n"
    "                        (default 10m)\n"
    "  --max-connections N   client connections at once (default 10000)\n";

/* A usage error: said on stderr; the exit status 2. */
static int bad(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int bad(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "bramble-gateway: ");
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\n(bramble-gateway --help says how to use it)\n");
    va_end(ap);
    return 2;
}

int main(int argc, char **argv)
{
    static const struct option opts[] = {{"credential", required_argument, NULL, 'c'},
                                         {"listen", required_argument, NULL, 'l'},
                                         {"tls-cert", required_argument, NULL, 'C'},
                                         {"tls-key", required_argument, NULL, 'K'},
                                         {"max-body", required_argument, NULL, 'b'},
                                         {"queue", required_argument, NULL, 'q'},
                                         {"wait", required_argument, NULL, 'w'},
                                         {"client-timeout", required_argument, NULL, 't'},
                                         {"upstream-timeout", required_argument, NULL, 'u'},
                                         {"max-connections", required_argument, NULL, 'm'},
                                         {"help", no_argument, NULL, 'h'},
                                         {NULL, 0, NULL, 0}};
    gw_config_t cfg;
    gw_config_defaults(&cfg);
    const char *cred = NULL;
    br_err_t err;
    int c;
    while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        uint64_t size;
        int64_t ms;
        char *end;
        long n;
        switch (c) {
        case 'c':
            cred = optarg;
            break;
        case 'l':
            if (strlen(optarg) >= sizeof(cfg.listen))
                return bad("--listen %s: too long", optarg);
            snprintf(cfg.listen, sizeof(cfg.listen), "%s", optarg);
            break;
        case 'C':
            cfg.tls_cert = optarg;
            break;
        case 'K':
            cfg.tls_key = optarg;
            break;
        case 'b':
            if (br_parse_size(optarg, &size, &err) < 0 || size == 0 || size > (1ull << 30))
                return bad("--max-body %s: expected a size from 1 to 1GiB", optarg);
            cfg.max_body = (size_t)size;
            break;
        case 'q':
        case 'm':
            n = strtol(optarg, &end, 10);
            if (*end || n < 1 || n > 1000000)
                return bad("%s %s: expected a number from 1 to 1000000",
                           c == 'q' ? "--queue" : "--max-connections", optarg);
            *(c == 'q' ? &cfg.queue_max : &cfg.max_conns) = (int)n;
            break;
        case 'w':
        case 't':
        case 'u':
            if (br_parse_duration(optarg, &ms, &err) < 0 || ms < 1000)
                return bad("%s %s: expected a duration of 1s or more (e.g. 30s, 5m)",
                           c == 'w' ? "--wait" : c == 't' ? "--client-timeout"
                                                         : "--upstream-timeout",
                           optarg);
            *(c == 'w' ? &cfg.wait_ms : c == 't' ? &cfg.client_ms : &cfg.upstream_ms) = ms;
            break;
        case 'h':
            fputs(usage, stdout);
            return 0;
        default:
            fputs(usage, stderr);
            return 2;
        }
    }
    if (optind < argc)
        return bad("unexpected argument '%s'", argv[optind]);
    if (!cred)
        return bad("--credential FILE is needed (bramble gateway add NAME makes one)");
    if (br_cred_load(cred, &cfg.cred, &err) < 0) {
        fprintf(stderr, "bramble-gateway: %s\n", err.text);
        return 1;
    }
    gw_t *g = gw_new(&cfg, &err);
    if (!g) {
        fprintf(stderr, "bramble-gateway: %s\n", err.text);
        return 1;
    }
    char host[300];
    snprintf(host, sizeof(host), "%.*s", (int)(strrchr(cfg.listen, ':') - cfg.listen),
             cfg.listen);
    printf("bramble-gateway: serving on %s://%s:%d (coordinator %s)\n",
           cfg.tls_cert ? "https" : "http", host, gw_port(g), cfg.cred.endpoint);
    fflush(stdout);
    int rc = gw_run(g, &err);
    if (rc < 0)
        fprintf(stderr, "bramble-gateway: %s\n", err.text);
    gw_destroy(&g);
    return rc < 0 ? 1 : 0;
}
