/* cmd_audit.c - bramble audit: the admin's actions and everyone's shells and
 * forwards, as the coordinator recorded them (who, what, to what, when, and how
 * it ended). */
#include <getopt.h>
#include <string.h>

#include "cli.h"

static void audit_row(cli_table_t *t, const json_t *e)
{
    char id[32], time[32], who[64], action[64], target[96], result[200];
    const char *row[] = {cli_fmt_value(json_object_get(e, "id"), id, sizeof(id)),
                         cli_fmt_time(json_object_get(e, "time"), time, sizeof(time)),
                         cli_fmt_value(json_object_get(e, "who"), who, sizeof(who)),
                         cli_fmt_value(json_object_get(e, "action"), action, sizeof(action)),
                         cli_fmt_value(json_object_get(e, "target"), target, sizeof(target)),
                         cli_fmt_value(json_object_get(e, "result"), result, sizeof(result))};
    cli_table_add(t, row);
}

static int audit(cli_t *cli, int argc, char **argv)
{
    static const struct option opts[] = {{"json", no_argument, NULL, 'j'},
                                         {"limit", required_argument, NULL, 'n'},
                                         {0}};
    int json = 0, c;
    long limit = 0;
    while ((c = getopt_long(argc, argv, ":", opts, NULL)) != -1) {
        if (c == 'j')
            json = 1;
        else if (c == 'n') {
            if (cli_parse_long(cli, "--limit", optarg, 1, 100000, &limit) != 0)
                return CLI_USAGE;
        } else
            return cli_bad_option(cli, c, argv);
    }
    if (cli_positional(cli, argc, argv, 0, NULL, NULL) != 0)
        return CLI_USAGE;
    json_t *r = cli_call(cli, "audit.list", json_pack("{s:i}", "limit", (int)limit));
    if (!r)
        return CLI_FAIL;
    static const char *head[] = {"ID", "TIME", "WHO", "ACTION", "TARGET", "RESULT"};
    cli_print_list(json_object_get(r, "entries"), json, 6, head, audit_row);
    json_decref(r);
    return CLI_OK;
}

const cli_cmd_t cli_audit_cmds[] = {
    {NULL, "audit", audit, "[--limit N] [--json]",
     "the admin's actions and every shell and forward, as recorded (admin)",
     "Every token, node, user, job and service action of the admin, and every\n"
     "shell and forwarded connection into a job, whoever opened it, oldest first:\n"
     "when, who, the request, what it was done to, and how it ended (done, or\n"
     "refused with the reason; for a shell, its command).\n"
     "\nOptions:\n"
     "  --limit N   the first N entries only\n"
     "  --json      print the array of {id, time, who, action, target, result}\n"},
    {0},
};
