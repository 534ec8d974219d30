/* session.h: the session's internals, shared by the executor (exec.c),
 * the session API (session.c) and the optimizers (train/optim.c). */
#ifndef REMAT_SESSION_H
#define REMAT_SESSION_H

#include "../plan/schedule.h"

typedef struct {
    remat_node node;
    float *data;  /* (numel) owned, category PARAM */
    float *grad;  /* (numel) owned, category GRAD; NULL for buffers */
    float *m, *v; /* optimizer state, category OPTIM (v: AdamW only) */
} remat__pslot;

/* The memory plan of one schedule (exec.c): where each of a run's
 * allocation events lies in the session's arena. */
typedef struct {
    int valid;
    int n_ev;      /* allocation events of one run */
    int64_t *off;  /* (n_ev) offset in the arena, or -1: from the C heap */
    size_t bytes;  /* arena bytes the plan needs */
} remat__mplan;

struct remat__dry; /* exec.c: what a dry run records */

struct remat_session {
    const remat_graph *g;
    remat_node loss;
    remat_session_opts opts;
    remat__alloc alloc;
    remat__pool *pool;
    remat__prog prog;
    remat__schedule train;       /* forward + backward */
    remat__schedule fwd[2];      /* forward only, cached: [train mode] */
    remat_node fwd_fetch[2];     /* the fetch node each cached one was built for */
    int fwd_valid[2];
    int32_t *pindex;             /* per node: index into params, or -1 */
    remat__pslot *params;
    int n_params;
    const void **bound;          /* per node: caller data for inputs */
    void **vals;                 /* per value: resident data or NULL */
    int8_t *vcat;                /* per value: category it was counted under
                                  * (gradient values are always TRANSIENT) */
    int64_t step;                /* completed optimizer updates */
    int has_optim;
    remat_optim_opts optim;
    int64_t optim_t;             /* AdamW's step count */
    /* The executor's memory (exec.c): one arena for the large values of
     * every schedule, kept across steps, and a plan per schedule. */
    remat__mplan mplan[3];       /* for train, fwd[0], fwd[1] */
    unsigned char *arena;        /* owned, not counted (its values are) */
    size_t arena_bytes;
    const remat__mplan *cur;     /* the running schedule's plan, or NULL */
    int32_t ev;                  /* allocation events so far in this run */
    struct remat__dry *dry;      /* non-NULL during a dry run */
    /* Per-op profile (remat_session_set_profiling): seconds and counts per
     * op and instruction kind (forward, recompute, backward, free). */
    int profiling;
    double prof_s[REMAT__N_OPS][4];
    int64_t prof_n[REMAT__N_OPS][4];
};

/* Runs a schedule. Writes the loss (if the schedule has one) and copies the
 * fetched node into fetch_out. */
remat_status remat__exec(remat_session *s, const remat__schedule *sched, float *loss,
                         float *fetch_out);

/* Drops the memory plan of a schedule about to change (the next run
 * plans it again). */
void remat__exec_forget(remat_session *s, const remat__schedule *sched);
/* Frees every value still resident (wherever it lies), drops every plan
 * and gives the arena back to the C library. For remat_session_destroy. */
void remat__exec_release(remat_session *s);

/* REMAT_BUDGET naming the bytes needed when the step's predicted peak is
 * above the session's budget. */
remat_status remat__session_check_budget(const remat_session *s);
/* (Re)builds the training schedule for the strategy and the live state. */
remat_status remat__session_plan_train(remat_session *s);

#endif
