/* err.c - error text that travels with -1/errno. */
#include "err.h"

#include "util.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

void br_utf8_trim(char *s)
{
    size_t len = strlen(s), i = len;
    /* back over continuation bytes to the last lead byte, at most 3 */
    while (i > 0 && len - i < 4 && ((unsigned char)s[i - 1] & 0xC0) == 0x80)
        i--;
    if (i == 0)
        return;
    unsigned char lead = (unsigned char)s[i - 1];
    size_t need = lead < 0x80 ? 1 : (lead & 0xE0) == 0xC0 ? 2 : (lead & 0xF0) == 0xE0 ? 3
                                   : (lead & 0xF8) == 0xF0                ? 4
                                                                           : 1;
    if (len - (i - 1) < need) /* the last character was cut: drop what is left of it */
        s[i - 1] = '\0';
}

static void vfill(br_err_t *err, int errnum, const char *fmt, va_list ap)
{
    if (err) {
        err->errnum = errnum;
        if (vsnprintf(err->text, sizeof(err->text), fmt, ap) >= (int)sizeof(err->text))
            br_utf8_trim(err->text); /* cut where a character ends, not inside one */
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
