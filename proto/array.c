/* array.c - a job array's index range: "0-99%8" -> pieces, count and limit. */
#include "array.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SHOW 40 /* characters of bad text quoted in an error */

/* A decimal number at *p (digits only), advancing *p; -1 when there is none, -2
 * when it is above BR_ARRAY_MAX_INDEX. */
static long number(const char **p)
{
    const char *s = *p;
    long v = 0;
    int big = 0;
    while (*s >= '0' && *s <= '9') {
        v = v * 10 + (*s - '0');
        if (v > BR_ARRAY_MAX_INDEX)
            big = 1, v = BR_ARRAY_MAX_INDEX + 1;
        s++;
    }
    if (s == *p)
        return -1;
    *p = s;
    return big ? -2 : v;
}

static int bad_form(const char *text, br_err_t *err)
{
    return br_errf(err, EINVAL,
                   "expected a range like 0-99, 0-99%%8 or 1,3,5-9, got '%.*s'%s", SHOW,
                   text, strlen(text) > SHOW ? "..." : "");
}

/* One piece "N" or "N-M" at *p. */
static int piece(const char *text, const char **p, int *lo, int *hi, br_err_t *err)
{
    if (**p == '-')
        return br_errf(err, EINVAL, "indices are not negative, got '%.*s'", SHOW, text);
    long a = number(p), b = a;
    if (a == -1)
        return bad_form(text, err);
    if (**p == '-') {
        (*p)++;
        if (**p == '-')
            return br_errf(err, EINVAL, "indices are not negative, got '%.*s'", SHOW,
                           text);
        if ((b = number(p)) == -1)
            return bad_form(text, err);
    }
    if (a == -2 || b == -2)
        return br_errf(err, ERANGE, "indices are at most %d", BR_ARRAY_MAX_INDEX);
    if (a > b)
        return br_errf(err, EINVAL, "%ld-%ld: the start is above the end", a, b);
    *lo = (int)a;
    *hi = (int)b;
    return 0;
}

int br_array_parse(const char *text, br_array_t *a, br_err_t *err)
{
    memset(a, 0, sizeof(*a));
    if (!text || !*text)
        return bad_form(text ? text : "", err);
    const char *p = text;
    long count = 0;
    for (;;) {
        int lo = 0, hi = 0; /* (set by piece, which gcc -O2 cannot always see) */
        if (a->npieces == BR_ARRAY_MAX_PIECES)
            return br_errf(err, EINVAL, "at most %d comma-separated pieces",
                           BR_ARRAY_MAX_PIECES);
        if (piece(text, &p, &lo, &hi, err) < 0)
            return -1;
        if (a->npieces && lo <= a->piece[a->npieces - 1].hi)
            return br_errf(err, EINVAL,
                           "pieces must rise without overlapping: %d comes after %d",
                           lo, a->piece[a->npieces - 1].hi);
        a->piece[a->npieces].lo = lo;
        a->piece[a->npieces++].hi = hi;
        count += (long)hi - lo + 1;
        if (*p != ',')
            break;
        p++;
    }
    if (*p == '%') {
        p++;
        if (*p == '-')
            return br_errf(err, EINVAL, "%%N: N is at least 1, got '%.*s'", SHOW, text);
        long m = number(&p);
        if (m == -1 || *p)
            return bad_form(text, err);
        if (m == 0)
            return br_errf(err, EINVAL,
                           "%%0: at most 0 running at once would run nothing "
                           "(N is at least 1)");
        if (m == -2 || m > BR_ARRAY_MAX_TASKS)
            return br_errf(err, ERANGE,
                           "%%N: N is 1 to %d (the most tasks in one array), got '%.*s'",
                           BR_ARRAY_MAX_TASKS, SHOW, text);
        a->max = (int)m;
    }
    if (*p)
        return bad_form(text, err);
    if (count > BR_ARRAY_MAX_TASKS)
        return br_errf(err, E2BIG, "%ld tasks, more than %d (the most in one array)",
                       count, BR_ARRAY_MAX_TASKS);
    a->count = (int)count;
    return 0;
}

int br_array_index(const br_array_t *a, int k)
{
    if (k < 0)
        return -1;
    for (int i = 0; i < a->npieces; i++) {
        int n = a->piece[i].hi - a->piece[i].lo + 1;
        if (k < n)
            return a->piece[i].lo + k;
        k -= n;
    }
    return -1;
}

char *br_array_range_text(const br_array_t *a, char *buf, size_t len)
{
    size_t used = 0;
    buf[0] = '\0';
    for (int i = 0; i < a->npieces && used < len; i++) {
        int n =
            a->piece[i].lo == a->piece[i].hi
                ? snprintf(buf + used, len - used, "%s%d", i ? "," : "", a->piece[i].lo)
                : snprintf(buf + used, len - used, "%s%d-%d", i ? "," : "",
                           a->piece[i].lo, a->piece[i].hi);
        if (n < 0)
            break;
        used += (size_t)n;
    }
    return buf;
}
