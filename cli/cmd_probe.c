/* cmd_probe.c - bramble probe: the network map, the round trips agents measure
 * between nodes and to the coordinator, as a matrix. */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

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

static int print_matrix(json_t *m)
{
    json_t *nodes = json_object_get(m, "nodes"), *rows = json_object_get(m, "rtt_ms");
    json_t *coord = json_object_get(m, "coordinator_ms");
    size_t n = json_array_size(nodes);
    if (n == 0) {
        printf("no nodes have joined yet\n");
        return CLI_OK;
    }
    const char **head = calloc(n + 2, sizeof(char *));
    const char **cells = calloc(n + 2, sizeof(char *));
    char (*buf)[32] = calloc(n + 2, sizeof(*buf));
    if (!head || !cells || !buf) {
        free(head);
        free(cells);
        free(buf);
        return CLI_FAIL;
    }
    head[0] = "FROM \\ TO (ms)";
    for (size_t j = 0; j < n; j++)
        head[j + 1] = json_string_value(json_array_get(nodes, j));
    head[n + 1] = "COORDINATOR";
    cli_table_t *t = cli_table_new((int)n + 2, head);
    for (size_t i = 0; t && i < n; i++) {
        json_t *row = json_array_get(rows, i);
        cells[0] = json_string_value(json_array_get(nodes, i));
        for (size_t j = 0; j < n; j++)
            cells[j + 1] = ms_cell(json_array_get(row, j), i == j, buf[j + 1], sizeof(buf[0]));
        cells[n + 1] = ms_cell(json_array_get(coord, i), 0, buf[n + 1], sizeof(buf[0]));
        cli_table_add(t, cells);
    }
    if (t)
        cli_table_print(t, stdout);
    cli_table_destroy(&t);
    printf("(round trips measured by the row's node; '-': not measured yet or no "
           "answer)\n");
    free(head);
    free(cells);
    free(buf);
    return CLI_OK;
}

static int probe_run(cli_t *cli, int argc, char **argv)
{
    int json = 0;
    if (cli_args(cli, argc, argv, &json, 0, NULL, NULL) != CLI_OK)
        return CLI_USAGE;
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
    {NULL, "probe", probe_run, "[--json]",
     "show the network map: round trips between nodes and to the coordinator",
     "Every agent probes the others over UDP (its --probe-port, 7703 by default)\n"
     "every 5 s and reports the median of its last answers with its heartbeats;\n"
     "the coordinator places gangs on the nodes closest together\n"
     "(docs/distributed.md).\n"
     "\nOptions:\n"
     "  --json   print {\"nodes\": [...], \"rtt_ms\": [[row: from, column: to]],\n"
     "           \"coordinator_ms\": [...]}; null where not measured\n"},
    {0},
};
