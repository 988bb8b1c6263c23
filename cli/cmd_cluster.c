/* cmd_cluster.c - a whole cluster on this machine for trying and teaching:
 * `bramble up` starts a coordinator and N agents on loopback, `bramble down`
 * stops them. ~/.config/bramble/local-cluster names the one that `bramble down`
 * stops by default and the credential it wrote: another `up` never takes either
 * over while that one runs (it is refused, or runs beside it with its own
 * credential and node names). The processes themselves are handled by local.c. */
#include <dirent.h>
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli.h"
#include "usercred.h"
#include "conf.h"
#include "local.h"
#include "util.h"

#define UP_MAX_AGENTS 64
#define UP_PING_MS 15000  /* the coordinator must answer within this */
#define UP_READY_MS 30000 /* and every agent be ready within this */
#define UP_TOKEN_TTL_MS 600000
#define DOWN_WAIT_MS 10000
#define TAIL_LINES 20

#define NODE_NAME_MAX 64

typedef struct {
    long agents, port;
    const char *dir_flag, *heartbeat, *node_timeout, *gpus, *http;
    const char *prefix; /* --node-prefix: new nodes are PREFIX-1 .. PREFIX-N */
    char http_auto[32]; /* the free loopback port chosen when --http is not given */
    char dir[CLI_PATH_MAX];
    char cred[CLI_PATH_MAX]; /* where the admin credential goes, absolute */
    char names[UP_MAX_AGENTS][NODE_NAME_MAX]; /* of node-1 .. node-N, as they join */
    int beside; /* another local cluster runs and keeps `bramble down` */
    char brambled[CLI_PATH_MAX], agent_bin[CLI_PATH_MAX];
    char endpoint[64];
    int reuse; /* DIR/coordinator was made before: no init */
    br_cred_t admin;
    pid_t coord;
    pid_t gateway;        /* bramble-gateway, when it was built; 0: none */
    char gateway_at[48];  /* where it listens: 127.0.0.1:PORT */
    pid_t agents_pid[UP_MAX_AGENTS];
    int nstarted;
    double agents_started; /* unix seconds */
} up_t;

/* One pid file of a local cluster. */
typedef struct {
    char name[NODE_NAME_MAX]; /* "coordinator", "node-1" */
    char pidfile[CLI_PATH_MAX];
    pid_t pid;
} proc_t;

/* ---- where things are */

static int default_dir(char *buf, size_t len)
{
    const char *xdg = getenv("XDG_DATA_HOME"), *home = getenv("HOME");
    int n = xdg && *xdg
                ? snprintf(buf, len, "%s/bramble/local", xdg)
                : snprintf(buf, len, "%s/.local/share/bramble/local", home ? home : "");
    return n < 0 || (size_t)n >= len ? -1 : 0;
}

static int record_path(char *buf, size_t len)
{
    const char *home = getenv("HOME");
    int n = snprintf(buf, len, "%s/.config/bramble/local-cluster", home ? home : "");
    return n < 0 || (size_t)n >= len ? -1 : 0;
}

/* The local cluster `bramble down` stops by default: the last `up` that did not
 * run beside another (line 1 of the record), and the credential it wrote (line 2;
 * a record from before has none: the default path). */
typedef struct {
    char dir[CLI_PATH_MAX];
    char cred[CLI_PATH_MAX];
} record_t;

static int record_read(record_t *rec)
{
    char path[CLI_PATH_MAX];
    char *text = record_path(path, sizeof(path)) == 0
                     ? br_read_file(path, 2 * CLI_PATH_MAX + 2, NULL, NULL)
                     : NULL;
    if (!text)
        return -1;
    size_t k = strcspn(text, "\n");
    snprintf(rec->dir, sizeof(rec->dir), "%.*s", (int)k, text);
    const char *second = text[k] ? text + k + 1 : "";
    snprintf(rec->cred, sizeof(rec->cred), "%.*s", (int)strcspn(second, "\n"), second);
    free(text);
    const char *home = getenv("HOME");
    if (!rec->cred[0])
        snprintf(rec->cred, sizeof(rec->cred), "%s/.config/bramble/credential",
                 home ? home : "");
    return rec->dir[0] == '/' ? 0 : -1;
}

/* 1 when a and b name one file: the same inode, or (not both there) the same path. */
static int same_file(const char *a, const char *b)
{
    struct stat sa, sb;
    if (stat(a, &sa) == 0 && stat(b, &sb) == 0)
        return sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
    return strcmp(a, b) == 0;
}

/* path made absolute into out (the daemons and `down` must find it anywhere). */
static int absolute_dir(const cli_t *cli, const char *dir, char *out, size_t len)
{
    char cwd[CLI_PATH_MAX];
    int n = dir[0] == '/'              ? snprintf(out, len, "%s", dir)
            : getcwd(cwd, sizeof(cwd)) ? snprintf(out, len, "%s/%s", cwd, dir)
                                       : -1;
    if (n < 0 || (size_t)n >= len)
        return cli_fail(cli, "%s: path too long or cannot find the current directory",
                        dir);
    while (n > 1 && out[n - 1] == '/')
        out[--n] = 0;
    return 0;
}

