/* bench_child.c: what a row of `remat bench` does in its own process, with
 * its own session.
 *
 * A forked row (bench_child) builds its graph, session and synthetic batch
 * (the same for all rows: same seed, same weights), then serves the
 * parent's commands over its pipes: it times each training step (forward,
 * backward and update) itself, and at the end reports its predicted and
 * measured peaks and, with --profile, its per-op times. The --save-init
 * process (bench_save_init_child) writes the initial weights. The optimizer
 * and the bound batch are shared with the rows under mpirun.
 */
#include "bench.h"

#include <stdlib.h>

/* Marks r failed with msg. */
void bench_set_error(reply *r, const char *msg) {
    r->ok = 0;
    snprintf(r->error, sizeof r->error, "%s", msg);
}

/* Sends the session's profile: a count, then that many lines. */
static int send_profile(int fd, const remat_session *s) {
    remat_profile_row pr[MAX_PROF];
    int n = remat_session_profile(s, pr, MAX_PROF);
    if (n > MAX_PROF) n = MAX_PROF;
    if (cli_write_all(fd, &n, sizeof n) != 0) return -1;
    for (int i = 0; i < n; i++) {
        prof_line l = {.seconds = pr[i].seconds, .count = pr[i].count};
        snprintf(l.op, sizeof l.op, "%s", pr[i].op);
        snprintf(l.kind, sizeof l.kind, "%s", pr[i].kind);
        if (cli_write_all(fd, &l, sizeof l) != 0) return -1;
    }
    return 0;
}

/* The optimizer every row trains with: SGD with momentum. */
void bench_optim(remat_optim_opts *oo, const cli_synth *syn) {
    remat_optim_opts_default(oo, REMAT_OPTIM_SGD);
    oo->momentum = 0.9f;
    /* regression targets (heavy's scalar chain) blow up at ordinary rates */
    oo->lr = syn->y_int ? 1e-3f : 1e-9f;
}

/* Fills x and y with q synthetic micro-batches (global indices first..)
 * and binds them: the same batch for every step and row. */
void bench_bind_synthetic(remat_session *s, const remat_model *m, const cli_synth *syn, int64_t first, int64_t q,
                          void *x, void *y) {
    for (int64_t j = 0; j < q; j++)
        cli_synth_next((void *)syn, first + j, (char *)x + (size_t)(j * syn->nx) * 4,
                       y ? (char *)y + (size_t)(j * syn->ny) * 4 : NULL);
    remat_session_bind(s, m->input, x);
    if (y) remat_session_bind(s, m->labels, y);
}

/* One timed training step into q; with --prefetch the same batch is named
 * for the next step, so that it is copied during this one. */
static void timed_step(remat_session *s, const config *cf, const remat_model *m, void *x, void *y, reply *q) {
    float loss;
    double t0 = cli_now();
    if (cf->so.prefetch) {
        remat_session_bind_next(s, m->input, x);
        if (y) remat_session_bind_next(s, m->labels, y);
    }
    if (remat_session_step(s, &loss) != REMAT_OK || remat_session_update(s) != REMAT_OK)
        bench_set_error(q, remat_last_error());
    q->seconds = cli_now() - t0;
}

/* The child: builds everything, then serves commands: 'S' one timed
 * training step, 'P' start profiling (clears the counts), 'R' the report,
 * 'F' the profile; end of input (or 'Q') ends it. */
