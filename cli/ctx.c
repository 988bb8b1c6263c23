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

int cli_send(cli_t *cli, const char *type, json_t *body, uint32_t *seq)
{
    br_err_t err = {0};
    if (!cli_client(cli)) {
        json_decref(body);
        return -1;
    }
    if (br_client_send(cli->client, type, body, seq, &err) < 0) {
        cli_err(cli, "%s", err.text);
        return -1;
    }
    return 0;
}

json_t *cli_recv(cli_t *cli, uint32_t seq)
{
    br_err_t err = {0};
    br_msg_t *m = NULL;
    if (br_client_recv(cli->client, seq, cli->timeout_ms, &m, &err) < 0) {
        cli_err(cli, "%s", err.text);
        return NULL;
    }
    json_t *b = json_incref(br_msg_body(m));
    br_msg_destroy(&m);
    return b;
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

/* Take the answer to the event.watch in flight: watching, no news to be had (an
 * older coordinator: poll), or no answer (ask again). */
static void watch_answered(cli_t *cli, cli_watch_t *w)
{
    br_err_t err = {0};
    int rc = br_client_recv(cli->client, w->asked, cli->timeout_ms, NULL, &err);
    w->asked = 0;
    /* refused as unknown: a coordinator without news, so poll; no answer: the
     * loop's own request rides out the outage, and the watch is asked again */
    w->state = rc == 0 ? 1 : err.errnum == EPROTO || err.errnum == EPERM ? -1 : 0;
}

int cli_watch_wait(cli_t *cli, cli_watch_t *w, int64_t max_ms)
{
    if (w->asked)
        watch_answered(cli, w);
    int64_t now = br_mono_ms();
    if (w->state == 0 || (w->state == 1 && now - w->renewed >= CLI_WATCH_RENEW_MS)) {
        /* asked, not waited for: the loop's own request goes out behind it, the
         * coordinator takes both in order, and the next call takes this answer */
        br_err_t err = {0};
        json_t *body = json_pack("{s:I}", "job", (json_int_t)w->job);
        if (w->logs)
            json_object_set_new(body, "logs", json_true());
        int rc = cli_client(cli) ? br_client_send(cli->client, "event.watch", body,
                                                  &w->asked, &err)
                                 : (json_decref(body), -1);
        w->renewed = now;
        if (rc < 0) {
            w->asked = 0;
            w->state = 0;
        }
        return 1; /* the loop asks again now: what happened before the watch counts */
    }
    int64_t wait = CLI_WATCH_RENEW_MS - (now - w->renewed);
    if (max_ms >= 0 && max_ms < wait)
        wait = max_ms;
    if (wait < 1)
        wait = 1;
    if (w->state < 0) {
        cli_sleep_ms((int)(wait < w->poll_ms ? wait : w->poll_ms));
        return 1;
    }
    br_err_t err;
    int got = br_client_wait_news(cli->client, (int)wait, &err);
    if (got < 0)
        cli_sleep_ms((int)(wait < 200 ? wait : 200));
    return got != 0;
}
