/* stages.h - trees of code that a node fetches while they are still being uploaded
 * (code.stage, docs/files.md "While it uploads"): for each, the user uploading it,
 * its manifest hash and files, and the node it is staged on, the one the job would
 * go to now. That node may read the tree's files (ckpt.read with grant stage:ID)
 * as they are stored, and is told "not yet" (EINPROGRESS) for those still on their
 * way; when the job comes, the scheduler prefers that node, which by then holds
 * most of the tree. A stage ends when its node holds the tree (and is remembered
 * BR_STAGE_KEEP_MS longer, for the job's placement), when the upload stops (no
 * file of the user's stored for BR_STAGE_IDLE_MS), or when the node goes. */
#ifndef BRAMBLE_STAGES_H
#define BRAMBLE_STAGES_H

#include <jansson.h>
#include <stdint.h>

#define BR_STAGE_IDLE_MS 60000         /* an upload silent this long has stopped */
#define BR_STAGE_KEEP_MS (10 * 60000)  /* a tree held is preferred this long */
#define BR_STAGE_MAX 64                /* stages at once: the oldest goes first */

typedef struct {
    int64_t id, user;
    char node[64];
    char mhash[80];
    json_t *files;     /* {content hash: true} of the tree, its listing's too */
    int64_t last_ms;   /* monotonic: made, or a file of the user's stored */
    int64_t held_ms;   /* when its node said it holds the tree (0: not yet) */
} br_stage_t;

typedef struct br_stages br_stages_t;

br_stages_t *br_stages_new(void);
void br_stages_destroy(br_stages_t **s);

/* The stage of user's tree mhash (made when none: files taken), touched now; NULL
 * when out of memory. *fresh: 1 when made now (its node is to be told). */
br_stage_t *br_stages_add(br_stages_t *s, int64_t user, const char *node, const char *mhash,
                          json_t *files, int64_t now_ms, int *fresh);
br_stage_t *br_stages_find(br_stages_t *s, int64_t id);
/* A file of user's was stored now: their stages' uploads go on. */
void br_stages_touch(br_stages_t *s, int64_t user, int64_t now_ms);
/* Node says it holds tree mhash. */
void br_stages_held(br_stages_t *s, const char *node, const char *mhash, int64_t now_ms);
/* The node tree mhash is staged on, or NULL. */
const char *br_stages_node_of(const br_stages_t *s, const char *mhash);
/* End the stages whose upload stopped, whose tree was held long enough, or (alive
 * says no) whose node is gone. */
void br_stages_expire(br_stages_t *s, int64_t now_ms, int (*alive)(void *, const char *),
                      void *arg);

#endif
