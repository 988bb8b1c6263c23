/* nodelife.c - a node's life: heard from, hello, drain, unhealthy, removal, lost,
 * each change through br_node_post. */
#include "nodelife.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "jobs.h"
#include "util.h"
#include "netmap.h"
#include "overlaynet.h"
#include "probeset.h"

br_node_t *br_nodelife_seen(br_coord_t *c, const char *name, const void *route, size_t len)
{
    br_node_t *n = br_nodes_find(c->nodes, name);
    if (!n || len > sizeof(n->route))
        return NULL;
    n->new_route = len != n->route_len || memcmp(route, n->route, len) != 0;
    memcpy(n->route, route, len);
    n->route_len = len;
    br_nodes_seen(c->nodes, n, br_mono_ms());
    n->last_seen_ms = br_now_ms();
    if (n->new_route) { /* (re)connected: it may take pending jobs. Its state stays
                         * what it is, and nothing stored changed (the route is
                         * memory's): no save, no event (a hello says) */
        br_node_move_t mv = {n->state, NULL, BR_HOOK_NODE_BACK, NULL,
                             BR_NODE_NOSAVE | BR_NODE_QUIET};
        br_node_post(c, n, &mv, "on a new connection");
    }
    return n;
}

int br_node_post(br_coord_t *c, br_node_t *n, const br_node_move_t *mv, const char *fmt,
                 ...)
{
    char text[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(text, sizeof(text), fmt, ap);
    va_end(ap);
    if (!br_node_state_move_ok(n->state, mv->state)) {
        fprintf(stderr, "brambled: node %s: no move from %s to %s (%s): not made\n", n->name,
                br_node_state_name(n->state), br_node_state_name(mv->state), text);
        return -1;
    }
    br_node_set_state(n, mv->state);
    if (!(mv->flags & BR_NODE_NOSAVE))
        br_coord_save_node(c, n);
    if (!(mv->flags & BR_NODE_QUIET))
        br_coord_event(c, 0, n->name,
                       mv->kind ? mv->kind : br_node_state_name(mv->state), "%s", text);
    if (mv->hook != BR_NODE_NO_HOOK) {
        br_hook_arg_t a = {.node = n, .reason = mv->reason};
        br_hooks_run(c, c->hooks, mv->hook, &a);
    }
    return 0;
}

void br_nodelife_hello(br_coord_t *c, br_node_t *n)
{
    br_probeset_hello(c->probeset, n); /* its address or port may be new: all hear */
    br_node_state_t was = n->state;
    /* hellos an agent queued while cut off arrive together on one connection: one
     * event for them; a drained or unhealthy node stays so */
    br_node_move_t mv = {BR_NODE_READY, NULL, BR_HOOK_NODE_BACK, NULL, 0};
    if (was != BR_NODE_DRAINING && was != BR_NODE_UNHEALTHY &&
        (n->new_route || was != BR_NODE_READY)) {
        br_node_post(c, n, &mv, "%s", was == BR_NODE_LOST ? "connected" : "reconnected");
        return;
    }
    /* its state stays (drained, unhealthy, or ready on this connection): saved with
     * what its hello said, and no event */
    br_node_move_t same = {was, NULL, BR_HOOK_NODE_BACK, NULL, BR_NODE_QUIET};
    br_node_post(c, n, &same, "hello");
}

int br_nodelife_answer_due(const br_coord_t *c, const br_node_t *n, int64_t now)
{
    int64_t most = br_jobs_fence_ms(c) / 3, hb = c->cfg.heartbeat_ms;
    return now - n->answered_at + hb + hb / 2 > most;
}

void br_nodelife_heard(br_coord_t *c, br_node_t *n)
{
    br_hook_arg_t a = {.node = n};
    br_hooks_run(c, c->hooks, BR_HOOK_NODE_HEARD, &a);
}

void br_nodelife_drain(br_coord_t *c, br_node_t *n, const char *by)
{
    br_node_move_t mv = {BR_NODE_DRAINING, NULL, BR_NODE_NO_HOOK, NULL, 0};
    if (n->state == BR_NODE_READY)
        br_node_post(c, n, &mv, "drained by %s: no new jobs", by);
}

void br_nodelife_undrain(br_coord_t *c, br_node_t *n, const char *by)
{
    int unhealthy = n->state == BR_NODE_UNHEALTHY;
    if (n->state != BR_NODE_DRAINING && !unhealthy)
        return;
    /* saved with the GPUs' error counts it was cleared at */
    br_node_move_t mv = {BR_NODE_READY, NULL, BR_HOOK_CHANGED, NULL, 0};
    br_node_post(c, n, &mv, "%s by %s", unhealthy ? "cleared" : "undrained", by);
}

void br_nodelife_unhealthy(br_coord_t *c, br_node_t *n, const char *fault)
{
    if (n->state == BR_NODE_LOST || n->state == BR_NODE_UNHEALTHY)
        return;
    /* saved with the error counts seen: told once */
    br_node_move_t mv = {BR_NODE_UNHEALTHY, NULL, BR_HOOK_NODE_UNHEALTHY, fault, 0};
    br_node_post(c, n, &mv, "%s; no new jobs until an admin clears it (bramble node undrain %s)",
                 fault, n->name);
}

int br_nodelife_remove(br_coord_t *c, br_node_t *n, const char *by, br_err_t *err)
{
    char name[64];
    br_strlcpy(name, n->name, sizeof(name));
    if (br_store_key_revoke(c->store, BR_PRINCIPAL_NODE, name, err) < 0 ||
        br_store_node_delete(c->store, name, err) < 0)
        return -1;
    br_node_move_t mv = {n->state, "removed", BR_HOOK_NODE_LOST, "node removed",
                         BR_NODE_NOSAVE};
    br_node_post(c, n, &mv, "removed by %s; its key is revoked", by);
    br_overlay_node_gone(c, n); /* its peers drop it at their next heartbeat */
    br_nodes_remove(c->nodes, name);
    br_netmap_forget(c->netmap, name);
    br_probeset_changed(c->probeset);
    return 0;
}

static int by_name(const void *a, const void *b)
{
    return strcmp((*(br_node_t *const *)a)->name, (*(br_node_t *const *)b)->name);
}

/* The nodes silent for longer than the node timeout, in name order; only those and
 * the first one heard from since are looked at. NULL when there are none. */
static br_node_t **silent_nodes(br_coord_t *c, int64_t now, size_t *count)
{
    br_node_t **due = NULL, *n, *next;
    size_t len = 0, cap = 0;
    for (n = br_nodes_oldest(c->nodes); n; n = next) {
        next = n->seen_next;
        if (n->state == BR_NODE_LOST) { /* out of the order until heard from */
            br_nodes_unseen(c->nodes, n);
            continue;
        }
        if (now - n->last_seen_mono <= c->cfg.node_timeout_ms)
            break; /* and every node after it was heard from later */
        if (len == cap) {
            br_node_t **nd = realloc(due, (cap = cap ? 2 * cap : 16) * sizeof(*nd));
            if (!nd)
                break; /* the rest next wake */
            due = nd;
        }
        due[len++] = n;
    }
    if (len > 1)
        qsort(due, len, sizeof(*due), by_name);
    *count = len;
    return due;
}

void br_nodelife_check(br_coord_t *c)
{
    int64_t now = br_mono_ms();
    if (now - c->started_mono < c->cfg.grace_ms)
        return;
    size_t count;
    br_node_t **due = silent_nodes(c, now, &count);
    for (size_t i = 0; i < count; i++) {
        br_node_t *n = due[i];
        char reason[128];
        snprintf(reason, sizeof(reason), "node %s lost (silent for %.1fs)", n->name,
                 (double)(now - n->last_seen_mono) / 1000.0);
        br_nodes_unseen(c->nodes, n);
        n->route_len = 0;
        br_probeset_changed(c->probeset); /* no one probes it any more */
        br_netmap_forget(c->netmap, n->name);
        br_node_move_t mv = {BR_NODE_LOST, NULL, BR_HOOK_NODE_LOST, reason, 0};
        br_node_post(c, n, &mv, "%s", reason);
    }
    free(due);
}

