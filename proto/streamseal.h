/* streamseal.h - what seals a stream's frames end to end (proto/PROTOCOL.md, section
 * 13): the CLI and the agent each get the stream's key from the coordinator over
 * their own CURVE connection, and every frame one end sends the other carries its
 * payload encrypted and both header and payload authenticated (ChaCha20-Poly1305,
 * the header as associated data), so that the relay between them passes bytes it
 * can neither read nor change. Each direction numbers its frames from 0 (the
 * nonce: the direction and that number), so a frame dropped, replayed, reordered or
 * sent back to its sender fails its check. The relay's own frames (ATTACHED, PING,
 * its CLOSE) are not sealed and say nothing an end trusts beyond "closed". */
#ifndef BRAMBLE_STREAMSEAL_H
#define BRAMBLE_STREAMSEAL_H

#include <stddef.h>
#include <stdint.h>

#include "err.h"
#include "stream.h"

#define BR_STREAM_KEY 32                  /* bytes of a stream's key */
#define BR_STREAM_KEY_HEX (2 * BR_STREAM_KEY) /* ... as hex characters */
#define BR_STREAM_SEAL 16                 /* bytes a sealed payload grows by */

typedef enum { BR_STREAM_FROM_CLI = 0, BR_STREAM_FROM_NODE = 1 } br_stream_side_t;

typedef struct {
    unsigned char key[BR_STREAM_KEY];
    uint8_t side;  /* which end this is: what it sends goes in this direction */
    uint64_t sent; /* frames sealed so far */
    uint64_t got;  /* frames opened so far */
} br_streamseal_t;

/* A new random key, as hex and a NUL. */
void br_streamseal_key(char out[BR_STREAM_KEY_HEX + 1]);
/* hex is a key (BR_STREAM_KEY_HEX hex characters). */
int br_streamseal_key_ok(const char *hex);

/* The seal of the end side of a stream with key hex: 0, or -1 with err (not a key). */
int br_streamseal_init(br_streamseal_t *s, const char *hex, br_stream_side_t side,
                       br_err_t *err);
/* Forget the key. */
void br_streamseal_fini(br_streamseal_t *s);

/* Seal buf (len bytes, and room for BR_STREAM_SEAL more) in place as this end's next
 * frame, its header (flag BR_STREAM_SEALED) written into hdr. */
void br_streamseal_seal(br_streamseal_t *s, unsigned char hdr[BR_STREAM_HEADER], uint8_t type,
                        uint8_t channel, uint32_t stream, uint64_t arg, void *buf, size_t len);
/* Send a sealed frame of stream on sock (a DEALER): buf holds len bytes of payload
 * and room for BR_STREAM_SEAL more, and is encrypted in place. 0, or -1 with errno. */
int br_streamseal_send_buf(br_streamseal_t *s, void *sock, uint8_t type, uint8_t channel,
                           uint32_t stream, uint64_t arg, void *buf, size_t len);
/* The same, buf (malloc'd) handed to ZeroMQ, which sends it as it is and frees it
 * (freed at once when the send failed): no copy on the way out. */
int br_streamseal_send_owned(br_streamseal_t *s, void *sock, uint8_t type, uint8_t channel,
                             uint32_t stream, uint64_t arg, void *buf, size_t len);
/* The same for a short payload that is not to be changed (at most
 * BR_STREAM_REASON_MAX bytes; NULL with len 0: none). */
int br_streamseal_send(br_streamseal_t *s, void *sock, uint8_t type, uint8_t channel,
                       uint32_t stream, uint64_t arg, const void *payload, size_t len);

/* A frame that came for this end: a sealed one is checked and its payload (buf,
 * *len bytes) decrypted in place, *len made the plain length; an unsealed one
 * passes only when the relay may send it (ATTACHED, PING, CLOSE). 0, or -1 with err
 * naming what was wrong (then the stream is to be closed). */
int br_streamseal_open(br_streamseal_t *s, const br_stream_hdr_t *h, void *buf, size_t *len,
                       br_err_t *err);

#endif
