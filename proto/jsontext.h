/* jsontext.h - compact JSON text of a jansson value: byte for byte what
 * json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY) writes (with JSON_SORT_KEYS when
 * asked), written straight into one growing buffer. jansson's own writer goes
 * through a callback per piece and decodes every string a code point at a time;
 * every job row, job shape and message body the coordinator writes is dumped, so
 * that cost is paid on every submission. */
#ifndef BRAMBLE_JSONTEXT_H
#define BRAMBLE_JSONTEXT_H

#include <jansson.h>
#include <stddef.h>

#define BR_JSONTEXT_SORT_KEYS 0x1 /* object keys in byte order, as JSON_SORT_KEYS */
#define BR_JSONTEXT_MAX_DEPTH 2048 /* arrays and objects inside one another */

/* The text of v (NUL-terminated, malloc'd; its length in *len when len is not
 * NULL). NULL when v is NULL, when a string or key is not valid UTF-8 (as
 * json_dumps), when the nesting is deeper than BR_JSONTEXT_MAX_DEPTH, or when out
 * of memory. */
char *br_jsontext(const json_t *v, int flags, size_t *len);

#endif