static int exists(const char *dir, const char *name)
{
    char path[CLI_PATH_MAX];
    struct stat st;
    return local_path(path, sizeof(path), dir, name, NULL) == 0 && stat(path, &st) == 0;
}

/* The name node-i of the cluster in dir joined with (DIR/node-i/agent.yaml) into
 * out; 0, or -1 when it has not joined. */
static int joined_name(const char *dir, long i, char *out, size_t len)
{
    char path[CLI_PATH_MAX];
    int n = snprintf(path, sizeof(path), "%s/node-%ld/agent.yaml", dir, i);
    json_t *conf = n > 0 && (size_t)n < sizeof(path) ? br_conf_load(path, NULL) : NULL;
    const char *name = br_conf_str(conf, "name");
    int rc = name && *name ? 0 : -1;
    if (rc == 0)
        br_strlcpy(out, name, len);
    json_decref(conf);
    return rc;
}

static int node_pidfile_cmp(const void *a, const void *b)
{
    return strverscmp(((const proc_t *)a)->name, ((const proc_t *)b)->name);
}

/* The pid files in dir: agents (node-*.pid, in order) first, the coordinator last.
 * Returns how many (at most max). */
static int find_procs(const char *dir, proc_t *procs, int max)
{
    int n = 0;
    DIR *d = opendir(dir);
    struct dirent *e;
    while (d && (e = readdir(d)) && n < max - 1) {
        size_t len = strlen(e->d_name);
        if (strncmp(e->d_name, "node-", 5) != 0 || len < 9 ||
            len >= NODE_NAME_MAX + 4 || strcmp(e->d_name + len - 4, ".pid") != 0)
            continue;
        snprintf(procs[n].name, sizeof(procs[n].name), "%.*s", (int)(len - 4),
                 e->d_name);
        if (local_path(procs[n].pidfile, sizeof(procs[n].pidfile), dir, e->d_name,
                       NULL) == 0)
            n++;
    }
    if (d)
        closedir(d);
    qsort(procs, (size_t)n, sizeof(*procs), node_pidfile_cmp);
    if (n < max - 2 && exists(dir, "gateway.pid") && /* a node of no kind: before the */
        local_path(procs[n].pidfile, sizeof(procs[n].pidfile), dir, "gateway.pid",
                   NULL) == 0) { /* coordinator, which it reads from */
        strcpy(procs[n].name, "gateway");
        n++;
    }
    if (local_path(procs[n].pidfile, sizeof(procs[n].pidfile), dir, "coordinator.pid",
                   NULL) == 0 &&
        exists(dir, "coordinator.pid")) {
        strcpy(procs[n].name, "coordinator");
        n++;
    }
    for (int i = 0; i < n; i++) {
        procs[i].pid = local_read_pid(procs[i].pidfile);
        if (strncmp(procs[i].name, "node-", 5) == 0) /* shown as the node's name */
            joined_name(dir, atol(procs[i].name + 5), procs[i].name,
                        sizeof(procs[i].name));
    }
    return n;
}

/* A live process of the cluster in dir (its coordinator when it runs) into who,
 * "coordinator pid 123"; 0 when none runs there. */
static pid_t running_in(const char *dir, char *who, size_t len)
{
    proc_t procs[UP_MAX_AGENTS + 8];
    int n = find_procs(dir, procs, UP_MAX_AGENTS + 8);
    for (int i = n - 1; i >= 0; i--) /* the coordinator is last */
        if (local_alive(procs[i].pid)) {
            snprintf(who, len, "%s pid %ld", procs[i].name, (long)procs[i].pid);
            return procs[i].pid;
        }
    return 0;
}

/* ---- bramble up */

static int up_args(cli_t *cli, int argc, char **argv, up_t *u)
{
    static const struct option opts[] = {
        {"agents", required_argument, NULL, 'a'},
        {"dir", required_argument, NULL, 'd'},
        {"port", required_argument, NULL, 'p'},
        {"heartbeat-interval", required_argument, NULL, 'H'},
        {"node-timeout", required_argument, NULL, 'T'},
        {"gpus", required_argument, NULL, 'g'},
        {"http", required_argument, NULL, 'w'},
        {"node-prefix", required_argument, NULL, 'n'},
        {0}};
    int64_t ms;
    int c;
    while ((c = getopt_long(argc, argv, ":", opts, NULL)) != -1) {
        if (c == 'a' &&
            cli_parse_long(cli, "--agents", optarg, 0, UP_MAX_AGENTS, &u->agents))
            return CLI_USAGE;
        if (c == 'p' && cli_parse_long(cli, "--port", optarg, 1, 65535, &u->port))
            return CLI_USAGE;
        if ((c == 'H' || c == 'T') &&
            cli_parse_ms(cli, c == 'H' ? "--heartbeat-interval" : "--node-timeout",
                         optarg, &ms))
            return CLI_USAGE;
        if (c == 'd')
            u->dir_flag = optarg;
        else if (c == 'H')
            u->heartbeat = optarg;
        else if (c == 'T')
            u->node_timeout = optarg;
        else if (c == 'g')
            u->gpus = optarg;
        else if (c == 'w')
            u->http = optarg;
        else if (c == 'n')
            u->prefix = optarg;
        else if (c != 'a' && c != 'p')
            return cli_bad_option(cli, c, argv);
    }
    char longest[NODE_NAME_MAX + 16];
    snprintf(longest, sizeof(longest), "%s-%d", u->prefix, UP_MAX_AGENTS);
    if (!br_valid_name(longest))
        return cli_usage(cli,
                         "--node-prefix %s: nodes are named PREFIX-1 .. PREFIX-N, of "
                         "a-z, 0-9 and '-' (not first), up to 63 characters",
                         u->prefix);
    return cli_positional(cli, argc, argv, 0, NULL, NULL);
}

