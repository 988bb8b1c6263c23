/* fuzz_msg.c - libFuzzer target for the message decoder (proto/msg.c): the input
 * is split into header, body and optional data frames, as br_msg_recv would hand
 * them over, and decoded; a decoded message is re-encoded and decoded again. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "msg.h"

/* Layout: [hlen byte][dlen-present byte][header][body...][data] with data the last
 * 1/4 of the rest when present. */
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 2)
        return 0;
    size_t hlen = data[0];
    int has_data = data[1] & 1;
    data += 2;
    size -= 2;
    if (hlen > size)
        hlen = size;
    const uint8_t *hdr = data, *rest = data + hlen;
    size_t rlen = size - hlen, dlen = has_data ? rlen / 4 : 0, blen = rlen - dlen;
    br_err_t err;
    br_msg_t *m = br_msg_decode(hdr, hlen, rest, blen, has_data ? rest + blen : NULL,
                                dlen, &err);
    if (!m)
        return 0;
    unsigned char h2[BR_MSG_HEADER_MIN + BR_MSG_TYPE_MAX];
    size_t h2len = br_msg_encode_header(m, h2);
    char *body = json_dumps(br_msg_body(m), JSON_COMPACT);
    size_t d2len;
    const void *d2 = br_msg_data(m, &d2len);
    br_msg_t *again = br_msg_decode(h2, h2len, body, strlen(body), d2, d2len, &err);
    if (!again || strcmp(br_msg_type(again), br_msg_type(m)) != 0 ||
        br_msg_seq(again) != br_msg_seq(m) || br_msg_kind(again) != br_msg_kind(m))
        abort(); /* what we encode we must decode the same */
    br_msg_destroy(&again);
    free(body);
    br_msg_destroy(&m);
    return 0;
}
