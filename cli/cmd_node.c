/* cmd_node.c - the admin's view of the machines: join tokens (token create, list,
 * revoke) and nodes (nodes, node show, drain, undrain, remove). */
#include <getopt.h>
#include <string.h>

#include "cli.h"
#include "util.h"

/* ---- token create | list | revoke */

static int token_create(cli_t *cli, int argc, char **argv)
{
    static const struct option opts[] = {{"ttl", required_argument, NULL, 't'},
                                         {"uses", required_argument, NULL, 'u'},
                                         {"metrics", no_argument, NULL, 'm'},
                                         {"json", no_argument, NULL, 'j'},
                                         {0}};
    int64_t ttl = -1;
    long uses = -1;
    int json = 0, metrics = 0, c;
    while ((c = getopt_long(argc, argv, ":", opts, NULL)) != -1) {
        if (c == 't') {
            if (cli_parse_ms(cli, "--ttl", optarg, &ttl) != 0)
                return CLI_USAGE;
            if (ttl <= 0)
                return cli_usage(cli, "--ttl must be more than zero");
        } else if (c == 'u') {
            if (cli_parse_long(cli, "--uses", optarg, 1, 1000000, &uses) != 0)
                return CLI_USAGE;
        } else if (c == 'm') {
            metrics = 1;
        } else if (c == 'j') {
            json = 1;
        } else {
            return cli_bad_option(cli, c, argv);
        }
    }
    if (cli_positional(cli, argc, argv, 0, NULL, NULL) != 0)
        return CLI_USAGE;
    if (metrics && uses != -1)
        return cli_usage(cli, "--uses is for join tokens: a metrics token is never used "
                              "up (revoke it with 'bramble token revoke ID')");
    json_t *body;
    if (metrics) /* no --ttl: it never expires */
        body = json_pack("{s:I, s:s}", "ttl", (json_int_t)(ttl < 0 ? 0 : ttl), "kind",
                         "metrics");
    else
        body = json_pack("{s:I, s:I}", "ttl", (json_int_t)(ttl < 0 ? 3600000 : ttl), "uses",
                         (json_int_t)(uses < 0 ? 1 : uses));
    json_t *r = cli_call(cli, "token.create", body);
    if (!r)
        return CLI_FAIL;
    const char *token = json_string_value(json_object_get(r, "token"));
    int rc = CLI_OK;
    if (json)
        cli_print_json(r);
    else if (token)
        printf("%s\n", token);
    else
        rc = cli_fail(cli, "the coordinator's answer has no token");
    if (rc == CLI_OK && metrics && json_is_null(json_object_get(r, "http")))
        fprintf(stderr, "bramble: token create: note: the coordinator serves no HTTP now; "
                        "start brambled with --http ADDR:PORT to serve /metrics\n");
    json_decref(r);
    return rc;
}

static void token_row(cli_table_t *t, const json_t *tok)
{
    char id[64], kind[32], created[32], expires[32], uses[64], revoked[32];
    char used[32], max[32];
    const char *k = json_string_value(json_object_get(tok, "kind"));
    int metrics = k && strcmp(k, "metrics") == 0;
    cli_fmt_value(json_object_get(tok, "id"), id, sizeof(id));
    br_strlcpy(kind, k ? k : "join", sizeof(kind));
    cli_fmt_time(json_object_get(tok, "created"), created, sizeof(created));
    cli_fmt_time(json_object_get(tok, "expires"), expires, sizeof(expires));
    if (metrics && json_is_null(json_object_get(tok, "expires")))
        br_strlcpy(expires, "never", sizeof(expires));
    cli_fmt_value(json_object_get(tok, "uses"), used, sizeof(used));
    cli_fmt_value(json_object_get(tok, "uses_max"), max, sizeof(max));
    snprintf(uses, sizeof(uses), "%s/%s", used, max);
    if (metrics) /* never used up */
        br_strlcpy(uses, "-", sizeof(uses));
    const json_t *rv = json_object_get(tok, "revoked");
    int is_revoked = json_is_true(rv) || (json_is_number(rv) && json_number_value(rv));
    br_strlcpy(revoked, is_revoked ? "yes" : "no", sizeof(revoked));
    const char *cells[] = {id, kind, created, expires, uses, revoked};
    cli_table_add(t, cells);
}

