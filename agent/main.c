/* main.c - bramble-agent: join a coordinator once with a token, then serve it. */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sodium.h>

#include "agent.h"
#include "settings.h"
#include "imagefetch.h"
#include "setuprun.h"
#include "token.h"
#include "util.h"

static void usage(FILE *f)
{
    fprintf(f,
            "usage: bramble-agent --data-dir DIR [--join-file FILE|-] [--name NAME]\n"
            "                     [--label k=v]... [--cost-per-hour X]\n"
            "                     [--power-price P] [--idle-watts W]\n"
            "                     [--gpus auto|none|LIST] [--job-user USER]\n"
            "                     [--advertise-addr ADDR]\n"
            "                     [--discover-timeout 30s] [--discover-port 7702]\n"
            "                     [--probe-port 7703|0|off]\n"
            "                     [--job-uids FIRST-LAST] [--allow-root-jobs]\n"
            "                     [--replica-dir DIR] [--replica-quota SIZE|0|none]\n"
            "                     [--replica-bandwidth RATE] [--replica-port 7704|0|off]\n"
            "                     [--cache-dir DIR] [--cache-quota SIZE|none]\n"
            "                     [--container-runtime auto|podman|none]\n"
            "                     [--overlay auto|kernel|userspace|off] [--relay]\n"
            "\n"
            "The first start joins with the token from `bramble token create`, read\n"
            "from --join-file FILE (or standard input with `-`; `--join TOKEN` also\n"
            "works, but any local user sees the token in ps until the agent has read\n"
            "it), makes this node's key pair and saves it in DIR; later starts need only\n"
            "--data-dir. --gpus LIST declares GPUs by hand: \"RTX 4090:24GiB,...\".\n"
            "--job-user runs jobs as USER (needs a root agent).\n"
            "What the node costs per hour, as the coordinator charges jobs: the fixed\n"
            "--cost-per-hour X, plus its electricity at --power-price P per kWh: its\n"
            "GPUs' draw (NVML) averaged over each heartbeat, plus --idle-watts W, what\n"
            "the rest of the machine draws (default 0 and 0).\n"
            "--job-uids FIRST-LAST runs each user's jobs as uid FIRST+their owner id\n"
            "(the same range on every node; needs a root agent). A root agent refuses to\n"
            "run jobs as root unless given --allow-root-jobs.\n"
            "When the token's endpoint does not answer the join within 3s (or its\n"
            "host cannot be resolved), the agent listens on UDP --discover-port for up to\n"
            "--discover-timeout (0: not at all) for a coordinator announcing the\n"
            "token's key (`brambled --announce`), and joins it there.\n"
            "The agent answers round-trip probes from the other nodes on UDP\n"
            "--probe-port (0: any free port; off: no probes) and probes them.\n"
            "Checkpoints move between nodes over CURVE on TCP --replica-port (0: any\n"
            "free port; off: this node serves none; when 7704 is taken, any free one):\n"
            "copies of other nodes' checkpoints (replicas) are kept in --replica-dir\n"
            "(default DIR/replicas), at most --replica-quota bytes of them (e.g.\n"
            "200GiB; 0: this node holds none, it opts out; none, the default: as many\n"
            "as the disk takes), and what this node sends is capped at\n"
            "--replica-bandwidth (e.g. 40MB/s; 0, the default: no cap).\n"
            "docs/checkpoints.md, \"Replicas\".\n"
            "Jobs' code, fetched from the coordinator once, is kept in --cache-dir\n"
            "(default DIR/cache), at most --cache-quota bytes (none, the default: no\n"
            "cap; the trees used longest ago leave first), and each attempt runs in\n"
            "its own copy of it (docs/files.md).\n"
            "Jobs with an image: run in containers through podman, when it is on PATH\n"
            "(--container-runtime auto, the default); podman: it must be; none: this\n"
            "node takes no such jobs (docs/containers.md).\n"
            "The node takes part in the cluster's WireGuard overlay (docs/overlay.md)\n"
            "with the kernel's WireGuard where it has one, else wireguard-go (--overlay\n"
            "auto, the default), or the one named; off: none. Its key pair is made in\n"
            "DIR/overlay.key and never leaves the node. --relay offers this node to\n"
            "forward overlay traffic between nodes that cannot reach each other.\n"
            "SIGTERM or SIGINT stops the agent and its jobs. SIGUSR2 stops the agent\n"
            "alone: its jobs go on, and the next agent started on DIR adopts them (as\n"
            "does one started after a crash).\n");
}

