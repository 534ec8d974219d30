/* comm.c: the public communicator calls (remat.h, "several processes"),
 * the agreement at known points, and the deterministic sum across ranks
 * (recursive doubling, see comm.h), driven as a state machine.
 */
#include "comm.h"

#include <stdio.h>
#include <stdlib.h>
#include <time.h>

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

int remat__comm_launcher_size(void) {
    /* Open MPI's mpirun, then PMI (MPICH's hydra, srun --mpi=pmi2); PMIx
     * alone (srun --mpi=pmix) gives the rank without the size */
    static const char *const sizes[] = {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_SIZE"};
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        const char *v = getenv(sizes[i]);
        if (v && atoi(v) > 0) return atoi(v);
    }
    return getenv("PMIX_RANK") || getenv("PMI_RANK") ? 1 : 0;
}

int remat_comm_mpi_built(void) {
#ifdef REMAT_HAVE_MPI
    return 1;
#else
    return 0;
#endif
}

remat_status remat_comm_create_single(remat_comm **out) {
    if (!out) return remat__err(REMAT_INVALID, "remat_comm_create_single: out is NULL");
    return remat__comm_single(out);
}

remat_status remat_comm_create_mpi(remat_comm **out, const void *mpi_comm) {
    if (!out) return remat__err(REMAT_INVALID, "remat_comm_create_mpi: out is NULL");
    *out = NULL;
#ifdef REMAT_HAVE_MPI
    return remat__comm_mpi(out, mpi_comm);
#else
    (void)mpi_comm;
    return remat__err(REMAT_UNSUPPORTED, "this libremat was built without MPI (cmake -DREMAT_MPI=ON with an MPI "
                      "such as Debian's libopenmpi-dev installed)");
#endif
}

remat_status remat_comm_create_env(remat_comm **out) {
    if (!out) return remat__err(REMAT_INVALID, "remat_comm_create_env: out is NULL");
    *out = NULL;
    int n = remat__comm_launcher_size();
    if (n == 0) return remat__comm_single(out);
#ifdef REMAT_HAVE_MPI
    return remat__comm_mpi(out, NULL);
#else
    if (n == 1) return remat__comm_single(out);
    return remat__err(REMAT_UNSUPPORTED, "this process was started by a launcher (mpirun) as one of %d ranks, but "
                      "this libremat was built without MPI, so each rank would train alone: build it with MPI "
                      "(Debian: apt-get install libopenmpi-dev, then cmake -DREMAT_MPI=ON)", n);
#endif
}

void remat_comm_destroy(remat_comm *c) {
    if (!c) return;
    c->ops->destroy(c->impl);
    free(c);
}

int remat_comm_rank(const remat_comm *c) { return c ? c->rank : 0; }
int remat_comm_size(const remat_comm *c) { return c ? c->size : 1; }
int remat_comm_hosts(const remat_comm *c) { return c ? c->hosts : 1; }
const char *remat_comm_host(const remat_comm *c) { return c ? c->host : "?"; }
const char *remat_comm_kind(const remat_comm *c) { return c ? c->ops->kind : "single"; }

remat_status remat_comm_split(remat_comm *c, int color, remat_comm **out) {
    if (!c || !out) return remat__err(REMAT_INVALID, "remat_comm_split: NULL communicator or out");
    *out = NULL;
    if (color < 0) return remat__err(REMAT_INVALID, "remat_comm_split: color %d is negative", color);
    void *impl = NULL;
    int rank = 0, size = 1;
    remat_status st = c->ops->split(c->impl, color, &impl, &rank, &size);
    if (st != REMAT_OK) return st;
    return remat__comm_wrap(c->ops, impl, rank, size, c->host, out);
}

remat_status remat_comm_allgather(remat_comm *c, const void *mine, size_t bytes, void *all) {
    if (!c || (!mine && bytes) || (!all && bytes))
        return remat__err(REMAT_INVALID, "remat_comm_allgather: NULL argument");
    return c->ops->allgather(c->impl, mine, bytes, all);
}

remat_status remat_comm_bcast(remat_comm *c, void *buf, size_t bytes, int root) {
    if (!c || (!buf && bytes)) return remat__err(REMAT_INVALID, "remat_comm_bcast: NULL argument");
    if (root < 0 || root >= c->size)
        return remat__err(REMAT_INVALID, "remat_comm_bcast: root %d is not a rank of %d", root, c->size);
    return c->ops->bcast(c->impl, buf, bytes, root);
}

void remat_comm_abort(remat_comm *c, int code) {
    fflush(stdout);
    fflush(stderr);
    if (c) c->ops->abort(c->impl, code);
    _Exit(code); /* the single process's abort, and a fallback */
}

/* What a rank tells the others at an agreement. */
typedef struct {
    int32_t status;
    char host[REMAT__HOST_MAX];
    char msg[960];
} agree_rec;

