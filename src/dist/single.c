/* single.c: the communicator of one process (rank 0 of 1). Its
 * collectives are copies, it has no partner to exchange with (a sum over
 * one rank has no rounds), and its abort is the process's exit.
 */
#include "comm.h"

#include <stdlib.h>
#include <unistd.h>

static void single_destroy(void *impl) { (void)impl; }

static remat_status single_allgather(void *impl, const void *mine, size_t bytes, void *all) {
    (void)impl;
    if (bytes) memmove(all, mine, bytes);
    return REMAT_OK;
}

static remat_status single_bcast(void *impl, void *buf, size_t bytes, int root) {
    (void)impl, (void)buf, (void)bytes, (void)root;
    return REMAT_OK;
}

static remat_status single_exchange_start(void *impl, int peer, int tag, const float *send, float *recv, int64_t n,
                                          void **req) {
    (void)impl, (void)tag, (void)send, (void)recv, (void)n, (void)req;
    return remat__err(REMAT_INTERNAL, "a single process has no rank %d to exchange with", peer);
}

static remat_status single_exchange_test(void *impl, void *req, int *done) {
    (void)impl, (void)req;
    *done = 1;
    return REMAT_OK;
}

static remat_status single_split(void *impl, int color, void **out_impl, int *rank, int *size) {
    (void)impl, (void)color;
    *out_impl = NULL, *rank = 0, *size = 1;
    return REMAT_OK;
}

static void single_abort(void *impl, int code) {
    (void)impl;
    _exit(code);
}

static const remat__comm_ops single_ops = {
    .kind = "single",
    .destroy = single_destroy,
    .allgather = single_allgather,
    .bcast = single_bcast,
    .exchange_start = single_exchange_start,
    .exchange_test = single_exchange_test,
    .split = single_split,
    .abort = single_abort,
};

remat_status remat__comm_single(remat_comm **out) {
    char host[REMAT__HOST_MAX] = "";
    if (gethostname(host, sizeof host - 1) != 0) host[0] = 0;
    return remat__comm_wrap(&single_ops, NULL, 0, 1, host, out);
}
