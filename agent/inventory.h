/* inventory.h - what this node is: hostname, arch, CPUs, memory, OS, agent version. */
#ifndef BRAMBLE_INVENTORY_H
#define BRAMBLE_INVENTORY_H

#include <jansson.h>

#include "err.h"

/* {"hostname": "pi4", "arch": "aarch64", "cpus": 4, "memory": <bytes>,
 *  "os": "Debian GNU/Linux 12 (bookworm)", "kernel": "6.1.0", "agent_version":
 *  BRAMBLE_VERSION}. arch is uname's machine ("x86_64", "aarch64", "armv7l").
 * New reference, or NULL with err. */
json_t *br_inventory_collect(br_err_t *err);

/* The name of the network interface that holds address (a numeric IPv4 or IPv6
 * address; a host name is not looked up, so nothing here waits on DNS) into name;
 * 0, or -1 when no interface of this host holds it. */
int br_inventory_iface_of(const char *address, char *name, size_t len);

#endif
