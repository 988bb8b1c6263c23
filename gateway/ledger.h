/* ledger.h - what the gateway answered, counted: per model for its /metrics
 * (requests by status, request seconds and time to first token as histograms,
 * tokens), and per user and model for the coordinator (gateway.report; `bramble
 * usage --models`).
 *
 * The coordinator's share goes in reports: gw_ledger_report makes one of what was
 * counted since the last (with a random id), and keeps it until the coordinator
 * takes it (gw_ledger_reported); until then the same report, with the same id, is
 * sent again, and the coordinator takes each id once. Counting goes on meanwhile,
 * into the next report. Model names are only those of the routing table (a name
 * nobody serves counts as ""), so a client cannot grow the ledger. */
#ifndef BRAMBLE_GW_LEDGER_H
#define BRAMBLE_GW_LEDGER_H

#include <jansson.h>
#include <stdint.h>

#include "metrics.h"

#define GW_LEDGER_MODELS_MAX 4096 /* models counted for /metrics; more count as "" */
#define GW_LEDGER_ROWS_MAX 65536  /* (user, model) rows one report holds */

typedef struct gw_ledger gw_ledger_t;

/* One request, answered. */
typedef struct {
    const char *model;  /* a name of the routing table, or "" */
    int64_t user_id;    /* its key's user; 0 without a key */
    int status;         /* the answer's (499: the client left before one) */
    double seconds;     /* from the whole request to the end of the answer */
    double ttft;        /* to the answer's first byte from a replica; < 0: none */
    int64_t prompt_tokens, completion_tokens; /* from the answer's "usage" (0: none) */
} gw_answer_t;

gw_ledger_t *gw_ledger_new(void);
void gw_ledger_destroy(gw_ledger_t **l);

void gw_ledger_add(gw_ledger_t *l, const gw_answer_t *a);

/* The /metrics families of what was counted, into m. */
void gw_ledger_metrics(const gw_ledger_t *l, br_metrics_t *m);

/* The report to send now: the one not yet taken, else a new one of what was
 * counted since ({"id", "usage": [{"user_id", "model", "requests", "errors",
 * "prompt_tokens", "completion_tokens", "ms"}]}); NULL when there is nothing to
 * report. Borrowed: it holds until gw_ledger_reported. */
const json_t *gw_ledger_report(gw_ledger_t *l);
/* The coordinator took the report id: it is done with. */
void gw_ledger_reported(gw_ledger_t *l, const char *id);

#endif
