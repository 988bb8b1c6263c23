/* cmd_user.c - bramble user add|list|remove: credentials for people who submit jobs.
 * The key pair is made here and only its public half is sent, so a user's secret
 * key never crosses the wire. */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "util.h"

static int user_add(cli_t *cli, int argc, char **argv)
{
    static const struct option opts[] = {{"out", required_argument, NULL, 'o'},
                                         {"endpoint", required_argument, NULL, 'e'},
                                         {"unix-user", required_argument, NULL, 'u'},
                                         {NULL, 0, NULL, 0}};
    static const char *names[] = {"user NAME"};
    const char *out = NULL, *name, *endpoint = NULL, *unix_user = NULL;
    int c;
    optind = 1;
    while ((c = getopt_long(argc, argv, ":", opts, NULL)) != -1) {
        if (c == 'o')
            out = optarg;
        else if (c == 'e')
            endpoint = optarg;
        else if (c == 'u')
            unix_user = optarg;
        else
            return cli_bad_option(cli, c, argv);
    }
    if (cli_positional(cli, argc, argv, 1, names, &name) != 0)
        return CLI_USAGE;
    if (endpoint && (strncmp(endpoint, "tcp://", 6) != 0 || !strrchr(endpoint + 6, ':') ||
                     strlen(endpoint) >= BR_ENDPOINT_MAX))
        return cli_usage(cli, "--endpoint '%s': expected tcp://HOST:PORT", endpoint);
    if (!br_valid_name(name))
        return cli_usage(cli, "user name '%s': use lowercase letters, digits and '-'",
                         name);
    if (!cli_client(cli))
        return CLI_FAIL;
    br_cred_t user = {0};
    br_err_t err;
    if (br_keypair(user.public_key, user.secret_key, &err) < 0)
        return cli_fail(cli, "%s", err.text);
    json_t *body = json_pack("{s:s, s:s}", "name", name, "public_key", user.public_key);
    if (unix_user)
        json_object_set_new(body, "unix_user", json_string(unix_user));
    json_t *r = cli_call(cli, "user.add", body);
    if (!r)
        return CLI_FAIL;
    br_strlcpy(user.name, name, sizeof(user.name));
    const char *ep = json_string_value(json_object_get(r, "endpoint"));
    br_strlcpy(user.endpoint, endpoint ? endpoint : ep ? ep : cli->cred.endpoint,
               sizeof(user.endpoint));
    br_strlcpy(user.server_public_key, cli->cred.server_public_key,
               sizeof(user.server_public_key));
    json_decref(r);
    char path[CLI_PATH_MAX];
    snprintf(path, sizeof(path), "%s", out ? out : "");
    if (!out)
        snprintf(path, sizeof(path), "%s.credential", name);
    if (br_cred_save(path, &user, &err) < 0)
        return cli_fail(cli, "user %s was added, but its credential could not be "
                             "written: %s (run 'bramble user remove %s')",
                        name, err.text, name);
    printf("added user %s; credential: %s (mode 0600; give it to %s, who runs "
           "bramble --credential %s ...)\n",
           name, path, name, path);
    return CLI_OK;
}

static void user_row(cli_table_t *t, const json_t *u)
{
    char a[64], b[64], cr[64];
    const char *row[] = {cli_fmt_value(json_object_get(u, "name"), a, sizeof(a)),
                         cli_fmt_value(json_object_get(u, "kind"), b, sizeof(b)),
                         cli_fmt_time(json_object_get(u, "created"), cr, sizeof(cr))};
    cli_table_add(t, row);
}

static int user_list(cli_t *cli, int argc, char **argv)
{
    int json = 0;
    if (cli_args(cli, argc, argv, &json, 0, NULL, NULL) != 0)
        return CLI_USAGE;
    json_t *r = cli_call(cli, "user.list", NULL);
    if (!r)
        return CLI_FAIL;
    static const char *head[] = {"NAME", "KIND", "CREATED"};
    cli_print_list(json_object_get(r, "users"), json, 3, head, user_row);
    json_decref(r);
    return CLI_OK;
}

/* bramble user set NAME --unix-user U | --no-unix-user */
static int user_set(cli_t *cli, int argc, char **argv)
{
    static const struct option opts[] = {{"unix-user", required_argument, NULL, 'u'},
                                         {"no-unix-user", no_argument, NULL, 'n'},
                                         {NULL, 0, NULL, 0}};
    static const char *names[] = {"user NAME"};
    const char *name, *unix_user = NULL;
    int c, none = 0;
    optind = 1;
    while ((c = getopt_long(argc, argv, ":", opts, NULL)) != -1) {
        if (c == 'u')
            unix_user = optarg;
        else if (c == 'n')
            none = 1;
        else
            return cli_bad_option(cli, c, argv);
    }
    if (cli_positional(cli, argc, argv, 1, names, &name) != 0)
        return CLI_USAGE;
    if (!unix_user == !none)
        return cli_usage(cli, "give --unix-user U or --no-unix-user");
    json_t *r = cli_call(cli, "user.set",
                         json_pack("{s:s, s:o}", "name", name, "unix_user",
                                   unix_user ? json_string(unix_user) : json_null()));
    if (!r)
        return CLI_FAIL;
    json_decref(r);
    if (unix_user)
        printf("user %s: jobs run as local account %s on nodes that have it\n", name,
               unix_user);
    else
        printf("user %s: jobs run as the node's uid for the user (--job-uids)\n", name);
    return CLI_OK;
}

