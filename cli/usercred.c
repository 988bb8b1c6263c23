/* usercred.c - a new user's key pair and credential, shared by user add, class
 * create and gateway add (usercred.h). */
#include <getopt.h>
#include <stdio.h>
#include <string.h>

#include "usercred.h"
#include "util.h"

int cli_usercred_endpoint_ok(const cli_t *cli, const char *endpoint)
{
    if (strncmp(endpoint, "tcp://", 6) != 0 || !strrchr(endpoint + 6, ':') ||
        strlen(endpoint) >= BR_ENDPOINT_MAX)
        return cli_usage(cli, "--endpoint '%s': expected tcp://HOST:PORT", endpoint);
    return 0;
}

int cli_usercred_new(const cli_t *cli, const char *name, br_cred_t *cred)
{
    br_err_t err;
    memset(cred, 0, sizeof(*cred));
    if (br_keypair(cred->public_key, cred->secret_key, &err) < 0) {
        cli_err(cli, "%s", err.text);
        return -1;
    }
    br_strlcpy(cred->name, name, sizeof(cred->name));
    return 0;
}

void cli_usercred_finish(const cli_t *cli, br_cred_t *cred, const char *endpoint,
                         const json_t *reply)
{
    const char *ep = json_string_value(json_object_get(reply, "endpoint"));
    if (!endpoint)
        endpoint = ep ? ep : cli->cred.endpoint;
    br_strlcpy(cred->endpoint, endpoint, sizeof(cred->endpoint));
    br_strlcpy(cred->server_public_key, cli->cred.server_public_key,
               sizeof(cred->server_public_key));
}

int cli_usercred_issue(cli_t *cli, const char *kind, const char *name, json_t *body,
                       const char *endpoint, const char *out, const char *suffix,
                       char *path)
{
    char type[32];
    br_cred_t cred;
    br_err_t err;
    if (!body || cli_usercred_new(cli, name, &cred) < 0) {
        json_decref(body);
        return CLI_FAIL;
    }
    json_object_set_new(body, "name", json_string(name));
    json_object_set_new(body, "public_key", json_string(cred.public_key));
    snprintf(type, sizeof(type), "%s.add", kind);
    json_t *r = cli_call(cli, type, body);
    if (!r)
        return CLI_FAIL;
    cli_usercred_finish(cli, &cred, endpoint, r);
    json_decref(r);
    if (out)
        snprintf(path, CLI_PATH_MAX, "%s", out);
    else
        snprintf(path, CLI_PATH_MAX, "%s.%s", name, suffix);
    int rc = br_cred_save(path, &cred, &err);
    explicit_bzero(&cred, sizeof(cred));
    if (rc < 0)
        return cli_fail(cli, "%s %s was added, but its credential could not be written: "
                             "%s (run 'bramble %s remove %s')",
                        kind, name, err.text, kind, name);
    return CLI_OK;
}

int cli_usercred_remove_args(cli_t *cli, int argc, char **argv, const char *what,
                             const char **name, const char **jobs)
{
    static const struct option opts[] = {{"jobs", required_argument, NULL, 'j'},
                                         {NULL, 0, NULL, 0}};
    const char *names[] = {what};
    int c;
    *jobs = "cancel";
    optind = 1;
    while ((c = getopt_long(argc, argv, ":", opts, NULL)) != -1) {
        if (c == 'j')
            *jobs = optarg;
        else
            return cli_bad_option(cli, c, argv);
    }
    if (strcmp(*jobs, "cancel") != 0 && strcmp(*jobs, "admin") != 0)
        return cli_usage(cli, "--jobs takes 'cancel' or 'admin', not '%s'", *jobs);
    return cli_positional(cli, argc, argv, 1, names, name) != 0 ? CLI_USAGE : 0;
}
