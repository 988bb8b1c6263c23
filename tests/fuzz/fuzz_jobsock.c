/* fuzz_jobsock.c - libFuzzer target for the decoder of requests jobs send to their
 * agent (proto/jobsock.c): any bytes either decode to a request that holds what the
 * decoder promises (a checkpoint: a canonical absolute path, a step >= 0; progress:
 * no path, a step >= 0 or -1 for none), or give an error with
 * words in it. A decoded request, encoded again, decodes to the same. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "jobsock.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    br_jobsock_req_t req, again;
    br_err_t err = {0};
    if (br_jobsock_decode(data, size, &req, &err) < 0) {
        if (!err.text[0] || err.errnum == 0)
            abort(); /* every refusal says why */
        return 0;
    }
    if (strcmp(req.type, "progress") == 0) { /* bramble progress [STEP] */
        if (req.path[0] || req.step < -1)
            abort();
        json_t *p = req.step >= 0 ? json_pack("{s:s, s:I}", "type", "progress", "step",
                                               (json_int_t)req.step)
                                  : json_pack("{s:s}", "type", "progress");
        char *t = p ? json_dumps(p, JSON_COMPACT) : NULL;
        if (!t || br_jobsock_decode(t, strlen(t), &again, &err) < 0 ||
            strcmp(again.type, "progress") != 0 || again.step != req.step)
            abort();
        free(t);
        json_decref(p);
        return 0;
    }
    size_t n = strnlen(req.path, sizeof(req.path));
    if (n == sizeof(req.path) || req.path[0] != '/' || req.step < 0 ||
        strcmp(req.type, "checkpoint") != 0 || strstr(req.path, "//") ||
        strstr(req.path, "/../") || strstr(req.path, "/./") || req.path[n - 1] == '/')
        abort();
    json_t *obj = json_pack("{s:s, s:s, s:I}", "type", req.type, "path", req.path, "step",
                            (json_int_t)req.step);
    char *text = obj ? json_dumps(obj, JSON_COMPACT) : NULL;
    if (!text || br_jobsock_decode(text, strlen(text), &again, &err) < 0 ||
        strcmp(again.path, req.path) != 0 || again.step != req.step)
        abort(); /* what we encode we must decode the same */
    free(text);
    json_decref(obj);
    return 0;
}
