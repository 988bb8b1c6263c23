/* err.h - error text that travels with -1/errno: "what was wrong", in words. */
#ifndef BRAMBLE_ERR_H
#define BRAMBLE_ERR_H

#define BR_ERR_TEXT 512 /* room for a refusal that names five files */

typedef struct {
    int errnum;              /* errno-style code, 0 when unset */
    char text[BR_ERR_TEXT];  /* human-readable reason, never ends in newline */
} br_err_t;

/* Fill err (may be NULL) with errnum and a formatted reason, set errno to errnum
 * and return -1, so callers can write: return br_errf(err, EINVAL, "..."). */
int br_errf(br_err_t *err, int errnum, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Like br_errf, but returns NULL for functions that return pointers. */
void *br_errp(br_err_t *err, int errnum, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Prefix err->text with "prefix: " (keeps errnum). */
void br_err_prefix(br_err_t *err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* s was cut at a byte count: drop a last character left incomplete, so that what
 * remains is as valid UTF-8 as it was before the cut. */
void br_utf8_trim(char *s);

#endif
