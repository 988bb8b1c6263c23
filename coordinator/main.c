/* main.c - brambled: `brambled init` sets up a data dir; `brambled` serves it. */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "announce.h"
#include "announcer.h"
#include "config.h"
#include "coord.h"
#include "http.h"
#include "overlaynet.h"
#include "util.h"

/* The coordinator's heap grows with the jobs it holds, and a first touch of each
 * new page is a fault (13.7 us each on a virtual machine measured, a fifth of a
 * burst of submissions). Transparent huge pages take them 2 MiB at a time, but
 * glibc asks for them only when told by GLIBC_TUNABLES when the process starts:
 * so the server execs itself once more with glibc.malloc.hugetlb=1 added, unless
 * the environment already says something about it (hugetlb=0 turns it off).
 * Nothing is open yet; the process id stays the same. On any failure it goes on
 * as it is. */
static void heap_in_huge_pages(char **argv)
{
    const char *was = getenv("GLIBC_TUNABLES");
    if (was && strstr(was, "glibc.malloc.hugetlb"))
        return;
    char value[1024];
    int n = snprintf(value, sizeof(value), "%s%sglibc.malloc.hugetlb=1", was ? was : "",
                     was && was[0] ? ":" : "");
    if (n < 0 || (size_t)n >= sizeof(value) || setenv("GLIBC_TUNABLES", value, 1) < 0)
        return;
    execv("/proc/self/exe", argv);
    if (was) /* (still this process: as it was) */
        setenv("GLIBC_TUNABLES", was, 1);
    else
        unsetenv("GLIBC_TUNABLES");
}

static void usage(FILE *f)
{
    fprintf(f,
            "usage: brambled init --data-dir DIR [--listen EP] [--advertise EP]\n"
            "                [--http [ADDR:]PORT [--http-cert FILE --http-key FILE]]\n"
            "       brambled [--data-dir DIR] [--listen EP] [--advertise EP]\n"
            "                [--heartbeat-interval 1s] [--node-timeout 5s]\n"
            "                [--announce | --no-announce] [--announce-port %d]\n"
            "                [--teaching] [--log-max-per-job 64MiB] [--log-retention 30d]\n"
            "                [--http [ADDR:]PORT | --http off] [--fairshare-half-life 7d]\n"
            "                [--kill-grace 30s] [--preempt-after 10m] [--preempt-min-run 5m]\n"
            "                [--replica-retention 7d]\n"
            "                [--http-cert FILE --http-key FILE]\n"
            "                [--store-dir DIR] [--store-quota SIZE] [--user-store-quota SIZE]\n"
            "                [--overlay-net CIDR]\n"
            "\n"
            "init creates the coordinator key pair, the store (DIR/bramble.db) and the\n"
            "admin credential (DIR/admin.credential), and records the endpoints.\n"
            "Without init, serve: agents and the CLI connect to --listen\n"
            "(default %s). Durations take ms, s, m, h, d.\n"
            "--announce broadcasts this coordinator's endpoint and public key on the\n"
            "LAN (UDP port %d, every 2s) so agents whose join token names a stale\n"
            "address find it; off unless --announce or --teaching (teaching mode) is\n"
            "given, or init recorded it (`brambled init --announce`).\n"
            "--log-max-per-job keeps the newest output of each job up to SIZE (0: no\n"
            "limit) and counts what it drops; --log-retention deletes the output of\n"
            "jobs that ended longer ago than that (0: keep it).\n"
            "--fairshare-half-life: fair share forgets half of what a user used in this\n"
            "long (docs/sharing.md). --kill-grace: a job past its time_limit, or cancelled\n"
            "while it runs, gets SIGTERM, then SIGKILL this long after (cancel --now: at\n"
            "once). --preempt-after: a job that waited this long\n"
            "may ask running jobs of lower priority to checkpoint and make room (0: never);\n"
            "--preempt-min-run: how long a job runs before it can be asked, again.\n"
            "--replica-retention drops the replicas of checkpoints (copies on other\n"
            "nodes) of jobs that ended longer ago than that (0: keep them until\n"
            "`bramble job purge`; docs/checkpoints.md).\n"
            "--http serves GET /metrics (Prometheus text format) to holders of a token\n"
            "from `bramble token create --metrics`; off unless given, or recorded by\n"
            "`brambled init --http` (`--http off` turns a recorded one off). A bare port\n"
            "or :PORT listens on 127.0.0.1 only; reach it from afar through an SSH\n"
            "tunnel (docs/metrics.md).\n"
            "--http-cert and --http-key (PEM files, both or neither; the key readable by\n"
            "its owner only) make the HTTP side serve HTTPS only; init records them.\n"
            "--store-dir keeps the files of data sets, code and outputs, each once by\n"
            "its hash (default DIR/store); --store-quota caps what it holds in all, and\n"
            "--user-store-quota what each user's files take (0: no limit, the\n"
            "default; docs/files.md).\n"
            "--overlay-net is the network whose addresses the nodes' WireGuard overlay\n"
            "takes, one per node for good (default %s; docs/overlay.md).%s\n",
            BR_ANNOUNCE_PORT, BR_DEFAULT_LISTEN, BR_ANNOUNCE_PORT, BR_OVERLAY_NET_DEFAULT,
            br_http_available() ? "" : "\nThis build has no HTTP: libmicrohttpd-dev was "
                                       "missing when it was built.");
}

