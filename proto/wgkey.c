/* wgkey.c - WireGuard keys (wgkey.h). */
#include "wgkey.h"

#include <errno.h>
#include <sodium.h>
#include <string.h>

static int decode(const char *text, unsigned char key[32])
{
    size_t len = 0;
    if (!text || strlen(text) != BR_WGKEY_B64 - 1 || text[BR_WGKEY_B64 - 2] != '=')
        return -1;
    if (sodium_base642bin(key, 32, text, BR_WGKEY_B64 - 1, NULL, &len, NULL,
                          sodium_base64_VARIANT_ORIGINAL) != 0 || len != 32)
        return -1;
    char back[BR_WGKEY_B64];
    sodium_bin2base64(back, sizeof(back), key, 32, sodium_base64_VARIANT_ORIGINAL);
    return strcmp(back, text) == 0 ? 0 : -1; /* (one text per key: no stray bits) */
}

int br_wgkey_ok(const char *text)
{
    unsigned char key[32];
    int ok = decode(text, key) == 0;
    sodium_memzero(key, sizeof(key));
    return ok;
}

void br_wgkey_private(char out[BR_WGKEY_B64])
{
    unsigned char key[32];
    randombytes_buf(key, sizeof(key));
    key[0] &= 248; /* clamped, as `wg genkey` does */
    key[31] = (unsigned char)((key[31] & 127) | 64);
    sodium_bin2base64(out, BR_WGKEY_B64, key, sizeof(key), sodium_base64_VARIANT_ORIGINAL);
    sodium_memzero(key, sizeof(key));
}

int br_wgkey_public(const char *priv, char out[BR_WGKEY_B64], br_err_t *err)
{
    unsigned char key[32], pub[32];
    if (decode(priv, key) < 0)
        return br_errf(err, EINVAL, "not a WireGuard key (44 characters of base64)");
    int rc = crypto_scalarmult_base(pub, key);
    sodium_memzero(key, sizeof(key));
    if (rc != 0)
        return br_errf(err, EINVAL, "not a usable WireGuard key");
    sodium_bin2base64(out, BR_WGKEY_B64, pub, sizeof(pub), sodium_base64_VARIANT_ORIGINAL);
    return 0;
}