static int token_list(cli_t *cli, int argc, char **argv)
{
    int json = 0;
    if (cli_args(cli, argc, argv, &json, 0, NULL, NULL) != 0)
        return CLI_USAGE;
    json_t *r = cli_call(cli, "token.list", NULL);
    if (!r)
        return CLI_FAIL;
    static const char *head[] = {"ID", "KIND", "CREATED", "EXPIRES", "USES", "REVOKED"};
    cli_print_list(json_object_get(r, "tokens"), json, 6, head, token_row);
    json_decref(r);
    return CLI_OK;
}

static int token_revoke(cli_t *cli, int argc, char **argv)
{
    static const char *names[] = {"token ID"};
    const char *id;
    if (cli_args(cli, argc, argv, NULL, 1, names, &id) != 0)
        return CLI_USAGE;
    json_t *r = cli_call(cli, "token.revoke", json_pack("{s:s}", "id", id));
    if (!r)
        return CLI_FAIL;
    json_decref(r);
    printf("revoked token %s\n", id);
    return CLI_OK;
}

/* ---- nodes, node show */

static char *fmt_labels(const json_t *labels, char *buf, size_t len)
{
    const char *k;
    json_t *v;
    size_t used = 0;
    buf[0] = 0;
    json_object_foreach((json_t *)labels, k, v) {
        char val[128];
        int n = snprintf(buf + used, len - used, "%s%s=%s", used ? "," : "", k,
                         cli_fmt_value(v, val, sizeof(val)));
        if (n < 0 || (size_t)n >= len - used)
            break;
        used += (size_t)n;
    }
    if (!buf[0])
        br_strlcpy(buf, "-", len);
    return buf;
}

/* "2x RTX 4090" when every GPU is the same model, else the models joined. */
static char *fmt_gpus(const json_t *gpus, char *buf, size_t len)
{
    size_t n = json_array_size(gpus), i;
    const char *first =
        json_string_value(json_object_get(json_array_get(gpus, 0), "model"));
    json_t *g;
    int same = first != NULL;
    json_array_foreach(gpus, i, g) {
        const char *m = json_string_value(json_object_get(g, "model"));
        if (!m || !first || strcmp(m, first) != 0)
            same = 0;
    }
    if (n == 0) {
        br_strlcpy(buf, "-", len);
    } else if (same) {
        snprintf(buf, len, "%zux %s", n, first);
    } else {
        json_t *models = json_array();
        json_array_foreach(gpus, i, g) {
            json_t *m = json_object_get(g, "model");
            json_array_append_new(
                models, json_is_string(m) ? json_incref(m) : json_string("?"));
        }
        cli_fmt_list(models, ",", buf, len);
        json_decref(models);
    }
    return buf;
}

/* A figure with its unit ("0.605", "350 W"), or "-" when the node did not say it. */
static char *fmt_figure(const json_t *v, const char *fmt, char *buf, size_t len)
{
    if (json_is_number(v))
        snprintf(buf, len, fmt, json_number_value(v));
    else
        br_strlcpy(buf, "-", len);
    return buf;
}

/* A node's place in the overlay: "10.213.0.3 (userspace)", "none: WHY" (long:
 * node show), "refused: WHY", or "-" (an agent that predates it). */
static const char *fmt_overlay(const json_t *ov, int lng, char *buf, size_t len)
{
    const char *mode = json_string_value(json_object_get(ov, "mode"));
    const char *addr = json_string_value(json_object_get(ov, "address"));
    const char *error = json_string_value(json_object_get(ov, "error"));
    const char *why = json_string_value(json_object_get(ov, "why"));
    if (!json_is_object(ov))
        snprintf(buf, len, "-");
    else if (error)
        snprintf(buf, len, lng ? "refused: %s" : "refused", error);
    else if (mode && addr)
        snprintf(buf, len, "%s (%s%s)", addr, mode,
                 json_is_true(json_object_get(ov, "relay")) ? ", relay" : "");
    else
        snprintf(buf, len, lng && why ? "none: %s" : "none", why);
    return buf;
}