static int parse_args(int argc, char **argv, br_config_t *cfg)
{
    static const struct option opts[] = {
        {"data-dir", required_argument, NULL, 'd'},
        {"listen", required_argument, NULL, 'l'},
        {"advertise", required_argument, NULL, 'a'},
        {"heartbeat-interval", required_argument, NULL, 'H'},
        {"node-timeout", required_argument, NULL, 'T'},
        {"announce", no_argument, NULL, 'A'},
        {"no-announce", no_argument, NULL, 'N'},
        {"announce-port", required_argument, NULL, 'P'},
        {"teaching", no_argument, NULL, 't'},
        {"log-max-per-job", required_argument, NULL, 'L'},
        {"log-retention", required_argument, NULL, 'R'},
        {"http", required_argument, NULL, 'W'},
        {"fairshare-half-life", required_argument, NULL, 'F'},
        {"kill-grace", required_argument, NULL, 'K'},
        {"preempt-after", required_argument, NULL, 'E'},
        {"preempt-min-run", required_argument, NULL, 'M'},
        {"replica-retention", required_argument, NULL, 'X'},
        {"http-cert", required_argument, NULL, 'c'},
        {"http-key", required_argument, NULL, 'k'},
        {"store-dir", required_argument, NULL, 'S'},
        {"store-quota", required_argument, NULL, 'Q'},
        {"user-store-quota", required_argument, NULL, 'U'},
        {"overlay-net", required_argument, NULL, 'O'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0}};
    int o;
    br_err_t err;
    while ((o = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        switch (o) {
        case 'd':
            br_strlcpy(cfg->data_dir, optarg, sizeof(cfg->data_dir));
            break;
        case 'l':
            br_strlcpy(cfg->listen, optarg, sizeof(cfg->listen));
            break;
        case 'a':
            br_strlcpy(cfg->advertise, optarg, sizeof(cfg->advertise));
            break;
        case 'H':
        case 'T':
            if (br_parse_duration(optarg, o == 'H' ? &cfg->heartbeat_ms
                                                   : &cfg->node_timeout_ms,
                                  &err) < 0) {
                fprintf(stderr, "brambled: --%s %s: %s\n",
                        o == 'H' ? "heartbeat-interval" : "node-timeout", optarg, err.text);
                return 2;
            }
            break;
        case 'A':
        case 't': /* teaching mode: agents find the coordinator by themselves */
            cfg->announce = 1;
            break;
        case 'N':
            cfg->announce = 0;
            break;
        case 'P':
            if (br_parse_port(optarg, 1, &cfg->announce_port, &err) < 0) {
                fprintf(stderr, "brambled: --announce-port %s\n", err.text);
                return 2;
            }
            break;
        case 'L': {
            uint64_t bytes = 0;
            int bad = br_parse_size(optarg, &bytes, &err) < 0;
            if (bad || bytes > (1ULL << 40)) {
                fprintf(stderr, "brambled: --log-max-per-job %s: %s\n", optarg,
                        bad ? err.text : "at most 1TiB");
                return 2;
            }
            cfg->log_max_per_job = (int64_t)bytes;
            break;
        }
        case 'F':
            if (br_parse_duration(optarg, &cfg->half_life_ms, &err) < 0 ||
                cfg->half_life_ms < 1000) {
                fprintf(stderr, "brambled: --fairshare-half-life %s: %s\n", optarg,
                        cfg->half_life_ms < 1000 ? "at least 1s" : err.text);
                return 2;
            }
            break;
        case 'K':
        case 'E':
        case 'M':
            if (br_parse_duration(optarg, o == 'K'   ? &cfg->kill_grace_ms
                                          : o == 'E' ? &cfg->preempt_after_ms
                                                     : &cfg->preempt_min_run_ms,
                                  &err) < 0) {
                fprintf(stderr, "brambled: --%s %s\n",
                        o == 'K' ? "kill-grace" : o == 'E' ? "preempt-after" : "preempt-min-run",
                        err.text);
                return 2;
            }
            break;
        case 'S':
            if (!optarg[0] || strlen(optarg) >= sizeof(cfg->store_dir)) {
                fprintf(stderr, "brambled: --store-dir: %s\n",
                        optarg[0] ? "too long a path" : "an empty path");
                return 2;
            }
            br_strlcpy(cfg->store_dir, optarg, sizeof(cfg->store_dir));
            break;
        case 'Q':
        case 'U': {
            uint64_t bytes = 0;
            if (br_parse_size(optarg, &bytes, &err) < 0 || bytes > (1ULL << 60)) {
                fprintf(stderr, "brambled: --%s %s: %s\n",
                        o == 'Q' ? "store-quota" : "user-store-quota", optarg,
                        bytes > (1ULL << 60) ? "too large" : err.text);
                return 2;
            }
            *(o == 'Q' ? &cfg->store_quota : &cfg->user_store_quota) = (int64_t)bytes;
            break;
        }
        case 'O': {
            br_overlay_net_t net;
            if (br_overlay_net_parse(optarg, &net, &err) < 0) {
                fprintf(stderr, "brambled: --overlay-net %s\n", err.text);
                return 2;
            }
            br_strlcpy(cfg->overlay_net, optarg, sizeof(cfg->overlay_net));
            break;
        }
        case 'R':
            if (br_parse_duration(optarg, &cfg->log_retention_ms, &err) < 0) {
                fprintf(stderr, "brambled: --log-retention %s\n", err.text);
                return 2;
            }
            break;
        case 'X':
            if (br_parse_duration(optarg, &cfg->replica_retention_ms, &err) < 0) {
                fprintf(stderr, "brambled: --replica-retention %s\n", err.text);
                return 2;
            }
            break;
        case 'W': {
            br_http_addr_t addr;
            if (strcmp(optarg, "off") != 0 && !br_http_available()) {
                fprintf(stderr, "brambled: --http: this brambled was built without HTTP "
                                "(libmicrohttpd-dev was missing when it was built): "
                                "install it and rebuild\n");
                return 2;
            }
            if (strcmp(optarg, "off") != 0 && br_http_parse_addr(optarg, &addr, &err) < 0) {
                fprintf(stderr, "brambled: --http %s\n", err.text);
                return 2;
            }
            br_strlcpy(cfg->http, optarg, sizeof(cfg->http));
            break;
        }
        case 'c':
        case 'k':
            if (!*optarg) {
                fprintf(stderr, "brambled: --http-%s: empty file name\n",
                        o == 'c' ? "cert" : "key");
                return 2;
            }
            if (!br_http_tls_available()) {
                fprintf(stderr, "brambled: --http-%s: this brambled's libmicrohttpd "
                                "cannot serve HTTPS (built without TLS, or no "
                                "libmicrohttpd at all)\n",
                        o == 'c' ? "cert" : "key");
                return 2;
            }
            br_strlcpy(o == 'c' ? cfg->http_cert : cfg->http_key, optarg,
                       sizeof(cfg->http_cert));
            break;
        case 'h':
            usage(stdout);
            exit(0);
        default:
            usage(stderr);
            return 2;
        }
    }
    if (cfg->heartbeat_ms < 10 || cfg->node_timeout_ms <= cfg->heartbeat_ms) {
        fprintf(stderr, "brambled: --node-timeout must be longer than "
                        "--heartbeat-interval (at least 10ms)\n");
        return 2;
    }
    if (!cfg->http_cert[0] != !cfg->http_key[0]) {
        fprintf(stderr, "brambled: --http-cert and --http-key go together: give both "
                        "(PEM files) or neither\n");
        return 2;
    }
    return 0;
}

int main(int argc, char **argv)
{
    br_config_t cfg;
    br_err_t err;
    int init = argc > 1 && strcmp(argv[1], "init") == 0;
    if (!init)
        heap_in_huge_pages(argv);
    br_config_defaults(&cfg);
    if (init) {
        argv[1] = argv[0];
        argc--;
        argv++;
    }
    int rc = parse_args(argc, argv, &cfg);
    if (rc)
        return rc;
    if (optind < argc) {
        fprintf(stderr, "brambled: unexpected argument '%s'\n", argv[optind]);
        usage(stderr);
        return 2;
    }
    if (init) {
        if (br_config_init(&cfg, &err) < 0) {
            fprintf(stderr, "brambled: init: %s\n", err.text);
            return 1;
        }
        printf("initialized %s\n  listen:    %s\n  advertise: %s\n"
               "  admin credential: %s/admin.credential\n",
               cfg.data_dir, cfg.listen, cfg.advertise, cfg.data_dir);
        if (cfg.announce == 1)
            printf("  announce:  on (UDP port %d)\n", cfg.announce_port);
        if (cfg.http[0] && strcmp(cfg.http, "off") != 0)
            printf("  http:      %s%s (/metrics)\n", cfg.http,
                   cfg.http_cert[0] ? " with TLS" : "");
        return 0;
    }
    br_raise_nofile();
    int tls_flags = cfg.http_cert[0] != 0;
    if (br_config_load(&cfg, &err) < 0) {
        fprintf(stderr, "brambled: %s\n", err.text);
        return 1;
    }
    if (tls_flags && (!cfg.http[0] || strcmp(cfg.http, "off") == 0)) {
        fprintf(stderr, "brambled: --http-cert and --http-key need --http ADDR:PORT "
                        "(given, or recorded by init)\n");
        return 2;
    }
    br_coord_t *c = br_coord_new(&cfg, &err);
    if (!c) {
        fprintf(stderr, "brambled: %s\n", err.text);
        return 1;
    }
    /* after the bind (br_coord_new), so an announced coordinator is there to answer */
    br_announcer_t *an = NULL;
    if (cfg.announce == 1) {
        an = br_announcer_new(cfg.public_key, cfg.listen, cfg.advertise,
                              cfg.announce_port, &err);
        if (!an) {
            fprintf(stderr, "brambled: %s\n", err.text);
            br_coord_destroy(&c);
            return 1;
        }
    }
    rc = br_coord_run(c, &err) < 0 ? 1 : 0;
    if (rc)
        fprintf(stderr, "brambled: %s\n", err.text);
    br_announcer_destroy(&an);
    br_coord_destroy(&c);
    return rc;
}
