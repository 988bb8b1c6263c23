/* keys.h - the API keys the gateway takes: each a user's, known by the hash of its
 * text only (the coordinator's table brings the hashes; routes.h there), with the
 * model names it may be used for and its user's limit of requests a minute. A
 * request's bearer key is hashed and looked up here; what the request needs of
 * its key is copied into it, so a new table may replace the keys at any time. */
#ifndef BRAMBLE_GW_KEYS_H
#define BRAMBLE_GW_KEYS_H

#include <jansson.h>
#include <stdint.h>

typedef struct {
    char hash[65];  /* hex BLAKE2b-256 of the key's text */
    char user[64];
    int64_t user_id;
    json_t *models; /* the names it may be used for; [] every one */
    int rpm;        /* its user's requests a minute; 0: no limit */
} gw_key_t;

typedef struct gw_keys gw_keys_t;

gw_keys_t *gw_keys_new(void);
void gw_keys_destroy(gw_keys_t **k);

/* Take the table's "keys" ([{"hash", "user", "user_id", "models", "rpm"}]): 0, or
 * -1 when it is malformed (the keys stay as they were). */
int gw_keys_update(gw_keys_t *k, const json_t *keys);
/* How many keys there are. */
size_t gw_keys_count(const gw_keys_t *k);

/* The key whose text is bearer; NULL when none is (revoked, or never made). The
 * pointer holds until the next gw_keys_update. */
const gw_key_t *gw_keys_find(const gw_keys_t *k, const char *bearer);

/* The key of an Authorization header's value ("Bearer KEY", the scheme in any
 * case): KEY, or NULL when the header is absent or names another scheme. */
const char *gw_keys_bearer(const char *authorization);

#endif
