/* api_gateway.c - gateways: their credentials (gateway.add, list, remove, the
 * admin's) and what a gateway may ask for (gateway.watch: the routing table,
 * routes.h) or tell (gateway.report: what it answered, per user and model;
 * gateway.load: what it carries now, which scales services, autoscale.h). A
 * gateway's key may do nothing else. */
#include "api.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "autoscale.h"
#include "gwload.h"
#include "routes.h"
#include "services.h"
#include "spec.h"
#include "usage.h"
#include "util.h"

/* 1 when a gateway has this name, 0 when not, -1 on a store error. */
static int gateway_exists(br_coord_t *c, const char *name, br_err_t *err)
{
    int64_t id;
    if (br_store_principal_id(c->store, BR_PRINCIPAL_GATEWAY, name, &id, err) < 0)
        return -1;
    return id != 0;
}

void br_api_gateway_add(br_coord_t *c, br_msg_t *m, const br_caller_t *who)
{
    const char *name, *key;
    br_err_t err;
    if (br_msg_unpack(m, &err, "{s:s, s:s}", "name", &name, "public_key", &key) < 0)
        goto fail;
    if (!br_valid_name(name)) {
        br_errf(&err, EINVAL, "gateway name '%s': use lowercase letters, digits and '-'",
                name);
        goto fail;
    }
    int taken = gateway_exists(c, name, &err);
    if (taken < 0)
        goto fail;
    if (taken) {
        br_errf(&err, EEXIST, "gateway '%s' exists already", name);
        goto fail;
    }
    if (br_api_key_unused(c, key, &err) < 0)
        goto fail;
    if (br_store_key_add(c->store, key, BR_PRINCIPAL_GATEWAY, name, &err) < 0)
        goto fail;
    br_coord_event(c, 0, NULL, "gateway", "gateway %s added by %s", name, who->name);
    br_reply_ok(c, m, json_pack("{s:s, s:s}", "name", name, "endpoint", c->cfg.advertise));
    return;
fail:
    br_reply_fail(c, m, &err);
}

void br_api_gateway_list(br_coord_t *c, br_msg_t *m, const br_caller_t *who)
{
    br_err_t err;
    json_t *list = br_store_key_list_gateways(c->store, &err);
    if (!list) {
        br_reply_fail(c, m, &err);
        return;
    }
    json_t *watching = br_routes_watching(c->routes);
    size_t i, k;
    json_t *g, *w;
    json_array_foreach(list, i, g) {
        json_object_del(g, "kind");
        json_object_set_new(g, "created", br_time_json(json_object_get(g, "created")));
        json_t *seen = json_null();
        json_array_foreach(watching, k, w) /* (one gateway may run twice) */
            if (json_equal(json_object_get(w, "name"), json_object_get(g, "name")) &&
                (json_is_null(seen) || json_real_value(json_object_get(w, "seen")) >
                                           json_real_value(seen)))
                seen = json_object_get(w, "seen");
        json_object_set_new(g, "connected", json_boolean(!json_is_null(seen)));
        json_object_set(g, "seen", seen);
    }
    json_decref(watching);
    br_reply_ok(c, m, json_pack("{s:o}", "gateways", list));
}

void br_api_gateway_remove(br_coord_t *c, br_msg_t *m, const br_caller_t *who)
{
    const char *name;
    br_err_t err;
    if (br_msg_unpack(m, &err, "{s:s}", "name", &name) < 0)
        goto fail;
    int have = gateway_exists(c, name, &err);
    if (have < 0)
        goto fail;
    if (!have) {
        br_errf(&err, ENOENT, "no gateway '%s'", name);
        goto fail;
    }
    if (br_store_key_revoke(c->store, BR_PRINCIPAL_GATEWAY, name, &err) < 0)
        goto fail;
    br_routes_forget(c->routes, name);
    br_gwload_forget(c->gwload, name);
    br_coord_event(c, 0, NULL, "gateway", "gateway %s removed by %s", name, who->name);
    br_reply_ok(c, m, json_pack("{s:s}", "name", name));
    return;
fail:
    br_reply_fail(c, m, &err);
}

