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

json_t *br_listcache_get(br_listcache_t *lc, const char *lhash, const json_t *summary,
                         int64_t now_ms)
{
    for (int i = 0; lc && lhash && i < BR_LISTCACHE_N; i++) {
        slot_t *s = &lc->s[i];
        if (s->manifest && strcmp(s->lhash, lhash) == 0 && json_equal(s->summary, summary)) {
            s->used = now_ms;
            return json_incref(s->manifest);
        }
    }
    return NULL;
}

void br_listcache_put(br_listcache_t *lc, const char *lhash, const json_t *summary,
                      json_t *manifest, int64_t now_ms)
{
    if (!lc || !lhash || strlen(lhash) >= sizeof(lc->s[0].lhash) || !manifest)
        return;
    slot_t *s = &lc->s[0];
    for (int i = 0; i < BR_LISTCACHE_N; i++) {
        slot_t *t = &lc->s[i];
        if (t->manifest && strcmp(t->lhash, lhash) == 0 && json_equal(t->summary, summary)) {
            s = t; /* (kept already: renewed) */
            break;
        }
        if (!t->manifest || t->used < s->used)
            s = t;
        if (!t->manifest)
            break;
    }
    json_t *sum = json_deep_copy(summary);
    if (!sum)
        return;
    drop(s);
    strcpy(s->lhash, lhash);
    s->summary = sum;
    s->manifest = json_incref(manifest);
    s->used = now_ms;
}

void br_listcache_expire(br_listcache_t *lc, int64_t now_ms)
{
    for (int i = 0; lc && i < BR_LISTCACHE_N; i++)
        if (lc->s[i].manifest && now_ms - lc->s[i].used >= BR_LISTCACHE_KEEP_MS)
            drop(&lc->s[i]);
}
