/* spec_tree.h - inside the job spec parser (spec.c): the YAML text read into a tree
 * of nodes that remember their lines, and the error texts that name those lines.
 * Not a public interface: spec.h is. */
#ifndef BRAMBLE_SPEC_TREE_H
#define BRAMBLE_SPEC_TREE_H

#include <stddef.h>

#include "err.h"

#define SPEC_MAX_DEPTH 16     /* nested collections in one document */
#define SPEC_MAX_ENTRIES 1024 /* entries in one mapping or list */
#define SPEC_NO_LINE (-1)     /* an error that belongs to no line */
#define SPEC_SHOW_LEN 48      /* room for a value quoted in an error */

enum { N_SCALAR, N_SEQ, N_MAP };

typedef struct node {
    int type;
    int line;     /* 1-based line in the spec; 0 when it came from --set */
    int plain;    /* scalar written without quotes */
    char *text;   /* scalar text */
    char *key;    /* its key, when this is a mapping value */
    int key_line; /* line of that key; 0 from --set */
    struct node **kids;
    size_t n, cap;
} node_t;

node_t *spec_node_new(int type, int line);
void spec_node_free(node_t *n);
/* Append kid to a collection; frees kid and returns -1 when out of memory. */
int spec_node_push(node_t *n, node_t *kid);
/* The value of key in a mapping, or NULL. */
node_t *spec_find(const node_t *map, const char *key);
/* Index of s in a NULL-terminated list, or -1. */
int spec_in_list(const char *s, const char *const *list);
/* A plain scalar "", "~", "null", "Null" or "NULL": counts as absent. */
int spec_is_null(const node_t *n);
/* Mark a node and its children as coming from --set (line 0). */
void spec_mark_set(node_t *n);
const char *spec_type_name(const node_t *n);

/* A value made safe to quote in an error: printable, valid UTF-8, cut with "..."
 * to fit buf of SPEC_SHOW_LEN bytes. */
const char *spec_show(const char *s, char *buf);
/* "line 7: msg" for spec text, "--set: msg" for --set values (line 0), else msg;
 * returns -1. */
int spec_fail_at(br_err_t *err, int line, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
int spec_oom(br_err_t *err);

/* Parse YAML text into a tree; set_path names the --set being read (NULL for the
 * spec itself). */
int spec_parse_text(const char *text, size_t len, const char *set_path, node_t **root,
                    br_err_t *err);

#endif
