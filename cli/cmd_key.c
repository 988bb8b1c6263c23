/* cmd_key.c - bramble key create|list|revoke: a user's API keys for the models
 * behind the gateways (docs/gateway.md). The coordinator makes a key and answers
 * it once; it keeps only its hash. */
#include <getopt.h>
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "util.h"

/* "a,b" into ["a", "b"] (empty names refused). NULL after a usage error. */
static json_t *models_of(cli_t *cli, const char *list)
{
    json_t *out = json_array();
    const char *p = list;
    for (;;) {
        const char *comma = strchr(p, ',');
        size_t n = comma ? (size_t)(comma - p) : strlen(p);
        if (n == 0) {
            json_decref(out);
            cli_usage(cli, "--models '%s': expected model names separated by commas", list);
            return NULL;
        }
        json_array_append_new(out, json_stringn(p, n));
        if (!comma)
            return out;
        p = comma + 1;
    }
}

static int key_create(cli_t *cli, int argc, char **argv)
{
    static const struct option opts[] = {{"name", required_argument, NULL, 'n'},
                                         {"models", required_argument, NULL, 'm'},
                                         {"json", no_argument, NULL, 'j'},
                                         {NULL, 0, NULL, 0}};
    const char *name = NULL, *models = NULL;
    int c, json = 0;
    optind = 1;
    while ((c = getopt_long(argc, argv, ":", opts, NULL)) != -1) {
        if (c == 'n')
            name = optarg;
        else if (c == 'm')
            models = optarg;
        else if (c == 'j')
            json = 1;
        else
            return cli_bad_option(cli, c, argv);
    }
    if (cli_positional(cli, argc, argv, 0, NULL, NULL) != 0)
        return CLI_USAGE;
    json_t *body = json_object();
    if (name)
        json_object_set_new(body, "name", json_string(name));
    if (models) {
        json_t *m = models_of(cli, models);
        if (!m) {
            json_decref(body);
            return CLI_USAGE;
        }
        json_object_set_new(body, "models", m);
    }
    json_t *r = cli_call(cli, "key.create", body);
    if (!r)
        return CLI_FAIL;
    if (json) {
        cli_print_json(r);
    } else {
        char list[1024];
        json_t *names = json_object_get(r, "models");
        printf("API key %s (%s) of user %s, for %s.\n"
               "It is shown only now: keep it. Clients send it as 'Authorization: Bearer "
               "KEY' (OPENAI_API_KEY) to the gateway.\n%s\n",
               json_string_value(json_object_get(r, "id")),
               json_string_value(json_object_get(r, "name")),
               json_string_value(json_object_get(r, "user")),
               json_array_size(names) ? cli_fmt_list(names, ", ", list, sizeof(list))
                                      : "every model",
               json_string_value(json_object_get(r, "key")));
    }
    json_decref(r);
    return CLI_OK;
}

static void key_row(cli_table_t *t, const json_t *k)
{
    char cr[64], list[256];
    json_t *models = json_object_get(k, "models");
    const char *row[] = {json_string_value(json_object_get(k, "id")),
                         json_string_value(json_object_get(k, "name")),
                         json_string_value(json_object_get(k, "user")),
                         json_array_size(models) ? cli_fmt_list(models, ",", list, sizeof(list))
                                                 : "all",
                         cli_fmt_time(json_object_get(k, "created"), cr, sizeof(cr))};
    cli_table_add(t, row);
}

static int key_list(cli_t *cli, int argc, char **argv)
{
    static const struct option opts[] = {{"all", no_argument, NULL, 'a'},
                                         {"json", no_argument, NULL, 'j'},
                                         {NULL, 0, NULL, 0}};
    int c, json = 0, all = 0;
    optind = 1;
    while ((c = getopt_long(argc, argv, ":", opts, NULL)) != -1) {
        if (c == 'a')
            all = 1;
        else if (c == 'j')
            json = 1;
        else
            return cli_bad_option(cli, c, argv);
    }
    if (cli_positional(cli, argc, argv, 0, NULL, NULL) != 0)
        return CLI_USAGE;
    json_t *r = cli_call(cli, "key.list", all ? json_pack("{s:b}", "all", 1) : NULL);
    if (!r)
        return CLI_FAIL;
    static const char *head[] = {"ID", "NAME", "USER", "MODELS", "CREATED"};
    cli_print_list(json_object_get(r, "keys"), json, 5, head, key_row);
    json_decref(r);
    return CLI_OK;
}

static int key_revoke(cli_t *cli, int argc, char **argv)
{
    const char *key;
    static const char *names[] = {"key ID or NAME"};
    if (cli_args(cli, argc, argv, NULL, 1, names, &key) != 0)
        return CLI_USAGE;
    json_t *r = cli_call(cli, "key.revoke", json_pack("{s:s}", "key", key));
    if (!r)
        return CLI_FAIL;
    printf("revoked API key %s (%s); the gateways refuse it once they hear of it\n",
           json_string_value(json_object_get(r, "id")),
           json_string_value(json_object_get(r, "name")));
    json_decref(r);
    return CLI_OK;
}

const cli_cmd_t cli_key_cmds[] = {
    {"key", "create", key_create, "[--name N] [--models a,b] [--json]",
     "make an API key for the models behind the gateways",
     "Prints the key once, alone on the last line; the coordinator keeps only its\n"
     "hash. Clients send it as 'Authorization: Bearer KEY' (the openai clients'\n"
     "api_key, OPENAI_API_KEY). A key is its user's: their limits (user set --rpm)\n"
     "hold for it, and it goes when they are removed.\n"
     "\nOptions:\n"
     "  --name N       a name for it (lowercase letters, digits, '-'; default its id)\n"
     "  --models a,b   the model names it may be used for (default every one); a\n"
     "                 request for another gets 403\n"
     "  --json         print {key, id, name, user, models}\n"},
    {"key", "list", key_list, "[--all] [--json]", "list your API keys",
     "Never shows a key itself, only its id (the first 12 hex digits of its hash).\n"
     "\nOptions:\n"
     "  --all    every user's keys (admin)\n"
     "  --json   print the array: id, name, user, models, created\n"},
    {"key", "revoke", key_revoke, "ID|NAME",
     "revoke an API key: the gateways refuse it once they hear of it",
     "Takes one of your keys by id or name; the admin may revoke anyone's by id.\n"},
    {0},
};