static void node_row(cli_table_t *t, const json_t *node)
{
    char name[64], state[32], arch[32], cpus[32], mem[32], gpus[256], labels[256];
    char jobs[256], seen[32], cost[32];
    cli_fmt_value(json_object_get(node, "name"), name, sizeof(name));
    cli_fmt_value(json_object_get(node, "state"), state, sizeof(state));
    if (json_is_string(json_object_get(node, "refuses")) && strcmp(state, "ready") == 0)
        snprintf(state, sizeof(state), "refusing"); /* node show says why */
    cli_fmt_value(json_object_get(node, "arch"), arch, sizeof(arch));
    cli_fmt_value(json_object_get(node, "cpus"), cpus, sizeof(cpus));
    cli_fmt_size(json_object_get(node, "memory"), mem, sizeof(mem));
    fmt_gpus(json_object_get(node, "gpus"), gpus, sizeof(gpus));
    fmt_labels(json_object_get(node, "labels"), labels, sizeof(labels));
    cli_fmt_list(json_object_get(node, "jobs"), ",", jobs, sizeof(jobs));
    cli_fmt_ago(json_object_get(node, "last_seen"), seen, sizeof(seen));
    fmt_figure(json_object_get(node, "cost_per_hour"), "%.4g", cost, sizeof(cost));
    char overlay[128];
    fmt_overlay(json_object_get(node, "overlay"), 0, overlay, sizeof(overlay));
    const char *cells[] = {name, state, arch, cpus, mem, gpus, cost, labels, jobs, seen,
                           overlay};
    cli_table_add(t, cells);
}

static int nodes_list(cli_t *cli, int argc, char **argv)
{
    int json = 0;
    if (cli_args(cli, argc, argv, &json, 0, NULL, NULL) != 0)
        return CLI_USAGE;
    json_t *r = cli_call(cli, "node.list", NULL);
    if (!r)
        return CLI_FAIL;
    static const char *head[] = {"NAME", "STATE",  "ARCH",   "CPUS", "MEMORY",   "GPUS",
                                 "COST/H", "LABELS", "JOBS", "LAST SEEN", "OVERLAY"};
    cli_print_list(json_object_get(r, "nodes"), json, 11, head, node_row);
    json_decref(r);
    return CLI_OK;
}

#define FIELD_WIDTH 15

/* Who holds one GPU: "job 12 (train): whole GPU", "job 13 (infer): 7.0GiB" (no
 * name: a user's view of another's job), joined by ", "; "-" for none. Cut with
 * "..." when it does not fit (the table escapes what it prints). */
static char *fmt_holders(const json_t *held, char *buf, size_t len)
{
    size_t used = 0, i;
    json_t *h;
    buf[0] = '\0';
    json_array_foreach(held, i, h) {
        char name[128] = "", size[32] = "whole GPU";
        const char *nm = json_string_value(json_object_get(h, "name"));
        if (nm)
            snprintf(name, sizeof(name), " (%s)", nm);
        if (!json_is_true(json_object_get(h, "whole")))
            cli_fmt_size(json_object_get(h, "vram"), size, sizeof(size));
        int n = snprintf(buf + used, len - used, "%sjob %lld%s: %s", i ? ", " : "",
                         (long long)json_integer_value(json_object_get(h, "job")), name, size);
        if (n < 0 || (size_t)n >= len - used) {
            snprintf(buf + (len > 4 ? len - 4 : 0), len > 4 ? 4 : len, "...");
            break;
        }
        used += (size_t)n;
    }
    if (!buf[0])
        br_strlcpy(buf, "-", len);
    return buf;
}

static void gpu_row(cli_table_t *t, const json_t *g)
{
    char idx[40], model[128], total[32], avail[32], held[512];
    snprintf(idx, sizeof(idx), "  %s",
             cli_fmt_value(json_object_get(g, "index"), model, sizeof(model)));
    cli_fmt_value(json_object_get(g, "model"), model, sizeof(model));
    cli_fmt_size(json_object_get(g, "vram_total"), total, sizeof(total));
    cli_fmt_size(json_object_get(g, "vram_free"), avail, sizeof(avail));
    fmt_holders(json_object_get(g, "held_by"), held, sizeof(held));
    const char *cells[] = {idx, model, total, avail, held};
    cli_table_add(t, cells);
}

static void print_gpus(const json_t *gpus)
{
    static const char *head[] = {"  INDEX", "MODEL", "VRAM TOTAL", "VRAM FREE", "HELD BY"};
    if (json_array_size(gpus) == 0) {
        cli_field(FIELD_WIDTH, "gpus:", "-");
        return;
    }
    printf("gpus:\n");
    cli_print_rows(gpus, 5, head, gpu_row);
}

