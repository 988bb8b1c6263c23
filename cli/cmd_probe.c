/* cmd_probe.c - bramble probe: the network map, the round trips agents measure
 * between nodes and to the coordinator, as a matrix; and with --nccl, an NCCL
 * all-reduce bandwidth test over chosen nodes' GPUs, run as a gang job. */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "spec.h"
#include "util.h"

/* "0.31" or "-" (not measured) for one cell. */
static const char *ms_cell(const json_t *v, int self, char *buf, size_t len)
{
    if (self)
        snprintf(buf, len, ".");
    else if (json_is_number(v))
        snprintf(buf, len, "%.2f", json_number_value(v));
    else
        snprintf(buf, len, "-");
    return buf;
}

static int print_rows(json_t *m, const char *key, const char *corner, int with_coord);

/* A node-by-node matrix: m's "nodes" and "rtt_ms" rows (from the row's node to the
 * column's), plus a coordinator column from "coordinator_ms" when with_coord. */
static int print_table(json_t *m, const char *corner, int with_coord)
{
    return print_rows(m, "rtt_ms", corner, with_coord);
}

/* print_table's with the rows of key. */
static int print_rows(json_t *m, const char *key, const char *corner, int with_coord)
{
    json_t *nodes = json_object_get(m, "nodes"), *rows = json_object_get(m, key);
    json_t *coord = json_object_get(m, "coordinator_ms");
    size_t n = json_array_size(nodes), cols = n + 1 + (with_coord ? 1 : 0);
    if (n == 0) {
        printf("no nodes have joined yet\n");
        return CLI_OK;
    }
    const char **head = calloc(cols, sizeof(char *));
    const char **cells = calloc(cols, sizeof(char *));
    char (*buf)[32] = calloc(cols, sizeof(*buf));
    if (!head || !cells || !buf) {
        free(head);
        free(cells);
        free(buf);
        return CLI_FAIL;
    }
    head[0] = corner;
    for (size_t j = 0; j < n; j++)
        head[j + 1] = json_string_value(json_array_get(nodes, j));
    if (with_coord)
        head[n + 1] = "COORDINATOR";
    cli_table_t *t = cli_table_new((int)cols, head);
    for (size_t i = 0; t && i < n; i++) {
        json_t *row = json_array_get(rows, i);
        cells[0] = json_string_value(json_array_get(nodes, i));
        for (size_t j = 0; j < n; j++)
            cells[j + 1] = ms_cell(json_array_get(row, j), i == j, buf[j + 1], sizeof(buf[0]));
        if (with_coord)
            cells[n + 1] = ms_cell(json_array_get(coord, i), 0, buf[n + 1], sizeof(buf[0]));
        cli_table_add(t, cells);
    }
    if (t)
        cli_table_print(t, stdout);
    cli_table_destroy(&t);
    free(head);
    free(cells);
    free(buf);
    return CLI_OK;
}

/* How the overlay's pairs reach each other (docs/overlay.md): counts, then each
 * pair that goes through a relay or has no path. Nothing when no pair is in it. */
static void print_overlay(const json_t *ov)
{
    json_int_t direct = json_integer_value(json_object_get(ov, "direct"));
    json_int_t relayed = json_integer_value(json_object_get(ov, "relayed"));
    json_int_t none = json_integer_value(json_object_get(ov, "unreachable"));
    json_int_t trying = json_integer_value(json_object_get(ov, "trying"));
    if (direct + relayed + none + trying == 0)
        return;
    printf("\noverlay: %lld pairs direct, %lld relayed, %lld unreachable, %lld not tried "
           "yet\n", (long long)direct, (long long)relayed, (long long)none,
           (long long)trying);
    size_t i;
    json_t *p;
    json_array_foreach(json_object_get(ov, "pairs"), i, p) {
        const char *via = json_string_value(json_object_get(p, "via"));
        const char *path = json_string_value(json_object_get(p, "path"));
        if (path && strcmp(path, "relayed") == 0 && via)
            printf("  %s <-> %s: relayed via %s\n",
                   json_string_value(json_object_get(p, "a")),
                   json_string_value(json_object_get(p, "b")), via);
        else
            printf("  %s <-> %s: %s (no relay reaches both: start one with --relay)\n",
                   json_string_value(json_object_get(p, "a")),
                   json_string_value(json_object_get(p, "b")), path ? path : "?");
    }
}

