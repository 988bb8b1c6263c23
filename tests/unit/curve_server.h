/* curve_server.h - the loop of a CURVE server thread in a unit test (test_msg.c,
 * test_upload.c): its ZAP handler's requests and its ROUTER's messages, served in
 * turn until told to stop, and never past a minute (a stuck test ends). Include
 * after cmocka.h. */
#ifndef BRAMBLE_TEST_CURVE_SERVER_H
#define BRAMBLE_TEST_CURVE_SERVER_H

#include <errno.h>
#include <stdatomic.h>
#include <zmq.h>

#include "util.h"
#include "zap.h"

/* Serve zap and router (serve(arg) when the router has messages) until *stop. */
static inline void curve_server_loop(br_zap_t *zap, void *router, atomic_int *stop,
                                     void (*serve)(void *), void *arg)
{
    int64_t deadline = br_mono_ms() + 60000; /* never outlive a stuck test */
    while (!atomic_load(stop) && br_mono_ms() < deadline) {
        zmq_pollitem_t items[] = {{br_zap_socket(zap), 0, ZMQ_POLLIN, 0},
                                  {router, 0, ZMQ_POLLIN, 0}};
        int n = zmq_poll(items, 2, 50);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            break;
        if (items[0].revents & ZMQ_POLLIN)
            br_zap_handle(zap);
        if (items[1].revents & ZMQ_POLLIN)
            serve(arg);
    }
}

#endif
