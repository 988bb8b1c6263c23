/* test_agent_orders.c - the agent's table of orders (agent/agent.c) and the table
 * of proto/PROTOCOL.md section 6, "Coordinator → agent", name the same messages
 * with the same kinds, so the two cannot drift apart (test_api.c does the same for
 * the coordinator's handler table). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "agent.h"
#include "msg.h"

#define MAX_TYPES 64
#define K_REQUEST (1 << BR_MSG_REQUEST)
#define K_EVENT (1 << BR_MSG_EVENT)

typedef struct {
    char type[64];
    int kinds;
} doc_order_t;

/* The messages in the tables of the section "Coordinator → agent". A row begins
 * "| `type`" (or "| `a` / `b`"); its kinds are read from the rest of the row: a
 * request shows its answer ("→"), an event says it is one ("kind 3", the kind
 * section 2 gives events), as "Agent → coordinator" writes `job.log`. */
static int documented(doc_order_t *doc, int max)
{
    FILE *f = fopen(BR_SOURCE_DIR "/proto/PROTOCOL.md", "r");
    assert_non_null(f);
    static char line[65536];
    int in = 0, n = 0;
    while (fgets(line, sizeof(line), f)) {
        assert_non_null(strchr(line, '\n')); /* no row longer than the buffer */
        if (strncmp(line, "## ", 3) == 0)
            in = strstr(line, "Coordinator \xe2\x86\x92 agent") != NULL;
        if (!in || strncmp(line, "| `", 3) != 0)
            continue;
        char *cell_end = strchr(line + 2, '|');
        assert_non_null(cell_end);
        *cell_end = '\0';
        const char *rest = cell_end + 1;
        int kinds = (strstr(rest, "\xe2\x86\x92") ? K_REQUEST : 0) |
                    (strstr(rest, "kind 3") ? K_EVENT : 0);
        for (const char *p = strchr(line, '`'); p; p = strchr(p, '`')) {
            const char *start = p + 1, *end = strchr(start, '`');
            assert_non_null(end);
            assert_true(n < max && (size_t)(end - start) < sizeof(doc[n].type));
            memcpy(doc[n].type, start, (size_t)(end - start));
            doc[n].type[end - start] = '\0';
            if (!kinds)
                fail_msg("proto/PROTOCOL.md: '%s' (Coordinator \xe2\x86\x92 agent) shows "
                         "no answer (\xe2\x86\x92) and says no \"kind 3\": request or "
                         "event?",
                         doc[n].type);
            doc[n].kinds = kinds;
            n++;
            p = end + 1;
        }
    }
    fclose(f);
    return n;
}

static const char *kinds_words(int kinds)
{
    switch (kinds) {
    case K_REQUEST:
        return "a request";
    case K_EVENT:
        return "an event";
    case K_REQUEST | K_EVENT:
        return "a request or an event";
    default:
        return "neither a request nor an event";
    }
}

static void test_orders_match_protocol(void **state)
{
    (void)state;
    doc_order_t doc[MAX_TYPES];
    int ndoc = documented(doc, MAX_TYPES);
    if (ndoc == 0)
        fail_msg("proto/PROTOCOL.md: no section \"Coordinator \xe2\x86\x92 agent\" "
                 "with a table of messages");
    size_t ntable = 0;
    for (size_t i = 0; br_agent_order_type(i); i++, ntable++) {
        const char *type = br_agent_order_type(i);
        int k = 0;
        while (k < ndoc && strcmp(doc[k].type, type) != 0)
            k++;
        if (k == ndoc)
            fail_msg("the agent takes '%s', which proto/PROTOCOL.md (Coordinator "
                     "\xe2\x86\x92 agent) does not list",
                     type);
        if (doc[k].kinds != br_agent_order_kinds(i))
            fail_msg("the agent takes '%s' as %s, proto/PROTOCOL.md says %s", type,
                     kinds_words(br_agent_order_kinds(i)), kinds_words(doc[k].kinds));
        for (size_t j = 0; j < i; j++)
            if (strcmp(br_agent_order_type(j), type) == 0)
                fail_msg("the agent's table lists '%s' twice", type);
    }
    for (int k = 0; k < ndoc; k++) {
        int found = 0;
        for (size_t i = 0; br_agent_order_type(i) && !found; i++)
            found = strcmp(br_agent_order_type(i), doc[k].type) == 0;
        if (!found)
            fail_msg("proto/PROTOCOL.md lists '%s' (Coordinator \xe2\x86\x92 agent), "
                     "which the agent does not take",
                     doc[k].type);
    }
    assert_int_equal(ntable, (size_t)ndoc);
    assert_null(br_agent_order_type(ntable));
    assert_int_equal(br_agent_order_kinds(ntable), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_orders_match_protocol),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
