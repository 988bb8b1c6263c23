/* api_stream.c - stream.open: a shell in a running job, or a connection to a port
 * on its node (docs/shell.md). The loop checks who may and where the job runs,
 * grants the stream at the relay (net/relay.h), orders the node's agent to dial
 * in, and answers the CLI with its ticket; each end gets the key that seals its
 * frames (proto/streamseal.h) from here, over its own CURVE connection, and the
 * relay never does; the bytes never pass through here. */
#include "api.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sodium.h>

#include "devenv.h"
#include "jobtab.h"
#include "relay.h"
#include "streamseal.h"
#include "util.h"

#define COMMAND_ARGS_MAX 256
#define COMMAND_BYTES_MAX (64 * 1024)
#define TERM_MAX 64

typedef struct {
    json_int_t id, rank, port, rows, cols;
    const char *kind, *term;
    json_t *command;
    int tty;
} open_req_t;

/* The command's words: 0, or -1 with err. The audit row gets them joined in text. */
static int command_ok(json_t *command, char *text, size_t len, br_err_t *err)
{
    text[0] = '\0';
    if (!command)
        return 0;
    if (!json_is_array(command) || json_array_size(command) == 0 ||
        json_array_size(command) > COMMAND_ARGS_MAX)
        return br_errf(err, EINVAL, "command: a list of 1 to %d words", COMMAND_ARGS_MAX);
    size_t i, bytes = 0, at = 0;
    json_t *w;
    json_array_foreach(command, i, w) {
        if (!json_is_string(w))
            return br_errf(err, EINVAL, "command: word %zu is not a string", i + 1);
        bytes += json_string_length(w) + 1;
        if (strlen(json_string_value(w)) != json_string_length(w))
            return br_errf(err, EINVAL, "command: word %zu holds a NUL byte", i + 1);
        if (at + 1 < len)
            at += (size_t)snprintf(text + at, len - at, "%s%s", i ? " " : "",
                                   json_string_value(w));
        if (at >= len)
            at = len - 1;
    }
    if (bytes > COMMAND_BYTES_MAX)
        return br_errf(err, EINVAL, "command: %zu bytes, more than %d", bytes,
                       COMMAND_BYTES_MAX);
    return 0;
}

static int term_ok(const char *term)
{
    size_t n = strlen(term);
    if (n == 0 || n > TERM_MAX)
        return 0;
    for (size_t i = 0; i < n; i++)
        if (!strchr("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._+-",
                    term[i]))
            return 0;
    return 1;
}

static int parse(br_msg_t *m, open_req_t *q, char *cmd, size_t cmdlen, br_err_t *err)
{
    memset(q, 0, sizeof(*q));
    q->port = -1;
    q->rows = 24;
    q->cols = 80;
    q->term = "xterm";
    if (br_msg_unpack(m, err, "{s:I, s:s, s?I, s?o, s?b, s?I, s?I, s?s, s?I}", "id", &q->id,
                      "kind", &q->kind, "rank", &q->rank, "command", &q->command, "tty",
                      &q->tty, "rows", &q->rows, "cols", &q->cols, "term", &q->term, "port",
                      &q->port) < 0)
        return -1;
    int shell = strcmp(q->kind, "shell") == 0, fwd = strcmp(q->kind, "forward") == 0;
    if (!shell && !fwd)
        return br_errf(err, EINVAL, "kind: \"shell\" or \"forward\", not \"%s\"", q->kind);
    if (q->rank < 0)
        return br_errf(err, EINVAL, "rank: a job's ranks count from 0");
    if (fwd && (q->port < 1 || q->port > 65535))
        return br_errf(err, EINVAL, "port: a TCP port from 1 to 65535");
    if (shell && q->port != -1)
        return br_errf(err, EINVAL, "port: only a forward has one");
    if (q->rows < 1 || q->rows > 65535 || q->cols < 1 || q->cols > 65535)
        return br_errf(err, EINVAL, "rows and cols: 1 to 65535");
    if (!term_ok(q->term))
        return br_errf(err, EINVAL, "term: 1 to %d letters, digits or ._+-", TERM_MAX);
    if (fwd && q->command)
        return br_errf(err, EINVAL, "command: only a shell runs one");
    return command_ok(q->command, cmd, cmdlen, err);
}

