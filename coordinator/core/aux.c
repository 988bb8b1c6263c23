/* aux.c - modules' slots on jobs and nodes (aux.h). */
#include "aux.h"

#include <string.h>

int br_aux_slot(const char **owners, int max, const char *owner)
{
    for (int i = 0; i < max; i++) {
        if (!owners[i])
            owners[i] = owner;
        if (strcmp(owners[i], owner) == 0)
            return i;
    }
    return -1;
}

void br_aux_set(br_aux_t *a, void *data, void (*free_fn)(void *data))
{
    if (a->data && a->free)
        a->free(a->data);
    a->data = data;
    a->free = free_fn;
}