static int port_of(const char *endpoint)
{
    const char *colon = strrchr(endpoint, ':');
    return colon ? atoi(colon + 1) : 0;
}

static int load_admin(cli_t *cli, up_t *u)
{
    char path[CLI_PATH_MAX];
    br_err_t err = {0};
    if (local_path(path, sizeof(path), u->dir, "coordinator/admin.credential", &err) ||
        br_cred_load(path, &u->admin, &err) < 0)
        return cli_fail(cli, "%s", err.text);
    return 0;
}

/* The names of node-1 .. node-N: the one each joined with, else PREFIX-i. */
static void up_names(up_t *u)
{
    for (long i = 1; i <= u->agents; i++)
        if (joined_name(u->dir, i, u->names[i - 1], sizeof(u->names[i - 1])) < 0)
            snprintf(u->names[i - 1], sizeof(u->names[i - 1]), "%s-%ld", u->prefix, i);
}

/* A name for the nodes of a cluster in dir, from its last component: "c2" for
 * /tmp/c2 (PREFIX of the command that runs one beside another). */
static void prefix_from(const char *dir, char *out, size_t len)
{
    const char *base = strrchr(dir, '/');
    size_t n = 0;
    for (base = base ? base + 1 : dir; *base && n + 1 < len && n < 40; base++) {
        char ch = *base >= 'A' && *base <= 'Z' ? (char)(*base - 'A' + 'a') : *base;
        if ((ch >= 'a' && ch <= 'z') || (ch >= '0' && ch <= '9') || (ch == '-' && n))
            out[n++] = ch;
    }
    out[n] = 0;
    if (!n || strcmp(out, "node") == 0)
        snprintf(out, len, "beside");
}

/* The running cluster rec keeps its credential: refused, with the two ways on. */
static int refuse_replace(cli_t *cli, const up_t *u, const record_t *rec,
                          const char *who)
{
    char prefix[48];
    prefix_from(u->dir, prefix, sizeof(prefix));
    return cli_fail(
        cli,
        "a local cluster is already running in %s (%s), and %s is its "
        "admin credential: another bramble up would replace it.\n"
        "  stop that one first:   bramble down\n"
        "  or run one beside it:  bramble --credential %s/admin.credential up "
        "--dir %s --node-prefix %s",
        rec->dir, who, rec->cred, u->dir, u->dir, prefix);
}

/* Beside the cluster running in dir, this one's node names must be others: jobs
 * are found by node name and job id, so two nodes of one name on one machine can
 * stop each other's jobs. */
static int names_clash(cli_t *cli, const up_t *u, const char *dir, const char *who)
{
    char theirs[NODE_NAME_MAX];
    for (long k = 1; k <= UP_MAX_AGENTS; k++) {
        if (joined_name(dir, k, theirs, sizeof(theirs)) < 0)
            continue;
        for (long i = 0; i < u->agents; i++) {
            if (strcmp(theirs, u->names[i]) != 0)
                continue;
            char file[64];
            snprintf(file, sizeof(file), "node-%ld/agent.yaml", i + 1);
            return cli_fail(cli,
                            "the local cluster running in %s (%s) has a node named "
                            "%s too, and two nodes of one name on one machine can stop "
                            "each other's jobs: %s",
                            dir, who, theirs,
                            exists(u->dir, file)
                                ? "this one joined under that name before: use a new "
                                  "--dir"
                                : "name this one's nodes with --node-prefix NAME");
        }
    }
    return 0;
}

/* Not over a running cluster: not in a DIR where one runs, and not replacing the
 * credential of the one `bramble down` stops. Beside that one, with a credential
 * of its own and other node names: u->beside. */
static int up_not_twice(cli_t *cli, up_t *u)
{
    record_t rec;
    char who[NODE_NAME_MAX + 32];
    int have = record_read(&rec) == 0;
    int recorded = have && strcmp(rec.dir, u->dir) == 0;
    if (running_in(u->dir, who, sizeof(who)))
        return cli_fail(cli,
                        "a local cluster is already running in %s (%s); stop it with: "
                        "bramble down%s%s",
                        u->dir, who, recorded ? "" : " --dir ", recorded ? "" : u->dir);
    if (!have || recorded || !running_in(rec.dir, who, sizeof(who)))
        return 0;
    if (same_file(rec.cred, u->cred))
        return refuse_replace(cli, u, &rec, who);
    u->beside = 1;
    return names_clash(cli, u, rec.dir, who);
}