static int print_matrix(json_t *m)
{
    int rc = print_table(m, "FROM \\ TO (ms)", 1);
    if (json_array_size(json_object_get(m, "nodes")))
        printf("(round trips measured by the row's node; '-': not measured yet or no "
               "answer)\n");
    if (json_is_array(json_object_get(m, "overlay_rtt_ms"))) {
        printf("\n");
        print_rows(m, "overlay_rtt_ms", "OVERLAY (ms)", 0);
        printf("(the same, over the overlay: to each node's overlay address)\n");
    }
    print_overlay(json_object_get(m, "overlay"));
    return rc;
}

/* ---- --nccl: an all-reduce bus bandwidth test as a gang job */

/* Every name in names must be a node's: else an error naming it and the known
 * ones. 0, or -1 after printing the reason. */
static int known_nodes(cli_t *cli, json_t *names, const char *flag)
{
    json_t *r = cli_call(cli, "node.list", json_object());
    if (!r)
        return -1;
    json_t *nodes = json_object_get(r, "nodes"), *name, *n;
    size_t i, k;
    json_array_foreach(names, i, name) {
        int found = 0;
        json_array_foreach(nodes, k, n) {
            found |= json_equal(json_object_get(n, "name"), name);
        }
        if (!found) {
            json_t *known = json_array();
            json_array_foreach(nodes, k, n) {
                json_array_append(known, json_object_get(n, "name"));
            }
            char list[1024];
            cli_err(cli, "%s: no node is named '%s' (the nodes: %s)", flag,
                    json_string_value(name),
                    json_array_size(known) ? cli_fmt_list(known, ", ", list, sizeof(list))
                                           : "none has joined yet");
            json_decref(known);
            json_decref(r);
            return -1;
        }
    }
    json_decref(r);
    return 0;
}

/* The GPUs every named node has (the fewest among them), or -1 with the reason. */
static int gpus_per_node(cli_t *cli, json_t *names)
{
    json_t *r = cli_call(cli, "node.list", json_object());
    if (!r)
        return -1;
    int fewest = -1;
    size_t i, k;
    json_t *name, *n;
    json_array_foreach(names, i, name) {
        json_t *found = NULL;
        json_array_foreach(json_object_get(r, "nodes"), k, n) {
            if (json_equal(json_object_get(n, "name"), name))
                found = n;
        }
        int g = (int)json_array_size(json_object_get(found, "gpus"));
        if (!found || g == 0) {
            cli_err(cli, found ? "node %s has no GPUs" : "no node named '%s'",
                    json_string_value(name));
            json_decref(r);
            return -1;
        }
        if (fewest < 0 || g < fewest)
            fewest = g;
    }
    json_decref(r);
    return fewest > BR_MAX_TASKS_PER_NODE ? BR_MAX_TASKS_PER_NODE : fewest;
}

typedef struct {
    char *buf;
    size_t len;
} text_t;

static int add_stdout(void *arg, int ranks, int rank, int stream, const char *data, size_t len)
{
    text_t *t = arg;
    if (stream != 1)
        return 0;
    char *nb = realloc(t->buf, t->len + len + 1);
    if (!nb)
        return -1;
    t->buf = nb;
    memcpy(t->buf + t->len, data, len);
    t->buf[t->len += len] = '\0';
    return 0;
}

/* The machine-readable lines (those that start with '{') of rank 0's standard
 * output, parsed, in order (the job has ended). NULL when the logs cannot be read. */
static json_t *rank0_results(cli_t *cli, int64_t id)
{
    text_t t = {NULL, 0};
    if (cli_read_logs(cli, id, 0, 0, add_stdout, &t) != CLI_OK) {
        free(t.buf);
        return NULL;
    }
    json_t *lines = json_array();
    for (const char *p = t.buf; p && *p;) {
        const char *nl = strchr(p, '\n');
        size_t n = nl ? (size_t)(nl - p) : strlen(p);
        json_t *v = n && *p == '{' ? json_loadb(p, n, 0, NULL) : NULL;
        if (json_is_object(v))
            json_array_append(lines, v);
        json_decref(v);
        p = nl ? nl + 1 : NULL;
    }
    free(t.buf);
    return lines;
}

