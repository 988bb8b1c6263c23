/* uploads.c - each user's ledger of stored files nothing of theirs refers to yet
 * (uploads.h). A user's files are a JSON object, hash -> [size, last written ms]. */
#include "uploads.h"

#include <stdlib.h>
#include <string.h>

typedef struct {
    int64_t id;
    json_t *files;
    int64_t pending;
    int64_t used, used_at; /* used_at 0: not known */
} user_t;

struct br_uploads {
    user_t *users;
    size_t n, cap;
};

br_uploads_t *br_uploads_new(void)
{
    return calloc(1, sizeof(br_uploads_t));
}

void br_uploads_destroy(br_uploads_t **up)
{
    br_uploads_t *u = *up;
    if (!u)
        return;
    for (size_t i = 0; i < u->n; i++)
        json_decref(u->users[i].files);
    free(u->users);
    free(u);
    *up = NULL;
}

static user_t *find(const br_uploads_t *u, int64_t id)
{
    for (size_t i = 0; i < u->n; i++)
        if (u->users[i].id == id)
            return &u->users[i];
    return NULL;
}

static user_t *find_or_add(br_uploads_t *u, int64_t id)
{
    user_t *x = find(u, id);
    if (x)
        return x;
    if (u->n == u->cap) {
        size_t cap = u->cap ? 2 * u->cap : 8;
        user_t *m = realloc(u->users, cap * sizeof(*m));
        if (!m)
            return NULL;
        u->users = m;
        u->cap = cap;
    }
    json_t *files = json_object();
    if (!files)
        return NULL;
    x = &u->users[u->n++];
    *x = (user_t){.id = id, .files = files};
    return x;
}

int br_uploads_touch(br_uploads_t *u, int64_t user, const char *hash, int64_t now_ms)
{
    user_t *x = find(u, user);
    json_t *f = x ? json_object_get(x->files, hash) : NULL;
    if (!f)
        return 0;
    json_array_set_new(f, 1, json_integer(now_ms));
    return 1;
}

int br_uploads_add(br_uploads_t *u, int64_t user, const char *hash, int64_t size,
                   int64_t now_ms)
{
    if (br_uploads_touch(u, user, hash, now_ms))
        return 0;
    user_t *x = find_or_add(u, user);
    if (!x || json_object_set_new(x->files, hash, json_pack("[I, I]", (json_int_t)size,
                                                             (json_int_t)now_ms)) < 0)
        return -1;
    x->pending += size;
    return 0;
}

int64_t br_uploads_size(const br_uploads_t *u, int64_t user, const char *hash)
{
    const user_t *x = find(u, user);
    json_t *f = x ? json_object_get(x->files, hash) : NULL;
    return f ? json_integer_value(json_array_get(f, 0)) : 0;
}

int br_uploads_others(const br_uploads_t *u, int64_t user, const char *hash)
{
    for (size_t i = 0; u && i < u->n; i++)
        if (u->users[i].id != user && json_object_get(u->users[i].files, hash))
            return 1;
    return 0;
}

int64_t br_uploads_pending(const br_uploads_t *u, int64_t user)
{
    const user_t *x = find(u, user);
    return x ? x->pending : 0;
}

int64_t br_uploads_used(const br_uploads_t *u, int64_t user, int64_t now_ms)
{
    const user_t *x = find(u, user);
    if (!x || !x->used_at || now_ms - x->used_at >= BR_UPLOADS_USED_MS)
        return -1;
    return x->used;
}

void br_uploads_set_used(br_uploads_t *u, int64_t user, int64_t used, int64_t now_ms)
{
    user_t *x = find_or_add(u, user);
    if (x) {
        x->used = used;
        x->used_at = now_ms ? now_ms : 1;
    }
}

void br_uploads_settle(br_uploads_t *u, int64_t user, const char *hash)
{
    user_t *x = find(u, user);
    if (!x)
        return;
    x->used_at = 0; /* it is counted there now */
    json_t *f = json_object_get(x->files, hash);
    if (!f)
        return;
    x->pending -= json_integer_value(json_array_get(f, 0));
    json_object_del(x->files, hash);
}

json_t *br_uploads_expire(br_uploads_t *u, int64_t now_ms)
{
    json_t *out = json_array();
    if (!out)
        return NULL;
    for (size_t i = 0; i < u->n; i++) {
        user_t *x = &u->users[i];
        const char *h;
        json_t *f, *tmp;
        json_object_foreach_safe(x->files, tmp, h, f) {
            if (now_ms - json_integer_value(json_array_get(f, 1)) < BR_UPLOADS_TTL_MS)
                continue;
            if (json_array_append_new(out, json_string(h)) < 0)
                break; /* (out of memory: the rest at the next call) */
            x->pending -= json_integer_value(json_array_get(f, 0));
            json_object_del(x->files, h);
        }
    }
    return out;
}
