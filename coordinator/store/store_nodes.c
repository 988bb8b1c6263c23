/* store_nodes.c - the nodes' rows. */
#include "store_int.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int br_store_node_save(br_store_t *s, const json_t *node, br_err_t *err)
{
    static const char *const need[] = {"name", "pubkey", "state"};
    if (!json_is_object(node))
        return br_errf(err, EINVAL, "a node must be a JSON object");
    for (size_t i = 0; i < NFIELDS(need); i++) {
        const json_t *v = json_object_get(node, need[i]);
        if (!json_is_string(v) || json_string_length(v) == 0 ||
            json_string_length(v) > SHORT_MAX)
            return br_errf(err, EINVAL, "a node needs a string '%s'", need[i]);
    }
    sqlite3_stmt *st = s->st[ST_NODE_SAVE];
    if (br_st_bind_field(s, st, 1, F_STR, json_object_get(node, "name"), "save node", err) ||
        br_st_bind_field(s, st, 2, F_OBJECT, node, "save node", err)) {
        br_st_reset(st);
        return -1;
    }
    return br_st_run(s, st, "save node", err);
}

int br_store_node_delete(br_store_t *s, const char *name, br_err_t *err)
{
    if (br_st_check_text(name, SHORT_MAX, 0, "node name", err) < 0)
        return -1;
    sqlite3_stmt *st = s->st[ST_NODE_DELETE];
    if (br_st_bind_text(st, 1, name))
        return br_st_binderr(s, st, "delete node", err);
    if (br_st_run(s, st, "delete node", err) < 0)
        return -1;
    if (sqlite3_changes(s->db) == 0)
        return br_errf(err, ENOENT, "no node '%.64s'", name);
    return 0;
}

static json_t *node_row(sqlite3_stmt *st, br_err_t *err)
{
    json_t *o = br_st_col_json(st, 0);
    return br_st_row_done(o, !json_is_object(o), "node", err);
}

json_t *br_store_node_list(br_store_t *s, br_err_t *err)
{
    return br_st_list_rows(s, s->st[ST_NODE_LIST], node_row, "list nodes", err);
}
