/* api.c - the coordinator's handler table: message type -> who may send it ->
 * handler. The caller is found from the connection's User-Id (the CURVE key ZAP
 * proved) for every message, so a key revoked mid-connection stops at once. */
#include "api.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

#define P_UNKNOWN (1 << BR_PRINCIPAL_UNKNOWN)
#define P_ADMIN (1 << BR_PRINCIPAL_ADMIN)
#define P_USER (1 << BR_PRINCIPAL_USER)
#define P_NODE (1 << BR_PRINCIPAL_NODE)
#define P_GATEWAY (1 << BR_PRINCIPAL_GATEWAY)
#define K_REQUEST (1 << BR_MSG_REQUEST)
#define K_EVENT (1 << BR_MSG_EVENT)

static const struct {
    const char *type;
    int kinds; /* K_REQUEST, K_EVENT: the kinds it is taken as */
    int who;
    br_handler_fn fn;
} handlers[] = {
    {"ping", K_REQUEST, P_ADMIN | P_USER | P_NODE | P_GATEWAY, br_api_ping},
    {"node.join", K_REQUEST, P_UNKNOWN, br_api_node_join},
    {"node.hello", K_REQUEST, P_NODE, br_api_node_hello},
    {"node.heartbeat", K_REQUEST, P_NODE, br_api_node_heartbeat},
    {"job.started", K_REQUEST, P_NODE, br_api_job_started},
    {"job.fetched", K_REQUEST, P_NODE, br_api_job_fetched},
    {"job.exited", K_REQUEST, P_NODE, br_api_job_exited},
    {"job.log", K_REQUEST | K_EVENT, /* an event from agents that predate its answer */
      P_NODE, br_api_job_log},
    {"job.checkpoint", K_REQUEST, P_NODE, br_api_job_checkpoint},
    {"ckpt.stored", K_REQUEST, P_NODE, br_api_ckpt_stored},
    {"token.create", K_REQUEST, P_ADMIN, br_api_token_create},
    {"token.list", K_REQUEST, P_ADMIN, br_api_token_list},
    {"token.revoke", K_REQUEST, P_ADMIN, br_api_token_revoke},
    {"node.list", K_REQUEST, P_ADMIN | P_USER, br_api_node_list},
    {"node.show", K_REQUEST, P_ADMIN | P_USER, br_api_node_show},
    {"node.drain", K_REQUEST, P_ADMIN, br_api_node_drain},
    {"node.undrain", K_REQUEST, P_ADMIN, br_api_node_undrain},
    {"node.remove", K_REQUEST, P_ADMIN, br_api_node_remove},
    {"node.probe", K_REQUEST, P_ADMIN | P_USER, br_api_node_probe},
    {"job.submit", K_REQUEST, P_ADMIN | P_USER, br_api_job_submit},
    {"job.list", K_REQUEST, P_ADMIN | P_USER, br_api_job_list},
    {"job.show", K_REQUEST, P_ADMIN | P_USER, br_api_job_show},
    {"job.queue", K_REQUEST, P_ADMIN | P_USER, br_api_job_queue},
    {"job.cancel", K_REQUEST, P_ADMIN | P_USER, br_api_job_cancel},
    {"job.purge", K_REQUEST, P_ADMIN | P_USER, br_api_job_purge},
    {"job.logs", K_REQUEST, P_ADMIN | P_USER, br_api_job_logs},
    {"event.list", K_REQUEST, P_ADMIN | P_USER, br_api_event_list},
    {"event.watch", K_REQUEST, P_ADMIN | P_USER, br_api_event_watch},
    {"user.add", K_REQUEST, P_ADMIN, br_api_user_add},
    {"user.list", K_REQUEST, P_ADMIN, br_api_user_list},
    {"user.remove", K_REQUEST, P_ADMIN, br_api_user_remove},
    {"audit.list", K_REQUEST, P_ADMIN, br_api_audit_list},
    {"user.rotate_key", K_REQUEST, P_ADMIN | P_USER, br_api_user_rotate_key},
    {"user.set", K_REQUEST, P_ADMIN, br_api_user_set},
    {"usage.show", K_REQUEST, P_ADMIN | P_USER, br_api_usage},
    {"node.rotate_key", K_REQUEST, P_ADMIN, br_api_node_rotate_key},
    {"node.env_rm", K_REQUEST, P_ADMIN, br_api_node_env_rm},
    {"node.key", K_REQUEST, P_NODE, br_api_node_key},
    {"service.endpoints", K_REQUEST, P_ADMIN | P_USER, br_api_service_endpoints},
    {"service.scale", K_REQUEST, P_ADMIN | P_USER, br_api_service_scale},
    {"service.list", K_REQUEST, P_ADMIN | P_USER, br_api_service_list},
    {"dashboard.login", K_REQUEST, P_ADMIN | P_USER, br_api_dashboard_login},
    {"checkpoint.open", K_REQUEST, P_ADMIN | P_USER, br_api_checkpoint_open},
    {"checkpoint.read", K_REQUEST, P_ADMIN | P_USER, br_api_checkpoint_read},
    {"checkpoint.close", K_REQUEST, P_ADMIN | P_USER, br_api_checkpoint_close},
    {"ckpt.read", K_REQUEST, P_NODE, br_api_content_read},
    {"content.lack", K_REQUEST, P_ADMIN | P_USER | P_NODE, br_api_content_lack},
    {"content.put", K_REQUEST, P_ADMIN | P_USER | P_NODE, br_api_content_put},
    {"code.stage", K_REQUEST, P_ADMIN | P_USER, br_api_code_stage},
    {"content.read", K_REQUEST, P_ADMIN | P_USER, br_api_content_read_user},
    {"job.outputs", K_REQUEST, P_NODE, br_api_job_outputs},
    {"data.push", K_REQUEST, P_ADMIN | P_USER, br_api_data_push},
    {"data.list", K_REQUEST, P_ADMIN | P_USER, br_api_data_list},
    {"data.show", K_REQUEST, P_ADMIN | P_USER, br_api_data_show},
    {"data.rm", K_REQUEST, P_ADMIN | P_USER, br_api_data_rm},
    {"image.load", K_REQUEST, P_ADMIN | P_USER, br_api_image_load},
    {"image.list", K_REQUEST, P_ADMIN | P_USER, br_api_image_list},
    {"image.rm", K_REQUEST, P_ADMIN | P_USER, br_api_image_rm},
    {"gateway.add", K_REQUEST, P_ADMIN, br_api_gateway_add},
    {"gateway.list", K_REQUEST, P_ADMIN, br_api_gateway_list},
    {"gateway.remove", K_REQUEST, P_ADMIN, br_api_gateway_remove},
    {"gateway.watch", K_REQUEST, P_GATEWAY, br_api_gateway_watch},
    {"gateway.report", K_REQUEST, P_GATEWAY, br_api_gateway_report},
    {"gateway.suspect", K_REQUEST, P_GATEWAY, br_api_gateway_suspect},
    {"gateway.load", K_REQUEST, P_GATEWAY, br_api_gateway_load},
    {"key.create", K_REQUEST, P_ADMIN | P_USER, br_api_key_create},
    {"key.list", K_REQUEST, P_ADMIN | P_USER, br_api_key_list},
    {"key.revoke", K_REQUEST, P_ADMIN | P_USER, br_api_key_revoke},
    {"stream.open", K_REQUEST, P_ADMIN | P_USER, br_api_stream_open},
};