/* The running job's rank, on a connected node: the node, or NULL with err. */
static br_node_t *where(br_coord_t *c, const br_caller_t *who, const open_req_t *q,
                        br_job_t **jp, br_err_t *err)
{
    json_t *row = br_store_job_get(c->store, q->id, NULL);
    int visible = row && br_coord_may_see(who, row);
    json_t *st = json_object_get(row, "state");
    char state[32];
    br_strlcpy(state, json_is_string(st) ? json_string_value(st) : "", sizeof(state));
    json_decref(row);
    if (!visible)
        return br_errp(err, ENOENT, "no job %lld", (long long)q->id);
    br_job_t *j = br_jobtab_find(c->jobs, q->id);
    if (!j || j->state != BR_JOB_RUNNING)
        return br_errp(err, EINVAL, "job %lld is %s: a %s needs a running job",
                       (long long)q->id, j ? br_job_state_name(j->state) : state, q->kind);
    if (j->replicas >= 0)
        return br_errp(err, EINVAL,
                       "job %lld is a service, which runs no process of its own: name one "
                       "of its replicas (bramble endpoints %lld lists them)",
                       (long long)q->id, (long long)q->id);
    if (q->rank >= j->nranks && j->nranks == 1)
        return br_errp(err, ENOENT, "job %lld has one rank, 0; there is no rank %lld",
                       (long long)q->id, (long long)q->rank);
    if (q->rank >= j->nranks)
        return br_errp(err, ENOENT, "job %lld has ranks 0 to %d; there is no rank %lld",
                       (long long)q->id, j->nranks - 1, (long long)q->rank);
    br_rank_t *rk = &j->ranks[q->rank];
    br_node_t *n = br_nodes_find(c->nodes, rk->node);
    if (rk->state != BR_RANK_STARTED)
        return br_errp(err, EAGAIN, "rank %lld of job %lld has not started on %s yet",
                       (long long)q->rank, (long long)q->id, rk->node);
    if (!n || !n->route_len || n->state == BR_NODE_LOST)
        return br_errp(err, EHOSTUNREACH, "node %s, which runs rank %lld of job %lld, is "
                                         "not connected now",
                       rk->node, (long long)q->rank, (long long)q->id);
    if (json_integer_value(json_object_get(n->info, "streams")) < BR_STREAM_VERSION)
        return br_errp(err, EPROTONOSUPPORT,
                       "node %s runs a bramble-agent older than this coordinator, which "
                       "cannot seal shells and forwards (stream frames version %d): "
                       "upgrade bramble-agent there",
                       rk->node, BR_STREAM_VERSION);
    *jp = j;
    return n;
}

void br_api_stream_open(br_coord_t *c, br_msg_t *m, const br_caller_t *who)
{
    open_req_t q;
    char cmd[512];
    br_err_t err;
    br_job_t *j = NULL;
    br_node_t *n = NULL;
    if (parse(m, &q, cmd, sizeof(cmd), &err) < 0 || !(n = where(c, who, &q, &j, &err))) {
        br_reply_fail(c, m, &err);
        return;
    }
    if (!c->relay) {
        br_errf(&err, ENOTSUP, "this coordinator relays no streams");
        br_reply_fail(c, m, &err);
        return;
    }
    br_relay_grant_t g = {.user_id = who->id, .job = q.id};
    br_strlcpy(g.cli_key, br_msg_user(m), sizeof(g.cli_key));
    br_strlcpy(g.node_key, n->pubkey, sizeof(g.node_key));
    if (br_relay_open(c->relay, &g, &err) < 0) {
        br_reply_fail(c, m, &err);
        return;
    }
    int shell = strcmp(q.kind, "shell") == 0;
    char key[BR_STREAM_KEY_HEX + 1]; /* both ends', and not the relay's */
    br_streamseal_key(key);
    json_t *order = json_pack("{s:I, s:s, s:s, s:i, s:I, s:i, s:I, s:s}", "stream",
                              (json_int_t)g.id, "ticket", g.node_ticket, "key", key,
                              "relay_port", br_relay_port(c->relay), "job",
                              (json_int_t)j->id, "attempt", j->attempt, "rank", q.rank,
                              "kind", q.kind);
    if (shell) {
        json_object_set_new(order, "tty", json_boolean(q.tty));
        json_object_set_new(order, "rows", json_integer(q.rows));
        json_object_set_new(order, "cols", json_integer(q.cols));
        json_object_set_new(order, "term", json_string(q.term));
        if (q.command)
            json_object_set(order, "command", q.command);
    } else {
        json_object_set_new(order, "port", json_integer(q.port));
    }
    br_coord_send_node(c, n, "stream.open", order);
    br_devenv_touch(c, j->id);
    char target[96], what[600];
    snprintf(target, sizeof(target), "job %lld rank %lld", (long long)q.id,
             (long long)q.rank);
    if (shell)
        snprintf(what, sizeof(what), "%s%s", q.command ? "command: " : "interactive shell",
                 cmd);
    else
        snprintf(what, sizeof(what), "port %lld", (long long)q.port);
    if (br_store_audit_add(c->store, br_now_ms(), who->id, who->name, shell ? "shell" : "forward",
                           target, what, &err) < 0)
        fprintf(stderr, "brambled: audit: %s\n", err.text);
    br_reply_ok(c, m, json_pack("{s:I, s:s, s:s, s:i, s:s, s:I}", "stream", (json_int_t)g.id,
                                "ticket", g.cli_ticket, "key", key, "relay_port",
                                br_relay_port(c->relay), "node", n->name, "rank", q.rank));
    sodium_memzero(key, sizeof(key));
}
