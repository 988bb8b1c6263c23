/* api_ckpt.c - the requests about checkpoints' copies: ckpt.stored from a node (how
 * a replica's or a restore's pull went; replicas.h), job.purge (an ended job's
 * replicas dropped now; replkeep.h), and checkpoint.open, checkpoint.read and
 * checkpoint.close (a checkpoint pulled to a user's machine; ckptpull.h). Each
 * decodes its body strictly, checks who may, and leaves the work to its module. */
#include "api.h"

#include <errno.h>

#include "ckptpull.h"
#include "replicas.h"
#include "replkeep.h"

/* ckpt.stored (PROTOCOL.md section 5): only pulls ordered to the calling node are
 * taken. */
void br_api_ckpt_stored(br_coord_t *c, br_msg_t *m, const br_caller_t *who)
{
    json_int_t job, step = -1, received = 0, deduped = 0;
    const char *hash, *path, *error = NULL;
    int restore = 0, errnum = 0;
    br_err_t err = {0};
    if (br_msg_unpack(m, &err, "{s:I, s?I, s:s, s:s, s?b, s?I, s?I, s?i, s?s}", "job",
                      &job, "step", &step, "hash", &hash, "path", &path, "restore",
                      &restore, "received", &received, "deduped", &deduped, "errnum",
                      &errnum, "error", &error) < 0) {
        br_reply_fail(c, m, &err);
        return;
    }
    br_replica_stored_t s = {job, step, hash, path, restore, received, deduped, errnum,
                             error};
    if (br_replicas_stored(c, who->name, &s, &err) < 0)
        br_reply_fail(c, m, &err);
    else
        br_reply_ok(c, m, json_object());
}

/* job.purge {"id"}: the replicas of a job that has ended, dropped now. */
void br_api_job_purge(br_coord_t *c, br_msg_t *m, const br_caller_t *who)
{
    json_int_t id;
    br_err_t err;
    if (br_msg_unpack(m, &err, "{s:I}", "id", &id) < 0) {
        br_reply_fail(c, m, &err);
        return;
    }
    json_t *job = br_store_job_get(c->store, id, NULL);
    int dropped = 0, forgotten = 0;
    if (!job || !br_coord_may_see(who, job)) {
        br_errf(&err, ENOENT, "no job %lld", (long long)id);
        br_reply_fail(c, m, &err);
    } else if (br_replkeep_purge(c, job, &dropped, &forgotten, &err) < 0) {
        br_reply_fail(c, m, &err);
    } else {
        br_reply_ok(c, m, json_pack("{s:I, s:i, s:i}", "id", id, "dropped", dropped,
                                    "forgotten", forgotten));
    }
    json_decref(job);
}

/* checkpoint.open {"job", "step"?}: a pull of a checkpoint of a job the caller may
 * see, owned by the caller's key. */
void br_api_checkpoint_open(br_coord_t *c, br_msg_t *m, const br_caller_t *who)
{
    json_int_t id, step = -1;
    br_err_t err;
    if (br_msg_unpack(m, &err, "{s:I, s?I}", "job", &id, "step", &step) < 0) {
        br_reply_fail(c, m, &err);
        return;
    }
    json_t *row = br_store_job_get(c->store, id, NULL), *answer = NULL;
    if (!row || !br_coord_may_see(who, row))
        br_errf(&err, ENOENT, "no job %lld", (long long)id);
    else
        answer = br_ckptpull_open(c, br_msg_user(m), id, step, &err);
    json_decref(row);
    if (answer)
        br_reply_ok(c, m, answer);
    else
        br_reply_fail(c, m, &err);
}

/* checkpoint.read {"xfer", "path", "hash", "offset"}: answered when the holder
 * answers (ckptpull.h), so only a refusal is answered here. */
void br_api_checkpoint_read(br_coord_t *c, br_msg_t *m, const br_caller_t *who)
{
    (void)who;
    const char *xfer, *path, *hash;
    json_int_t off;
    br_err_t err;
    if (br_msg_unpack(m, &err, "{s:s, s:s, s:s, s:I}", "xfer", &xfer, "path", &path,
                      "hash", &hash, "offset", &off) < 0) {
        br_reply_fail(c, m, &err);
        return;
    }
    br_msg_t *answer = br_msg_reply(m);
    if (!answer)
        br_errf(&err, ENOMEM, "out of memory");
    else if (br_ckptpull_read(c, br_msg_user(m), xfer, path, hash, off, answer, &err) == 0)
        return; /* the pull has the answer now */
    br_msg_destroy(&answer);
    br_reply_fail(c, m, &err);
}

/* checkpoint.close {"xfer"}: closing a pull that is gone is no fault. */
void br_api_checkpoint_close(br_coord_t *c, br_msg_t *m, const br_caller_t *who)
{
    (void)who;
    const char *xfer;
    br_err_t err;
    if (br_msg_unpack(m, &err, "{s:s}", "xfer", &xfer) < 0) {
        br_reply_fail(c, m, &err);
        return;
    }
    br_ckptpull_close(c, br_msg_user(m), xfer);
    br_reply_ok(c, m, json_object());
}