/* Where, which binaries, not twice, which port. */
static int up_prepare(cli_t *cli, up_t *u)
{
    char dflt[CLI_PATH_MAX], cred[CLI_PATH_MAX];
    br_err_t err = {0};
    if (!u->dir_flag && default_dir(dflt, sizeof(dflt)) < 0)
        return cli_fail(cli, "$HOME or $XDG_DATA_HOME is too long");
    if (absolute_dir(cli, u->dir_flag ? u->dir_flag : dflt, u->dir, sizeof(u->dir)) ||
        absolute_dir(cli, br_cred_path(cli->cred_flag, cred, sizeof(cred)), u->cred,
                     sizeof(u->cred)))
        return CLI_FAIL;
    if (local_find_bin("brambled", u->brambled, sizeof(u->brambled), &err) < 0 ||
        local_find_bin("bramble-agent", u->agent_bin, sizeof(u->agent_bin), &err) < 0)
        return cli_fail(cli, "%s", err.text);
    up_names(u);
    if (up_not_twice(cli, u))
        return CLI_FAIL;
    if (br_mkdir_p(u->dir, 0700, &err) < 0)
        return cli_fail(cli, "%s", err.text);
    u->reuse = exists(u->dir, "coordinator/coordinator.yaml");
    if (u->reuse && load_admin(cli, u))
        return CLI_FAIL;
    if (u->reuse && u->port && u->port != port_of(u->admin.endpoint))
        cli_err(cli,
                "warning: agents that joined before still look for the "
                "coordinator at %s",
                u->admin.endpoint);
    if (!u->port && u->reuse)
        u->port = port_of(u->admin.endpoint);
    if (!u->port && (u->port = local_free_port(&err)) < 0)
        return cli_fail(cli, "%s", err.text);
    snprintf(u->endpoint, sizeof(u->endpoint), "tcp://127.0.0.1:%ld", u->port);
    return 0;
}

static int up_init(cli_t *cli, up_t *u, const char *coord_dir, const char *log)
{
    char *argv[] = {u->brambled, "init",      "--data-dir", (char *)coord_dir,
                    "--listen",  u->endpoint, NULL};
    br_err_t err = {0};
    int st = local_run(argv, log, &err);
    if (st < 0)
        return cli_fail(cli, "%s", err.text);
    if (st != 0) {
        cli_err(cli, "brambled init failed (exit status %d)", st);
        local_log_tail(log, TAIL_LINES);
        return CLI_FAIL;
    }
    return load_admin(cli, u);
}

static int up_coordinator(cli_t *cli, up_t *u)
{
    char coord_dir[CLI_PATH_MAX], log[CLI_PATH_MAX], pidfile[CLI_PATH_MAX];
    br_err_t err = {0};
    if (local_path(coord_dir, sizeof(coord_dir), u->dir, "coordinator", &err) ||
        local_path(log, sizeof(log), u->dir, "coordinator.log", &err) ||
        local_path(pidfile, sizeof(pidfile), u->dir, "coordinator.pid", &err))
        return cli_fail(cli, "%s", err.text);
    if (!u->reuse && up_init(cli, u, coord_dir, log))
        return CLI_FAIL;
    char *argv[16] = {u->brambled, "--data-dir", coord_dir};
    int n = 3;
    if (u->reuse) {
        argv[n++] = "--listen";
        argv[n++] = u->endpoint;
    }
    if (u->heartbeat) {
        argv[n++] = "--heartbeat-interval";
        argv[n++] = (char *)u->heartbeat;
    }
    if (u->node_timeout) {
        argv[n++] = "--node-timeout";
        argv[n++] = (char *)u->node_timeout;
    }
#ifdef BRAMBLE_HAVE_MHD
    int http_port = u->http ? 0 : local_free_port(NULL);
    if (http_port > 0) { /* the dashboard is where a newcomer looks first */
        snprintf(u->http_auto, sizeof(u->http_auto), "127.0.0.1:%d", http_port);
        u->http = u->http_auto;
    }
#endif
    if (u->http && strcmp(u->http, "off") == 0)
        u->http = NULL;
    if (u->http) { /* the dashboard and /metrics (docs/dashboard.md) */
        argv[n++] = "--http";
        argv[n++] = (char *)u->http;
    }
    if ((u->coord = local_spawn(argv, log, &err)) < 0 ||
        local_write_pid(pidfile, u->coord, &err) < 0)
        return cli_fail(cli, "%s", err.text);
    return 0;
}

static void show_log(const up_t *u, const char *logname)
{
    char log[CLI_PATH_MAX];
    if (local_path(log, sizeof(log), u->dir, logname, NULL) == 0)
        local_log_tail(log, TAIL_LINES);
}

static int died(cli_t *cli, const up_t *u, const char *who, const char *logname)
{
    cli_err(cli, "%s exited during start-up", who);
    show_log(u, logname);
    return CLI_FAIL;
}

