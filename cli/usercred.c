/* usercred.c - a new user's key pair and credential, shared by user add and class
 * create (usercred.h). */
#include <getopt.h>
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
