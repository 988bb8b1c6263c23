/* limits.c - the limit flags of user add, user set and class create, parsed into
 * the limits object the coordinator takes, and that object in words. The ranges
 * are the coordinator's to check (it refuses a value out of range by name). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "limits.h"
#include "util.h"

int cli_limit_opt(const cli_t *cli, int c, const char *arg, json_t *limits)
{
    static const struct {
        int c;
        const char *flag, *key;
        int real;
    } opts[] = {{'G', "max-gpus", "max_gpus", 0},        {'J', "max-jobs", "max_jobs", 0},
                {'P', "max-pending", "max_pending", 0},  {'W', "gpu-hours-week", "gpu_hours_week", 1},
                {'R', "max-priority", "max_priority", 0}, {'S', "share", "share", 1},
                {'Q', "rpm", "rpm", 0}};
    for (size_t i = 0; i < sizeof(opts) / sizeof(opts[0]); i++) {
        if (opts[i].c != c)
            continue;
        if (strcmp(arg, "none") == 0 && c != 'S') {
            json_object_set_new(limits, opts[i].key, json_null());
            return 0;
        }
        char *end;
        errno = 0;
        double v = strtod(arg, &end);
        if (errno || end == arg || *end || (!opts[i].real && v != (double)(long long)v)) {
            cli_usage(cli, "--%s '%s': expected %s%s", opts[i].flag, arg,
                      opts[i].real ? "a number" : "a whole number",
                      c == 'S' ? "" : " or none");
            return -1;
        }
        json_object_set_new(limits, opts[i].key,
                            opts[i].real ? json_real(v) : json_integer((json_int_t)v));
        return 0;
    }
    return 1;
}

const char *cli_limits_text(const json_t *limits, char *buf, size_t len)
{
    size_t off = 0;
    const char *k;
    json_t *v;
    buf[0] = '\0';
    json_object_foreach((json_t *)limits, k, v) {
        char key[32];
        br_strlcpy(key, k, sizeof(key));
        for (char *p = key; *p; p++)
            *p = *p == '_' ? '-' : *p;
        if (off < len)
            off += (size_t)snprintf(buf + off, len - off, "%s%s %g", off ? ", " : "", key,
                                    json_number_value(v));
    }
    return buf[0] ? buf : "none";
}
