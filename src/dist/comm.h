/* comm.h: the communicator's internals (remat.h, "several processes").
 *
 * A communicator is a vtable of a few operations an implementation
 * supplies (single.c: one process; mpi.c: Open MPI or any MPI) and what is
 * built on them once, here and in comm.c: the agreement at known points
 * (every rank learns whether any failed, and why), and the deterministic
 * sum of float arrays across ranks, a state machine that a caller drives
 * (start, test between other work, wait) so that a reduction can proceed
 * while the backward pass runs.
 *
 * The sum is recursive doubling: in round r every rank exchanges its
 * partial sum with rank ^ 2^r and both compute mine + theirs. IEEE addition
 * is commutative (a + b and b + a are the same bits), so both partners hold
 * the same sum, and after log2(size) rounds every rank holds the sum of a
 * fixed binary tree over the ranks: the bits depend on the rank count and
 * the inputs only, never on timing. That is why the size must be a power
 * of two (the partners of a round must exist).
 */
#ifndef REMAT_DIST_COMM_H
#define REMAT_DIST_COMM_H

#include "../remat-impl.h"

/* What an implementation supplies. Every call reports failure as a status
 * with a message (remat__err); none aborts. */
typedef struct {
    const char *kind; /* "single", "mpi" */
    void (*destroy)(void *impl);
    /* Every rank contributes `bytes` at mine; all gets size * bytes, rank
     * i's at i * bytes. */
    remat_status (*allgather)(void *impl, const void *mine, size_t bytes, void *all);
    /* root's bytes to every rank. */
    remat_status (*bcast)(void *impl, void *buf, size_t bytes, int root);
    /* Starts sending n floats from send to peer and receiving n floats from
     * peer into recv (tag tells exchanges between the same ranks apart);
     * *req is the exchange in flight, finished by test or wait. */
    remat_status (*exchange_start)(void *impl, int peer, int tag, const float *send, float *recv, int64_t n,
                                   void **req);
    /* Drives progress; *done = 1 once the exchange is complete (then req is
     * freed and must not be used again). Waiting is polling this (comm.c). */
    remat_status (*exchange_test)(void *impl, void *req, int *done);
    /* The ranks of each color form a new communicator (ordered by rank);
     * *out_impl, *rank and *size describe this rank's. Collective. */
    remat_status (*split)(void *impl, int color, void **out_impl, int *rank, int *size);
    /* Ends every rank of the job with exit status code; does not return. */
    void (*abort)(void *impl, int code);
} remat__comm_ops;

#define REMAT__HOST_MAX 64

struct remat_comm {
    const remat__comm_ops *ops;
    void *impl; /* the implementation's state (owned) */
    int rank, size;
    int hosts; /* distinct host names among the ranks */
    char host[REMAT__HOST_MAX];
    int failed; /* the last agreement failed (remat_comm_agreed_failure) */
};

/* Marks a failure that every rank of c has found together (they compared
 * the same exchanged values): remat_comm_agreed_failure then says so. */
static inline void remat__comm_failed_together(remat_comm *c) {
    if (c) c->failed = 1;
}

/* Makes a communicator around an implementation (comm_wrap.c): fills
 * host, hosts (an
 * allgather of the host names: collective). On failure impl is destroyed. */
remat_status remat__comm_wrap(const remat__comm_ops *ops, void *impl, int rank, int size, const char *host,
                              remat_comm **out);

/* The single-process implementation (single.c). */
remat_status remat__comm_single(remat_comm **out);

/* The MPI implementation (mpi.c, built with REMAT_MPI): around a duplicate
 * of *mpi_comm (an MPI_Comm; NULL: MPI_COMM_WORLD), initializing MPI first
 * when nothing has (then destroying the communicator finalizes it). */
remat_status remat__comm_mpi(remat_comm **out, const void *mpi_comm);
/* The size of the job this process was started in by a launcher (mpirun,
 * mpiexec, srun with PMI or PMIx), read from its environment; 0 when none. */
int remat__comm_launcher_size(void);

/* --------------------------------------------------- deterministic sum */

/* One sum of n floats across the ranks, in flight. x holds this rank's
 * partial sum and receives the total; tmp (n floats) receives partners'
 * sums. Both must stay valid until the sum is complete. */
typedef struct {
    remat_comm *c;
    float *x, *tmp;
    int64_t n;
    int tag;
    int round, rounds; /* rounds = log2(size) */
    void *req;         /* the exchange of the current round, or NULL */
    int done;
} remat__allreduce;

/* Starts the sum (its first exchange). REMAT_INVALID when the size is not
 * a power of two. tag: a number of the caller's, the same on every rank
 * for the same sum, that keeps sums in flight together apart. */
remat_status remat__allreduce_start(remat__allreduce *a, remat_comm *c, float *x, float *tmp, int64_t n, int tag);
/* Drives the sum without blocking: a finished exchange is added and the
 * next round's started. *done = 1 once x holds the total. */
remat_status remat__allreduce_test(remat__allreduce *a, int *done);
/* Finishes the sum, blocking (polling, with short sleeps). */
remat_status remat__allreduce_wait(remat__allreduce *a);

/* 1 when n is a power of two (1 included). */
static inline int remat__pow2(int64_t n) { return n > 0 && (n & (n - 1)) == 0; }

#endif