/* The environments jobs' setups built on the node (docs/files.md, "Setup"). */
static void print_envs(const json_t *envs)
{
    static const char *head[] = {"  KEY", "UID", "SIZE", "SETUP TOOK", "BUILT", "LAST USED"};
    if (!json_is_array(envs))
        return;
    if (json_array_size(envs) == 0) {
        cli_field(FIELD_WIDTH, "environments:", "-");
        return;
    }
    printf("environments:\n");
    cli_table_t *t = cli_table_new(6, head);
    size_t i;
    json_t *e;
    json_array_foreach(envs, i, e) {
        char key[80], uid[24], size[32], took[32], built[48], used[48];
        snprintf(key, sizeof(key), "  %s", json_string_value(json_object_get(e, "key")));
        snprintf(uid, sizeof(uid), "%lld", (long long)json_integer_value(json_object_get(e, "uid")));
        cli_fmt_size(json_object_get(e, "bytes"), size, sizeof(size));
        snprintf(took, sizeof(took), "%.1fs", json_number_value(json_object_get(e, "seconds")));
        json_t *b = json_real((double)json_integer_value(json_object_get(e, "built")) / 1000.0);
        json_t *u = json_real((double)json_integer_value(json_object_get(e, "used")) / 1000.0);
        cli_fmt_time(b, built, sizeof(built));
        cli_fmt_ago(u, used, sizeof(used));
        json_decref(b);
        json_decref(u);
        const char *row[] = {key, uid, size, took, built, used};
        cli_table_add(t, row);
    }
    cli_table_print(t, stdout);
    cli_table_destroy(&t);
}

static void print_node(const json_t *node)
{
    char buf[512];
    cli_field_json(FIELD_WIDTH, node, "name", "name:");
    cli_field_json(FIELD_WIDTH, node, "state", "state:");
    if (json_is_string(json_object_get(node, "refuses")))
        cli_field_json(FIELD_WIDTH, node, "refuses", "refuses jobs:");
    cli_field_json(FIELD_WIDTH, node, "hostname", "hostname:");
    cli_field_json(FIELD_WIDTH, node, "address", "address:");
    cli_field_json(FIELD_WIDTH, node, "arch", "arch:");
    cli_field(FIELD_WIDTH, "overlay:", fmt_overlay(json_object_get(node, "overlay"), 1, buf,
                                                   sizeof(buf)));
    json_t *paths = json_object_get(node, "overlay_paths");
    if (json_is_object(paths)) { /* how it reaches its peers over the overlay */
        char line[1024];
        size_t at = (size_t)snprintf(line, sizeof(line), "%lld direct, %lld not tried yet",
                                     (long long)json_integer_value(json_object_get(paths,
                                                                                   "direct")),
                                     (long long)json_integer_value(json_object_get(paths,
                                                                                   "trying")));
        size_t i;
        json_t *v;
        json_array_foreach(json_object_get(paths, "relayed"), i, v) {
            if (at < sizeof(line))
                at += (size_t)snprintf(line + at, sizeof(line) - at, "%s %s via %s",
                                       i ? "," : "; relayed:",
                                       json_string_value(json_object_get(v, "peer")),
                                       json_string_value(json_object_get(v, "via")));
        }
        json_array_foreach(json_object_get(paths, "unreachable"), i, v) {
            if (at < sizeof(line))
                at += (size_t)snprintf(line + at, sizeof(line) - at, "%s %s",
                                       i ? "," : "; unreachable:", json_string_value(v));
        }
        cli_field(FIELD_WIDTH, "overlay peers:", line);
    }
    cli_field_json(FIELD_WIDTH, node, "os", "os:");
    cli_field_json(FIELD_WIDTH, node, "kernel", "kernel:");
    cli_field_json(FIELD_WIDTH, node, "agent_version", "agent version:");
    cli_field_json(FIELD_WIDTH, node, "cpus", "cpus:");
    cli_field(FIELD_WIDTH, "memory:", cli_fmt_size(json_object_get(node, "memory"), buf, sizeof(buf)));
    cli_field(FIELD_WIDTH, "cost per hour:",
              fmt_figure(json_object_get(node, "cost_per_hour"), "%.6g", buf, sizeof(buf)));
    if (json_is_number(json_object_get(node, "power_watts")))
        cli_field(FIELD_WIDTH, "power:",
                  fmt_figure(json_object_get(node, "power_watts"), "%.1f W", buf, sizeof(buf)));
    cli_field(FIELD_WIDTH, "labels:", fmt_labels(json_object_get(node, "labels"), buf, sizeof(buf)));
    cli_field(FIELD_WIDTH, "jobs:", cli_fmt_list(json_object_get(node, "jobs"), ",", buf, sizeof(buf)));
    cli_field_time(FIELD_WIDTH, node, "joined", "joined:");
    cli_field_time(FIELD_WIDTH, node, "last_seen", "last seen:");
    print_gpus(json_object_get(node, "gpus"));
    print_envs(json_object_get(node, "envs"));
}