void br_api_gateway_watch(br_coord_t *c, br_msg_t *m, const br_caller_t *who)
{
    br_err_t err;
    size_t route_len;
    if (br_msg_unpack(m, &err, "{}") < 0) {
        br_reply_fail(c, m, &err);
        return;
    }
    const void *route = br_msg_route(m, &route_len);
    json_t *r = br_routes_watch(c, route, route_len, who->name, br_mono_ms(), &err);
    if (!r)
        br_reply_fail(c, m, &err);
    else
        br_reply_ok(c, m, r);
}

#define REPORT_ROWS_MAX 65536

/* One row of a report into the store, as of hour; checked first. */
static int take_row(br_coord_t *c, const json_t *row, int64_t hour, br_err_t *err)
{
    json_int_t uid, v[5];
    const char *model;
    if (json_unpack((json_t *)row, "{s:I, s:s, s:I, s:I, s:I, s:I, s:I}", "user_id", &uid,
                    "model", &model, "requests", &v[0], "errors", &v[1], "prompt_tokens",
                    &v[2], "completion_tokens", &v[3], "ms", &v[4]) < 0)
        return br_errf(err, EPROTO, "gateway.report: a row needs user_id, model, requests, "
                                    "errors, prompt_tokens, completion_tokens and ms");
    if (uid < 0 || !br_spec_model_name_ok(model))
        return br_errf(err, EPROTO, "gateway.report: a row's user_id or model is bad");
    int64_t u[5];
    for (int i = 0; i < 5; i++) {
        if (v[i] < 0 || v[i] > (INT64_C(1) << 50))
            return br_errf(err, EPROTO, "gateway.report: a row's counts must be 0 or more");
        u[i] = v[i];
    }
    return br_store_model_usage_add(c->store, uid, model, hour, u, err);
}

void br_api_gateway_report(br_coord_t *c, br_msg_t *m, const br_caller_t *who)
{
    const char *id;
    json_t *usage;
    br_err_t err;
    if (br_msg_unpack(m, &err, "{s:s, s:o}", "id", &id, "usage", &usage) < 0)
        goto fail;
    if (!*id || strlen(id) > 32 || !json_is_array(usage) ||
        json_array_size(usage) > REPORT_ROWS_MAX) {
        br_errf(&err, EPROTO, "gateway.report: id must be 1 to 32 characters and usage an "
                              "array of at most %d rows", REPORT_ROWS_MAX);
        goto fail;
    }
    if (!br_routes_report_seen(c->routes, id)) { /* (else: taken, its answer lost) */
        int64_t hour = br_now_ms() / BR_USAGE_HOUR_MS;
        size_t i;
        json_t *row;
        json_array_foreach(usage, i, row)
            if (take_row(c, row, hour, &err) < 0)
                goto fail;
        br_routes_report_took(c->routes, id);
    }
    br_reply_ok(c, m, json_pack("{s:s}", "id", id));
    return;
fail:
    br_reply_fail(c, m, &err);
}

void br_api_gateway_suspect(br_coord_t *c, br_msg_t *m, const br_caller_t *who)
{
    json_int_t job;
    int port;
    const char *why;
    br_err_t err;
    if (br_msg_unpack(m, &err, "{s:I, s:i, s:s}", "job", &job, "port", &port, "why", &why) <
            0 ||
        br_services_suspect(c, job, port, who->name, why, br_mono_ms(), &err) < 0)
        br_reply_fail(c, m, &err);
    else
        br_reply_ok(c, m, json_object());
}

void br_api_gateway_load(br_coord_t *c, br_msg_t *m, const br_caller_t *who)
{
    json_t *services;
    json_int_t version = 0;
    br_err_t err;
    int64_t now = br_mono_ms();
    if (br_msg_unpack(m, &err, "{s:o, s?I}", "services", &services, "version", &version) <
            0 ||
        br_gwload_take(c->gwload, who->name, services, version, now, &err) < 0) {
        br_reply_fail(c, m, &err);
        return;
    }
    br_autoscale_run(c, now); /* a request waiting at zero replicas starts one now */
    br_reply_ok(c, m, json_object());
}
