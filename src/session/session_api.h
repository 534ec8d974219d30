/* session_api.h: what the layers above the executor (train/) ask of a
 * session beyond include/remat.h.
 *
 * struct remat_session is session.h's (included by the files of
 * src/session, src/exec, src/dist's dp_*.c and src/api only); the training
 * loops, training states and calibration call these functions instead of
 * reading its fields, so the struct can change under them. Most of what they need is public already
 * (remat_session_graph, remat_session_dist, remat_session_param, ...); this is the rest.
 */
#ifndef REMAT_SESSION_API_H
#define REMAT_SESSION_API_H

#include "../remat-impl.h"

/* REMAT_OK, or REMAT_INVALID naming `what` when s is NULL or was created
 * plan-only (it holds nothing to run with). */
remat_status remat__session_runnable(const remat_session *s, const char *what);

/* The options the session runs under (owned by it): the caller's, with the
 * thread count resolved (the pool's size) and the strategy chosen; their
 * cost_model and optim are NULL (the session keeps copies). */
const remat_session_opts *remat__session_opts(const remat_session *s);
/* The loss node the session was compiled for. */
remat_node remat__session_loss(const remat_session *s);
/* The communicator of the session's ranks (the caller's, borrowed), NULL
 * for this process alone: remat_comm_rank and remat_comm_size of it are
 * the session's rank and number of ranks. */
remat_comm *remat__session_comm(const remat_session *s);

/* Zeroes every gradient: a step's backward accumulates into them. */
remat_status remat__session_zero_grads(remat_session *s);
/* Elements of the trainable parameters: what an update reads and writes. */
int64_t remat__session_trainable_numel(const remat_session *s);

/* While profiling is on (remat_session_set_profiling), and when its memory
 * could be had: per node u, REMAT__PROF_NODE doubles at
 * [REMAT__PROF_NODE * u]: the seconds of u's first forwards, of its
 * recomputations and of its backwards, and the number of its
 * recomputations, summed over the runs since profiling went on (the caller
 * may zero them between runs); what remat_calibrate_graph measures a shape
 * class by. NULL otherwise. Owned by the session. */
#define REMAT__PROF_NODE 4
double *remat__session_node_profile(remat_session *s);

/* The optimizer, for training states (train/state.c), on every device: its
 * options (NULL when none), whether trainable parameter i has state tensor
 * `which` (0: m, SGD's momentum buffer or AdamW's exp_avg; 1: v, AdamW's
 * exp_avg_sq), its copy to or from the host (numel floats), and the step
 * counters (the session's step index, dropout's Philox step, and the
 * optimizer's own count). */
const remat_optim_opts *remat__optim_opts(const remat_session *s);
int remat__optim_has_state(const remat_session *s, int i, int which);
remat_status remat__optim_state_read(remat_session *s, int i, int which, float *dst);
remat_status remat__optim_state_write(remat_session *s, int i, int which, const float *src);
void remat__optim_counters(const remat_session *s, int64_t *step, int64_t *optim_t);
void remat__optim_set_counters(remat_session *s, int64_t step, int64_t optim_t);

#endif
