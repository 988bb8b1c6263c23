/* streamend.h - one end of a stream (stream.h) as the CLI and the agent both run
 * it: local descriptors that feed channels (read here, sent as DATA within the
 * credit the other end granted) and local descriptors that channels go to (what
 * came is queued, written out as the descriptor takes it, and granted back as
 * credit only once written, so a descriptor that does not drain stalls its own
 * stream and buffers at most a window). EOFs pass both ways: a source that ends
 * sends EOF on its channel; an EOF received closes its sink once drained (a
 * socket is shut down for writing instead, and a descriptor that is also a
 * source is left open). A sink that fails (EPIPE: the process closed its stdin)
 * drops what comes after, granting it back all the same. Never blocks: every
 * descriptor is non-blocking. */
#ifndef BRAMBLE_STREAMEND_H
#define BRAMBLE_STREAMEND_H

#include <stddef.h>
#include <stdint.h>
#include <zmq.h>

#include "stream.h"
#include "streamseal.h"

#define BR_STREAMEND_CHANNELS 3

typedef struct br_streamend br_streamend_t;

/* The end side of stream, sending on sock (a DEALER connected to the relay), its
 * frames sealed with key (hex; streamseal.h). NULL with err (not a key, out of
 * memory). */
br_streamend_t *br_streamend_new(void *sock, uint32_t stream, const char *key,
                                 br_stream_side_t side, br_err_t *err);
/* Closes the descriptors it was given (each once). */
void br_streamend_destroy(br_streamend_t **e);

/* fd feeds channel ch / channel ch goes to fd (taken: closed at destroy, or at its
 * EOF). is_socket: a TCP connection (shut down for writing at EOF, not closed). */
void br_streamend_source(br_streamend_t *e, int ch, int fd);
void br_streamend_sink(br_streamend_t *e, int ch, int fd, int is_socket);

/* Poll items for what this end waits on now (at most 2 * BR_STREAMEND_CHANNELS). */
int br_streamend_poll(const br_streamend_t *e, zmq_pollitem_t *items, int max);

/* Move what can move: sources read within credit and sent, sinks written, credit
 * granted back. 0, or -1 with errno when a send failed. */
int br_streamend_turn(br_streamend_t *e);

/* Send one of the caller's frames to the other end (WINCH, EXIT, CLOSE), sealed.
 * 0, or -1 with errno. */
int br_streamend_send(br_streamend_t *e, uint8_t type, uint8_t channel, uint64_t arg,
                      const void *payload, size_t len);

/* Every frame that came for this stream, first: a sealed one checked and its payload
 * (buf, *len bytes) decrypted in place; an unsealed one let through only when the
 * relay may send it. 0, or -1 with err (then the stream is to be closed). */
int br_streamend_open(br_streamend_t *e, const br_stream_hdr_t *h, void *buf, size_t *len,
                      br_err_t *err);

/* A frame for this stream, opened (DATA, CREDIT, EOF, ATTACHED; others are the
 * caller's):
 * 0, or -1 with err when the other end broke the protocol (data beyond the window,
 * on a channel with no sink). */
int br_streamend_frame(br_streamend_t *e, const br_stream_hdr_t *h, const void *payload,
                       size_t len, br_err_t *err);

int br_streamend_attached(const br_streamend_t *e);
/* Every source has ended (its EOF sent). */
int br_streamend_sources_done(const br_streamend_t *e);
/* Every sink has its EOF and is written out (or has no sink at all). */
int br_streamend_sinks_done(const br_streamend_t *e);
/* Bytes waiting for a sink. */
size_t br_streamend_queued(const br_streamend_t *e);

#endif
