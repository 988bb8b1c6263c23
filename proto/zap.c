/* zap.c - the ZAP handler: maps a peer's proven CURVE key to allow/deny + User-Id. */
#include "zap.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <zmq.h>

#include "cred.h"
#include "sock.h"

#define ZAP_ENDPOINT "inproc://zeromq.zap.01"

struct br_zap {
    void *sock;
    br_zap_check_fn check;
    void *arg;
};

br_zap_t *br_zap_new(void *ctx, br_zap_check_fn check, void *arg, br_err_t *err)
{
    br_zap_t *z = calloc(1, sizeof(*z));
    if (!z)
        return br_errp(err, ENOMEM, "out of memory");
    z->check = check;
    z->arg = arg;
    z->sock = zmq_socket(ctx, ZMQ_REP);
    if (!z->sock || zmq_bind(z->sock, ZAP_ENDPOINT) < 0) {
        int e = errno;
        br_sock_close(&z->sock);
        free(z);
        return br_errp(err, e, "ZAP handler: %s", zmq_strerror(e));
    }
    return z;
}

void br_zap_destroy(br_zap_t **z)
{
    if (z && *z) {
        br_sock_close(&(*z)->sock);
        free(*z);
        *z = NULL;
    }
}

void *br_zap_socket(br_zap_t *z)
{
    return z->sock;
}

/* Request frames: version, request id, domain, address, identity, mechanism,
 * credentials... (RFC 27). Reply: version, request id, status, text, user, meta. */
static void handle_one(br_zap_t *z, zmq_msg_t *f, int n)
{
    char key[BR_KEY_LEN + 1] = "";
    const char *status = "400", *text = "refused";
    if (n >= 7 && zmq_msg_size(&f[0]) == 3 && memcmp(zmq_msg_data(&f[0]), "1.0", 3) == 0 &&
        zmq_msg_size(&f[5]) == 5 && memcmp(zmq_msg_data(&f[5]), "CURVE", 5) == 0 &&
        zmq_msg_size(&f[6]) == 32) {
        zmq_z85_encode(key, zmq_msg_data(&f[6]), 32);
        if (z->check(z->arg, key) == 0) {
            status = "200";
            text = "OK";
        }
    }
    const char *ver = "1.0";
    zmq_send(z->sock, ver, 3, ZMQ_SNDMORE);
    if (n >= 2)
        zmq_send(z->sock, zmq_msg_data(&f[1]), zmq_msg_size(&f[1]), ZMQ_SNDMORE);
    else
        zmq_send(z->sock, "", 0, ZMQ_SNDMORE);
    zmq_send(z->sock, status, 3, ZMQ_SNDMORE);
    zmq_send(z->sock, text, strlen(text), ZMQ_SNDMORE);
    zmq_send(z->sock, key, strcmp(status, "200") == 0 ? strlen(key) : 0, ZMQ_SNDMORE);
    zmq_send(z->sock, "", 0, 0);
}

void br_zap_handle(br_zap_t *z)
{
    for (;;) {
        zmq_msg_t f[8];
        int n = 0, more = 1;
        while (more) {
            zmq_msg_t tmp, *p = n < 8 ? &f[n] : &tmp;
            zmq_msg_init(p);
            if (zmq_msg_recv(p, z->sock, n == 0 ? ZMQ_DONTWAIT : 0) < 0) {
                zmq_msg_close(p);
                for (int i = 0; i < n; i++)
                    zmq_msg_close(&f[i]);
                return;
            }
            more = zmq_msg_more(p);
            if (p == &tmp)
                zmq_msg_close(p);
            else
                n++;
        }
        handle_one(z, f, n);
        for (int i = 0; i < n; i++)
            zmq_msg_close(&f[i]);
    }
}
