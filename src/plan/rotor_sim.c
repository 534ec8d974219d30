/* rotor_sim.c: a chain's checks and its exact simulator (the model is
 * rotor.c's header comment, PLANNING.md section 3.1): what every plan the
 * DPs make (rotor.c, offload_chain.c) is costed and checked by, and the
 * public remat_chain_simulate.
 */
#include "rotor.h"

#include "../remat-impl.h"

#include <float.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#define MAXO REMAT__MAX_OPTIONS

static const char *op_name(remat_chain_op_kind k) {
    switch (k) {
    case REMAT_CHAIN_FN: return "Fn";
    case REMAT_CHAIN_CF: return "CF";
    case REMAT_CHAIN_FE: return "Fe";
    case REMAT_CHAIN_LOSS: return "Loss";
    case REMAT_CHAIN_B: return "B";
    }
    return "?";
}

/* ------------------------------------------------------------ validation */

/* Checks what every entry point assumes: at least one stage, finite
 * non-negative costs, non-negative sizes, saved >= the stage's output (the
 * next stage's input, or `output` for the last stage), and sizes small
 * enough that every sum below fits in int64_t. */
remat_status remat__chain_check(const remat_stage *st, int n, int64_t output) {
    if (!st || n < 1) return remat__err(REMAT_INVALID, "a chain needs at least one stage (got %d)", n);
    if (output < 0) return remat__err(REMAT_INVALID, "chain 'output' is negative (%lld)", (long long)output);
    const int64_t limit = INT64_MAX / 8;
    int64_t total = output;
    for (int i = 0; i < n; i++) {
        const remat_stage *s = &st[i];
        if (!isfinite(s->forward) || s->forward < 0)
            return remat__err(REMAT_INVALID, "stage %d: 'forward' is not a finite number >= 0 (%g)", i, s->forward);
        if (!isfinite(s->backward) || s->backward < 0)
            return remat__err(REMAT_INVALID, "stage %d: 'backward' is not a finite number >= 0 (%g)", i, s->backward);
        if (s->input < 0)
            return remat__err(REMAT_INVALID, "stage %d: 'input' is negative (%lld)", i, (long long)s->input);
        if (s->saved < 0)
            return remat__err(REMAT_INVALID, "stage %d: 'saved' is negative (%lld)", i, (long long)s->saved);
        int64_t out = i + 1 < n ? st[i + 1].input : output;
        if (s->saved < out) {
            if (i + 1 < n)
                return remat__err(REMAT_INVALID,
                                  "stage %d: 'saved' (%lld) is less than the stage's output, stage %d's 'input' "
                                  "(%lld); saved includes the output",
                                  i, (long long)s->saved, i + 1, (long long)out);
            return remat__err(REMAT_INVALID,
                              "stage %d: 'saved' (%lld) is less than the chain's 'output' (%lld); saved includes "
                              "the output",
                              i, (long long)s->saved, (long long)out);
        }
        if (s->input > limit - total || s->saved > limit - total - s->input)
            return remat__err(REMAT_INVALID, "stage %d: sizes too large (their sum must stay below %lld)", i,
                              (long long)limit);
        total += s->input + s->saved;
    }
    return REMAT_OK;
}

/* The same checks for stages with options, each option's saved and
 * bwd_tmp included (the largest saved + bwd_tmp of a stage counts in the
 * size bound); a stage of several options is named "stage i, option o". */