/* The join token from the first line of path ("-": standard input), without the
 * whitespace around it. */
static int read_token(const char *path, char *buf, size_t len, br_err_t *err)
{
    FILE *f = strcmp(path, "-") == 0 ? stdin : fopen(path, "re");
    if (!f)
        return br_errf(err, errno, "%s", strerror(errno));
    char line[BR_TOKEN_MAX + 2] = "";
    int got = fgets(line, sizeof(line), f) != NULL;
    if (f != stdin)
        fclose(f);
    size_t n = strlen(line);
    while (n && (line[n - 1] == '\n' || line[n - 1] == '\r' || line[n - 1] == ' ' ||
                 line[n - 1] == '\t'))
        line[--n] = '\0';
    const char *t = line + strspn(line, " \t");
    if (!got || !*t)
        return br_errf(err, EINVAL, "no token in it");
    if (n >= sizeof(line) - 1 || strlen(t) >= len)
        return br_errf(err, EINVAL, "the token is longer than %d characters", BR_TOKEN_MAX);
    br_strlcpy(buf, t, len);
    sodium_memzero(line, sizeof(line));
    return 0;
}

/* A default node name from the host name: lowercase, [a-z0-9-]. */
static void default_name(char *buf, size_t len)
{
    char host[256] = "node";
    gethostname(host, sizeof(host) - 1);
    size_t j = 0;
    for (size_t i = 0; host[i] && host[i] != '.' && j + 1 < len && j < 63; i++) {
        char ch = host[i];
        if (ch >= 'A' && ch <= 'Z')
            ch = (char)(ch - 'A' + 'a');
        buf[j++] = ((ch >= 'a' && ch <= 'z') || (ch >= '0' && ch <= '9')) ? ch : '-';
    }
    buf[j] = '\0';
    if (!br_valid_name(buf))
        br_strlcpy(buf, "node", len);
}

