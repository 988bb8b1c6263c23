/* cmd_service.c - services: endpoints (where the healthy replicas answer) and
 * scale (how many replicas run). */
#include <stdio.h>
#include <string.h>

#include "cli.h"

static void endpoint_row(cli_table_t *t, const json_t *e)
{
    char port[16], replica[16];
    snprintf(port, sizeof(port), "%lld", (long long)json_integer_value(json_object_get(e, "port")));
    snprintf(replica, sizeof(replica), "%lld",
             (long long)json_integer_value(json_object_get(e, "replica")));
    const char *cells[] = {json_string_value(json_object_get(e, "host")), port,
                           json_string_value(json_object_get(e, "node")), replica};
    cli_table_add(t, cells);
}

static int endpoints_run(cli_t *cli, int argc, char **argv)
{
    static const char *const names[] = {"NAME"};
    const char *name;
    int json = 0;
    if (cli_args(cli, argc, argv, &json, 1, names, &name) != CLI_OK)
        return CLI_USAGE;
    json_t *r = cli_call(cli, "service.endpoints", json_pack("{s:s}", "name", name));
    if (!r)
        return CLI_FAIL;
    json_t *list = json_object_get(r, "endpoints");
    if (json) {
        cli_print_json(list);
    } else if (json_array_size(list) == 0) {
        printf("no healthy replica of %s yet (%lld wanted)\n", name,
               (long long)json_integer_value(json_object_get(r, "replicas")));
    } else {
        static const char *const head[] = {"HOST", "PORT", "NODE", "REPLICA"};
        cli_print_rows(list, 4, head, endpoint_row);
    }
    json_decref(r);
    return CLI_OK;
}

static int scale_run(cli_t *cli, int argc, char **argv)
{
    static const char *const names[] = {"NAME", "N"};
    const char *pos[2];
    long n;
    if (cli_args(cli, argc, argv, NULL, 2, names, pos) != CLI_OK)
        return CLI_USAGE;
    if (cli_parse_long(cli, "N", pos[1], 0, 1000, &n) != CLI_OK)
        return CLI_USAGE;
    json_t *r = cli_call(cli, "service.scale",
                         json_pack("{s:s, s:i}", "name", pos[0], "replicas", (int)n));
    if (!r)
        return CLI_FAIL;
    printf("%s: %lld -> %ld replica%s\n", pos[0],
           (long long)json_integer_value(json_object_get(r, "was")), n, n == 1 ? "" : "s");
    json_decref(r);
    return CLI_OK;
}

const cli_cmd_t cli_service_cmds[] = {
    {NULL, "endpoints", endpoints_run, "NAME [--json]",
     "where a service's healthy replicas answer, as host and port",
     "Lists the replicas of service NAME that run and passed their health check\n"
     "(or, without one, run): HOST PORT NODE REPLICA. HOST is the node's address\n"
     "(the one its agent connects from, or its --advertise-addr).\n"
     "\nOptions:\n"
     "  --json   print an array of {host, port, node, replica, id}\n"},
    {NULL, "scale", scale_run, "NAME N",
     "change how many replicas of a service run",
     "Adds replicas (numbered after the highest) or cancels the highest numbered\n"
     "ones until N run or wait to run. N may be 0.\n"},
    {0},
};
