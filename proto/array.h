/* array.h - a job array's index range, the spec's `array:` field (docs/spec.md):
 * "0-99" (100 tasks, indices 0 to 99), "0-99%8" (at most 8 of them running at
 * once), "1,3,5-9%2" (pieces in rising order). Shared by the spec parser (the CLI's
 * early check and the coordinator's) and the coordinator, which makes one task per
 * index. */
#ifndef BRAMBLE_ARRAY_H
#define BRAMBLE_ARRAY_H

#include <stddef.h>

#include "err.h"

#define BR_ARRAY_MAX_TASKS 10000  /* tasks in one array at most */
#define BR_ARRAY_MAX_INDEX 999999 /* the highest index */
#define BR_ARRAY_MAX_PIECES 64    /* comma-separated pieces */
#define BR_ARRAY_TEXT_MAX 1024    /* the normalised range text, NUL included */

typedef struct {
    struct {
        int lo, hi; /* lo <= hi */
    } piece[BR_ARRAY_MAX_PIECES];
    int npieces;
    int count; /* indices in all, 1 .. BR_ARRAY_MAX_TASKS */
    int max;   /* at most this many tasks running at once; 0: no limit */
} br_array_t;

/* Parse text ("0-99%8"). On error -1 with err saying what is wrong, without a
 * field name ("9-3: the start is above the end"); the caller names the field. */
int br_array_parse(const char *text, br_array_t *a, br_err_t *err);

/* The k-th index (0 <= k < count), in rising order; -1 when k is out of range. */
int br_array_index(const br_array_t *a, int k);

/* The pieces without the limit, normalised: "0-99", "1,3,5-9" (for listings:
 * "12[0-99]"). Returns buf. */
char *br_array_range_text(const br_array_t *a, char *buf, size_t len);

#endif
