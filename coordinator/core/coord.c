/* coord.c - what every module of the coordinator uses of the core, below them all:
 * queueing messages and replies (outbox.h), events, news for watchers, asking for
 * a scheduling pass, saving a node, and who may see a job. */
#include "coord.h"

#include <stdarg.h>
#include <stdio.h>

#include "hooks.h"
#include "jobtab.h"
#include "outbox.h"
#include "util.h"
#include "watchers.h"

void br_coord_post(br_coord_t *c, br_msg_t *m)
{
    br_outbox_post(c->out, m);
}

void br_reply_ok(br_coord_t *c, br_msg_t *m, json_t *body)
{
    br_outbox_ok(c->out, m, body);
}

void br_reply_fail(br_coord_t *c, br_msg_t *m, const br_err_t *err)
{
    br_outbox_fail(c->out, m, err);
}

void br_coord_send_node(br_coord_t *c, br_node_t *n, const char *type, json_t *body)
{
    if (!n->route_len) {
        json_decref(body);
        return;
    }
    br_outbox_order(c->out, n->route, n->route_len, type, body);
}

void br_coord_event(br_coord_t *c, int64_t job, const char *node, const char *state,
                    const char *fmt, ...)
{
    char reason[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(reason, sizeof(reason), fmt, ap);
    va_end(ap);
    br_err_t err;
    if (br_store_event_add(c->store, br_now_ms(), job, node, state, reason, &err) < 0)
        fprintf(stderr, "brambled: event not stored: %s\n", err.text);
    else if (c->watchers && br_watchers_count(c->watchers))
        br_coord_news(c, job, 0);
    /* logged once the wake is on disk: the log never claims what was not stored */
    char line[768];
    if (job)
        snprintf(line, sizeof(line), "brambled: job %lld %s%s%s: %s\n", (long long)job, state,
                 node ? " on " : "", node ? node : "", reason);
    else
        snprintf(line, sizeof(line), "brambled: node %s %s: %s\n", node ? node : "-", state,
                 reason);
    br_outbox_log(c->out, line);
}

void br_coord_news(br_coord_t *c, int64_t job, int is_log)
{
    int64_t owner = -1;
    if (job > 0 && br_watchers_need_owner(c->watchers)) {
        br_job_t *j = br_jobtab_find(c->jobs, job);
        if (j) {
            owner = j->owner_id > 0 ? j->owner_id : -1;
        } else { /* ended: only in the store */
            json_t *row = br_store_job_get(c->store, job, NULL);
            json_t *o = json_object_get(row, "owner_id");
            owner = json_is_integer(o) ? json_integer_value(o) : -1;
            json_decref(row);
        }
    }
    br_watchers_note(c->watchers, job, owner, is_log);
}

void br_coord_changed(br_coord_t *c)
{
    br_hooks_run(c, c->hooks, BR_HOOK_CHANGED, NULL);
}

void br_coord_save_node(br_coord_t *c, br_node_t *n)
{
    br_err_t err;
    json_object_set_new(n->info, "last_seen", json_integer(n->last_seen_ms));
    if (br_store_node_save(c->store, n->info, &err) < 0)
        fprintf(stderr, "brambled: node %s not saved: %s\n", n->name, err.text);
}

json_t *br_time_json(json_t *ms)
{
    if (!json_is_integer(ms) || json_integer_value(ms) == 0)
        return json_null();
    return json_real((double)json_integer_value(ms) / 1000.0);
}

int br_coord_may_see(const br_caller_t *who, const json_t *job)
{
    json_t *owner = json_object_get(job, "owner_id");
    return who->kind == BR_PRINCIPAL_ADMIN ||
           (json_is_integer(owner) && json_integer_value(owner) == who->id);
}
