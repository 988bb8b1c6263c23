/* fuzz_jsontext.c - libFuzzer target for the JSON writer (proto/jsontext.c): any
 * JSON the input parses to is written by jansson and by br_jsontext, with and
 * without sorted keys, and the two texts must be the same bytes. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "jsontext.h"

static void same(const json_t *v, int sorted)
{
    char *want = json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY | (sorted ? JSON_SORT_KEYS : 0));
    size_t len = 0;
    char *got = br_jsontext(v, sorted ? BR_JSONTEXT_SORT_KEYS : 0, &len);
    /* both refuse (too deep for one of them) or both write the same */
    if (got && want && (strcmp(got, want) != 0 || len != strlen(want)))
        abort();
    if (got && !want)
        abort(); /* (jansson writes whatever it parsed) */
    free(want);
    free(got);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    json_t *v = json_loadb((const char *)data, size, JSON_DECODE_ANY | JSON_ALLOW_NUL, NULL);
    if (!v)
        return 0;
    same(v, 0);
    same(v, 1);
    json_decref(v);
    return 0;
}