/* The first line of lines with a "result", or NULL. Borrowed. */
static json_t *result_of(json_t *lines)
{
    size_t i;
    json_t *v;
    json_array_foreach(lines, i, v) {
        if (json_object_get(v, "result"))
            return v;
    }
    return NULL;
}

static int print_nccl(json_t *lines, json_t *names, int gpus, int json)
{
    json_t *result = result_of(lines), *sizes = json_array();
    size_t i;
    json_t *v;
    json_array_foreach(lines, i, v) {
        if (json_object_get(v, "bytes"))
            json_array_append(sizes, v);
    }
    if (!result) {
        json_decref(sizes);
        return -1;
    }
    if (json) {
        json_t *all = json_pack("{s:O, s:i, s:o, s:O}", "nodes", names, "gpus_per_node",
                                gpus, "sizes", sizes, "result", result);
        cli_print_json(all);
        json_decref(all);
        return 0;
    }
    static const char *const head[] = {"BYTES", "TIME (us)", "ALGBW (GB/s)", "BUSBW (GB/s)"};
    cli_table_t *t = cli_table_new(4, head);
    json_array_foreach(sizes, i, v) {
        char c[4][32];
        snprintf(c[0], 32, "%lld", (long long)json_integer_value(json_object_get(v, "bytes")));
        snprintf(c[1], 32, "%.1f", json_number_value(json_object_get(v, "time_us")));
        snprintf(c[2], 32, "%.2f", json_number_value(json_object_get(v, "algbw_gbs")));
        snprintf(c[3], 32, "%.2f", json_number_value(json_object_get(v, "busbw_gbs")));
        const char *cells[4] = {c[0], c[1], c[2], c[3]};
        cli_table_add(t, cells);
    }
    cli_table_print(t, stdout);
    cli_table_destroy(&t);
    printf("peak bus bandwidth %.2f GB/s at %lld bytes over %lld GPUs on %lld nodes "
           "(NCCL %s)\n",
           json_number_value(json_object_get(result, "peak_busbw_gbs")),
           (long long)json_integer_value(json_object_get(result, "at_bytes")),
           (long long)json_integer_value(json_object_get(result, "ranks")),
           (long long)json_integer_value(json_object_get(result, "nodes")),
           json_string_value(json_object_get(result, "nccl_version")));
    json_decref(sizes);
    return 0;
}

/* "a,b,c" -> ["a","b","c"]; NULL (usage printed) when empty or too long. */
static json_t *name_list(cli_t *cli, const char *list, const char *flag)
{
    json_t *names = json_array();
    char buf[1024];
    br_strlcpy(buf, list, sizeof(buf));
    for (char *save = NULL, *tok = strtok_r(buf, ",", &save); tok;
         tok = strtok_r(NULL, ",", &save))
        json_array_append_new(names, json_string(tok));
    if (json_array_size(names) == 0 || json_array_size(names) > BR_SPEC_MAX_LIST) {
        json_decref(names);
        cli_usage(cli, "%s: give 1 to %d node names, comma-separated", flag,
                  BR_SPEC_MAX_LIST);
        return NULL;
    }
    return names;
}

/* Run command as a gang job on the named nodes (resources: what else it needs),
 * wait for it, and hand back rank 0's result lines (*out, a new reference). When
 * the job fails, every rank's output goes to stderr. */
