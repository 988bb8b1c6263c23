/* ctx.c - the CLI's context: loads the credential and makes the client on first
 * use, and wraps requests so every failure is printed one way. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "util.h"

static br_client_t *make_client(cli_t *cli)
{
    br_err_t err = {0};
    if (br_client_check_host(cli->cred.endpoint, &err) < 0) {
        cli_err(cli, "%s", err.text);
        return NULL;
    }
    cli->client = br_client_new_cred(&cli->cred, &err);
    if (!cli->client)
        cli_err(cli, "cannot connect to %s: %s", cli->cred.endpoint, err.text);
    return cli->client;
}

br_client_t *cli_client(cli_t *cli)
{
    if (cli->client)
        return cli->client;
    if (!cli->have_cred) {
        char path[CLI_PATH_MAX];
        br_err_t err = {0};
        br_cred_path(cli->cred_flag, path, sizeof(path));
        if (br_cred_load(path, &cli->cred, &err) < 0) {
            const char *env = getenv("BRAMBLE_CREDENTIAL");
            if (err.errnum == ENOENT && !cli->cred_flag && !(env && *env))
                cli_err(cli,
                        "%s (start a local cluster with 'bramble up', or give "
                        "--credential FILE)",
                        err.text);
            else
                cli_err(cli, "%s", err.text);
            return NULL;
        }
        cli->have_cred = 1;
    }
    return make_client(cli);
}

br_client_t *cli_client_with(cli_t *cli, const br_cred_t *cred)
{
    br_client_destroy(&cli->client);
    cli->cred = *cred;
    cli->have_cred = 1;
    return make_client(cli);
}

void cli_close(cli_t *cli)
{
    br_client_destroy(&cli->client);
    explicit_bzero(cli->cred.secret_key, sizeof(cli->cred.secret_key));
    cli->have_cred = 0;
}

json_t *cli_call(cli_t *cli, const char *type, json_t *body)
{
    br_err_t err = {0};
    if (!cli_client(cli)) {
        json_decref(body);
        return NULL;
    }
    json_t *r = br_client_call(cli->client, type, body, cli->timeout_ms, &err);
    if (!r)
        cli_err(cli, "%s", err.text);
    return r;
}

int cli_rpc(cli_t *cli, const char *type, json_t *body, br_msg_t **resp)
{
    br_err_t err = {0};
    if (!cli_client(cli)) {
        json_decref(body);
        return -1;
    }
    if (br_client_rpc(cli->client, type, body, cli->timeout_ms, resp, &err) < 0) {
        cli_err(cli, "%s", err.text);
        return -1;
    }
    return 0;
}

int cli_rpc_poll(cli_t *cli, const char *type, json_t *body, br_msg_t **resp,
                 int64_t *silent_since)
{
    br_err_t err = {0};
    if (!cli_client(cli)) {
        json_decref(body);
        return -1;
    }
    if (br_client_rpc(cli->client, type, body, cli->timeout_ms, resp, &err) == 0) {
        if (*silent_since)
            cli_err(cli, "the coordinator answers again");
        *silent_since = 0;
        return 0;
    }
    if (err.errnum != ETIMEDOUT) {
        cli_err(cli, "%s", err.text);
        return -1;
    }
    if (!*silent_since) {
        *silent_since = br_mono_ms();
        cli_err(cli, "%s; still trying", err.text);
        return 1;
    }
    if (br_mono_ms() - *silent_since > CLI_OUTAGE_MS) {
        cli_err(cli, "gave up: the coordinator has not answered for %ds",
                CLI_OUTAGE_MS / 1000);
        return -1;
    }
    return 1;
}
