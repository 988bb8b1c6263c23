/* services.h - kind: service jobs (ARCHITECTURE.md, the spec's service section).
 *
 * A service is one job that stands for it (the "service job": running from submit
 * until cancelled, placed nowhere, holding nothing) and one job per replica, named
 * NAME.K (K from 0), each placed on its own like any single-node job. A replica
 * runs until the service is cancelled or scaled down: whenever it ends (exit, a
 * failed health check, its node lost) it is started again, after a backoff that
 * doubles with each restart in a row (1 s, 2 s ... 30 s; none after a node loss)
 * and resets once it is healthy. Its agent gives it a PORT (auto, or the spec's
 * number) and checks its health; the healthy replicas are the service's
 * endpoints. A replica's job has service (the service job's id) and replica (K);
 * the service job has replicas (N) (job.h). The functions that take a json_t job
 * take its store row (br_store_job_get). */
#ifndef BRAMBLE_SERVICES_H
#define BRAMBLE_SERVICES_H

#include <jansson.h>
#include <stdint.h>

#include "coord.h"
#include "job.h"

#define BR_SERVICE_BACKOFF_MS 1000
#define BR_SERVICE_BACKOFF_MAX_MS 30000

/* Store the service job (from job, the usual new-job object) and its replicas.
 * Returns the service job's id, or -1 with err. */
int64_t br_services_submit(br_coord_t *c, json_t *job, int replicas, br_err_t *err);

/* The active service job called name, when owner_id (a principal id; 0: anyone,
 * for the admin) owns it; NULL with err. */
json_t *br_services_find(br_coord_t *c, const char *name, int64_t owner_id,
                         br_err_t *err);

/* Change the service's replica count (why: said in its event after "scaled from A
 * to B replicas: ", or NULL): new replicas are added; the highest numbered ones
 * beyond the count go. When the service is behind the gateway and a gateway
 * reports load (gwload.h), a healthy replica that goes drains first: it leaves the
 * routing table and the endpoints at once, and is stopped when no gateway holds a
 * request on it any more, or after BR_SERVICES_DRAIN_MS (checked each tick); a
 * draining replica wanted again by a later scale takes requests again. Others stop
 * at once. Returns the new count, or -1 with err. */
#define BR_SERVICES_DRAIN_MS 300000
int br_services_scale(br_coord_t *c, json_t *service, int replicas, const char *why,
                      br_err_t *err);

/* Healthy replicas that do not drain: [{"host","port","node","replica","id"}]. New
 * ref. */
json_t *br_services_endpoints(br_coord_t *c, json_t *service);
/* The same of the service job with this id. */
json_t *br_services_endpoints_of(br_coord_t *c, int64_t service_id);

/* Cancel the service job's replicas (the service job itself is the caller's). */
void br_services_cancel(br_coord_t *c, json_t *service);

/* A replica's health as its agent last reported it ("starting", "healthy",
 * "unhealthy"), remembered in memory; changes are events, and a healthy replica's
 * restart backoff starts again from the beginning. */
const char *br_services_health_of(br_coord_t *c, int64_t id);

/* A gateway could not use replica id at port (why: what failed): its agent is
 * ordered to check it now (job.check: its health checks come quickly, so one that
 * fails them is stopped and restarted within seconds), and an event says so; at
 * most once per BR_SERVICES_SUSPECT_MS a replica. A report of a replica that moved
 * on (another attempt, another port, not healthy any more) is dropped. -1 with
 * ENOENT when id is no replica. */
#define BR_SERVICES_SUSPECT_MS 10000
int br_services_suspect(br_coord_t *c, int64_t id, int port, const char *gateway,
                        const char *why, int64_t now_ms, br_err_t *err);

/* The services' own state (the replicas' health, which drain), and its hooks
 * (hooks.h): a replica whose attempt ended starts again after its backoff (a
 * draining one is stopped instead); its agent's word on its health; a job that
 * left is forgotten; each tick, drained replicas stop; when the jobs are read
 * again, the replicas beyond their service's count drain. NULL when out of
 * memory. */
typedef struct br_services br_services_t;
br_services_t *br_services_new(br_coord_t *c);
void br_services_destroy(br_services_t **s);

/* The wait before a replica's next start after restarts in a row. */
int64_t br_services_backoff_ms(int64_t restarts);

int br_services_is_replica(json_t *job);
int br_services_is_service(json_t *job);

/* The job as the CLI shows it gets: a replica its "service", "replica", "port",
 * "health" and "draining"; a service job its "replicas" (each {"replica","id",
 * "state","node","port","health","draining"}). */
void br_services_annotate(br_coord_t *c, json_t *job, json_t *public_job);

#endif