remat_status remat__chain_check_ex(const remat__stage_ex *st, int n, int64_t output) {
    if (!st || n < 1) return remat__err(REMAT_INVALID, "a chain needs at least one stage (got %d)", n);
    if (output < 0) return remat__err(REMAT_INVALID, "chain 'output' is negative (%lld)", (long long)output);
    const int64_t limit = INT64_MAX / 8;
    int64_t total = output;
    for (int i = 0; i < n; i++) {
        const remat__stage_ex *s = &st[i];
        if (!isfinite(s->forward) || s->forward < 0)
            return remat__err(REMAT_INVALID, "stage %d: 'forward' is not a finite number >= 0 (%g)", i, s->forward);
        if (s->input < 0)
            return remat__err(REMAT_INVALID, "stage %d: 'input' is negative (%lld)", i, (long long)s->input);
        if (s->fwd_tmp < 0 || s->fwd_tmp > limit / 4)
            return remat__err(REMAT_INVALID, "stage %d: 'fwd_tmp' is negative or too large (%lld)", i,
                              (long long)s->fwd_tmp);
        if (s->grads < 0 || s->grads > limit / 4)
            return remat__err(REMAT_INVALID, "stage %d: 'grads' is negative or too large (%lld)", i,
                              (long long)s->grads);
        if (s->n_options < 1 || s->n_options > MAXO)
            return remat__err(REMAT_INVALID, "stage %d: %d storage options (1 to %d)", i, s->n_options, MAXO);
        if (s->drop_input && i == 0)
            return remat__err(REMAT_INVALID, "stage 0 cannot drop its input (the chain's x_0)");
        if (s->input > limit - total)
            return remat__err(REMAT_INVALID, "stage %d: sizes too large (their sum must stay below %lld)", i,
                              (long long)limit);
        total += s->input;
        int64_t out = i + 1 < n ? st[i + 1].input : output, big = 0;
        for (int o = 0; o < s->n_options; o++) {
            const remat__stage_option *p = &s->opt[o];
            char where[48];
            if (s->n_options > 1) snprintf(where, sizeof where, "stage %d, option %d", i, o);
            else snprintf(where, sizeof where, "stage %d", i);
            if (!isfinite(p->backward) || p->backward < 0)
                return remat__err(REMAT_INVALID, "%s: 'backward' is not a finite number >= 0 (%g)", where, p->backward);
            if (p->saved < 0)
                return remat__err(REMAT_INVALID, "%s: 'saved' is negative (%lld)", where, (long long)p->saved);
            if (p->bwd_tmp < 0)
                return remat__err(REMAT_INVALID, "%s: 'bwd_tmp' is negative (%lld)", where, (long long)p->bwd_tmp);
            if (p->fe_tmp < 0 || p->fe_tmp > limit / 4)
                return remat__err(REMAT_INVALID, "%s: 'fe_tmp' is negative or too large (%lld)", where,
                                  (long long)p->fe_tmp);
            if (p->saved < out)
                return remat__err(REMAT_INVALID,
                                  "%s: 'saved' (%lld) is less than the stage's output (%lld); saved includes the "
                                  "output",
                                  where, (long long)p->saved, (long long)out);
            if (p->saved > limit - total || p->bwd_tmp > limit - total - p->saved)
                return remat__err(REMAT_INVALID, "%s: sizes too large (their sum must stay below %lld)", where,
                                  (long long)limit);
            big = p->saved + p->bwd_tmp > big ? p->saved + p->bwd_tmp : big;
        }
        if (s->grads > limit - total - big)
            return remat__err(REMAT_INVALID, "stage %d: sizes too large (their sum must stay below %lld)", i,
                              (long long)limit);
        total += big + s->grads;
    }
    /* Infinite cost is the DP's mark of an infeasible state, so no
     * schedule's cost may overflow: a persistent schedule runs each
     * stage's forward at most n + 1 times and one backward per stage. */
    double fsum = 0, bsum = 0;
    for (int i = 0; i < n; i++) {
        double b = 0;
        for (int o = 0; o < st[i].n_options; o++) b = fmax(b, st[i].opt[o].backward);
        fsum += st[i].forward, bsum += b;
    }
    double worst = (double)(n + 1) * fsum + bsum;
    if (!isfinite(worst) || worst > DBL_MAX / 4)
        return remat__err(REMAT_INVALID,
                          "the chain's costs are too large: a schedule of it may cost up to (n + 1) x "
                          "the forwards + the backwards = %g, beyond what a double sums safely; scale them down",
                          worst);
    return REMAT_OK;
}

/* The one-option stages of a public chain (malloc'd; NULL with the error
 * set when out of memory). */
remat__stage_ex *remat__chain_to_ex(const remat_stage *st, int n) {
    remat__stage_ex *ex = calloc((size_t)n, sizeof *ex);
    if (!ex) {
        remat__err(REMAT_NOMEM, "out of memory planning a chain of %d stages", n);
        return NULL;
    }
    for (int i = 0; i < n; i++) {
        ex[i].forward = st[i].forward;
        ex[i].input = st[i].input;
        ex[i].n_options = 1;
        ex[i].opt[0] = (remat__stage_option){.saved = st[i].saved, .backward = st[i].backward, .bwd_tmp = 0};
    }
    return ex;
}

