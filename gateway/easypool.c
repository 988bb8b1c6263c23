/* easypool.c - libcurl easy handles kept for reuse. */
#include "easypool.h"

#include <stdlib.h>

struct gw_easypool {
    CURL **v;
    size_t n, max;
    struct curl_slist *hdrs;
};

gw_easypool_t *gw_easypool_new(size_t max)
{
    gw_easypool_t *p = calloc(1, sizeof(*p));
    if (!p || !(p->v = calloc(max ? max : 1, sizeof(*p->v))) ||
        !(p->hdrs = curl_slist_append(NULL, "Content-Type: application/json"))) {
        if (p)
            free(p->v);
        free(p);
        return NULL;
    }
    struct curl_slist *h = curl_slist_append(p->hdrs, "Expect:");
    if (!h) {
        gw_easypool_destroy(&p);
        return NULL;
    }
    p->hdrs = h;
    p->max = max;
    return p;
}

void gw_easypool_destroy(gw_easypool_t **pp)
{
    gw_easypool_t *p = pp ? *pp : NULL;
    if (!p)
        return;
    for (size_t i = 0; i < p->n; i++)
        curl_easy_cleanup(p->v[i]);
    free(p->v);
    curl_slist_free_all(p->hdrs);
    free(p);
    *pp = NULL;
}

CURL *gw_easypool_get(gw_easypool_t *p)
{
    return p->n ? p->v[--p->n] : curl_easy_init();
}

void gw_easypool_put(gw_easypool_t *p, CURL *e)
{
    if (!e)
        return;
    if (p->n == p->max) {
        curl_easy_cleanup(e);
        return;
    }
    curl_easy_reset(e);
    p->v[p->n++] = e;
}

size_t gw_easypool_kept(const gw_easypool_t *p)
{
    return p->n;
}

struct curl_slist *gw_easypool_headers(const gw_easypool_t *p)
{
    return p->hdrs;
}
