/* conf.h - small YAML files of our own (credentials, saved settings): read into a
 * JSON object of strings, nested mappings and sequences; written back with every
 * scalar single-quoted. Not for job specs (spec.h does those, with line numbers). */
#ifndef BRAMBLE_CONF_H
#define BRAMBLE_CONF_H

#include <jansson.h>
#include <stddef.h>

#include "err.h"

#define BR_CONF_MAX_BYTES (64 * 1024)

/* Parse YAML text whose root is a mapping. Scalars become strings. */
json_t *br_conf_parse(const char *text, size_t len, br_err_t *err);

/* Read a file (at most BR_CONF_MAX_BYTES) and parse it; errors name the path. */
json_t *br_conf_load(const char *path, br_err_t *err);

/* Write obj (strings, integers, reals, booleans, nested objects and arrays) as YAML,
 * atomically, with the given file mode. */
int br_conf_save(const char *path, const json_t *obj, mode_t mode, br_err_t *err);

/* The string at key, or NULL when missing or not a string. */
const char *br_conf_str(const json_t *obj, const char *key);

#endif