static int user_remove(cli_t *cli, int argc, char **argv)
{
    static const struct option opts[] = {{"jobs", required_argument, NULL, 'j'},
                                         {NULL, 0, NULL, 0}};
    static const char *names[] = {"user NAME"};
    const char *name, *jobs = "cancel";
    int c;
    optind = 1;
    while ((c = getopt_long(argc, argv, ":", opts, NULL)) != -1) {
        if (c == 'j')
            jobs = optarg;
        else
            return cli_bad_option(cli, c, argv);
    }
    if (strcmp(jobs, "cancel") != 0 && strcmp(jobs, "admin") != 0)
        return cli_usage(cli, "--jobs takes 'cancel' or 'admin', not '%s'", jobs);
    if (cli_positional(cli, argc, argv, 1, names, &name) != 0)
        return CLI_USAGE;
    json_t *r = cli_call(cli, "user.remove",
                         json_pack("{s:s, s:s}", "name", name, "jobs", jobs));
    if (!r)
        return CLI_FAIL;
    printf("removed user %s; its key is revoked; %lld active job(s) %s\n", name,
           (long long)json_integer_value(json_object_get(r, "jobs")),
           json_string_value(json_object_get(r, "jobs_were")));
    json_decref(r);
    return CLI_OK;
}

/* Replace the caller's own key pair. The new credential is written next to the old
 * one first (FILE.new), so that an answer lost on the way leaves a usable key. */
static int user_rotate_key(cli_t *cli, int argc, char **argv)
{
    if (cli_args(cli, argc, argv, NULL, 0, NULL, NULL) != 0)
        return CLI_USAGE;
    if (!cli_client(cli))
        return CLI_FAIL;
    char path[CLI_PATH_MAX], next[CLI_PATH_MAX + 8];
    br_cred_path(cli->cred_flag, path, sizeof(path));
    snprintf(next, sizeof(next), "%s.new", path);
    br_cred_t fresh = cli->cred;
    br_err_t err;
    if (br_keypair(fresh.public_key, fresh.secret_key, &err) < 0 ||
        br_cred_save(next, &fresh, &err) < 0)
        return cli_fail(cli, "%s", err.text);
    json_t *r = cli_call(cli, "user.rotate_key",
                         json_pack("{s:s}", "public_key", fresh.public_key));
    if (!r) {
        unlink(next); /* refused: the old key still holds */
        return CLI_FAIL;
    }
    json_decref(r);
    if (rename(next, path) < 0)
        return cli_fail(cli, "the key was rotated, but %s could not replace %s: %s; use "
                             "%s from now on",
                        next, path, strerror(errno), next);
    printf("rotated the key of %s; %s holds the new one, and the old key is refused\n",
           cli->cred.name, path);
    return CLI_OK;
}

const cli_cmd_t cli_user_cmds[] = {
    {"user", "add", user_add,
     "NAME [--out FILE] [--endpoint tcp://HOST:PORT] [--unix-user U]",
     "issue a credential for a user who submits jobs (admin)",
     "Makes a key pair here, registers its public key, and writes the credential\n"
     "(mode 0600) to FILE, by default ./NAME.credential. Users see and cancel their\n"
     "own jobs only.\n"
     "\nOptions:\n"
     "  --out FILE        where to write the credential\n"
     "  --endpoint EP     the coordinator's address written into the credential\n"
     "                    (tcp://HOST:PORT; default: the one the coordinator\n"
     "                    advertises), for users who reach it another way\n"
     "  --unix-user U     run the user's jobs as local account U on nodes that\n"
     "                    have it (else as the node's uid for the user)\n"},
    {"user", "set", user_set, "NAME --unix-user U | --no-unix-user",
     "change how a user's jobs run on the nodes (admin)",
     "--unix-user U runs the user's jobs as local account U on every node that has\n"
     "it; --no-unix-user goes back to the node's uid for the user (--job-uids).\n"
     "Jobs started from then on follow it.\n"},
    {"user", "list", user_list, "[--json]", "list the admin and the users (admin)",
     "Options:\n"
     "  --json   print the array of users: name, kind, created\n"},
    {"user", "rotate-key", user_rotate_key, "",
     "replace your own key pair; the old key is refused at once",
     "Makes a new key pair here, registers its public key for the same user (the\n"
     "same id and jobs) and revokes the key this command ran with. The credential\n"
     "file is rewritten in place; should the answer be lost, FILE.new holds the new\n"
     "credential. Works for the admin's credential too.\n"},
    {"user", "remove", user_remove, "NAME [--jobs cancel|admin]",
     "remove a user and revoke its key at once (admin)",
     "The user's pending and running jobs are cancelled (--jobs cancel, the\n"
     "default) or handed to the admin (--jobs admin). A user added later under the\n"
     "same name is someone else: it sees nothing of the removed user's jobs.\n"
     "\nOptions:\n"
     "  --jobs cancel|admin   what happens to the user's active jobs\n"},
    {0},
};
