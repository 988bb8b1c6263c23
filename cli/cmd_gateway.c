/* cmd_gateway.c - bramble gateway add|list|remove: credentials for bramble-gateway
 * (docs/gateway.md). A gateway's key may read the routing table and nothing else;
 * like a user's, its key pair is made here and only the public half is sent. */
#include <getopt.h>
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "usercred.h"
#include "util.h"

static int gateway_add(cli_t *cli, int argc, char **argv)
{
    static const struct option opts[] = {{"out", required_argument, NULL, 'o'},
                                         {"endpoint", required_argument, NULL, 'e'},
                                         {NULL, 0, NULL, 0}};
    static const char *names[] = {"gateway NAME"};
    const char *out = NULL, *name, *endpoint = NULL;
    int c;
    optind = 1;
    while ((c = getopt_long(argc, argv, ":", opts, NULL)) != -1) {
        if (c == 'o')
            out = optarg;
        else if (c == 'e')
            endpoint = optarg;
        else
            return cli_bad_option(cli, c, argv);
    }
    if (cli_positional(cli, argc, argv, 1, names, &name) != 0)
        return CLI_USAGE;
    if (endpoint && cli_usercred_endpoint_ok(cli, endpoint) != 0)
        return CLI_USAGE;
    if (!br_valid_name(name))
        return cli_usage(cli, "gateway name '%s': use lowercase letters, digits and '-'",
                         name);
    if (!cli_client(cli))
        return CLI_FAIL;
    char path[CLI_PATH_MAX];
    if (cli_usercred_issue(cli, "gateway", name, json_object(), endpoint, out, "gateway",
                           path))
        return CLI_FAIL;
    printf("added gateway %s; credential: %s (mode 0600; start it with "
           "bramble-gateway --credential %s --listen ADDR:PORT)\n",
           name, path, path);
    return CLI_OK;
}

static void gateway_row(cli_table_t *t, const json_t *g)
{
    char a[64], cr[64], seen[64];
    json_t *s = json_object_get(g, "seen");
    const char *row[] = {cli_fmt_value(json_object_get(g, "name"), a, sizeof(a)),
                         cli_fmt_time(json_object_get(g, "created"), cr, sizeof(cr)),
                         json_is_true(json_object_get(g, "connected")) ? "yes" : "no",
                         json_is_null(s) ? "-" : cli_fmt_time(s, seen, sizeof(seen))};
    cli_table_add(t, row);
}

static int gateway_list(cli_t *cli, int argc, char **argv)
{
    int json = 0;
    if (cli_args(cli, argc, argv, &json, 0, NULL, NULL) != 0)
        return CLI_USAGE;
    json_t *r = cli_call(cli, "gateway.list", NULL);
    if (!r)
        return CLI_FAIL;
    static const char *head[] = {"NAME", "CREATED", "CONNECTED", "RENEWED"};
    cli_print_list(json_object_get(r, "gateways"), json, 4, head, gateway_row);
    json_decref(r);
    return CLI_OK;
}

static int gateway_remove(cli_t *cli, int argc, char **argv)
{
    const char *name;
    static const char *names[] = {"gateway NAME"};
    if (cli_args(cli, argc, argv, NULL, 1, names, &name) != 0)
        return CLI_USAGE;
    json_t *r = cli_call(cli, "gateway.remove", json_pack("{s:s}", "name", name));
    if (!r)
        return CLI_FAIL;
    printf("removed gateway %s; its key is revoked\n", name);
    json_decref(r);
    return CLI_OK;
}

const cli_cmd_t cli_gateway_cmds[] = {
    {"gateway", "add", gateway_add, "NAME [--out FILE] [--endpoint tcp://HOST:PORT]",
     "issue a credential for a bramble-gateway (admin)",
     "Makes a key pair here, registers its public key as gateway NAME, and writes\n"
     "the credential (mode 0600) to FILE, by default ./NAME.gateway. A gateway's\n"
     "key may read the services' routing table and nothing else.\n"
     "\nOptions:\n"
     "  --out FILE        where to write the credential\n"
     "  --endpoint EP     the coordinator's address written into the credential\n"},
    {"gateway", "list", gateway_list, "[--json]", "list the gateways (admin)",
     "CONNECTED says whether the gateway watches the routing table now; RENEWED\n"
     "when it last renewed its watch (every 5 s while it runs).\n"
     "\nOptions:\n"
     "  --json   print the array: name, created, connected, seen\n"},
    {"gateway", "remove", gateway_remove, "NAME",
     "remove a gateway and revoke its key at once (admin)", ""},
    {0},
};