static const char *principal_words(br_principal_t k)
{
    switch (k) {
    case BR_PRINCIPAL_UNKNOWN:
        return "this key is not known to the coordinator (join a node with a token, or "
               "use a credential the coordinator issued)";
    case BR_PRINCIPAL_REVOKED:
        return "this key has been revoked";
    case BR_PRINCIPAL_NODE:
        return "nodes may not send this";
    case BR_PRINCIPAL_GATEWAY:
        return "a gateway may only read the routing table and report what it saw";
    default:
        return "not allowed for this credential";
    }
}

/* What a message type asks for, in words, for denials. */
static const char *action_words(const char *type)
{
    static const struct {
        const char *type, *words;
    } actions[] = {
        {"token.", "managing join tokens"},   {"node.list", "listing nodes"},
        {"node.show", "showing a node"},      {"node.drain", "draining nodes"},
        {"node.undrain", "undraining nodes"}, {"node.remove", "removing nodes"},
        {"node.env_rm", "removing a node's environments"},
        {"node.probe", "reading the network map"},
        {"node.join", "joining a node"},      {"node.", "agent messages"},
        {"job.submit", "submitting jobs"},
        {"job.list", "listing jobs"},         {"job.show", "showing jobs"},
        {"job.cancel", "cancelling jobs"},    {"job.logs", "reading job logs"},
        {"job.purge", "purging jobs"},
        {"job.", "reports of a node's jobs"}, {"event.", "reading events"},
        {"user.", "managing users"},          {"service.", "managing services"},
        {"dashboard.", "logging in to the dashboard"},
        {"checkpoint.", "pulling checkpoints"},
        {"content.", "uploading files"},      {"data.", "managing data sets"},
        {"code.", "uploading files"},
        {"gateway.watch", "reading the gateways' routing table"},
        {"gateway.report", "reporting what a gateway answered"},
        {"gateway.suspect", "reporting a replica a gateway could not use"},
        {"gateway.load", "reporting a gateway's load"},
        {"gateway.", "managing gateways"},   {"key.", "managing API keys"},
        {"stream.", "opening shells and forwards"},
    };
    for (size_t i = 0; i < sizeof(actions) / sizeof(actions[0]); i++)
        if (strncmp(type, actions[i].type, strlen(actions[i].type)) == 0)
            return actions[i].words;
    return type;
}

