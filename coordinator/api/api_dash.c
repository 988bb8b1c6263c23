/* api_dash.c - the loop's side of the dashboard (dashboard.h): the dashboard.login
 * message that mints a one-time login link, and the dashboard's requests turned
 * into ordinary messages of the session's key, so that they go through the same
 * handler table and rights checks as the CLI's, and their answers back. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "api.h"
#include "dashboard.h"
#include "gpuhist.h"
#include "util.h"
#include "http.h"

void br_api_dashboard_login(br_coord_t *c, br_msg_t *m, const br_caller_t *who)
{
    br_err_t err;
    char url[BR_HTTP_ADDR_MAX + BR_DASH_SECRET_HEX + 32];
    int64_t expires = 0;
    if (br_msg_unpack(m, &err, "{}") < 0) {
        br_reply_fail(c, m, &err);
        return;
    }
    if (!c->dash) {
        br_errf(&err, ENOTSUP,
                "the dashboard is off: start brambled with --http "
                "ADDR:PORT (docs/dashboard.md)");
        br_reply_fail(c, m, &err);
        return;
    }
    if (br_dash_login_new(c->dash, br_msg_user(m), who->name,
                          who->kind == BR_PRINCIPAL_ADMIN, url, sizeof(url),
                          &expires) < 0) {
        br_errf(&err, ENOMEM, "out of memory");
        br_reply_fail(c, m, &err);
        return;
    }
    br_reply_ok(c, m,
                json_pack("{s:s, s:s, s:s, s:f}", "url", url, "http", c->cfg.http,
                        "scheme", c->cfg.http_cert[0] ? "https" : "http", "expires",
                        (double)expires / 1000.0));
    memset(url, 0, sizeof(url));
}

br_msg_t *br_dash_msg(br_dash_req_t *r)
{
    br_msg_t *m = br_msg_new(BR_MSG_REQUEST, r->type, 0);
    if (!m || br_msg_set_route(m, r->route, sizeof(r->route)) < 0) {
        br_msg_destroy(&m);
        json_decref(r->body);
        r->body = NULL;
        return NULL;
    }
    br_msg_set_user(m, r->key);
    br_msg_set_body(m, r->body ? r->body : json_object());
    r->body = NULL;
    return m;
}

int br_dash_catch(br_coord_t *c, const br_msg_t *m)
{
    size_t len, dlen = 0;
    const void *route = br_msg_route(m, &len);
    if (!br_dash_is_route(route, len))
        return 0;
    if (c->dash && br_msg_kind(m) == BR_MSG_RESPONSE) {
        const void *data = br_msg_data(m, &dlen);
        json_t *body = br_msg_body(m), *nodes = json_object_get(body, "nodes");
        if (json_is_array(nodes) && br_msg_type(m) &&
            strcmp(br_msg_type(m), "node.list") == 0) {
            json_t *copy = json_deep_copy(body); /* with each GPU's last hour */
            if (copy)
                br_gpuhist_attach(br_dash_gpuhist(c->dash), copy, br_now_ms());
            br_dash_answer(c->dash, route, len, copy ? copy : body, data, dlen);
            json_decref(copy);
        } else {
            br_dash_answer(c->dash, route, len, body, data, dlen);
        }
    }
    return 1;
}

void br_dash_loop_sample(br_coord_t *c)
{
    br_gpuhist_t *h = c->dash ? br_dash_gpuhist(c->dash) : NULL;
    if (!h || !br_gpuhist_due(h, br_mono_ms()))
        return;
    int64_t now = br_now_ms();
    for (br_node_t *n = br_nodes_first(c->nodes); n; n = n->next) {
        size_t i;
        json_t *g;
        json_array_foreach (json_object_get(n->info, "gpus"), i, g) {
            json_t *idx = json_object_get(g, "index"), *u = json_object_get(g, "util"),
                   *p = json_object_get(g, "power_w");
            if (json_is_integer(idx) && (json_is_number(u) || json_is_number(p)) &&
                n->state != BR_NODE_LOST)
                br_gpuhist_sample(h, n->name, (int)json_integer_value(idx),
                                  json_is_number(u) ? json_number_value(u) : NAN,
                                  json_is_number(p) ? json_number_value(p) : NAN, now);
        }
    }
}

int br_dash_posed(const br_msg_t *m)
{
    size_t len;
    const void *route = br_msg_route(m, &len);
    if (!br_dash_is_route(route, len))
        return 0;
    fprintf(stderr,
            "brambled: dropped %s from %.8s...: its routing id poses as the "
            "dashboard's\n",
            br_msg_type(m), br_msg_user(m));
    return 1;
}
