/* dp.h: data parallelism inside a session (remat.h, "several
 * processes"): micro-batches, gradient buckets, the fixed tree over the
 * micro-batch index, the reduction across ranks, and the stateful ops'
 * statistics. The communicator is comm.h, beside it in src/dist. Three
 * files, by floor:
 *
 *   dp_plan.c    the layout and the plan: options, buckets, statistics,
 *                the communication block, the REDUCE instructions placed
 *                in the training schedule, the ranks' agreement on it
 *                (session.c and optim.c call it, when they plan);
 *   dp_reduce.c  below the executor: a REDUCE instruction and the
 *                progress of the sums in flight (exec.c's walk calls it);
 *   dp_step.c    above the executor: a step's micro-batches run through
 *                remat__exec, then finished (remat_session_step calls it).
 *
 * A step runs this rank's q micro-batches one after the other through the
 * training schedule, which has a REDUCE instruction per bucket right after
 * the last backward that writes one of the bucket's gradients. At
 * micro-batch j, a REDUCE folds the bucket into the tree over [0, q): the
 * leaf j is in the gradient block (the backward pass wrote it there from
 * zeros); while the node is a right child, its left sibling's sum (an
 * accumulator) is added to it, and a left child is copied to the
 * accumulator of its depth to wait for its sibling. After the last
 * micro-batch the block holds this rank's subtree, and with several ranks
 * the REDUCE starts its recursive-doubling sum (dist/comm.h), which the
 * executor drives between instructions and the step finishes. Then the
 * gradients are divided by the micro-batch count K, the losses averaged in
 * micro-batch order, and the stateful ops' statistics, exchanged, are
 * committed micro-batch by micro-batch.
 *
 * Where the session's memory is a device's: the fold and the division are
 * the backend's copy, add and div (the CPU's float operations, in the
 * same order, so the same bits), and the exchanges go through host
 * staging: at a bucket's last REDUCE its partial sums are downloaded into
 * a host buffer (hx), summed across the ranks there by src/dist as on the
 * CPU, and uploaded back before the division; the statistics, written by
 * the device's kernels into the communication block, are downloaded
 * before they are exchanged, and committed into host copies of the
 * stateful ops' buffers, which are then uploaded. The staging buffers are
 * host memory, outside every device category (host_bytes). The CPU runs
 * the staged path too when REMAT_DP_STAGING=host (tests: the same bits as
 * the direct one).
 */
#ifndef REMAT_DP_H
#define REMAT_DP_H

#include "comm.h"
#include "../plan/schedule.h"

typedef struct {
    remat_comm *comm; /* borrowed; NULL: this process alone */
    int rank, ranks;
    int64_t K;     /* micro-batches per step, over all ranks */
    int64_t q;     /* this rank's: K / ranks */
    int64_t first; /* the global index of this rank's first */
    int active;    /* K > 1: steps run micro-batches and REDUCEs */
    int at_end;    /* every REDUCE after the backward pass */
    size_t bucket_bytes;
    int nb;              /* buckets */
    size_t *blo, *bhi;   /* (nb) bucket b is bytes [blo, bhi) of the gradient block;
                          * bucket 0 holds the last parameters */
    int32_t *bucket_of;  /* (graph nodes) a parameter's bucket, -1 */
    size_t gfloats;      /* floats of the gradient block */
    int depth;           /* accumulators: ceil(log2 q) */
    float *acc;          /* (depth, gfloats) in the communication block */
    float *recv;         /* (gfloats) the exchanges' receive buffer (several ranks) */
    size_t sdoubles;     /* statistics of one micro-batch, every stateful node (several ranks) */
    size_t *soff;        /* (graph nodes) a stateful node's offset in them, SIZE_MAX none */
    double *stats;       /* (q, sdoubles) this rank's, in the communication block */
    double *stats_all;   /* (K, sdoubles) every rank's (host staging when staged) */
    size_t comm_counted; /* bytes of the communication block as counted */
    int staged;          /* exchanges and statistics through host staging (a
                          * device's memory, or REMAT_DP_STAGING=host) */
    /* Host staging, several ranks only (NULL otherwise and when planning
     * only): malloc'd, never device memory, counted in no category. */
    float *hx;            /* (gfloats) this rank's subtree, then the sum over the ranks */
    float *hrecv;         /* (gfloats) the exchanges' receive buffer */
    double *hstats;       /* (q, sdoubles) this rank's statistics, downloaded */
    float *hstate;        /* host copies of the stateful ops' resident inputs */
    size_t *hoff;         /* (params) a slot's floats in hstate, SIZE_MAX none */
    size_t host_bytes;    /* of the staging buffers (also when planning only) */
    float *losses;        /* (K + q) host scratch: every micro-batch's loss,
                           * then this rank's (what it sends) */
    remat__allreduce *ar; /* (nb) */
    uint8_t *flying;      /* (nb) a reduction in flight */
    int n_flying;
    double t_reduce, t_wait;
    /* The last step on one host: the reductions' time after the last
     * rank's backward pass ended (what the backward pass did not hide),
     * and how long before that this rank's ended (its wait for the
     * slowest rank); -1 on several hosts (no common clock). */
    double t_exposed, t_skew;
    double *ends;  /* (ranks) host scratch: every rank's backward end */
    uint64_t hash; /* of the training plan */
} remat__dp;

struct remat_session;

/* ------------------------------------------------------------ dp_plan.c */

/* Checks the options (micro-batches, ranks, device), lays out the buckets
 * and allocates the communication block. After the parameter and gradient
 * blocks, before the first plan (whose budget counts the block). */
remat_status remat__dp_init(struct remat_session *s);
void remat__dp_free(struct remat_session *s);
/* Collective, where the ranks plan: every rank's status st agreed, then
 * the plans' hashes compared. One rank: st. */
remat_status remat__dp_agree_plan(struct remat_session *s, remat_status st);

/* ---------------------------------------------------------- dp_reduce.c */

/* The REDUCE of bucket b in this rank's micro-batch j (the executor's
 * argument), and progress of the reductions in flight (between
 * instructions). */
remat_status remat__dp_reduce(struct remat_session *s, int b, int64_t j);
remat_status remat__dp_progress(struct remat_session *s);

/* ------------------------------------------------------------ dp_step.c */

/* One optimizer step's worth of micro-batches (remat_session_step). */
remat_status remat__dp_step(struct remat_session *s, float *loss);

#endif
