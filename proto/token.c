/* token.c - join tokens: encode, decode, hash. */
#include "token.h"

#include <errno.h>
#include <jansson.h>
#include <sodium.h>
#include <stdio.h>
#include <string.h>
#include <zmq.h>

#include "util.h"

#define PREFIX "brt1."

int br_token_init(br_token_t *t, const char *endpoint, const char *server_key,
                  br_err_t *err)
{
    unsigned char raw[BR_TOKEN_SECRET_HEX / 2];
    if (sodium_init() < 0)
        return br_errf(err, EIO, "libsodium failed to start");
    if (strlen(endpoint) >= sizeof(t->endpoint) || !br_key_valid(server_key))
        return br_errf(err, EINVAL, "bad endpoint or server key for a token");
    randombytes_buf(raw, sizeof(raw));
    sodium_bin2hex(t->secret, sizeof(t->secret), raw, sizeof(raw));
    strcpy(t->endpoint, endpoint);
    strcpy(t->server_key, server_key);
    return 0;
}

int br_token_encode(const br_token_t *t, char *out, size_t len, br_err_t *err)
{
    json_t *j = json_pack("{s:s, s:s, s:s}", "e", t->endpoint, "k", t->server_key, "s",
                          t->secret);
    char *text = j ? json_dumps(j, JSON_COMPACT | JSON_SORT_KEYS) : NULL;
    json_decref(j);
    if (!text)
        return br_errf(err, ENOMEM, "out of memory");
    size_t n = strlen(text);
    size_t need = sizeof(PREFIX) - 1 +
                  sodium_base64_ENCODED_LEN(n, sodium_base64_VARIANT_URLSAFE_NO_PADDING);
    if (need > len) {
        free(text);
        return br_errf(err, ENAMETOOLONG, "token too long");
    }
    strcpy(out, PREFIX);
    sodium_bin2base64(out + sizeof(PREFIX) - 1, len - (sizeof(PREFIX) - 1),
                      (const unsigned char *)text, n,
                      sodium_base64_VARIANT_URLSAFE_NO_PADDING);
    free(text);
    return 0;
}

static int hex_ok(const char *s, size_t n)
{
    if (strlen(s) != n)
        return 0;
    for (size_t i = 0; i < n; i++)
        if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f')))
            return 0;
    return 1;
}

int br_token_decode(const char *text, br_token_t *t, br_err_t *err)
{
    size_t n = text ? strlen(text) : 0;
    if (n > BR_TOKEN_MAX || strncmp(text ? text : "", PREFIX, sizeof(PREFIX) - 1) != 0)
        return br_errf(err, EINVAL, "malformed token: it should start with '%s'",
                       PREFIX);
    unsigned char raw[BR_TOKEN_MAX];
    size_t rawlen;
    if (sodium_base642bin(raw, sizeof(raw) - 1, text + sizeof(PREFIX) - 1,
                          n - (sizeof(PREFIX) - 1), NULL, &rawlen, NULL,
                          sodium_base64_VARIANT_URLSAFE_NO_PADDING) < 0)
        return br_errf(err, EINVAL, "malformed token: not base64url (was it cut short?)");
    json_error_t jerr;
    json_t *j = json_loadb((const char *)raw, rawlen, JSON_REJECT_DUPLICATES, &jerr);
    const char *e, *k, *s;
    int rc = -1;
    if (!j || json_unpack_ex(j, &jerr, JSON_STRICT, "{s:s, s:s, s:s}", "e", &e, "k", &k,
                             "s", &s) < 0) {
        br_errf(err, EINVAL, "malformed token: unreadable contents");
    } else if (strlen(e) == 0 || strlen(e) >= sizeof(t->endpoint)) {
        br_errf(err, EINVAL, "malformed token: bad endpoint");
    } else if (!br_key_valid(k)) {
        br_errf(err, EINVAL, "malformed token: bad coordinator key");
    } else if (!hex_ok(s, BR_TOKEN_SECRET_HEX)) {
        br_errf(err, EINVAL, "malformed token: bad secret");
    } else {
        strcpy(t->endpoint, e);
        strcpy(t->server_key, k);
        strcpy(t->secret, s);
        rc = 0;
    }
    json_decref(j);
    return rc;
}

void br_token_hash(const char *secret, char *hash, char *id)
{
    unsigned char h[32];
    crypto_generichash(h, sizeof(h), (const unsigned char *)secret, strlen(secret),
                       NULL, 0);
    sodium_bin2hex(hash, BR_TOKEN_HASH_HEX + 1, h, sizeof(h));
    if (id)
        br_strlcpy(id, hash, BR_TOKEN_ID_LEN + 1);
}

void br_token_join_keypair(const char *secret, char *public_key, char *secret_key)
{
    static const char label[] = "bramble join key";
    unsigned char seed[crypto_box_SEEDBYTES], pk[crypto_box_PUBLICKEYBYTES],
        sk[crypto_box_SECRETKEYBYTES];
    crypto_generichash(seed, sizeof(seed), (const unsigned char *)secret, strlen(secret),
                       (const unsigned char *)label, sizeof(label) - 1);
    crypto_box_seed_keypair(pk, sk, seed);
    zmq_z85_encode(public_key, pk, sizeof(pk));
    if (secret_key)
        zmq_z85_encode(secret_key, sk, sizeof(sk));
    sodium_memzero(seed, sizeof(seed));
    sodium_memzero(sk, sizeof(sk));
}