/* Until a ping with the admin credential is answered. */
static int up_wait_ping(cli_t *cli, up_t *u)
{
    br_strlcpy(u->admin.endpoint, u->endpoint, sizeof(u->admin.endpoint));
    if (!cli_client_with(cli, &u->admin))
        return CLI_FAIL;
    int64_t deadline = br_mono_ms() + UP_PING_MS;
    for (;;) {
        if (!local_alive(u->coord))
            return died(cli, u, "brambled", "coordinator.log");
        br_err_t err = {0};
        json_t *r = br_client_call(cli->client, "ping", NULL, 500, &err);
        if (r) {
            json_decref(r);
            return 0;
        }
        if (err.errnum != ETIMEDOUT)
            return cli_fail(cli, "%s", err.text);
        if (br_mono_ms() > deadline) {
            cli_err(cli, "brambled did not answer at %s within %ds", u->endpoint,
                    UP_PING_MS / 1000);
            show_log(u, "coordinator.log");
            return CLI_FAIL;
        }
    }
}

/* A join token for the agents that have not joined yet (NULL when none need one). */
static json_t *up_token(cli_t *cli, const up_t *u, int *failed)
{
    long need = 0;
    *failed = 0;
    for (long i = 1; i <= u->agents; i++) {
        char name[64];
        snprintf(name, sizeof(name), "node-%ld/agent.yaml", i);
        need += !exists(u->dir, name);
    }
    if (!need)
        return NULL;
    json_t *r = cli_call(cli, "token.create",
                         json_pack("{s:I, s:I}", "ttl", (json_int_t)UP_TOKEN_TTL_MS,
                                   "uses", (json_int_t)need));
    if (!r || !json_is_string(json_object_get(r, "token"))) {
        if (r)
            cli_err(cli, "the coordinator's answer has no token");
        json_decref(r);
        *failed = 1;
        return NULL;
    }
    return r;
}

static int up_agent(cli_t *cli, up_t *u, long i, const char *token)
{
    char name[32], data[CLI_PATH_MAX], log[CLI_PATH_MAX], pidfile[CLI_PATH_MAX];
    char file[64];
    br_err_t err = {0};
    snprintf(name, sizeof(name), "node-%ld", i);
    snprintf(file, sizeof(file), "%s/agent.yaml", name);
    int joined = exists(u->dir, file);
    snprintf(file, sizeof(file), "%s.log", name);
    if (local_path(data, sizeof(data), u->dir, name, &err) ||
        local_path(log, sizeof(log), u->dir, file, &err))
        return cli_fail(cli, "%s", err.text);
    snprintf(file, sizeof(file), "%s.pid", name);
    if (local_path(pidfile, sizeof(pidfile), u->dir, file, &err))
        return cli_fail(cli, "%s", err.text);
    /* all on one host: one WireGuard interface there would be every agent's */
    char *argv[14] = {u->agent_bin, "--data-dir", data, "--overlay", "off"};
    int n = 5;
    if (!joined) {
        argv[n++] = "--join";
        argv[n++] = (char *)token;
        argv[n++] = "--name";
        argv[n++] = u->names[i - 1];
        argv[n++] = "--probe-port"; /* all on one host: each answers on its own */
        argv[n++] = "0";
    }
    if (u->gpus) {
        argv[n++] = "--gpus";
        argv[n++] = (char *)u->gpus;
    }
    if (geteuid() == 0) /* a trial cluster runs its jobs as whoever started it */
        argv[n++] = "--allow-root-jobs";
    pid_t pid = local_spawn(argv, log, &err);
    if (pid < 0)
        return cli_fail(cli, "%s", err.text);
    u->agents_pid[u->nstarted++] = pid;
    if (local_write_pid(pidfile, pid, &err) < 0)
        return cli_fail(cli, "%s", err.text);
    return 0;
}

static int up_agents(cli_t *cli, up_t *u)
{
    int failed;
    json_t *tok = up_token(cli, u, &failed);
    if (failed)
        return CLI_FAIL;
    const char *token = json_string_value(json_object_get(tok, "token"));
    int rc = 0;
    u->agents_started = br_now_ms() / 1000.0;
    for (long i = 1; i <= u->agents && !rc; i++)
        rc = up_agent(cli, u, i, token ? token : "");
    json_decref(tok);
    return rc;
}

/* How many of node-1..node-N node.list shows ready (ready[i] for node-(i+1), by
 * the name it joined with); -1 on a refused request. */