/* ------------------------------------------------------------- simulator */

/* Size of x_k (and y_k), 0 <= k <= n. */
static int64_t size_x(const remat__stage_ex *st, int n, int64_t output, int k) { return k < n ? st[k].input : output; }

/* The simulator's state: which values are resident (one flag per value
 * and k = 0..n), and the running totals. */
typedef struct {
    const remat__stage_ex *st;
    int n;
    int64_t output;
    uint8_t *X, *XB, *Y; /* x_k, xbar_k, y_k resident */
    uint8_t *XO;         /* the option the resident xbar_k was made with */
    int64_t *xbs;        /* size of the resident xbar_k */
    int64_t mem, peak;
    double cost;
} sim;

/* REMAT_OK when op t can run now: a known kind, a stage (and option) in
 * range, and its inputs resident; otherwise REMAT_INVALID naming op t and
 * what is wrong. */
static remat_status sim_check(const sim *s, int t, remat_chain_op op) {
    const remat__stage_ex *st = s->st;
    int i = op.stage, n = s->n, o = op.option;
    const char *nm = op_name(op.kind);
    if ((int)op.kind < REMAT_CHAIN_FN || op.kind > REMAT_CHAIN_B)
        return remat__err(REMAT_INVALID, "op %d: unknown kind %d", t, (int)op.kind);
    if (op.kind == REMAT_CHAIN_LOSS ? i != n : (i < 0 || i >= n)) {
        if (op.kind == REMAT_CHAIN_LOSS)
            return remat__err(REMAT_INVALID, "op %d (Loss, stage %d): the loss is stage %d", t, i, n);
        return remat__err(REMAT_INVALID, "op %d (%s, stage %d): stage out of range 0..%d", t, nm, i, n - 1);
    }
    if ((op.kind == REMAT_CHAIN_FE || op.kind == REMAT_CHAIN_B) && (o < 0 || o >= st[i].n_options))
        return remat__err(REMAT_INVALID, "op %d (%s, stage %d): option %d out of range 0..%d", t, nm, i, o,
                          st[i].n_options - 1);
    /* every op reads x_i or xbar_i; where stage i drops its input, its
     * forwards read x_i itself (xbar_i does not hold it) and its B neither */
    int drops = op.kind != REMAT_CHAIN_LOSS && st[i].drop_input;
    if (drops && op.kind != REMAT_CHAIN_B && !s->X[i])
        return remat__err(REMAT_INVALID, "op %d (%s, stage %d): needs x_%d, which is not resident", t, nm, i, i);
    if (!drops && !s->X[i] && !(i > 0 && s->XB[i])) {
        if (i > 0)
            return remat__err(REMAT_INVALID, "op %d (%s, stage %d): needs x_%d or xbar_%d, neither is resident", t, nm,
                              i, i, i);
        return remat__err(REMAT_INVALID, "op %d (%s, stage %d): needs x_0, which is not resident", t, nm, i);
    }
    if (op.kind == REMAT_CHAIN_B && (!s->Y[i + 1] || !s->XB[i + 1]))
        return remat__err(REMAT_INVALID, "op %d (B, stage %d): needs %s_%d, which is not resident", t, i,
                          !s->Y[i + 1] ? "y" : "xbar", i + 1);
    if (op.kind == REMAT_CHAIN_B && s->XO[i + 1] != o)
        return remat__err(REMAT_INVALID, "op %d (B, stage %d, option %d): xbar_%d was made with option %d", t, i, o,
                          i + 1, (int)s->XO[i + 1]);
    return REMAT_OK;
}

/* Runs op t (checked) up to its peak: adds its cost, makes its output
 * (REMAT_INVALID if that is already resident) and counts the peak with
 * its transient bytes. */