void bench_child(void *argp, int cmd, int res) {
    const child_arg *a = argp;
    const config *cf = a->cf;
    const row *me = a->me;
    reply r = {.ok = 1};
    size_t free0 = 0, total = 0; /* the device's free bytes before the session */
    remat_graph *g = NULL;
    remat_session *s = NULL;
    void *x = NULL, *y = NULL;
    remat_model m;
    cli_synth syn;
    if (remat_graph_create(&g) != REMAT_OK || remat_model_build(g, &cf->mo, &m) != REMAT_OK) {
        bench_set_error(&r, remat_last_error());
    } else if (cli_synth_init(&syn, g, &m, &cf->mo, cf->so.seed)) {
        bench_set_error(&r, "no synthetic data for this model");
    } else {
        remat_session_opts so = cf->so;
        so.strategy = me->strategy;
        so.budget = me->budget;
        if (so.cost_model) so.cost_model = cf->cm;
        remat_optim_opts oo;
        bench_optim(&oo, &syn);
        int64_t q = so.micro_batches ? so.micro_batches : 1; /* one process: every micro-batch is its own */
        /* page-locked on a GPU, as remat_train's batches: uploaded straight */
        x = remat_host_alloc(so.device, (size_t)(q * syn.nx) * 4);
        y = syn.ny ? remat_host_alloc(so.device, (size_t)(q * syn.ny) * 4) : NULL;
        if (!x || (syn.ny && !y)) bench_set_error(&r, "out of memory for a batch");
        else if (remat_device_available(so.device) != REMAT_OK ||
                 remat_device_memory(so.device, &free0, &total) != REMAT_OK ||
                 (so.optim = &oo, remat_session_create(&s, g, m.loss, &so)) != REMAT_OK)
            bench_set_error(&r, remat_last_error());
        else bench_bind_synthetic(s, &m, &syn, 0, q, x, y);
    }
    int setup_ok = r.ok;
    if (cli_write_all(res, &r, sizeof r) == 0 && setup_ok) {
        char c;
        while (cli_read_all(cmd, &c, 1) == 0 && c != 'Q') {
            reply q = {.ok = 1};
            if (c == 'P') {
                remat_session_set_profiling(s, 1);
                continue; /* no reply */
            }
            if (c == 'F') {
                if (send_profile(res, s) != 0) break;
                continue;
            }
            if (c == 'S') {
                timed_step(s, cf, &m, x, y, &q);
            } else {
                remat_mem_stats meas;
                remat_plan_summary p;
                remat_session_mem(s, &meas);
                if (remat_session_plan(s, &p) != REMAT_OK) {
                    bench_set_error(&q, remat_last_error());
                } else {
                    q.predicted = p.predicted.peak[REMAT_MEM_TOTAL];
                    q.measured = meas.peak[REMAT_MEM_TOTAL];
                    q.act = meas.peak[REMAT_MEM_ACT];
                    q.recomputations = p.recomputations;
                    q.predicted_s = p.calibrated ? p.seconds + p.update_seconds : 0.0;
                    q.held = remat_session_held_bytes(s);
                    q.arena = p.arena_bytes;
                    size_t free1 = 0;
                    if (remat_device_memory(cf->so.device, &free1, &total) == REMAT_OK && free0 > free1)
                        q.device_used = free0 - free1;
                    snprintf(q.planner, sizeof q.planner, "%s", p.planner);
                }
            }
            if (cli_write_all(res, &q, sizeof q) != 0) break;
        }
    }
    remat_session_destroy(s);
    remat_graph_destroy(g);
    remat_host_free(cf->so.device, x), remat_host_free(cf->so.device, y);
}

/* --save-init: a short-lived process builds a session (its weights come
 * from the seed alone, the same in every row) and writes them, so that the
 * parent never allocates what the rows' RSS would then include. */
void bench_save_init_child(void *argp, int cmd, int res) {
    (void)cmd;
    const init_arg *a = argp;
    reply r = {.ok = 1};
    remat_graph *g = NULL;
    remat_session *s = NULL;
    remat_model m;
    remat_session_opts so;
    remat_session_opts_default(&so);
    so.threads = 1;
    so.seed = a->cf->so.seed; /* on the CPU: initial weights do not depend on the device */
    if (remat_graph_create(&g) != REMAT_OK || remat_model_build(g, &a->cf->mo, &m) != REMAT_OK ||
        remat_session_create(&s, g, m.loss, &so) != REMAT_OK || remat_safetensors_save(s, a->path) != REMAT_OK)
        bench_set_error(&r, remat_last_error());
    (void)cli_write_all(res, &r, sizeof r);
    remat_session_destroy(s);
    remat_graph_destroy(g);
}