int remat_comm_agreed_failure(const remat_comm *c) { return c ? c->failed : 0; }

remat_status remat_comm_agree(remat_comm *c, remat_status st) {
    if (!c) return st;
    c->failed = st != REMAT_OK;
    if (c->size == 1) return st; /* one process: its own status, its own message */
    c->failed = 0;
    agree_rec mine = {.status = (int32_t)st};
    snprintf(mine.host, sizeof mine.host, "%s", c->host);
    if (st != REMAT_OK) snprintf(mine.msg, sizeof mine.msg, "%s", remat_last_error());
    agree_rec *all = malloc((size_t)c->size * sizeof *all);
    if (!all) return remat__err(REMAT_NOMEM, "out of memory agreeing with the other ranks");
    remat_status rc = c->ops->allgather(c->impl, &mine, sizeof mine, all);
    int f = -1;
    for (int i = 0; rc == REMAT_OK && i < c->size && f < 0; i++)
        if (all[i].status != REMAT_OK) f = i;
    if (rc == REMAT_OK && f >= 0) {
        all[f].msg[sizeof all[f].msg - 1] = 0;
        all[f].host[sizeof all[f].host - 1] = 0;
        rc = remat__err((remat_status)all[f].status, "rank %d of %d (%s): %s", f, c->size, all[f].host, all[f].msg);
        c->failed = 1;
    }
    free(all);
    return rc;
}

/* ------------------------------------------------------------------ sum */

/* x += tmp, element by element: both partners of a round compute their
 * own + the other's, which IEEE addition makes the same bits. */
static void add_into(float *x, const float *tmp, int64_t n) {
    for (int64_t i = 0; i < n; i++) x[i] = x[i] + tmp[i];
}

static remat_status post_round(remat__allreduce *a) {
    int peer = a->c->rank ^ (1 << a->round);
    /* tags: 32 rounds per sum, sums told apart by the caller's tag */
    return a->c->ops->exchange_start(a->c->impl, peer, (a->tag & 0xfff) * 32 + a->round, a->x, a->tmp, a->n, &a->req);
}

remat_status remat__allreduce_start(remat__allreduce *a, remat_comm *c, float *x, float *tmp, int64_t n, int tag) {
    memset(a, 0, sizeof *a);
    a->c = c, a->x = x, a->tmp = tmp, a->n = n, a->tag = tag;
    if (!remat__pow2(c->size))
        return remat__err(REMAT_INVALID, "a deterministic sum across ranks needs a power-of-two number of ranks "
                          "(1, 2, 4, 8, ...), not %d", c->size);
    while ((1 << a->rounds) < c->size) a->rounds++;
    if (a->rounds == 0 || n == 0) {
        a->done = 1;
        return REMAT_OK;
    }
    return post_round(a);
}

remat_status remat__allreduce_test(remat__allreduce *a, int *done) {
    while (!a->done) {
        int fin = 0;
        remat_status st = a->c->ops->exchange_test(a->c->impl, a->req, &fin);
        if (st != REMAT_OK) return st;
        if (!fin) break;
        a->req = NULL;
        add_into(a->x, a->tmp, a->n);
        if (++a->round == a->rounds) a->done = 1;
        else if ((st = post_round(a)) != REMAT_OK) return st;
    }
    *done = a->done;
    return REMAT_OK;
}

/* Waiting polls with a short sleep between tests (10 us, doubling up to
 * 200 us) instead of MPI's busy wait: ranks that share cores (more ranks
 * than cores, or other work on the host) then leave the cores to the
 * ranks still computing, which are the ones being waited for. It costs at
 * most the last sleep after the data has arrived. */
remat_status remat__allreduce_wait(remat__allreduce *a) {
    long ns = 10000;
    for (int done = 0;;) {
        remat_status st = remat__allreduce_test(a, &done);
        if (st != REMAT_OK || done) return st;
        struct timespec ts = {0, ns};
        nanosleep(&ts, NULL);
        if (ns < 200000) ns *= 2;
    }
}

remat_status remat_comm_sum(remat_comm *c, float *x, int64_t n) {
    if (!c || (!x && n)) return remat__err(REMAT_INVALID, "remat_comm_sum: NULL argument");
    if (n < 0) return remat__err(REMAT_INVALID, "remat_comm_sum: %lld elements", (long long)n);
    if (c->size == 1 || n == 0) return REMAT_OK;
    float *tmp = malloc((size_t)n * sizeof *tmp);
    if (!tmp) return remat__err(REMAT_NOMEM, "out of memory for a sum of %lld floats", (long long)n);
    remat__allreduce a;
    remat_status st = remat__allreduce_start(&a, c, x, tmp, n, 0);
    if (st == REMAT_OK) st = remat__allreduce_wait(&a);
    free(tmp);
    return st;
}
