/* fuzz_stream.c - libFuzzer target for what the relay's port takes from anyone and
 * what each end opens: a stream frame's header (br_stream_hdr_decode, proto/stream.c)
 * and the seal of its payload (br_streamseal_open, proto/streamseal.c). The input is
 * a header and a payload as they came. A header either decodes to fields that encode
 * to the same 16 bytes, or is refused with EPROTO and words; a payload opened with a
 * key the input never had passes only unsealed, and only for the relay's own types;
 * and the payload, sealed as an end would, opens to itself at the other end and
 * fails once any byte of it or of its header is changed. */
#include <errno.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "stream.h"
#include "streamseal.h"

#define KEY "8d4b1f0e2a7c39d6e5f40a1b2c3d4e5f60718293a4b5c6d7e8f90a1b2c3d4e5f"

static unsigned char buf[BR_STREAM_CHUNK + BR_STREAM_SEAL];

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    br_stream_hdr_t h;
    br_err_t err = {0};
    if (size < BR_STREAM_HEADER)
        return 0;
    if (br_stream_hdr_decode(data, BR_STREAM_HEADER, &h, &err) < 0) {
        if (!err.text[0] || err.errnum != EPROTO)
            abort(); /* every refusal says why, as a protocol error */
        return 0;
    }
    unsigned char again[BR_STREAM_HEADER];
    br_stream_hdr_encode(&h, again);
    if (memcmp(again, data, BR_STREAM_HEADER) != 0)
        abort(); /* what decodes encodes to the same bytes */
    const uint8_t *p = data + BR_STREAM_HEADER;
    size_t len = size - BR_STREAM_HEADER;
    if (len > BR_STREAM_CHUNK - BR_STREAM_SEAL)
        len = BR_STREAM_CHUNK - BR_STREAM_SEAL;

    /* as it came: never opens as sealed without the key; unsealed only the relay's */
    br_streamseal_t node, cli;
    if (br_streamseal_init(&node, KEY, BR_STREAM_FROM_NODE, &err) < 0 ||
        br_streamseal_init(&cli, KEY, BR_STREAM_FROM_CLI, &err) < 0)
        abort();
    memcpy(buf, p, len);
    size_t n = len;
    int rc = br_streamseal_open(&node, &h, buf, &n, &err);
    if (rc == 0 && ((h.flags & BR_STREAM_SEALED) || n != len ||
                    !(h.type == BR_STREAM_ATTACHED || h.type == BR_STREAM_PING ||
                      h.type == BR_STREAM_CLOSE)))
        abort();
    if (rc < 0 && (!err.text[0] || err.errnum != EPROTO || node.got != 0))
        abort(); /* refused, saying why, and counted nothing */

    /* sealed as an end seals it: opens to itself, in turn, and to nothing changed */
    unsigned char hdr[BR_STREAM_HEADER];
    memcpy(buf, p, len);
    br_streamseal_seal(&cli, hdr, h.type, h.channel, h.stream, h.arg, buf, len);
    size_t sealed = len + BR_STREAM_SEAL;
    br_stream_hdr_t sh;
    if (br_stream_hdr_decode(hdr, sizeof(hdr), &sh, &err) < 0)
        abort();
    unsigned char keep[BR_STREAM_CHUNK];
    memcpy(keep, buf, sealed);
    size_t at = len ? p[0] % sealed : 0; /* a byte the input picks, to change */
    buf[at] ^= 0x01;
    n = sealed;
    if (br_streamseal_open(&node, &sh, buf, &n, &err) == 0)
        abort(); /* a changed byte passed */
    br_stream_hdr_t other = sh;
    other.arg ^= 1;
    memcpy(buf, keep, sealed);
    n = sealed;
    if (br_streamseal_open(&node, &other, buf, &n, &err) == 0)
        abort(); /* a changed header passed */
    memcpy(buf, keep, sealed);
    n = sealed;
    if (br_streamseal_open(&node, &sh, buf, &n, &err) < 0 || n != len ||
        memcmp(buf, p, len) != 0)
        abort(); /* the end's own frame did not open to itself */
    memcpy(buf, keep, sealed);
    n = sealed;
    if (br_streamseal_open(&node, &sh, buf, &n, &err) == 0)
        abort(); /* the same frame again (a replay) passed */
    br_streamseal_fini(&node);
    br_streamseal_fini(&cli);
    return 0;
}
