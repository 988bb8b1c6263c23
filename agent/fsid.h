/* fsid.h - a job user's identity for file system checks made by the agent itself:
 * while entered, the calling thread's file system uid and gid (setfsuid/setfsgid)
 * and supplementary groups are the job user's, so what the agent opens, stats or
 * lists on a job's behalf (its checkpoint dir, a path it reports) is exactly what
 * that user could, and a root agent tells nobody about files the user cannot see.
 * Only the calling thread changes (ZeroMQ's threads keep theirs), and only file
 * system access: signals and sockets are unaffected. A no-op when the agent already
 * runs as that uid. */
#ifndef BRAMBLE_FSID_H
#define BRAMBLE_FSID_H

#include <sys/types.h>

#include "err.h"

typedef struct br_fsid br_fsid_t;

/* uid and gid to act as; the supplementary groups are those of uid's passwd entry
 * (none when it has none). */
br_fsid_t *br_fsid_new(uid_t uid, gid_t gid, br_err_t *err);
void br_fsid_destroy(br_fsid_t **f);

uid_t br_fsid_uid(const br_fsid_t *f);
gid_t br_fsid_gid(const br_fsid_t *f);

/* Act as the user until br_fsid_leave. 0, or -1 with err (nothing changed). Not
 * nested. f NULL: nothing to do. */
int br_fsid_enter(br_fsid_t *f, br_err_t *err);
/* Back to the agent's own identity. Aborts when that fails: an agent left acting
 * as a job user would be wrong in every later check. */
void br_fsid_leave(br_fsid_t *f);

#endif
