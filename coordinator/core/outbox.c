/* outbox.c - the wake's messages and log lines, until it commits. */
#include "outbox.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct br_outbox {
    br_msg_t **msgs;
    size_t len, cap;
    uint32_t seq; /* the next order's number */
    char *log;    /* the wake's lines, back to back */
    size_t log_len, log_cap;
};

br_outbox_t *br_outbox_new(void)
{
    br_outbox_t *o = calloc(1, sizeof(*o));
    if (o)
        o->seq = 1;
    return o;
}

void br_outbox_destroy(br_outbox_t **op)
{
    br_outbox_t *o = op ? *op : NULL;
    if (!o)
        return;
    br_outbox_undo(o, (br_outbox_mark_t){0, 0});
    free(o->msgs);
    free(o->log);
    free(o);
    *op = NULL;
}

void br_outbox_post(br_outbox_t *o, br_msg_t *m)
{
    if (!m)
        return;
    if (o->len == o->cap) {
        size_t cap = o->cap ? o->cap * 2 : 64;
        br_msg_t **nb = realloc(o->msgs, cap * sizeof(*nb));
        if (!nb) {
            br_msg_destroy(&m);
            return;
        }
        o->msgs = nb;
        o->cap = cap;
    }
    o->msgs[o->len++] = m;
}

void br_outbox_order(br_outbox_t *o, const void *route, size_t len, const char *type,
                     json_t *body)
{
    br_msg_t *m = br_msg_new(BR_MSG_REQUEST, type, o->seq++);
    if (!m) {
        json_decref(body);
        return;
    }
    br_msg_set_body(m, body);
    br_msg_set_route(m, route, len);
    br_outbox_post(o, m);
}

void br_outbox_ok(br_outbox_t *o, br_msg_t *req, json_t *body)
{
    br_msg_t *r = br_msg_kind(req) == BR_MSG_REQUEST ? br_msg_reply(req) : NULL;
    if (r)
        br_msg_set_body(r, body);
    else
        json_decref(body);
    br_outbox_post(o, r);
}

void br_outbox_fail(br_outbox_t *o, br_msg_t *req, const br_err_t *err)
{
    if (br_msg_kind(req) == BR_MSG_REQUEST)
        br_outbox_post(o, br_msg_reply_error(req, err->errnum ? err->errnum : EINVAL, "%s",
                                             err->text));
}

void br_outbox_log(br_outbox_t *o, const char *line)
{
    size_t len = strlen(line);
    if (o->log_len + len + 1 > o->log_cap) {
        size_t cap = (o->log_cap ? o->log_cap * 2 : 4096) + len;
        char *nb = realloc(o->log, cap);
        if (!nb) {
            fputs(line, stderr);
            return;
        }
        o->log = nb;
        o->log_cap = cap;
    }
    memcpy(o->log + o->log_len, line, len);
    o->log_len += len;
}

br_outbox_mark_t br_outbox_mark(const br_outbox_t *o)
{
    return (br_outbox_mark_t){o->len, o->log_len};
}

void br_outbox_undo(br_outbox_t *o, br_outbox_mark_t to)
{
    while (o->len > to.msgs)
        br_msg_destroy(&o->msgs[--o->len]);
    if (o->log_len > to.log)
        o->log_len = to.log;
}

size_t br_outbox_count(const br_outbox_t *o)
{
    return o->len;
}

const br_msg_t *br_outbox_msg(const br_outbox_t *o, size_t i)
{
    return i < o->len ? o->msgs[i] : NULL;
}

void br_outbox_end(br_outbox_t *o, int committed, void (*send)(void *arg, br_msg_t *m),
                   void *arg)
{
    if (committed && o->log_len)
        fwrite(o->log, 1, o->log_len, stderr);
    o->log_len = 0;
    for (size_t i = 0; i < o->len; i++)
        send(arg, o->msgs[i]);
    o->len = 0;
}
