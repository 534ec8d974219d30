/* comm_wrap.c: a communicator around an implementation (single.c, mpi.c):
 * the handle every public call takes, with its rank, size and host count.
 * Apart from comm.c, which creates the implementations, so that they do
 * not call back into it. */
#include "comm.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

remat_status remat__comm_wrap(const remat__comm_ops *ops, void *impl, int rank, int size, const char *host,
                              remat_comm **out) {
    remat_comm *c = calloc(1, sizeof *c);
    if (!c) {
        ops->destroy(impl);
        return remat__err(REMAT_NOMEM, "out of memory creating a communicator");
    }
    c->ops = ops, c->impl = impl, c->rank = rank, c->size = size;
    snprintf(c->host, sizeof c->host, "%s", host && *host ? host : "?");
    /* the hosts: every rank's name, counted once each */
    char *all = malloc((size_t)size * REMAT__HOST_MAX);
    remat_status st = all ? ops->allgather(impl, c->host, REMAT__HOST_MAX, all)
                          : remat__err(REMAT_NOMEM, "out of memory creating a communicator");
    for (int i = 0; st == REMAT_OK && i < size; i++) {
        int seen = 0;
        for (int j = 0; j < i && !seen; j++)
            seen = strncmp(all + (size_t)i * REMAT__HOST_MAX, all + (size_t)j * REMAT__HOST_MAX, REMAT__HOST_MAX) == 0;
        c->hosts += !seen;
    }
    free(all);
    if (st != REMAT_OK) {
        ops->destroy(impl);
        free(c);
        return st;
    }
    *out = c;
    return REMAT_OK;
}
