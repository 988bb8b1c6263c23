/* token.h - join tokens: one opaque string carrying the coordinator endpoint, its
 * public key and a random secret ("brt1." + base64url of a small JSON object). The
 * coordinator keeps only a hash of the secret; a token's id is a prefix of it. */
#ifndef BRAMBLE_TOKEN_H
#define BRAMBLE_TOKEN_H

#include <stddef.h>

#include "cred.h"
#include "err.h"

#define BR_TOKEN_MAX 1024
#define BR_TOKEN_SECRET_HEX 48 /* 24 random bytes */
#define BR_TOKEN_HASH_HEX 64
#define BR_TOKEN_ID_LEN 12

typedef struct {
    char endpoint[BR_ENDPOINT_MAX];
    char server_key[BR_KEY_LEN + 1];
    char secret[BR_TOKEN_SECRET_HEX + 1];
} br_token_t;

/* A token with a fresh random secret. */
int br_token_init(br_token_t *t, const char *endpoint, const char *server_key,
                  br_err_t *err);

/* The opaque text form. out needs BR_TOKEN_MAX bytes. */
int br_token_encode(const br_token_t *t, char *out, size_t len, br_err_t *err);

/* Parse the text form; errors begin "malformed token: ". */
int br_token_decode(const char *text, br_token_t *t, br_err_t *err);

/* hex(BLAKE2b-256(secret)) into hash (65 bytes) and its first 12 chars into id
 * (13 bytes); id may be NULL. */
void br_token_hash(const char *secret, char *hash, char *id);

/* The CURVE key pair (Z85, BR_KEY_LEN + 1 bytes each) that the token's holder joins
 * with: BLAKE2b of the secret, keyed by a fixed label, seeds a Curve25519 pair. The
 * coordinator keeps the public half with the token, so its handshake admits this
 * key and refuses every other unknown one. secret_key may be NULL. */
void br_token_join_keypair(const char *secret, char *public_key, char *secret_key);

#endif
