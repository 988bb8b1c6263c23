/* keys.c - the API keys the gateway takes (see keys.h). */
#include "keys.h"

#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "token.h"

struct gw_keys {
    gw_key_t *v; /* by hash */
    size_t n;
};

gw_keys_t *gw_keys_new(void)
{
    return calloc(1, sizeof(gw_keys_t));
}

static void keys_free(gw_key_t *v, size_t n)
{
    for (size_t i = 0; i < n; i++)
        json_decref(v[i].models);
    free(v);
}

void gw_keys_destroy(gw_keys_t **kp)
{
    if (!kp || !*kp)
        return;
    keys_free((*kp)->v, (*kp)->n);
    free(*kp);
    *kp = NULL;
}

static int by_hash(const void *a, const void *b)
{
    return strcmp(((const gw_key_t *)a)->hash, ((const gw_key_t *)b)->hash);
}

/* One key of the table into *out: 0, or -1 when malformed. */
static int key_of(const json_t *o, gw_key_t *out)
{
    const char *hash, *user;
    json_int_t uid, rpm = 0;
    json_t *models;
    if (json_unpack((json_t *)o, "{s:s, s:s, s:I, s:o, s?I}", "hash", &hash, "user", &user,
                    "user_id", &uid, "models", &models, "rpm", &rpm) < 0 ||
        strlen(hash) != 64 || strlen(user) >= sizeof(out->user) || !json_is_array(models) ||
        rpm < 0 || rpm > 1000000000)
        return -1;
    size_t i;
    json_t *m;
    json_array_foreach(models, i, m)
        if (!json_is_string(m))
            return -1;
    memcpy(out->hash, hash, 65);
    strcpy(out->user, user);
    out->user_id = uid;
    out->rpm = (int)rpm;
    out->models = json_incref(models);
    return 0;
}

int gw_keys_update(gw_keys_t *k, const json_t *keys)
{
    if (!json_is_array(keys))
        return -1;
    size_t n = json_array_size(keys);
    gw_key_t *v = calloc(n ? n : 1, sizeof(*v));
    if (!v)
        return -1;
    for (size_t i = 0; i < n; i++)
        if (key_of(json_array_get(keys, i), &v[i]) < 0) {
            keys_free(v, i);
            return -1;
        }
    qsort(v, n, sizeof(*v), by_hash);
    keys_free(k->v, k->n);
    k->v = v;
    k->n = n;
    return 0;
}

size_t gw_keys_count(const gw_keys_t *k)
{
    return k->n;
}

const gw_key_t *gw_keys_find(const gw_keys_t *k, const char *bearer)
{
    if (!bearer || !*bearer || !k->n || strlen(bearer) > 512)
        return NULL;
    gw_key_t probe;
    br_token_hash(bearer, probe.hash, NULL);
    return bsearch(&probe, k->v, k->n, sizeof(probe), by_hash);
}

const char *gw_keys_bearer(const char *authorization)
{
    if (!authorization || strncasecmp(authorization, "Bearer ", 7) != 0)
        return NULL;
    const char *key = authorization + 7;
    while (*key == ' ')
        key++;
    return *key ? key : NULL;
}
