/* jobuser.h - whom a job runs as on this node. The coordinator's job.run order
 * names the job's owner (owner_id: a number never reused for another user) and may
 * name a local account the admin mapped to that user (unix_user). The rule:
 *   1. unix_user, when that account exists on this node;
 *   2. else, with --job-uids FIRST-LAST, uid FIRST+owner_id and gid of the same
 *      number (refused when that passes LAST), so that every user's jobs have their
 *      own uid, the same on every node, and cannot read, signal or overwrite each
 *      other's; such a uid needs no passwd entry: its HOME is DIR/homes/UID, made by
 *      the agent (mode 0700, owned by the uid);
 *   3. else --job-user, else the agent's own user (also when the order carries no
 *      owner_id, as from an older coordinator).
 * A root agent never runs a job as root unless started with --allow-root-jobs: such
 * a start is refused with a reason. */
#ifndef BRAMBLE_JOBUSER_H
#define BRAMBLE_JOBUSER_H

#include <stdint.h>
#include <sys/types.h>

#include "err.h"

typedef struct br_jobusers br_jobusers_t;

typedef struct {
    const char *job_user;  /* --job-user, NULL or "" for none */
    uint32_t first, last;  /* --job-uids; 0 and 0 for none */
    int allow_root;        /* --allow-root-jobs */
    const char *data_dir;  /* homes go to DATA_DIR/homes/UID */
    uid_t agent_uid;       /* geteuid() of the agent */
} br_jobusers_opts_t;

/* One job's identity. */
typedef struct {
    char user[80];  /* for br_task_opts_t.user: "" (the agent's own), a name, or
                       "#UID:GID" */
    uid_t uid;
    gid_t gid;
    char home[1200]; /* the HOME to give the job when the agent made one, else "" */
} br_jobuser_t;

br_jobusers_t *br_jobusers_new(const br_jobusers_opts_t *o, br_err_t *err);
void br_jobusers_destroy(br_jobusers_t **u);

/* Whom to run a job of owner owner_id (< 1: not given) with unix_user (NULL: not
 * given) as. 0 and out filled (a home made when needed), or -1 with err saying why
 * the job may not start. */
int br_jobusers_resolve(const br_jobusers_t *u, int64_t owner_id, const char *unix_user,
                        br_jobuser_t *out, br_err_t *err);

/* Make a job's checkpoint dir (mkdir -p) before it starts, so that a job whose uid
 * may not create it is not left to fail on its own. First as the job's uid and
 * gid (fsid.h: what the job itself could make, symlinks followed with its rights);
 * when that is refused and the agent is root, by root, each dir it makes handed to
 * the job's uid, only along real directories (or root's own symlinks in dirs only
 * root may write), only below a directory that is root's and not writable by
 * others, and never in the system's trees (/etc, /usr, /var, ..., nor / itself).
 * A dir that is there already is left as it is. NULL or "": nothing to make. 0,
 * or -1 with err "checkpoint.dir DIR: cannot be made for uid U: why". */
int br_jobuser_make_dir(const br_jobuser_t *who, const char *dir, br_err_t *err);

/* A warning for the agent's start, or NULL: a root agent with no way to run jobs
 * as anyone but root. */
const char *br_jobusers_warning(const br_jobusers_t *u);
/* That warning when it means that this agent refuses every job, or NULL: the
 * coordinator is told, so that it places nothing here and says why. */
const char *br_jobusers_refuses_all(const br_jobusers_t *u);

/* Parse "FIRST-LAST" (1 <= FIRST <= LAST < 2^31). */
int br_jobusers_parse_range(const char *text, uint32_t *first, uint32_t *last,
                            br_err_t *err);

#endif
