/* audit.c - the audit log of admin actions (see audit.h). */
#include "audit.h"

#include <stdio.h>
#include <string.h>

#include "util.h"
#include "outbox.h"

/* The requests that change something: everything else the admin sends only reads. */
static const char *const actions[] = {
    "token.create", "token.revoke", "node.drain",    "node.undrain",  "node.remove",
    "user.add",     "user.remove",  "job.submit",    "job.cancel",    "service.scale",
    "user.rotate_key", "user.set", "node.rotate_key", "job.purge", "data.push",
    "data.rm",      "gateway.add",  "gateway.remove", "key.create", "key.revoke",
    "image.load",   "image.rm",     NULL,
};

static int audited(const char *type)
{
    for (int i = 0; actions[i]; i++)
        if (strcmp(actions[i], type) == 0)
            return 1;
    return 0;
}

/* What the action was done to: the name or id in its body, or the new job's id. */
static void target_of(const br_msg_t *req, const br_msg_t *resp, char *buf, size_t len)
{
    json_t *b = br_msg_body(req);
    json_t *name = json_object_get(b, "name"), *id = json_object_get(b, "id");
    json_t *index = json_object_get(b, "index"); /* a task of a job array */
    json_t *key = json_object_get(b, "key");     /* an API key, by id or name */
    json_t *rid = resp ? json_object_get(br_msg_body(resp), "id") : NULL;
    buf[0] = '\0';
    if (json_is_string(name))
        snprintf(buf, len, "%s", json_string_value(name));
    else if (json_is_string(key))
        snprintf(buf, len, "key %s", json_string_value(key));
    else if (json_is_integer(id) && json_is_integer(index))
        snprintf(buf, len, "job %lld[%lld]", (long long)json_integer_value(id),
                 (long long)json_integer_value(index));
    else if (json_is_integer(id))
        snprintf(buf, len, "job %lld", (long long)json_integer_value(id));
    else if (json_is_string(id))
        snprintf(buf, len, "token %s", json_string_value(id));
    else if (json_is_integer(rid))
        snprintf(buf, len, "job %lld", (long long)json_integer_value(rid));
    else if (json_is_string(rid))
        snprintf(buf, len, "token %s", json_string_value(rid));
}

void br_audit_note(br_coord_t *c, const br_msg_t *req, const br_caller_t *who, size_t from)
{
    if (br_msg_kind(req) != BR_MSG_REQUEST || !audited(br_msg_type(req)) ||
        who->kind != BR_PRINCIPAL_ADMIN) /* (known at dispatch: not looked up again) */
        return;
    char target[160], result[200];
    br_err_t err;
    const br_msg_t *resp = NULL;
    for (size_t i = from; i < br_outbox_count(c->out) && !resp; i++) {
        const br_msg_t *m = br_outbox_msg(c->out, i);
        if (br_msg_kind(m) == BR_MSG_RESPONSE && br_msg_seq(m) == br_msg_seq(req) &&
            strcmp(br_msg_type(m), br_msg_type(req)) == 0)
            resp = m;
    }
    if (!resp)
        snprintf(result, sizeof(result), "no answer");
    else if (br_msg_check(resp, &err) < 0)
        snprintf(result, sizeof(result), "refused: %s", err.text);
    else
        snprintf(result, sizeof(result), "done");
    target_of(req, resp, target, sizeof(target));
    if (br_store_audit_add(c->store, br_now_ms(), who->id, who->name, br_msg_type(req),
                           target[0] ? target : NULL, result, &err) < 0)
        fprintf(stderr, "brambled: audit: %s\n", err.text);
}