/* node env rm NAME KEY: the node removes an environment it keeps. */
static int node_env(cli_t *cli, int argc, char **argv)
{
    static const char *names[] = {"rm", "node NAME", "environment KEY"};
    const char *pos[3];
    if (cli_args(cli, argc, argv, NULL, 3, names, pos) != 0)
        return CLI_USAGE;
    if (strcmp(pos[0], "rm") != 0)
        return cli_usage(cli, "'%s': the only action is rm ('bramble node env rm NAME KEY'); "
                              "'bramble node show NAME' lists the environments",
                         pos[0]);
    json_t *r = cli_call(cli, "node.env_rm", json_pack("{s:s, s:s}", "name", pos[1], "key", pos[2]));
    if (!r)
        return CLI_FAIL;
    printf("%s: environment %s removed now, or once the jobs that use it end\n", pos[1],
           pos[2]);
    json_decref(r);
    return CLI_OK;
}

static int node_show(cli_t *cli, int argc, char **argv)
{
    static const char *names[] = {"node NAME"};
    const char *name;
    int json = 0;
    if (cli_args(cli, argc, argv, &json, 1, names, &name) != 0)
        return CLI_USAGE;
    json_t *r = cli_call(cli, "node.show", json_pack("{s:s}", "name", name));
    if (!r)
        return CLI_FAIL;
    json_t *node = json_object_get(r, "node");
    if (json)
        cli_print_json(node ? node : json_object());
    else
        print_node(node);
    json_decref(r);
    return CLI_OK;
}

/* ---- node drain | undrain | remove */

static int node_act(cli_t *cli, int argc, char **argv, const char *type)
{
    static const char *names[] = {"node NAME"};
    const char *name;
    if (cli_args(cli, argc, argv, NULL, 1, names, &name) != 0)
        return CLI_USAGE;
    json_t *r = cli_call(cli, type, json_pack("{s:s}", "name", name));
    if (!r)
        return CLI_FAIL;
    const char *state =
        json_string_value(json_object_get(json_object_get(r, "node"), "state"));
    if (strcmp(type, "node.remove") == 0)
        printf("removed node %s; its key is revoked.\n"
               "To join that machine again: stop its agent, delete the key it keeps\n"
               "(DIR/agent.yaml and DIR/credential, DIR being the agent's --data-dir:\n"
               "/var/lib/bramble-agent for the service), then join with a new token:\n"
               "  bramble-agent --data-dir DIR --join-file TOKEN-FILE --name %s\n",
               name, name);
    else
        printf("node %s: %s\n", name, state ? state : "done");
    json_decref(r);
    return CLI_OK;
}

static int node_drain(cli_t *cli, int argc, char **argv)
{
    return node_act(cli, argc, argv, "node.drain");
}

static int node_undrain(cli_t *cli, int argc, char **argv)
{
    return node_act(cli, argc, argv, "node.undrain");
}

static int node_remove(cli_t *cli, int argc, char **argv)
{
    return node_act(cli, argc, argv, "node.remove");
}

/* When the node's key was last rotated (a time, or null), as node.show says; NULL
 * when it could not be asked (said on stderr). */
static json_t *key_rotated(cli_t *cli, const char *name)
{
    json_t *r = cli_call(cli, "node.show", json_pack("{s:s}", "name", name));
    if (!r)
        return NULL;
    json_t *t = json_incref(json_object_get(json_object_get(r, "node"), "key_rotated"));
    json_decref(r);
    return t ? t : json_null();
}

#define ROTATE_WAIT_MS 30000