/* Whose key a handler wants, in words. */
static const char *who_words(int who)
{
    if (who == P_ADMIN)
        return "the admin key";
    if (who == (P_ADMIN | P_USER))
        return "a user or admin key";
    if (who == P_NODE)
        return "a node's key";
    if (who == P_GATEWAY)
        return "a gateway's key";
    if (who == P_UNKNOWN)
        return "a join token from a new node";
    return "another kind of key";
}

void br_api_dispatch(br_coord_t *c, br_msg_t *m, br_caller_t *who)
{
    *who = (br_caller_t){BR_PRINCIPAL_UNKNOWN, "", 0};
    br_err_t err;
    if (br_msg_kind(m) == BR_MSG_RESPONSE)
        return; /* agents' receipts for job.run / job.kill: nothing to do */
    if (br_store_key_who(c->store, br_msg_user(m), &who->kind, who->name, sizeof(who->name),
                         &who->id, &err) < 0) {
        br_reply_fail(c, m, &err);
        return;
    }
    for (size_t i = 0; i < sizeof(handlers) / sizeof(handlers[0]); i++) {
        if (strcmp(handlers[i].type, br_msg_type(m)) != 0)
            continue;
        if (!(handlers[i].kinds & (1 << br_msg_kind(m)))) {
            br_errf(&err, EPROTO, "%s: wrong message kind", br_msg_type(m));
            br_reply_fail(c, m, &err);
        } else if (!(handlers[i].who & (1 << who->kind))) {
            if (who->kind == BR_PRINCIPAL_UNKNOWN || who->kind == BR_PRINCIPAL_REVOKED ||
                who->kind == BR_PRINCIPAL_GATEWAY)
                br_errf(&err, EACCES, "not allowed: %s: %s", action_words(br_msg_type(m)),
                        principal_words(who->kind));
            else
                br_errf(&err, EACCES, "not allowed: %s needs %s",
                        action_words(br_msg_type(m)), who_words(handlers[i].who));
            br_reply_fail(c, m, &err);
        } else {
            handlers[i].fn(c, m, who);
        }
        return;
    }
    br_errf(&err, EPROTO, "unknown message type '%s'", br_msg_type(m));
    br_reply_fail(c, m, &err);
}

const char *br_api_type(size_t i)
{
    return i < sizeof(handlers) / sizeof(handlers[0]) ? handlers[i].type : NULL;
}
