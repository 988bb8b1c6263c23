/* fuzz_announce.c - libFuzzer target for the LAN announcement decoder
 * (br_announce_decode, proto/announce.c): the input is one received datagram. It
 * either decodes to an announcement that holds what the decoder promises (a valid
 * key, a port 1..65535, a printable endpoint), or is refused with EPROTO and words.
 * A decoded announcement, encoded again, decodes to the same; its endpoint goes
 * through br_announce_split_endpoint as the agent would do. */
#include <errno.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "announce.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    br_announce_t a, again;
    br_err_t err = {0};
    if (br_announce_decode(data, size, &a, &err) < 0) {
        if (!err.text[0] || err.errnum != EPROTO)
            abort(); /* every refusal says why, as a protocol error */
        return 0;
    }
    size_t n = strnlen(a.endpoint, sizeof(a.endpoint));
    if (!br_key_valid(a.key) || a.port < 1 || a.port > 65535 || n == 0 ||
        n == sizeof(a.endpoint))
        abort();
    for (size_t i = 0; i < n; i++)
        if (a.endpoint[i] < 0x21 || a.endpoint[i] > 0x7e)
            abort();
    /* the same fields in fewer bytes than received can always be sent again */
    char buf[BR_ANNOUNCE_MAX];
    size_t len = 0;
    if (br_announce_encode(&a, buf, sizeof(buf), &len, &err) < 0 || len > size)
        abort();
    if (br_announce_decode(buf, len, &again, &err) < 0 || strcmp(again.key, a.key) != 0 ||
        again.port != a.port || strcmp(again.endpoint, a.endpoint) != 0)
        abort(); /* what we encode we must decode the same */
    char host[BR_ENDPOINT_MAX];
    int port = 0;
    if (br_announce_split_endpoint(a.endpoint, host, sizeof(host), &port, &err) == 0 &&
        (port < 1 || port > 65535 || !host[0] || strlen(host) >= n))
        abort();
    return 0;
}
