/* cred.h - CURVE key pairs and credential files: YAML with endpoint,
 * server_public_key, name, public_key, secret_key (Z85), mode 0600. A credential
 * readable by group or others is refused, as ssh refuses such a private key. */
#ifndef BRAMBLE_CRED_H
#define BRAMBLE_CRED_H

#include <stddef.h>

#include "err.h"

#define BR_KEY_LEN 40 /* Z85 text of a 32-byte CURVE key */
#define BR_ENDPOINT_MAX 256

typedef struct {
    char endpoint[BR_ENDPOINT_MAX];
    char server_public_key[BR_KEY_LEN + 1];
    char name[64];
    char public_key[BR_KEY_LEN + 1];
    char secret_key[BR_KEY_LEN + 1];
} br_cred_t;

/* A fresh CURVE key pair in Z85. */
int br_keypair(char *public_key, char *secret_key, br_err_t *err);

/* 1 when s is 40 chars of Z85 that decode to a 32-byte key. */
int br_key_valid(const char *s);

/* Load a credential; refuses a group- or world-readable file, unknown keys, missing
 * fields and malformed keys, each with a message naming the file and field. */
int br_cred_load(const char *path, br_cred_t *cred, br_err_t *err);

/* Write a credential with mode 0600 (atomically). */
int br_cred_save(const char *path, const br_cred_t *cred, br_err_t *err);

/* Where the CLI finds its credential: flag (may be NULL), else $BRAMBLE_CREDENTIAL,
 * else ~/.config/bramble/credential. */
const char *br_cred_path(const char *flag, char *buf, size_t len);

#endif