static int count_ready(cli_t *cli, const up_t *u, char *ready)
{
    br_err_t err = {0};
    json_t *r = br_client_call(cli->client, "node.list", NULL, 2000, &err);
    memset(ready, 0, UP_MAX_AGENTS);
    if (!r)
        return err.errnum == ETIMEDOUT ? 0 : (cli_err(cli, "%s", err.text), -1);
    int n = 0;
    size_t i;
    json_t *node;
    json_array_foreach(json_object_get(r, "nodes"), i, node) {
        const char *name = json_string_value(json_object_get(node, "name"));
        const char *state = json_string_value(json_object_get(node, "state"));
        long k = 0;
        while (name && k < u->agents && strcmp(u->names[k], name) != 0)
            k++;
        k = name && k < u->agents ? k + 1 : 0;
        /* Seen since its agent started: a restarted coordinator may still show
         * the state it had stored. */
        double seen = json_number_value(json_object_get(node, "last_seen"));
        if (k >= 1 && k <= u->agents && state && strcmp(state, "ready") == 0 &&
            seen >= u->agents_started - 1.0 && !ready[k - 1]) {
            ready[k - 1] = 1;
            n++;
        }
    }
    json_decref(r);
    return n;
}

static int agents_alive(cli_t *cli, const up_t *u)
{
    for (int i = 0; i < u->nstarted; i++) {
        char who[NODE_NAME_MAX + 32], log[48];
        snprintf(who, sizeof(who), "bramble-agent %s", u->names[i]);
        snprintf(log, sizeof(log), "node-%d.log", i + 1);
        if (!local_alive(u->agents_pid[i]))
            return died(cli, u, who, log);
    }
    return 0;
}

static int up_wait_ready(cli_t *cli, up_t *u)
{
    int64_t deadline = br_mono_ms() + UP_READY_MS;
    char ready[UP_MAX_AGENTS];
    for (;;) {
        if (!local_alive(u->coord))
            return died(cli, u, "brambled", "coordinator.log");
        if (agents_alive(cli, u))
            return CLI_FAIL;
        int n = count_ready(cli, u, ready);
        if (n < 0)
            return CLI_FAIL;
        if (n >= u->agents)
            return 0;
        if (br_mono_ms() > deadline) {
            char log[48];
            int first = 0;
            while (first < u->agents - 1 && ready[first])
                first++;
            snprintf(log, sizeof(log), "node-%d.log", first + 1);
            cli_err(cli, "only %d of %ld nodes were ready after %ds", n, u->agents,
                    UP_READY_MS / 1000);
            show_log(u, log);
            return CLI_FAIL;
        }
        cli_sleep_ms(300);
    }
}

/* The gateway (docs/gateway.md), when bramble-gateway was built: a credential of its
 * own (DIR/gateway.credential, gateway "local", made once), on a free loopback
 * port. 0 (also when there is none to start), or CLI_FAIL. */
static int up_gateway(cli_t *cli, up_t *u)
{
    char bin[CLI_PATH_MAX], cred[CLI_PATH_MAX], log[CLI_PATH_MAX], pidfile[CLI_PATH_MAX];
    br_err_t err = {0};
    if (local_find_bin("bramble-gateway", bin, sizeof(bin), NULL) < 0)
        return 0; /* built without libcurl or libmicrohttpd */
    if (local_path(cred, sizeof(cred), u->dir, "gateway.credential", &err) ||
        local_path(log, sizeof(log), u->dir, "gateway.log", &err) ||
        local_path(pidfile, sizeof(pidfile), u->dir, "gateway.pid", &err))
        return cli_fail(cli, "%s", err.text);
    char written[CLI_PATH_MAX];
    if (!exists(u->dir, "gateway.credential") &&
        cli_usercred_issue(cli, "gateway", "local", json_object(), u->admin.endpoint, cred,
                           "gateway", written) != CLI_OK)
        return CLI_FAIL;
    int port = local_free_port(&err);
    if (port <= 0)
        return cli_fail(cli, "%s", err.text);
    snprintf(u->gateway_at, sizeof(u->gateway_at), "127.0.0.1:%d", port);
    char *argv[] = {bin, "--credential", cred, "--listen", u->gateway_at, NULL};
    if ((u->gateway = local_spawn(argv, log, &err)) < 0 ||
        local_write_pid(pidfile, u->gateway, &err) < 0)
        return cli_fail(cli, "%s", err.text);
    return 0;
}

/* Stop what this run started, after a failure. */
static void up_abort(cli_t *cli, up_t *u)
{
    proc_t procs[UP_MAX_AGENTS + 8];
    cli_close(cli);
    int n = find_procs(u->dir, procs, UP_MAX_AGENTS + 8);
    pid_t pids[UP_MAX_AGENTS + 2];
    int np = 0;
    for (int i = 0; i < u->nstarted; i++)
        pids[np++] = u->agents_pid[i];
    if (u->gateway > 0)
        pids[np++] = u->gateway;
    if (u->coord > 0)
        pids[np++] = u->coord;
    if (!np)
        return;
    local_stop(pids, np, DOWN_WAIT_MS, NULL);
    for (int i = 0; i < n; i++)
        for (int k = 0; k < np; k++)
            if (procs[i].pid == pids[k])
                unlink(procs[i].pidfile);
    cli_err(cli, "stopped what it had started; the logs are in %s", u->dir);
}

