/* easypool.h - libcurl easy handles kept for reuse. Each request to a replica
 * needs one; making it anew costs a large zeroed allocation and its buffers, and
 * freeing it as much again. A handle given back is reset (curl_easy_reset: every
 * option to its default, nothing of the last request left) and kept, up to a
 * bound. The connections themselves live in the multi handle's cache, so reuse
 * here saves allocations, not connections. Also holds the request headers every
 * try sends, made once. One thread. */
#ifndef BRAMBLE_GW_EASYPOOL_H
#define BRAMBLE_GW_EASYPOOL_H

#include <stddef.h>

#include <curl/curl.h>

typedef struct gw_easypool gw_easypool_t;

/* A pool that keeps at most max handles. NULL when out of memory. */
gw_easypool_t *gw_easypool_new(size_t max);
void gw_easypool_destroy(gw_easypool_t **p);

/* A handle with every option at its default: a kept one, or a new one; NULL when
 * out of memory. */
CURL *gw_easypool_get(gw_easypool_t *p);
/* Give e back (out of any multi handle already): reset and kept, or cleaned up
 * when the pool is full. NULL is ignored. */
void gw_easypool_put(gw_easypool_t *p, CURL *e);
/* How many are kept now. */
size_t gw_easypool_kept(const gw_easypool_t *p);

/* "Content-Type: application/json" and "Expect:" (no 100-continue), for
 * CURLOPT_HTTPHEADER; lives as long as the pool. */
struct curl_slist *gw_easypool_headers(const gw_easypool_t *p);

#endif
