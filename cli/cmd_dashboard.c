/* cmd_dashboard.c - bramble dashboard: a one-time login link to the coordinator's
 * web dashboard (docs/dashboard.md), asked for over the caller's own CURVE
 * connection, so the page shows what this credential may see. */
#include <getopt.h>
#include <string.h>

#include "cli.h"

static int dashboard(cli_t *cli, int argc, char **argv)
{
    int json = 0;
    if (cli_args(cli, argc, argv, &json, 0, NULL, NULL) != 0)
        return CLI_USAGE;
    json_t *r = cli_call(cli, "dashboard.login", json_object());
    if (!r)
        return CLI_FAIL;
    const char *url = json_string_value(json_object_get(r, "url"));
    const char *scheme = json_string_value(json_object_get(r, "scheme"));
    if (json)
        cli_print_json(r);
    else if (url)
        printf("%s\n", url);
    if (!json)
        fprintf(stderr,
                "Open this link within a minute; it works once. Through an SSH tunnel "
                "use the\nsame port on your side: ssh -L PORT:ADDR:PORT coordinator "
                "(docs/dashboard.md).%s\n",
                scheme && strcmp(scheme, "https") == 0
                    ? "\nThe coordinator serves HTTPS: a browser warns about a "
                      "self-signed certificate\nuntil it is trusted."
                    : "");
    json_decref(r);
    return url ? CLI_OK : cli_fail(cli, "the coordinator sent no link");
}

const cli_cmd_t cli_dashboard_cmds[] = {
    {NULL, "dashboard", dashboard, "[--json]",
     "print a one-time login link to the web dashboard",
     "Asks the coordinator (started with --http ADDR:PORT) for a login link\n"
     "made for this credential and prints it: http://ADDR:PORT/login?t=SECRET\n"
     "(https:// when brambled serves TLS: --http-cert and --http-key).\n"
     "The link works once, within a minute; opening it gives the browser a\n"
     "session cookie (12 hours) and shows the nodes, jobs and events this\n"
     "credential may see: a user their own jobs, the admin everything.\n"
     "\nOptions:\n"
     "  --json   print {\"url\", \"http\", \"scheme\", \"expires\"}\n"},
    {0},
};