static int up_finish(cli_t *cli, up_t *u, char *cred_path, size_t len)
{
    char rec[CLI_PATH_MAX], parent[CLI_PATH_MAX];
    br_err_t err = {0};
    br_cred_path(cli->cred_flag, cred_path, len);
    br_strlcpy(parent, cred_path, sizeof(parent));
    char *slash = strrchr(parent, '/');
    if (slash && slash != parent) {
        *slash = 0;
        if (br_mkdir_p(parent, 0700, &err) < 0)
            return cli_fail(cli, "%s", err.text);
    }
    if (br_cred_save(cred_path, &u->admin, &err) < 0)
        return cli_fail(cli, "%s", err.text);
    if (!u->beside && record_path(rec, sizeof(rec)) == 0) { /* beside: the other's */
        char line[2 * CLI_PATH_MAX + 2];
        int n = snprintf(line, sizeof(line), "%s\n%s\n", u->dir, u->cred);
        br_strlcpy(parent, rec, sizeof(parent));
        *strrchr(parent, '/') = 0;
        if (br_mkdir_p(parent, 0700, &err) < 0 ||
            br_write_file(rec, line, (size_t)n, 0600, &err) < 0)
            cli_err(cli, "warning: %s", err.text);
    }
    return 0;
}

static void up_summary(const cli_t *cli, const up_t *u, const char *cred_path)
{
    static const char *head[] = {"  PROCESS", "PID", "ENDPOINT/STATE", "LOG"};
    char name[NODE_NAME_MAX + 2], pid[32], log[CLI_PATH_MAX + 16];
    cli_table_t *t = cli_table_new(4, head);
    for (int i = -1; t && i < u->nstarted; i++) {
        pid_t p = i < 0 ? u->coord : u->agents_pid[i];
        snprintf(name, sizeof(name), "  %s", i < 0 ? "coordinator" : u->names[i]);
        snprintf(pid, sizeof(pid), "%ld", (long)p);
        if (i < 0)
            snprintf(log, sizeof(log), "%s/coordinator.log", u->dir);
        else
            snprintf(log, sizeof(log), "%s/node-%d.log", u->dir, i + 1);
        const char *cells[] = {name, pid, i < 0 ? u->endpoint : "ready", log};
        cli_table_add(t, cells);
    }
    if (t && u->gateway > 0) {
        char at[64];
        snprintf(pid, sizeof(pid), "%ld", (long)u->gateway);
        snprintf(at, sizeof(at), "http://%s", u->gateway_at);
        snprintf(log, sizeof(log), "%s/gateway.log", u->dir);
        const char *cells[] = {"  gateway", pid, at, log};
        cli_table_add(t, cells);
    }
    printf("local cluster up in %s\n\n", u->dir);
    if (t)
        cli_table_print(t, stdout);
    cli_table_destroy(&t);
    printf("\nadmin credential: %s\n", cred_path);
    record_t rec;
    if (u->beside && record_read(&rec) == 0)
        printf("beside the local cluster in %s (plain bramble down stops that one)\n",
               rec.dir);
    printf("\nTry:\n");
    const char *cred = cli->cred_flag ? " --credential " : "";
    const char *cred_file = cli->cred_flag ? cli->cred_flag : "";
    printf("  bramble%s%s nodes\n", cred, cred_file);
    printf("  bramble%s%s submit examples/hello.yaml --follow\n", cred, cred_file);
    if (u->http) /* brambled serves the dashboard: a one-time link logs in */
        printf("  bramble%s%s dashboard      (the web dashboard, at http://%s)\n", cred,
               cred_file, u->http);
    if (u->gateway > 0) /* the OpenAI-compatible endpoint of every service's model */
        printf("  curl http://%s/v1/models   (the gateway: services with "
               "service.model)\n", u->gateway_at);
    int dir = u->dir_flag || u->beside;
    printf("  bramble down%s%s\n", dir ? " --dir " : "", dir ? u->dir : "");
}

static int cmd_up(cli_t *cli, int argc, char **argv)
{
    up_t u = {.agents = 2, .prefix = "node"};
    char cred_path[CLI_PATH_MAX];
    if (up_args(cli, argc, argv, &u) != 0)
        return CLI_USAGE;
    if (up_prepare(cli, &u) != 0)
        return CLI_FAIL;
    if (u.reuse)
        printf("starting the cluster kept in %s\n", u.dir);
    if (up_coordinator(cli, &u) || up_wait_ping(cli, &u) || up_agents(cli, &u) ||
        up_wait_ready(cli, &u) || up_gateway(cli, &u) ||
        up_finish(cli, &u, cred_path, sizeof(cred_path))) {
        up_abort(cli, &u);
        explicit_bzero(&u.admin, sizeof(u.admin));
        return CLI_FAIL;
    }
    up_summary(cli, &u, cred_path);
    explicit_bzero(&u.admin, sizeof(u.admin));
    return CLI_OK;
}

/* ---- bramble down */

static int down_dir(cli_t *cli, const char *flag, char *dir, size_t len)
{
    char buf[CLI_PATH_MAX];
    record_t rec;
    if (flag)
        br_strlcpy(buf, flag, sizeof(buf));
    else if (record_read(&rec) == 0)
        br_strlcpy(buf, rec.dir, sizeof(buf));
    else if (default_dir(buf, sizeof(buf)) < 0)
        buf[0] = 0;
    if (!buf[0])
        return cli_fail(cli, "cannot tell where the local cluster is; give --dir");
    return absolute_dir(cli, buf, dir, len);
}