/* Ask the node to make a new key pair, then wait until the coordinator has it. */
static int node_rotate_key(cli_t *cli, int argc, char **argv)
{
    static const char *names[] = {"node NAME"};
    const char *name;
    if (cli_args(cli, argc, argv, NULL, 1, names, &name) != 0)
        return CLI_USAGE;
    if (!cli_client(cli))
        return CLI_FAIL;
    json_t *before = key_rotated(cli, name);
    if (!before)
        return CLI_FAIL; /* (no such node: said once) */
    json_t *r = cli_call(cli, "node.rotate_key", json_pack("{s:s}", "name", name));
    if (!r) {
        json_decref(before);
        return CLI_FAIL;
    }
    json_decref(r);
    int64_t deadline = br_mono_ms() + ROTATE_WAIT_MS;
    int done = 0;
    while (!done && br_mono_ms() < deadline) {
        json_t *now = key_rotated(cli, name);
        done = now && json_is_real(now) && !json_equal(now, before);
        json_decref(now);
        if (!done)
            cli_sleep_ms(100);
    }
    json_decref(before);
    if (!done)
        return cli_fail(cli, "node %s did not report a new key within %ds; its agent's "
                             "log says why (the old key still holds)",
                        name, ROTATE_WAIT_MS / 1000);
    printf("node %s has a new key; the old one is refused from now on\n", name);
    return CLI_OK;
}

const cli_cmd_t cli_node_cmds[] = {
    {"token", "create", token_create, "[--ttl DURATION] [--uses N | --metrics] [--json]",
     "create a join token for new nodes, or a metrics token (admin)",
     "Prints the token alone on stdout. A join token goes to\n"
     "'bramble-agent --join TOKEN'. A metrics token (--metrics) is the bearer token\n"
     "of the coordinator's GET /metrics (brambled --http): give it to Prometheus\n"
     "(docs/metrics.md). The coordinator keeps only a hash of either.\n"
     "\nOptions:\n"
     "  --ttl DURATION   how long the token stays valid (default 1h for a join\n"
     "                   token; a metrics token never expires unless given one)\n"
     "  --uses N         how many nodes may join with it (default 1; join tokens)\n"
     "  --metrics        a metrics token: never used up, ends when revoked\n"
     "  --json           print the coordinator's answer: {\"token\", \"id\",\n"
     "                   \"expires\" (null: never), \"kind\"; metrics tokens also\n"
     "                   \"http\", where the coordinator serves HTTP, or null}\n"},
    {"token", "list", token_list, "[--json]", "list join and metrics tokens (admin)",
     "Table columns: ID KIND (join or metrics) CREATED EXPIRES USES (used/allowed;\n"
     "- for metrics tokens) REVOKED.\n"
     "\nOptions:\n"
     "  --json   print the array of tokens: id, kind, created, expires (null:\n"
     "           never), uses, uses_max, revoked\n"},
    {"token", "revoke", token_revoke, "ID",
     "revoke a join or metrics token (admin)",
     "A revoked metrics token is refused (401) from the coordinator's next request on.\n"},
    {NULL, "nodes", nodes_list, "[--json]", "list the nodes of the cluster",
     "Table columns: NAME STATE ARCH CPUS MEMORY GPUS LABELS JOBS LAST SEEN.\n"
     "\nOptions:\n"
     "  --json   print the array of nodes exactly as the coordinator sent it\n"},
    {"node", "show", node_show, "NAME [--json]", "show one node in detail",
     "Options:\n"
     "  --json   print the node object\n"},
    {"node", "env", node_env, "rm NAME KEY",
     "remove an environment a node keeps for jobs' setups (admin)",
     "KEY is one of the environments 'bramble node show NAME' lists. The node\n"
     "removes it now, or, when a running job uses it, once that job's attempt ends;\n"
     "the next job with that setup on the node runs it again (docs/files.md,\n"
     "\"Setup\").\n"},
    {"node", "drain", node_drain, "NAME",
     "stop scheduling new jobs on a node (admin); running jobs go on", ""},
    {"node", "undrain", node_undrain, "NAME",
     "let a drained node take jobs again (admin)", ""},
    {"node", "rotate-key", node_rotate_key, "NAME",
     "have a node make a new key pair; its old key is refused at once (admin)",
     "The node's agent makes the pair itself (the secret key never leaves the\n"
     "node), saves it in its data dir and sends the public key; the coordinator\n"
     "takes it and revokes the old one in the same step, and the agent reconnects\n"
     "with the new one. Its jobs run on. The node must be connected. Waits up to\n"
     "30s for the new key to be in place.\n"},
    {"node", "remove", node_remove, "NAME",
     "remove a node and revoke its key; its jobs are requeued (admin)",
     "The name is free again at once. The removed machine's agent keeps its old key\n"
     "in its data dir and is refused with it: to join it again, delete\n"
     "DIR/agent.yaml and DIR/credential there and start it with --join and a new\n"
     "token (the output says so).\n"},
    {0},
};