static int parse_args(int argc, char **argv, br_settings_t *s)
{
    static const struct option opts[] = {
        {"data-dir", required_argument, NULL, 'd'},
        {"join", required_argument, NULL, 'j'},
        {"join-file", required_argument, NULL, 'J'},
        {"name", required_argument, NULL, 'n'},
        {"label", required_argument, NULL, 'l'},
        {"cost-per-hour", required_argument, NULL, 'c'},
        {"power-price", required_argument, NULL, 'e'},
        {"idle-watts", required_argument, NULL, 'w'},
        {"gpus", required_argument, NULL, 'g'},
        {"job-user", required_argument, NULL, 'u'},
        {"advertise-addr", required_argument, NULL, 'a'},
        {"discover-timeout", required_argument, NULL, 'D'},
        {"discover-port", required_argument, NULL, 'P'},
        {"probe-port", required_argument, NULL, 'p'},
        {"job-uids", required_argument, NULL, 'U'},
        {"allow-root-jobs", no_argument, NULL, 'R'},
        {"replica-dir", required_argument, NULL, 'r'},
        {"cache-dir", required_argument, NULL, 'C'},
        {"cache-quota", required_argument, NULL, 'K'},
        {"container-runtime", required_argument, NULL, 'X'},
        {"overlay", required_argument, NULL, 'Y'},
        {"relay", no_argument, NULL, 'L'},
        {"replica-quota", required_argument, NULL, 'q'},
        {"replica-bandwidth", required_argument, NULL, 'b'},
        {"replica-port", required_argument, NULL, 'o'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0}};
    int o;
    br_err_t err;
    while ((o = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        switch (o) {
        case 'd': br_strlcpy(s->data_dir, optarg, sizeof(s->data_dir)); break;
        case 'j':
            if (strcmp(optarg, "-") == 0)
                goto from_file;
            br_strlcpy(s->join_token, optarg, sizeof(s->join_token));
            memset(optarg, 'x', strlen(optarg)); /* out of /proc/PID/cmdline from now */
            fprintf(stderr, "bramble-agent: a token on the command line is visible to "
                            "local users in ps; prefer --join-file FILE or -\n");
            break;
        case 'J':
        from_file:
            if (read_token(optarg, s->join_token, sizeof(s->join_token), &err) < 0) {
                fprintf(stderr, "bramble-agent: --join-file %s: %s\n", optarg, err.text);
                return 2;
            }
            break;
        case 'n': br_strlcpy(s->name, optarg, sizeof(s->name)); break;
        case 'g': br_strlcpy(s->gpus, optarg, sizeof(s->gpus)); break;
        case 'u': br_strlcpy(s->job_user, optarg, sizeof(s->job_user)); break;
        case 'a': br_strlcpy(s->advertise_addr, optarg, sizeof(s->advertise_addr)); break;
        case 'l':
            if (br_settings_add_label(s, optarg, &err) < 0) {
                fprintf(stderr, "bramble-agent: %s\n", err.text);
                return 2;
            }
            break;
        case 'c':
        case 'e':
        case 'w':
            if ((o == 'c'   ? br_settings_cost_per_hour(s, optarg, &err)
                 : o == 'e' ? br_settings_power_price(s, optarg, &err)
                            : br_settings_idle_watts(s, optarg, &err)) < 0) {
                fprintf(stderr, "bramble-agent: --%s %s\n",
                        o == 'c' ? "cost-per-hour" : o == 'e' ? "power-price" : "idle-watts",
                        err.text);
                return 2;
            }
            s->cost_given |= o == 'c';
            break;
        case 'D':
            if (br_parse_duration(optarg, &s->discover_timeout_ms, &err) < 0) {
                fprintf(stderr, "bramble-agent: --discover-timeout: %s\n", err.text);
                return 2;
            }
            break;
        case 'P':
            if (br_parse_port(optarg, 1, &s->discover_port, &err) < 0) {
                fprintf(stderr, "bramble-agent: --discover-port %s\n", err.text);
                return 2;
            }
            break;
        case 'p':
            if (br_settings_probe_port(s, optarg, &err) < 0) {
                fprintf(stderr, "bramble-agent: --probe-port %s\n", err.text);
                return 2;
            }
            break;
        case 'U':
            if (br_settings_job_uids(s, optarg, &err) < 0) {
                fprintf(stderr, "bramble-agent: --job-uids %s\n", err.text);
                return 2;
            }
            break;
        case 'R': s->allow_root_jobs = 1; break;
        case 'r':
            if (optarg[0] != '/') {
                fprintf(stderr, "bramble-agent: --replica-dir '%s': an absolute path is "
                                "needed\n", optarg);
                return 2;
            }
            br_strlcpy(s->replica_dir, optarg, sizeof(s->replica_dir));
            break;
        case 'C':
            if (optarg[0] != '/' || strlen(optarg) >= sizeof(s->cache_dir)) {
                fprintf(stderr, "bramble-agent: --cache-dir '%s': an absolute path is "
                                "needed\n", optarg);
                return 2;
            }
            br_strlcpy(s->cache_dir, optarg, sizeof(s->cache_dir));
            break;
        case 'X':
            if (strcmp(optarg, "auto") != 0 && strcmp(optarg, "podman") != 0 &&
                strcmp(optarg, "none") != 0) {
                fprintf(stderr, "bramble-agent: --container-runtime '%s': expected auto, "
                                "podman or none\n", optarg);
                return 2;
            }
            br_strlcpy(s->container_runtime, optarg, sizeof(s->container_runtime));
            break;
        case 'Y':
            if (strcmp(optarg, "auto") != 0 && strcmp(optarg, "kernel") != 0 &&
                strcmp(optarg, "userspace") != 0 && strcmp(optarg, "off") != 0) {
                fprintf(stderr, "bramble-agent: --overlay '%s': expected auto, kernel, "
                                "userspace or off\n", optarg);
                return 2;
            }
            br_strlcpy(s->overlay, optarg, sizeof(s->overlay));
            break;
        case 'L':
            s->relay = 1;
            break;
        case 'K':
            if (br_settings_cache_quota(s, optarg, &err) < 0) {
                fprintf(stderr, "bramble-agent: --cache-quota %s\n", err.text);
                return 2;
            }
            break;
        case 'q':
        case 'b':
        case 'o':
            if ((o == 'q'   ? br_settings_replica_quota(s, optarg, &err)
                 : o == 'b' ? br_settings_replica_bandwidth(s, optarg, &err)
                            : br_settings_replica_port(s, optarg, &err)) < 0) {
                fprintf(stderr, "bramble-agent: --replica-%s %s\n",
                        o == 'q' ? "quota" : o == 'b' ? "bandwidth" : "port", err.text);
                return 2;
            }
            break;
        case 'h': usage(stdout); exit(0);
        default: usage(stderr); return 2;
        }
    }
    if (optind < argc || !s->data_dir[0]) {
        fprintf(stderr, "bramble-agent: %s\n",
                optind < argc ? "unexpected argument" : "--data-dir is required");
        usage(stderr);
        return 2;
    }
    if (s->name[0] && !br_valid_name(s->name)) {
        fprintf(stderr, "bramble-agent: --name '%s': use lowercase letters, digits, '-'\n",
                s->name);
        return 2;
    }
    return 0;
}

static int setup(br_settings_t *s, br_err_t *err)
{
    int joined;
    char name[64];
    br_strlcpy(name, s->name, sizeof(name));
    if (br_settings_load(s, &joined, err) < 0)
        return -1;
    br_settings_finish(s);
    if (joined && s->join_token[0]) {
        fprintf(stderr, "bramble-agent: %s already joined as %s; ignoring --join\n",
                s->data_dir, s->name);
    } else if (!joined) {
        if (!s->join_token[0])
            return br_errf(err, ENOENT,
                           "%s has not joined a coordinator: start once with --join TOKEN",
                           s->data_dir);
        if (!name[0])
            default_name(name, sizeof(name));
        br_strlcpy(s->name, name, sizeof(s->name));
        if (br_agent_join(s, err) < 0)
            return -1;
        fprintf(stderr, "bramble-agent: joined %s as %s\n", s->cred.endpoint, s->name);
        return 0;
    }
    return br_settings_save(s, err); /* keep flags given at this start */
}

int main(int argc, char **argv)
{
    if (argc >= 2 && strcmp(argv[1], "--setup-run") == 0) /* inside a job (setuprun.h) */
        return br_setuprun_main(argc - 2, argv + 2);
    if (argc >= 2 && strcmp(argv[1], "--image-fetch") == 0) /* the same (imagefetch.h) */
        return br_imagefetch_main(argc - 2, argv + 2);
    br_settings_t s;
    br_err_t err;
    br_settings_init(&s);
    int rc = parse_args(argc, argv, &s);
    if (rc == 0 && (br_settings_lock(&s, &err) < 0 || setup(&s, &err) < 0)) {
        fprintf(stderr, "bramble-agent: %s\n", err.text);
        rc = 1;
    }
    if (rc == 0)
        br_settings_warn(&s);
    br_agent_t *a = rc == 0 ? br_agent_new(&s, &err) : NULL;
    if (rc == 0 && !a) {
        fprintf(stderr, "bramble-agent: %s\n", err.text);
        rc = 1;
    }
    if (a && br_agent_run(a, &err) < 0) {
        fprintf(stderr, "bramble-agent: %s\n", err.text);
        rc = 1;
    }
    br_agent_destroy(&a);
    br_settings_free(&s);
    return rc;
}
