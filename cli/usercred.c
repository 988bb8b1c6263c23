/* usercred.c - a new user's key pair and credential, shared by user add and class
 * create (usercred.h). */
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
