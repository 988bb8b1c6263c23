/* err.c - error text that travels with -1/errno. */
#include "err.h"

#include "util.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

static void vfill(br_err_t *err, int errnum, const char *fmt, va_list ap)
{
    if (err) {
        err->errnum = errnum;
        vsnprintf(err->text, sizeof(err->text), fmt, ap);
    }
    errno = errnum;
}

int br_errf(br_err_t *err, int errnum, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vfill(err, errnum, fmt, ap);
    va_end(ap);
    return -1;
}

void *br_errp(br_err_t *err, int errnum, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vfill(err, errnum, fmt, ap);
    va_end(ap);
    return NULL;
}

void br_err_prefix(br_err_t *err, const char *fmt, ...)
{
    if (!err)
        return;
    char prefix[BR_ERR_TEXT], old[BR_ERR_TEXT];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(prefix, sizeof(prefix), fmt, ap);
    va_end(ap);
    memcpy(old, err->text, sizeof(old));
    size_t n = strlen(prefix);
    memcpy(err->text, prefix, n);
    if (n + 2 < sizeof(err->text)) {
        memcpy(err->text + n, ": ", 2);
        n += 2;
    }
    br_strlcpy(err->text + n, old, sizeof(err->text) - n);
}
