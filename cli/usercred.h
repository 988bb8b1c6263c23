/* usercred.h - a new user's credential, as user add and class create make it.
 * The key pair is made here and only its public half goes to the coordinator
 * (user.add), so a user's secret key never crosses the wire; once the
 * coordinator took it, the credential is completed with the endpoint the user
 * will reach it at and the coordinator's public key. */
#ifndef BRAMBLE_CLI_USERCRED_H
#define BRAMBLE_CLI_USERCRED_H

#include <jansson.h>

#include "cli.h"

/* An --endpoint the user will reach the coordinator at: tcp://HOST:PORT. 0, or
 * CLI_USAGE after saying what was wrong. */
int cli_usercred_endpoint_ok(const cli_t *cli, const char *endpoint);

/* A fresh key pair for user name in *cred (cleared first). 0, or -1 after
 * printing the reason. */
int cli_usercred_new(const cli_t *cli, const char *name, br_cred_t *cred);

/* The rest of *cred once user.add answered reply: endpoint when given, else the
 * one the coordinator advertises (reply's "endpoint"), else the one this CLI
 * reached it at; and the coordinator's public key. */
void cli_usercred_finish(const cli_t *cli, br_cred_t *cred, const char *endpoint,
                         const json_t *reply);

/* What user add and gateway add share: a key pair for a new principal `kind`
 * ("user", "gateway") called name, registered with `kind`.add (body: its other
 * fields, taken; name and public_key are added), completed as
 * cli_usercred_finish does (endpoint may be NULL) and written to out, else to
 * ./NAME.SUFFIX; the path written in path (CLI_PATH_MAX). CLI_OK, or CLI_FAIL after
 * saying why (a credential not written names `bramble KIND remove NAME`). */
int cli_usercred_issue(cli_t *cli, const char *kind, const char *name, json_t *body,
                       const char *endpoint, const char *out, const char *suffix,
                       char *path);

/* The arguments of user remove and class remove: NAME [--jobs cancel|admin]
 * (what, e.g. "user NAME", names NAME in messages). 0 with *name and *jobs
 * ("cancel" unless given), or CLI_USAGE after saying what was wrong. */
int cli_usercred_remove_args(cli_t *cli, int argc, char **argv, const char *what,
                             const char **name, const char **jobs);

#endif