static void stop_group(proc_t *procs, int n)
{
    pid_t pids[UP_MAX_AGENTS + 8] = {0};
    int killed[UP_MAX_AGENTS + 8] = {0};
    for (int i = 0; i < n; i++)
        pids[i] = procs[i].pid;
    local_stop(pids, n, DOWN_WAIT_MS, killed);
    for (int i = 0; i < n; i++) {
        if (killed[i])
            printf("killed %s (pid %ld): it did not stop within %ds\n", procs[i].name,
                   (long)procs[i].pid, DOWN_WAIT_MS / 1000);
        else
            printf("stopped %s (pid %ld)\n", procs[i].name, (long)procs[i].pid);
        unlink(procs[i].pidfile);
    }
}

static int cmd_down(cli_t *cli, int argc, char **argv)
{
    static const struct option opts[] = {{"dir", required_argument, NULL, 'd'}, {0}};
    const char *flag = NULL;
    char dir[CLI_PATH_MAX];
    proc_t procs[UP_MAX_AGENTS + 8], live[UP_MAX_AGENTS + 8];
    int c;
    while ((c = getopt_long(argc, argv, ":", opts, NULL)) != -1) {
        if (c != 'd')
            return cli_bad_option(cli, c, argv);
        flag = optarg;
    }
    if (cli_positional(cli, argc, argv, 0, NULL, NULL) != 0)
        return CLI_USAGE;
    if (down_dir(cli, flag, dir, sizeof(dir)) != 0)
        return CLI_FAIL;
    int n = find_procs(dir, procs, UP_MAX_AGENTS + 8), nlive = 0, nagents = 0;
    for (int i = 0; i < n; i++) {
        if (!local_alive(procs[i].pid)) {
            unlink(procs[i].pidfile); /* stale: its process is gone */
            continue;
        }
        live[nlive++] = procs[i];
        nagents += strcmp(procs[i].name, "coordinator") != 0;
    }
    if (!nlive) {
        printf("no local cluster is running in %s\n", dir);
        return CLI_OK;
    }
    stop_group(live, nagents); /* agents first: they may still report to it */
    stop_group(live + nagents, nlive - nagents);
    printf("local cluster in %s is down (its data is kept there)\n", dir);
    return CLI_OK;
}

const cli_cmd_t cli_cluster_cmds[] = {
    {NULL, "up", cmd_up,
     "[--agents N] [--dir DIR] [--port P] [--heartbeat-interval D] "
     "[--node-timeout D] [--gpus LIST] [--http ADDR|off] [--node-prefix NAME]",
     "start a local cluster (a coordinator and N agents) on loopback",
     "Starts brambled and N bramble-agent processes (found next to bramble, else on\n"
     "PATH) in the background, waits until every node is ready, and writes the\n"
     "admin credential where bramble finds it (--credential, $BRAMBLE_CREDENTIAL or\n"
     "~/.config/bramble/credential). Logs and pid files are kept in DIR; a DIR\n"
     "used before is started again with its data.\n"
     "\nWhile a local cluster runs, another bramble up is refused when it would\n"
     "replace that one's credential; one with its own credential, DIR and node\n"
     "names runs beside it, and bramble down --dir DIR stops it:\n"
     "  bramble --credential DIR/admin.credential up --dir DIR --node-prefix NAME\n"
     "\nOptions:\n"
     "  --agents N                how many agents (default 2): node-1 .. node-N\n"
     "  --dir DIR                 where the cluster lives (default\n"
     "                            $XDG_DATA_HOME/bramble/local, else\n"
     "                            ~/.local/share/bramble/local)\n"
     "  --port P                  coordinator port on 127.0.0.1 (default: a free one,\n"
     "                            or the one used before in DIR)\n"
     "  --heartbeat-interval D    passed to brambled (default 1s)\n"
     "  --node-timeout D          passed to brambled (default 5s)\n"
     "  --gpus LIST               passed to every agent, e.g. \"RTX 4090:24GiB\"\n"
     "  --http ADDR|off           passed to brambled: its HTTP side (the dashboard,\n"
     "                            /metrics), e.g. 7780 for 127.0.0.1:7780; default:\n"
     "                            a free port on 127.0.0.1 (bramble dashboard prints\n"
     "                            a login link); off: none\n"
     "  --node-prefix NAME        new nodes are NAME-1 .. NAME-N (default node);\n"
     "                            nodes that joined before keep their names\n"},
    {NULL, "down", cmd_down, "[--dir DIR]",
     "stop the local cluster started by bramble up",
     "Stops the agents, then the coordinator (SIGTERM, and SIGKILL after 10s); the\n"
     "data in DIR is kept for the next bramble up.\n"
     "\nOptions:\n"
     "  --dir DIR   the cluster's directory (default: the one the last bramble up\n"
     "              that ran on its own used, else the default of bramble up; not\n"
     "              one started beside another)\n"},
    {0},
};
