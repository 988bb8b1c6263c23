/* fuzz_spec.c - libFuzzer target for the job spec parser (br_spec_parse). */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "spec.h"

/* An input that starts with '@' carries a --set on its first line: "@a.b=v\nYAML". */
static char *take_set(const uint8_t **data, size_t *size)
{
    if (*size == 0 || (*data)[0] != '@')
        return NULL;
    const uint8_t *nl = memchr(*data, '\n', *size);
    size_t len = nl ? (size_t)(nl - *data) : *size;
    char *set = strndup((const char *)*data + 1, len - 1);
    *data += nl ? len + 1 : len;
    *size -= nl ? len + 1 : len;
    return set;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *set = take_set(&data, &size);
    const char *sets[] = {set, "priority=1"};
    br_err_t err = {0};
    br_spec_t *spec = br_spec_parse((const char *)data, size, set ? sets : NULL,
                                    set ? 1 + (size & 1) : 0, &err);
    if (spec) {
        json_t *j = br_spec_to_json(spec);
        char *text = json_dumps(j, JSON_COMPACT);
        /* name kind command workdir env resources model checkpoint restart
         * priority time_limit service after progress preemptible preempt, and
         * array for a job array, idle_stop for a dev environment, code, files,
         * outputs, data, setup, setup_files and image when given */
        static const char *const optional[] = {"array", "idle_stop", "code",
                                               "files", "outputs", "data", "setup",
                                               "setup_files", "image"};
        size_t keys = 16;
        for (size_t k = 0; k < sizeof(optional) / sizeof(optional[0]); k++)
            keys += json_object_get(j, optional[k]) != NULL;
        if (!j || !text || json_object_size(j) != keys ||
            !json_is_string(json_object_get(j, "name")))
            abort(); /* a parsed spec always has its whole JSON form */
        free(text);
        json_decref(j);
        br_spec_destroy(&spec);
        if (spec)
            abort();
    } else {
        json_t *why = json_string(err.text); /* NULL when not valid UTF-8 */
        if (!err.text[0] || !why)
            abort(); /* every refusal says why, in text that JSON can carry */
        json_decref(why);
    }
    free(set);
    return 0;
}