static int run_probe_job(cli_t *cli, json_t *names, const char *resources,
                         const char *command, const char *what, json_t **out)
{
    char yaml[4096];
    char *nodes = json_dumps(names, JSON_COMPACT);
    json_t *cmd = json_string(command);
    char *cmd_text = json_dumps(cmd, JSON_ENCODE_ANY);
    snprintf(yaml, sizeof(yaml),
             "name: probe-%d\n"
             "command: %s\n"
             "resources: {nodes: %zu, nodelist: %s%s}\n"
             "restart: {max: 0}\n"
             "time_limit: 10m\n",
             (int)getpid() % 100000, cmd_text, json_array_size(names), nodes, resources);
    free(nodes);
    free(cmd_text);
    json_decref(cmd);
    *out = NULL;
    json_t *r = cli_call(cli, "job.submit", json_pack("{s:s, s:[]}", "spec", yaml, "sets"));
    if (!r)
        return CLI_FAIL;
    int64_t id = json_integer_value(json_object_get(r, "id"));
    json_decref(r);
    char list[1024];
    fprintf(stderr, "bramble: probe: job %lld runs %s on %s\n", (long long)id, what,
            cli_fmt_list(names, ",", list, sizeof(list)));
    int rc = cli_wait_job(cli, id);
    if (rc == CLI_OK && !(*out = rank0_results(cli, id)))
        rc = CLI_FAIL;
    if (rc != CLI_OK) { /* what the probe said, every rank */
        fprintf(stderr, "bramble: probe: the job's output:\n");
        cli_stream_logs(cli, id, -1, 0, stderr);
    }
    return rc;
}

static int nccl_run(cli_t *cli, const char *list, const char *command, const char *max,
                    int json)
{
    json_t *names = name_list(cli, list, "--nccl");
    if (!names)
        return CLI_USAGE;
    int gpus = known_nodes(cli, names, "--nccl") < 0 ? -1 : gpus_per_node(cli, names);
    char res[64], cmd[1024], what[64];
    json_t *out = NULL;
    snprintf(res, sizeof(res), ", gpus: %d, tasks_per_node: gpus", gpus);
    snprintf(cmd, sizeof(cmd), "%s --max-bytes %s", command, max);
    snprintf(what, sizeof(what), "an NCCL all-reduce, %d GPU%s each", gpus,
             gpus == 1 ? "" : "s");
    int rc = gpus < 0 ? CLI_FAIL : run_probe_job(cli, names, res, cmd, what, &out);
    if (rc == CLI_OK && print_nccl(out, names, gpus, json) < 0)
        rc = cli_fail(cli, "the probe printed no result line");
    json_decref(out);
    json_decref(names);
    return rc;
}

/* The ready nodes, by name. */
static json_t *ready_nodes(cli_t *cli)
{
    json_t *r = cli_call(cli, "node.list", json_object());
    if (!r)
        return NULL;
    json_t *names = json_array();
    size_t i;
    json_t *n;
    json_array_foreach(json_object_get(r, "nodes"), i, n) {
        const char *st = json_string_value(json_object_get(n, "state"));
        if (st && strcmp(st, "ready") == 0)
            json_array_append(names, json_object_get(n, "name"));
    }
    json_decref(r);
    return names;
}

static int print_bandwidth(json_t *lines, int json)
{
    json_t *result = result_of(lines);
    if (!result)
        return -1;
    if (json) {
        cli_print_json(result);
    } else {
        json_t *m = json_pack("{s:O, s:O, s:[]}", "nodes", json_object_get(result, "nodes"),
                              "rtt_ms", json_object_get(result, "gbit_s"), "coordinator_ms");
        print_table(m, "FROM \\ TO (Gbit/s)", 0);
        json_decref(m);
    }
    return 0;
}

static int bandwidth_run(cli_t *cli, const char *list, const char *command, const char *bytes,
                         int json)
{
    json_t *names = list ? name_list(cli, list, "--nodes") : ready_nodes(cli);
    if (!names)
        return list ? CLI_USAGE : CLI_FAIL;
    if (list && known_nodes(cli, names, "--nodes") < 0) {
        json_decref(names);
        return CLI_FAIL;
    }
    if (json_array_size(names) < 2) {
        json_decref(names);
        return cli_fail(cli, "--bandwidth needs at least 2 ready nodes");
    }
    char cmd[1024];
    json_t *out = NULL;
    snprintf(cmd, sizeof(cmd), "%s --bytes %s", command, bytes);
    int rc = run_probe_job(cli, names, "", cmd, "a TCP throughput test", &out);
    if (rc == CLI_OK && print_bandwidth(out, json) < 0)
        rc = cli_fail(cli, "the probe printed no result line");
    json_decref(out);
    json_decref(names);
    return rc;
}