static remat_status sim_make(sim *s, int t, remat_chain_op op) {
    const remat__stage_ex *st = s->st;
    int i = op.stage, n = s->n, o = op.option;
    uint8_t *made;
    int64_t made_size, tmp = 0;
    const char *made_name;
    int made_k;
    switch (op.kind) {
    case REMAT_CHAIN_FN:
    case REMAT_CHAIN_CF:
        made = &s->X[i + 1], made_size = size_x(st, n, s->output, i + 1), made_name = "x", made_k = i + 1;
        s->cost += st[i].forward;
        tmp = st[i].fwd_tmp;
        break;
    case REMAT_CHAIN_FE:
        made = &s->XB[i + 1], made_size = st[i].opt[o].saved, made_name = "xbar", made_k = i + 1;
        s->cost += st[i].forward;
        tmp = st[i].opt[o].fe_tmp;
        if (i + 1 < n && st[i + 1].drop_input) { /* x_{i+1} apart: saved is both */
            if (s->X[i + 1])
                return remat__err(REMAT_INVALID, "op %d (Fe, stage %d): x_%d is already resident", t, i, i + 1);
            s->X[i + 1] = 1;
            made_size -= st[i + 1].input;
            s->mem += st[i + 1].input;
        }
        break;
    case REMAT_CHAIN_LOSS: made = &s->Y[n], made_size = s->output, made_name = "y", made_k = n; break;
    default: /* B */
        made = &s->Y[i], made_size = st[i].input, made_name = "y", made_k = i;
        s->cost += st[i].opt[o].backward;
        tmp = st[i].opt[o].bwd_tmp;
        break;
    }
    if (*made)
        return remat__err(REMAT_INVALID, "op %d (%s, stage %d): %s_%d is already resident", t, op_name(op.kind), i,
                          made_name, made_k);
    *made = 1;
    s->mem += made_size;
    if (op.kind == REMAT_CHAIN_FE) s->xbs[i + 1] = made_size, s->XO[i + 1] = (uint8_t)o;
    if (s->mem + tmp > s->peak) s->peak = s->mem + tmp;
    return REMAT_OK;
}

/* Frees the values op used up, once past its peak (semantics below). */
static void sim_free(sim *s, remat_chain_op op) {
    int i = op.stage, n = s->n;
    switch (op.kind) {
    case REMAT_CHAIN_FE: /* its last forward before B_i: x_i goes where no backward reads it */
        if (s->st[i].drop_input && s->X[i]) s->X[i] = 0, s->mem -= s->st[i].input;
        break;
    case REMAT_CHAIN_FN:
        if (s->X[i]) s->X[i] = 0, s->mem -= size_x(s->st, n, s->output, i);
        else s->XB[i] = 0, s->mem -= s->xbs[i];
        break;
    case REMAT_CHAIN_LOSS:
        if (s->X[n]) s->X[n] = 0, s->mem -= s->output;
        break;
    case REMAT_CHAIN_B:
        s->Y[i + 1] = 0, s->mem -= size_x(s->st, n, s->output, i + 1);
        s->XB[i + 1] = 0, s->mem -= s->xbs[i + 1];
        if (s->X[i]) s->X[i] = 0, s->mem -= s->st[i].input;
        if (s->X[i + 1] && i + 1 < n && s->st[i + 1].drop_input) /* made by Fe_i apart from xbar_{i+1} */
            s->X[i + 1] = 0, s->mem -= s->st[i + 1].input;
        s->mem += s->st[i].grads; /* kept to the step's end */
        if (s->mem > s->peak) s->peak = s->mem;
        break;
    default: break;
    }
}

/* The exact simulator of the chain model. Resident values are sets (one
 * flag per value): producing a value that is already resident is an error.
 * Semantics per op (peak taken after the outputs appear, before frees):
 *   Fn_i: needs x_i or xbar_i; makes x_{i+1}, holding fwd_tmp at its peak;
 *         frees x_i if resident, else xbar_i (as rotor's simulate_sequence).
 *   CF_i: needs x_i or xbar_i; makes x_{i+1}, holding fwd_tmp; frees nothing.
 *   Fe_i: needs x_i or xbar_i; makes xbar_{i+1} of its option's size,
 *         holding the option's fe_tmp; frees nothing. Where stage i+1
 *         drops its input (drop_input), the option's size is xbar_{i+1}
 *         and x_{i+1} apart; where stage i does, it needs x_i and frees
 *         it after its peak (Fn_i and CF_i need x_i too, B_i neither).
 *   Loss: needs x_L or xbar_L; makes y_L; frees x_L if resident (xbar_L
 *         stays for B_{L-1}).
 *   B_i:  needs y_{i+1}, xbar_{i+1} made with the same option, and x_i or
 *         xbar_i; makes y_i, holding the option's bwd_tmp at its peak;
 *         frees y_{i+1}, xbar_{i+1}, and x_i if resident (xbar_i stays),
 *         and x_{i+1} where Fe_i made it apart and it is still resident;
 *         then holds the stage's grads to the end (its bwd_tmp counts them
 *         while B_i runs).
 * *complete is set when y_0 is resident at the end. */
