/* autoscale.h - services whose replica count follows their load
 * (service.autoscale; docs/gateway.md, "Autoscaling").
 *
 * The load of a service is what the gateways report (gwload.h): its requests in
 * flight and those waiting for a replica, over every gateway. The count it asks
 * for is that load over target_inflight, rounded up, kept within min..max. A count
 * asked for above the present one for up_after is set (the least asked over that
 * time); below it for down_after, likewise (the most asked), and the replicas that
 * go drain first (services.h). At zero replicas, a request that waits starts one
 * at once: a cold start does not wait up_after. While a replica of the service
 * waits to be placed (no room: GPUs, fair share, limits), the count is not raised
 * further. With no gateway reporting, the count is left alone: there is no load
 * to read. Each change is the service's event, saying why. Decided at each tick,
 * and at once after a gateway's report. */
#ifndef BRAMBLE_AUTOSCALE_H
#define BRAMBLE_AUTOSCALE_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#include "coord.h"
#include "spec.h"

/* One side of a decision, more or fewer: since when it is asked for (monotonic ms;
 * 0: it is not), the count to set when it has lasted (the least asked for more,
 * the most asked for fewer) and the load it stands for (the least, the most). */
typedef struct {
    int64_t since;
    int count, load;
} br_autoscale_side_t;

/* What the autoscaler remembers of one service between decisions. */
typedef struct {
    br_autoscale_side_t up, down;
} br_autoscale_track_t;

/* The count a load (requests in flight and waiting) asks for: load over
 * target_inflight rounded up, within min..max. */
int br_autoscale_wants(const br_autoscale_spec_t *as, int load);

/* The count to set for a service of have replicas now (pending: of which some
 * wait to be placed) under load (in flight and waiting), or -1 to leave it; why
 * says why in words when it is set. t is updated. */
int br_autoscale_decide(const br_autoscale_spec_t *as, br_autoscale_track_t *t, int have,
                        int load, int pending, int64_t now_ms, char *why, size_t why_len);

/* The service's autoscale section of its spec as JSON (spec.h's
 * br_spec_to_json); 0 when it has none. */
int br_autoscale_spec_of(const json_t *spec, br_autoscale_spec_t *as);

typedef struct br_autoscale br_autoscale_t;
/* Made with its hooks (a tick decides; a service that left is forgotten). NULL
 * when out of memory. */
br_autoscale_t *br_autoscale_new(br_coord_t *c);
void br_autoscale_destroy(br_autoscale_t **a);

/* Decide for every autoscaled service now (a gateway reported). */
void br_autoscale_run(br_coord_t *c, int64_t now_ms);

/* What job show says of an autoscaled service: {"min", "max", "target_inflight",
 * "inflight", "waiting" (its requests over the gateways), "gateways" (how many
 * report), "wants" (the count the load asks for now)}; NULL when it has none. */
json_t *br_autoscale_show(br_coord_t *c, int64_t service_id, const json_t *spec);

#endif
