/* api_keys.c - the gateway's API keys (key.create, key.list, key.revoke;
 * docs/gateway.md): a user's bearer keys for the models behind the gateways. A key
 * is made here, answered once, and kept by its hash only; the gateways hear of
 * the hashes through the routing table (routes.h). */
#include "api.h"

#include <errno.h>
#include <sodium.h>
#include <stdio.h>
#include <string.h>

#include "routes.h"
#include "spec.h"
#include "token.h"
#include "util.h"

#define KEYS_PER_USER 100 /* live keys a user may hold */
#define KEY_MODELS_MAX 64 /* model names one key may be limited to */
#define KEY_PREFIX "brk-"

/* The models a key is limited to, checked: an array of distinct model names. */
static int check_models(const json_t *models, br_err_t *err)
{
    if (!json_is_array(models))
        return br_errf(err, EINVAL, "models must be an array of model names");
    if (json_array_size(models) > KEY_MODELS_MAX)
        return br_errf(err, EINVAL, "a key may name at most %d models, not %zu",
                       KEY_MODELS_MAX, json_array_size(models));
    size_t i, k;
    json_t *v, *w;
    json_array_foreach(models, i, v) {
        if (!json_is_string(v) || !br_spec_model_name_ok(json_string_value(v)))
            return br_errf(err, EINVAL, "model name %zu is not a model name (1 to %d of "
                                        "letters, digits and ._-/:@+)", i + 1,
                           BR_SPEC_MODEL_MAX);
        json_array_foreach(models, k, w)
            if (k < i && json_equal(v, w))
                return br_errf(err, EINVAL, "model '%s' is named twice",
                               json_string_value(v));
    }
    return 0;
}

/* Whether who may make a key named name (NULL: its id) for models: 0, or -1 with
 * err (a bad name or model list, or as many keys as a user may hold). */
static int check_new_key(br_coord_t *c, const br_caller_t *who, const char *name,
                         const json_t *models, br_err_t *err)
{
    if (name && !br_valid_name(name)) /* (at most 63 characters) */
        return br_errf(err, EINVAL, "key name '%.80s': use up to 63 lowercase letters, "
                                    "digits and '-'", name);
    if (check_models(models, err) < 0)
        return -1;
    json_t *have = br_store_apikey_list(c->store, who->id, err);
    if (!have)
        return -1;
    size_t held = json_array_size(have);
    json_decref(have);
    if (held >= KEYS_PER_USER)
        return br_errf(err, EDQUOT, "you hold %zu keys, the most a user may: revoke one "
                                    "first (bramble key revoke)", held);
    return 0;
}

void br_api_key_create(br_coord_t *c, br_msg_t *m, const br_caller_t *who)
{
    const char *name = NULL;
    json_t *models = NULL;
    br_err_t err;
    if (br_msg_unpack(m, &err, "{s?s, s?o}", "name", &name, "models", &models) < 0) {
        br_reply_fail(c, m, &err);
        return;
    }
    json_t *list = models ? json_incref(models) : json_array();
    unsigned char raw[32];
    char text[sizeof(KEY_PREFIX) + 64], hash[BR_TOKEN_HASH_HEX + 1], id[BR_TOKEN_ID_LEN + 1];
    if (check_new_key(c, who, name, list, &err) < 0)
        goto fail;
    randombytes_buf(raw, sizeof(raw));
    memcpy(text, KEY_PREFIX, sizeof(KEY_PREFIX) - 1);
    sodium_bin2base64(text + sizeof(KEY_PREFIX) - 1, sizeof(text) - sizeof(KEY_PREFIX) + 1,
                      raw, sizeof(raw), sodium_base64_VARIANT_URLSAFE_NO_PADDING);
    sodium_memzero(raw, sizeof(raw));
    br_token_hash(text, hash, id);
    if (!name)
        name = id;
    if (br_store_apikey_add(c->store, who->id, id, hash, name, list, br_now_ms(), &err) < 0) {
        sodium_memzero(text, sizeof(text));
        goto fail;
    }
    br_routes_keys_changed(c->routes);
    br_coord_event(c, 0, NULL, "key", "API key %s (%s) made by %s", id, name, who->name);
    br_reply_ok(c, m, json_pack("{s:s, s:s, s:s, s:s, s:O}", "key", text, "id", id, "name",
                              name, "user", who->name, "models", list));
    sodium_memzero(text, sizeof(text));
    json_decref(list);
    return;
fail:
    json_decref(list);
    br_reply_fail(c, m, &err);
}

void br_api_key_list(br_coord_t *c, br_msg_t *m, const br_caller_t *who)
{
    int all = 0;
    br_err_t err;
    if (br_msg_unpack(m, &err, "{s?b}", "all", &all) < 0)
        goto fail;
    if (all && who->kind != BR_PRINCIPAL_ADMIN) {
        br_errf(&err, EACCES, "only the admin lists every user's keys");
        goto fail;
    }
    json_t *keys = br_store_apikey_list(c->store, all ? 0 : who->id, &err);
    if (!keys)
        goto fail;
    size_t i;
    json_t *k;
    json_array_foreach(keys, i, k) {
        json_object_del(k, "user_id");
        json_object_set_new(k, "created", br_time_json(json_object_get(k, "created")));
    }
    br_reply_ok(c, m, json_pack("{s:o}", "keys", keys));
    return;
fail:
    br_reply_fail(c, m, &err);
}

void br_api_key_revoke(br_coord_t *c, br_msg_t *m, const br_caller_t *who)
{
    const char *key;
    br_err_t err;
    if (br_msg_unpack(m, &err, "{s:s}", "key", &key) < 0)
        goto fail;
    json_t *gone = br_store_apikey_revoke(c->store, who->id, key, &err);
    if (!gone && err.errnum == ENOENT && who->kind == BR_PRINCIPAL_ADMIN)
        gone = br_store_apikey_revoke(c->store, 0, key, &err); /* anyone's, by id */
    if (!gone)
        goto fail;
    br_routes_keys_changed(c->routes);
    br_coord_event(c, 0, NULL, "key", "API key %s (%s) revoked by %s",
                   json_string_value(json_object_get(gone, "id")),
                   json_string_value(json_object_get(gone, "name")), who->name);
    br_reply_ok(c, m, gone);
    return;
fail:
    br_reply_fail(c, m, &err);
}