remat_status remat__chain_sim_run(const remat__stage_ex *st, int n, int64_t output, const remat_chain_op *ops, int nops,
                                  double *cost_out, int64_t *peak_out, int *complete) {
    if (nops < 0 || (nops > 0 && !ops)) return remat__err(REMAT_INVALID, "bad operation list (%d operations)", nops);
    uint8_t *res = calloc(4 * ((size_t)n + 1), 1);     /* x[k], xbar[k], y[k], option of xbar[k] */
    int64_t *xbs = calloc((size_t)n + 1, sizeof *xbs); /* size of the resident xbar[k] */
    if (!res || !xbs) {
        free(res), free(xbs);
        return remat__err(REMAT_NOMEM, "out of memory simulating a chain of %d stages", n);
    }
    sim s = {.st = st,
             .n = n,
             .output = output,
             .X = res,
             .XB = res + n + 1,
             .Y = res + 2 * ((size_t)n + 1),
             .XO = res + 3 * ((size_t)n + 1),
             .xbs = xbs};
    s.X[0] = 1;
    s.mem = s.peak = size_x(st, n, output, 0);
    remat_status rc = REMAT_OK;
    for (int t = 0; t < nops && rc == REMAT_OK; t++) {
        rc = sim_check(&s, t, ops[t]);
        if (rc == REMAT_OK) rc = sim_make(&s, t, ops[t]);
        if (rc == REMAT_OK) sim_free(&s, ops[t]);
    }
    if (rc == REMAT_OK) {
        if (cost_out) *cost_out = s.cost;
        if (peak_out) *peak_out = s.peak;
        if (complete) *complete = s.Y[0];
    }
    free(res), free(xbs);
    return rc;
}

remat_status remat__chain_simulate_ex(const remat__stage_ex *st, int n, int64_t output, const remat_chain_op *ops,
                                      int nops, double *cost, int64_t *peak) {
    remat_status rc = remat__chain_check_ex(st, n, output);
    if (rc != REMAT_OK) return rc;
    return remat__chain_sim_run(st, n, output, ops, nops, cost, peak, NULL);
}

remat_status remat_chain_simulate(const remat_stage *stages, int n, int64_t output, const remat_chain_op *ops, int nops,
                                  double *cost, int64_t *peak) {
    remat_status rc = remat__chain_check(stages, n, output);
    if (rc != REMAT_OK) return rc;
    remat__stage_ex *ex = remat__chain_to_ex(stages, n);
    if (!ex) return REMAT_NOMEM;
    rc = remat__chain_sim_run(ex, n, output, ops, nops, cost, peak, NULL);
    free(ex);
    return rc;
}

/* ------------------------------------------------------------- the plan */

void remat_chain_plan_destroy(remat_chain_plan *p) {
    if (!p) return;
    free(p->ops);
    free(p);
}

int remat_chain_plan_length(const remat_chain_plan *p) { return p ? p->n_ops : 0; }

remat_chain_op remat_chain_plan_op(const remat_chain_plan *p, int i) {
    if (!p || i < 0 || i >= p->n_ops) return (remat_chain_op){.kind = REMAT_CHAIN_FN, .stage = -1};
    return p->ops[i];
}

double remat_chain_plan_cost(const remat_chain_plan *p) { return p ? p->cost : 0; }

int64_t remat_chain_plan_peak(const remat_chain_plan *p) { return p ? p->peak : 0; }

remat_chain_plan *remat__chain_plan_make(const remat_chain_op *ops, int n, double cost, int64_t peak) {
    remat_chain_plan *p = calloc(1, sizeof *p);
    if (p) p->ops = malloc((size_t)(n > 0 ? n : 1) * sizeof *p->ops);
    if (!p || !p->ops) {
        free(p);
        remat__err(REMAT_NOMEM, "out of memory making a chain plan of %d operations", n);
        return NULL;
    }
    if (n > 0) memcpy(p->ops, ops, (size_t)n * sizeof *ops);
    p->n_ops = n, p->cost = cost, p->peak = peak;
    return p;
}
