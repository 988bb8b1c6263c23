/* listcache.c - parsed manifests, kept by listing (see listcache.h). */
#include "listcache.h"

#include <stdlib.h>
#include <string.h>

typedef struct {
    char lhash[72];
    json_t *summary, *manifest; /* (NULL: a free slot) */
    int64_t used;
} slot_t;

struct br_listcache {
    slot_t s[BR_LISTCACHE_N];
};

br_listcache_t *br_listcache_new(void)
{
    return calloc(1, sizeof(br_listcache_t));
}

static void drop(slot_t *s)
{
    json_decref(s->summary);
    json_decref(s->manifest);
    memset(s, 0, sizeof(*s));
}

void br_listcache_destroy(br_listcache_t **lcp)
{
    br_listcache_t *lc = lcp ? *lcp : NULL;
    if (!lc)
        return;
    for (int i = 0; i < BR_LISTCACHE_N; i++)
        drop(&lc->s[i]);
    free(lc);
    *lcp = NULL;
}

static slot_t *find(br_listcache_t *lc, const char *lhash, const json_t *summary)
{
    for (int i = 0; i < BR_LISTCACHE_N; i++) {
        slot_t *s = &lc->s[i];
        if (s->manifest && strcmp(s->lhash, lhash) == 0 && json_equal(s->summary, summary))
            return s;
    }
    return NULL;
}

json_t *br_listcache_get(br_listcache_t *lc, const char *lhash, const json_t *summary,
                         int64_t now_ms)
{
    slot_t *s = lc && lhash ? find(lc, lhash, summary) : NULL;
    if (!s)
        return NULL;
    s->used = now_ms;
    return json_incref(s->manifest);
}

void br_listcache_put(br_listcache_t *lc, const char *lhash, const json_t *summary,
                      json_t *manifest, int64_t now_ms)
{
    if (!lc || !lhash || strlen(lhash) >= sizeof(lc->s[0].lhash) || !manifest)
        return;
    slot_t *s = find(lc, lhash, summary);
    if (s) { /* kept already: renewed */
        s->used = now_ms;
        return;
    }
    s = &lc->s[0]; /* a free slot, else the least recently used */
    for (int i = 0; i < BR_LISTCACHE_N && s->manifest; i++)
        if (!lc->s[i].manifest || lc->s[i].used < s->used)
            s = &lc->s[i];
    json_t *sum = json_deep_copy(summary);
    if (!sum)
        return;
    json_incref(manifest); /* (before the slot's is let go: it may be the same) */
    drop(s);
    strcpy(s->lhash, lhash);
    s->summary = sum;
    s->manifest = manifest;
    s->used = now_ms;
}

void br_listcache_expire(br_listcache_t *lc, int64_t now_ms)
{
    for (int i = 0; lc && i < BR_LISTCACHE_N; i++)
        if (lc->s[i].manifest && now_ms - lc->s[i].used >= BR_LISTCACHE_KEEP_MS)
            drop(&lc->s[i]);
}
