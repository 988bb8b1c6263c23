/* limits.h - the limit flags that user add, user set and class create share
 * (--max-gpus, --max-jobs, --max-pending, --gpu-hours-week, --max-priority,
 * --share, --rpm): their getopt entries, their values into the "limits" object of
 * user.add and user.set (proto/PROTOCOL.md), and such an object in words. */
#ifndef BRAMBLE_CLI_LIMITS_H
#define BRAMBLE_CLI_LIMITS_H

#include <getopt.h>
#include <jansson.h>
#include <stddef.h>

#include "cli.h"

/* The getopt_long entries of the limit flags; a command's own options must not
 * use the letters G, J, P, W, R, S or Q. */
#define CLI_LIMIT_OPTS                                                      \
    {"max-gpus", required_argument, NULL, 'G'},                             \
        {"max-jobs", required_argument, NULL, 'J'},                         \
        {"max-pending", required_argument, NULL, 'P'},                      \
        {"gpu-hours-week", required_argument, NULL, 'W'},                   \
        {"max-priority", required_argument, NULL, 'R'},                     \
        {"share", required_argument, NULL, 'S'},                            \
        {"rpm", required_argument, NULL, 'Q'}

/* Option c (what getopt_long returned) with its value into limits: a number, or
 * "none" (null: the limit is lifted; not for --share). 1 when c is not a limit
 * option, -1 after a usage error naming the flag, 0 when taken. */
int cli_limit_opt(const cli_t *cli, int c, const char *arg, json_t *limits);

/* "max-gpus 2, share 3" of a limits object, or "none". Returns buf. */
const char *cli_limits_text(const json_t *limits, char *buf, size_t len);

#endif