static int probe_run(cli_t *cli, int argc, char **argv)
{
    static const struct option opts[] = {{"json", no_argument, NULL, 'j'},
                                         {"nccl", required_argument, NULL, 'n'},
                                         {"command", required_argument, NULL, 'c'},
                                         {"max-bytes", required_argument, NULL, 'm'},
                                         {"bandwidth", no_argument, NULL, 'b'},
                                         {"nodes", required_argument, NULL, 'N'},
                                         {"bytes", required_argument, NULL, 'B'},
                                         {0}};
    int json = 0, bandwidth = 0, c;
    const char *nccl = NULL, *command = NULL, *max = "256M", *nodes = NULL, *bytes = "64M";
    while ((c = getopt_long(argc, argv, ":", opts, NULL)) != -1) {
        if (c == 'j')
            json = 1;
        else if (c == 'n')
            nccl = optarg;
        else if (c == 'c')
            command = optarg;
        else if (c == 'm')
            max = optarg;
        else if (c == 'b')
            bandwidth = 1;
        else if (c == 'N')
            nodes = optarg;
        else if (c == 'B')
            bytes = optarg;
        else
            return cli_bad_option(cli, c, argv);
    }
    if (cli_positional(cli, argc, argv, 0, NULL, NULL) != CLI_OK)
        return CLI_USAGE;
    if (nccl && bandwidth)
        return cli_usage(cli, "--nccl and --bandwidth: one test at a time");
    if (nccl)
        return nccl_run(cli, nccl, command ? command : "bramble-nccl-probe", max, json);
    if (bandwidth)
        return bandwidth_run(cli, nodes, command ? command : "bramble-net-probe", bytes, json);
    json_t *m = cli_call(cli, "node.probe", json_object());
    if (!m)
        return CLI_FAIL;
    int rc = CLI_OK;
    if (json)
        cli_print_json(m);
    else
        rc = print_matrix(m);
    json_decref(m);
    return rc;
}

const cli_cmd_t cli_probe_cmds[] = {
    {NULL, "probe", probe_run,
     "[--json] | --bandwidth [--nodes NODES] [--bytes N] [--json] | --nccl NODES "
     "[--max-bytes N] [--json]",
     "show the network map: round trips between nodes and to the coordinator",
     "Every agent probes the others over UDP (its --probe-port, 7703 by default)\n"
     "every 5 s and reports the median of its last answers with its heartbeats;\n"
     "the coordinator places gangs on the nodes closest together\n"
     "(docs/distributed.md).\n"
     "\nWith --bandwidth it measures TCP throughput between every pair of the ready\n"
     "nodes (or --nodes), one pair at a time, as a gang job running\n"
     "bramble-net-probe, and prints the matrix in Gbit/s.\n"
     "\nWith --nccl a,b,... it runs an NCCL all-reduce bus bandwidth test over every\n"
     "GPU of those nodes as a gang job (one process per GPU; the nodes need\n"
     "bramble-nccl-probe, built where CUDA and NCCL are found) and prints the\n"
     "bandwidth per message size (docs/probe-nccl.md).\n"
     "\nOptions:\n"
     "  --json           print {\"nodes\": [...], \"rtt_ms\": [[row: from, column:\n"
     "                   to]], \"coordinator_ms\": [...]}; null where not measured\n"
     "                   (with --nccl: {nodes, gpus_per_node, sizes, result})\n"
     "  --bandwidth      the throughput test (--json: the probe's result object)\n"
     "  --nodes NODES    the nodes it runs on (default: every ready node)\n"
     "  --bytes N        bytes sent per pair (64M)\n"
     "  --nccl NODES     the all-reduce test over these nodes' GPUs\n"
     "  --command CMD    the probe program on the nodes (bramble-net-probe,\n"
     "                   bramble-nccl-probe)\n"
     "  --max-bytes N    the largest all-reduce message (256M)\n"},
    {0},
};
