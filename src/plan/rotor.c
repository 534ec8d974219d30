/* rotor.c: the optimal persistent schedule of a chain (rotor's dynamic
 * program), solved for one budget or tabled for all budgets, and the
 * plans it returns.
 *
 * The model is PLANNING.md section 3.1, transient bytes included: a
 * stage's Fn and CF hold fwd_tmp more at their peak, its Fe with option o
 * fe_tmp, its B bwd_tmp (the public chains have none). A
 * chain of n stages 0..n-1 is followed by the loss, stage L = n (cost 0).
 * Values: x_k, the input of stage k (x_L is the loss input, `output`
 * bytes); xbar_k (k >= 1), everything stage k-1's backward needs, x_k
 * included (`saved` of stage k-1's option); y_k, the gradient of x_k (as
 * large as x_k). Memory is the sum of the resident values, x_0 and
 * gradients included; an operation's peak is taken after its outputs
 * appear and before its inputs are freed (B_i's peak also holds its
 * option's bwd_tmp). What a stage's B makes to keep to the step's end
 * (`grads`: a traced step's parameter gradients) is held beside every
 * operation after it: G_k, the sum over the stages k..L-1, goes with
 * y_k, so that wherever the DP counts y_{l+1} beside an interval's
 * operations (the y_{l+1} of Opt[m][i][l]) it counts a[l+1] + G_{l+1}
 * (ay below).
 *
 * Each stage has 1..REMAT__MAX_OPTIONS storage options (rotor.h): what
 * its Fe keeps (saved), what its B then costs (backward) and holds while
 * it runs (bwd_tmp). The public API is the one-option case.
 *
 * Validation and the simulator are rotor_sim.c.
 *
 * remat__chain_solve_ex runs the persistent DP of PLANNING.md section 3.2
 * (Opt[m][i][l]: least time to process stages i..l with x_i resident and
 * not counted in m, y_{l+1} resident and counted), on memory discretized
 * into whole slots: slot = ceil(budget / slots), every size rounded up, so
 * any schedule feasible in slots holds at most budget bytes. Wherever the
 * recurrence uses "Fe_i then B_i" (the base Opt[m][i][i] and the chain
 * term Opt[m][i][i] + Opt[m - xbar_{i+1}][i+1][l]) it takes the least
 * over stage i's options, and records the option in the choice table.
 * Before the DP, a memory-only version of the same recurrence (the least
 * m that makes Opt[m][i][l] finite) decides feasibility, and when the
 * budget is too small it finds the smallest budget that the same slot
 * count makes feasible, which the error names (and every larger budget is
 * feasible: one whose own slot size rounds too coarsely is planned at the
 * largest smaller budget with finer slots). The table is filled
 * iteratively, each (i, l) cell a row over m so that the inner loops are
 * contiguous; the schedule is rebuilt with an explicit stack, then
 * simulated: the plan's cost and peak are the simulator's. Before it
 * allocates anything, a solve prices its tables and its work from the
 * stage count and the slots (plan_cost) and refuses a chain too large to
 * plan (1 GiB, 1e11 operations), naming both and what to change.
 *
 * Ownership: the solvers return a plan the caller owns
 * (remat_chain_plan_destroy); remat_chain_parse_json returns a malloc'd
 * stage array the caller frees. Nothing else outlives a call.
 */
#include "rotor.h"

#include "../remat-impl.h"

#include <limits.h>
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#define DEFAULT_SLOTS 500
/* `what` is int16: -o <= 0 = chain (Fe_i with option o; for i == l the
 * option of the base case), j > 0 = leaf checkpoint at x_j, WHAT_NONE =
 * infeasible. */
#define MAX_STAGES REMAT__CHAIN_MAX_STAGES
#define WHAT_NONE INT16_MIN
/* What one plan may cost (plan_cost): memory for its tables, and
 * operations of the DP's inner loops, which bench_rotor times at 1.5 to
 * 2 ns each (2 ns is the figure used for the time named in messages), so
 * 1e11 is about 3 minutes. A 200-stage chain with the default 500 slots
 * takes 97 MiB and 7e8 operations (1.3 s); optimal's chains have at most
 * 32 stages. */
#define MAX_PLAN_BYTES ((double)(1u << 30))
#define MAX_PLAN_WORK 1e11
#define SECONDS_PER_OP 2e-9
#define MAXO REMAT__MAX_OPTIONS

/* ------------------------------------------------------ the memory floor */

/* Sizes of one discretization, in slots of `unit` caller units, rounded
 * up: a[k] = x_k (k = 0..L, a[L+1] = 0 for the missing y_{L+1}); per stage
 * i and option o (index i * MAXO + o; the loss, stage L, has one option of
 * size 0): sv = its xbar_{i+1}, tmp = its bwd_tmp, need = the least m of
 * the interval (i, i) with it. */
typedef struct {
    int L;
    int64_t *a;                               /* L + 2 entries */
    int64_t *d;                               /* L + 2 entries: a[i] where stage i drops its input after
                                                 Fe_i (drop_input), else 0 */
    int64_t *ay;                              /* L + 2 entries: y_k with what the B's from k on keep (G_k) */
    int *nopt;                                /* L + 1 entries: options per stage, 1 for the loss */
    int64_t *sv, *tmp, *fetmp, *need, *needb; /* (L+1) * MAXO entries each */
    int64_t *ftmp;                            /* L + 1 entries: fwd_tmp of each stage, 0 for the loss */
    int64_t *F;                               /* (L+1)^2: F[i*(L+1)+l], least m making Opt[m][i][l] finite */
} sizes;

static void sizes_free(sizes *z) {
    free(z->a), free(z->d), free(z->ay), free(z->nopt), free(z->sv), free(z->tmp), free(z->fetmp), free(z->ftmp),
        free(z->need), free(z->needb), free(z->F);
    memset(z, 0, sizeof *z);
}

static remat_status sizes_init(sizes *z, int L) {
    memset(z, 0, sizeof *z);
    z->L = L;
    size_t sq = ((size_t)L + 1) * ((size_t)L + 1), no = ((size_t)L + 1) * MAXO;
    z->a = calloc((size_t)L + 2, sizeof *z->a);
    z->d = calloc((size_t)L + 2, sizeof *z->d);
    z->ay = calloc((size_t)L + 2, sizeof *z->ay);
    z->nopt = calloc((size_t)L + 1, sizeof *z->nopt);
    z->sv = calloc(no, sizeof *z->sv);
    z->tmp = calloc(no, sizeof *z->tmp);
    z->fetmp = calloc(no, sizeof *z->fetmp);
    z->ftmp = calloc((size_t)L + 1, sizeof *z->ftmp);
    z->need = calloc(no, sizeof *z->need);
    z->needb = calloc(no, sizeof *z->needb);
    z->F = malloc(sq * sizeof *z->F);
    if (!z->a || !z->d || !z->ay || !z->nopt || !z->sv || !z->tmp || !z->fetmp || !z->ftmp || !z->need || !z->needb ||
        !z->F) {
        sizes_free(z);
        return remat__err(REMAT_NOMEM, "out of memory planning a chain of %d stages", L);
    }
    return REMAT_OK;
}

static int64_t ceil_div(int64_t v, int64_t u) { return v / u + (v % u != 0); }

static int64_t max64(int64_t a, int64_t b) { return a > b ? a : b; }
static int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }

/* Rounds the chain's sizes to slots of `unit` and fills need and F
 * (the memory-only recurrence, by increasing interval length). Returns the
 * least total memory in slots, x_0 included. */
static int64_t sizes_fill(sizes *z, const remat__stage_ex *st, int64_t output, int64_t unit) {
    int L = z->L;
    size_t W = (size_t)L + 1;
    for (int k = 0; k <= L; k++) z->a[k] = ceil_div(k < L ? st[k].input : output, unit);
    z->a[L + 1] = 0;
    for (int k = 0; k <= L + 1; k++) z->d[k] = k > 0 && k < L && st[k].drop_input ? z->a[k] : 0;
    /* G_k in slots, rounded up as a sum (at least the bytes' sum) */
    int64_t g = 0;
    z->ay[L + 1] = 0, z->ay[L] = z->a[L];
    for (int k = L - 1; k >= 0; k--) z->ay[k] = z->a[k] + (g += ceil_div(st[k].grads, unit));
    const int64_t *a = z->a, *ay = z->ay, *dr = z->d;
    /* Least m of (i, i) with option o: during Fe_i (y_{i+1} with G_{i+1},
     * xbar_{i+1} and fe_tmp) and during B_i (y_i, y_{i+1} with G_{i+1},
     * xbar_{i+1}, bwd_tmp, which counts the stage's own grads); x_i is
     * outside m, and where Fe_i drops it (d[i]) B_i has its bytes too.
     * For i = L (the loss) this is a[L], for y_L. needb is B_i's where it
     * follows (i+1, l) (the chain term): x_{i+1} is gone by then where
     * stage i+1 drops it. */
    for (int i = 0; i <= L; i++) {
        z->nopt[i] = i < L ? st[i].n_options : 1;
        z->ftmp[i] = i < L ? ceil_div(st[i].fwd_tmp, unit) : 0;
        for (int o = 0; o < z->nopt[i]; o++) {
            size_t q = (size_t)i * MAXO + (size_t)o;
            z->sv[q] = i < L ? ceil_div(st[i].opt[o].saved, unit) : 0;
            z->tmp[q] = i < L ? ceil_div(st[i].opt[o].bwd_tmp, unit) : 0;
            z->fetmp[q] = i < L ? ceil_div(st[i].opt[o].fe_tmp, unit) : 0;
            /* and after B_i, y_i with G_i (bwd_tmp, counting the stage's
             * grads, covers it unless a caller's is smaller) */
            int64_t base = max64(a[i] + ay[i + 1] + z->sv[q] + z->tmp[q], ay[i]) - dr[i];
            z->needb[q] = max64(0, max64(a[i] + ay[i + 1] + z->sv[q] - dr[i + 1] + z->tmp[q], ay[i]) - dr[i]);
            z->need[q] = max64(ay[i + 1] + z->sv[q] + z->fetmp[q], base);
        }
    }
    const int64_t *sv = z->sv, *needb = z->needb, *fetmp = z->fetmp, *ftmp = z->ftmp, *need = z->need;
    /* The forwards of a leaf's prefix (CF_i, Fn_{i+1..j-1}) run beside
     * y_{l+1}: their peak is ay[l+1] + max(a[i+1] + ftmp[i], max_{i<k<j}
     * a[k] + a[k+1] + ftmp[k]), counted per leaf j below. (Rotor bounds
     * every interval by the largest over k < l instead; without transient
     * bytes the sub-intervals imply it, with them it would be too strict
     * for the chain choice and for leaves below l.) */
    int64_t *F = z->F;
    for (int i = 0; i <= L; i++) {
        int64_t best = INT64_MAX;
        for (int o = 0; o < z->nopt[i]; o++) best = min64(best, need[(size_t)i * MAXO + (size_t)o]);
        F[(size_t)i * W + (size_t)i] = best;
    }
    for (int d = 1; d <= L; d++) {
        for (int i = 0; i + d <= L; i++) {
            int l = i + d;
            /* chain: Fe_i with option o (beside y_{l+1}), then (i+1, l)
             * beside its xbar_{i+1} */
            int64_t best = INT64_MAX;
            for (int o = 0; o < z->nopt[i]; o++) {
                size_t q = (size_t)i * MAXO + (size_t)o;
                /* B_i's peak (needb), not the base's Fe beside y_{i+1}: here
                 * Fe_i runs beside y_{l+1}; (i+1, l) has x_i's bytes too
                 * where Fe_i drops it */
                int64_t v = max64(needb[q], sv[q] - z->d[i] + F[(size_t)(i + 1) * W + (size_t)l]);
                best = min64(best, max64(v, ay[l + 1] + sv[q] + fetmp[q]));
            }
            /* leaf j: CF_i and Fn_{i+1..j-1} beside y_{l+1} (pre: their
             * peak), x_j kept beside (j, l); then (i, j-1) */
            int64_t pre = a[i + 1] + ftmp[i];
            for (int j = i + 1; j <= l; j++) {
                if (j - 1 > i) pre = max64(pre, a[j - 1] + a[j] + ftmp[j - 1]);
                int64_t v = max64(a[j] + F[(size_t)j * W + (size_t)l], F[(size_t)i * W + (size_t)(j - 1)]);
                best = min64(best, max64(v, ay[l + 1] + pre));
            }
            F[(size_t)i * W + (size_t)l] = best;
        }
    }
    return a[0] + F[(size_t)L];
}

/* The smallest budget that remat__chain_solve_ex accepts with S slots, or
 * -1 when none does (*need_slots then says how many slots would). *exact
 * is the undiscretized floor (unit 1).
 *
 * With unit u, a budget B is feasible iff u = max(1, ceil(B/S)) and
 * C_u <= floor(B/u), C_u being the floor in slots of unit u. C_u does not
 * grow with u (sizes shrink), so the least u with C_u <= S is found by
 * bisection, and every budget of a larger unit exceeds u*S >= the answer
 * max(C_u * u, (u-1)*S + 1). */
static remat_status least_budget(const remat__stage_ex *st, int n, int64_t output, int64_t S, int64_t *best,
                                 int64_t *exact, int64_t *need_slots) {
    sizes z;
    remat_status rc = sizes_init(&z, n);
    if (rc != REMAT_OK) return rc;
    int64_t c1 = sizes_fill(&z, st, output, 1);
    *exact = c1;
    *need_slots = 0;
    if (c1 <= S) {
        *best = c1;
        sizes_free(&z);
        return REMAT_OK;
    }
    int64_t umax = max64(1, output);
    for (int i = 0; i < n; i++) {
        umax = max64(umax, max64(max64(st[i].input, st[i].fwd_tmp), st[i].grads));
        for (int o = 0; o < st[i].n_options; o++)
            umax = max64(umax, max64(max64(st[i].opt[o].saved, st[i].opt[o].bwd_tmp), st[i].opt[o].fe_tmp));
    }
    umax = min64(umax, INT64_MAX / S);
    int64_t chi = sizes_fill(&z, st, output, umax);
    if (chi > S) {
        *best = -1;
        *need_slots = chi;
        sizes_free(&z);
        return REMAT_OK;
    }
    int64_t lo = 1, hi = umax, chosen = chi; /* C_lo > S >= C_hi */
    while (hi - lo > 1) {
        int64_t mid = lo + (hi - lo) / 2;
        int64_t c = sizes_fill(&z, st, output, mid);
        if (c <= S) hi = mid, chosen = c;
        else lo = mid;
    }
    *best = max64(chosen * hi, (hi - 1) * S + 1);
    sizes_free(&z);
    return REMAT_OK;
}

/* ------------------------------------------------------ what a plan costs */

/* The memory a solve of L stages with table rows of W slots allocates
 * (the DP table, a double and an int16 per cell of its (L+1)(L+2)/2 rows,
 * and the memory-only recurrence's two (L+1)^2 tables) and the
 * operations it runs: the memory-only pass visits (i, l, j) triples,
 * (L+1)^3/6 of them, `passes` times (the floor search repeats it), and
 * the DP visits each triple once per slot, plus once per option per
 * (i, l) and slot. Doubles, so that nothing overflows. */
static void plan_cost(int L, double W, double passes, double *bytes, double *work) {
    double n = (double)L + 1, tri3 = n * n * n / 6, ntri = n * (n + 1) / 2;
    *bytes = ntri * W * (double)(sizeof(double) + sizeof(int16_t)) + 2 * n * n * (double)sizeof(int64_t);
    *work = tri3 * (W + passes) + ntri * MAXO * W;
}

/* "1.5 GiB", "812 MiB" */
static const char *bytes_str(double b, char *buf, size_t cap) {
    static const char *const units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
    int u = 0;
    while (b >= 1024 && u < 5) b /= 1024, u++;
    snprintf(buf, cap, "%.3g %s", b, units[u]);
    return buf;
}

/* "40 s", "3.2 hours" */
static const char *time_str(double s, char *buf, size_t cap) {
    if (s < 120) snprintf(buf, cap, "%.2g s", s);
    else if (s < 7200) snprintf(buf, cap, "%.2g minutes", s / 60);
    else if (s < 172800) snprintf(buf, cap, "%.2g hours", s / 3600);
    else snprintf(buf, cap, "%.2g days", s / 86400);
    return buf;
}

/* REMAT_OK when a solve of L stages with W-slot rows stays within the
 * limits; otherwise REMAT_NOMEM (memory) or REMAT_UNSUPPORTED (time),
 * naming the memory and time it would take and what to change. `what`
 * says which part of the solve ("planning", "finding the smallest
 * budget"). */
static remat_status check_plan_cost(int L, int64_t W, double passes, const char *what) {
    double bytes, work;
    plan_cost(L, (double)W, passes, &bytes, &work);
    if (bytes <= MAX_PLAN_BYTES && work <= MAX_PLAN_WORK) return REMAT_OK;
    char b[32], lb[32], t[32], lt[32], sl[48] = "";
    if (W > 0) snprintf(sl, sizeof sl, " with %lld memory slots", (long long)(W - 1));
    return remat__err(bytes > MAX_PLAN_BYTES ? REMAT_NOMEM : REMAT_UNSUPPORTED,
                      "a chain of %d stages%s is too large to plan: %s would need %s of tables (limit %s) and "
                      "about %.2g operations, %s (limit %.2g, %s); use fewer stages (merge consecutive layers "
                      "into one)%s",
                      L, sl, what, bytes_str(bytes, b, sizeof b), bytes_str(MAX_PLAN_BYTES, lb, sizeof lb), work,
                      time_str(work * SECONDS_PER_OP, t, sizeof t), MAX_PLAN_WORK,
                      time_str(MAX_PLAN_WORK * SECONDS_PER_OP, lt, sizeof lt),
                      W > 0 ? " or fewer slots (coarser sizes)" : "");
}

/* The table's largest useful m with slots of `unit`: memory beyond what
 * storing everything needs changes nothing (2 x every value, gradients
 * included, is more than any schedule holds). Worked out from the stages
 * alone, so that it bounds the table before anything is allocated. */
static int64_t store_all_slots(const remat__stage_ex *st, int n, int64_t output, int64_t unit) {
    int64_t cap = 0;
    for (int k = 0; k <= n; k++) {
        int64_t big = k < n ? ceil_div(st[k].fwd_tmp, unit) : 0;
        for (int o = 0; k < n && o < st[k].n_options; o++)
            big = max64(big, ceil_div(st[k].opt[o].saved, unit) +
                                 max64(ceil_div(st[k].opt[o].bwd_tmp, unit), ceil_div(st[k].opt[o].fe_tmp, unit)));
        cap += 2 * (ceil_div(k < n ? st[k].input : output, unit) + big) + (k < n ? ceil_div(st[k].grads, unit) : 0);
    }
    return cap;
}

/* ------------------------------------------------------------ the solver */

/* Index of interval (i, l), 0 <= i <= l <= L, in the triangular tables. */
static size_t tri(int L, int i, int l) {
    return (size_t)i * ((size_t)L + 1) - (size_t)i * ((size_t)i - 1) / 2 + (size_t)(l - i);
}

typedef struct {
    int L;
    int64_t Ms;    /* the largest m in the table */
    size_t W;      /* Ms + 1 */
    double *opt;   /* tri(i,l)*W + m: Opt[m][i][l], +inf when infeasible */
    int16_t *what; /* same layout: -o chain with option o, j > 0 leaf j, WHAT_NONE none */
    double *f;     /* L + 1 entries: forward costs, the loss's 0 */
    double *b;     /* (L+1) * MAXO: backward cost of stage i's option o, the loss's 0 */
} table;

/* Computes row (i, l) of the table from rows of shorter intervals. wt is
 * a scratch row (W doubles) holding the choices while they are compared,
 * 8 bytes wide like the costs so that the update loops vectorize. */
static void table_row(table *t, const sizes *z, int i, int l, double *wt) {
    int L = t->L;
    size_t W = t->W, SQ = (size_t)L + 1;
    int64_t Ms = t->Ms;
    const int64_t *a = z->a, *ay = z->ay, *F = z->F;
    double *r = t->opt + tri(L, i, l) * W;
    int16_t *w = t->what + tri(L, i, l) * W;
    for (size_t m = 0; m < W; m++) r[m] = INFINITY, wt[m] = WHAT_NONE;
    if (F[(size_t)i * SQ + (size_t)l] <= Ms) {
        /* leaves, j ascending; strict < keeps the first minimal j */
        double sf = 0;
        int64_t pre = a[i + 1] + z->ftmp[i]; /* peak of CF_i, Fn_{i+1..j-1} beside y_{l+1} */
        for (int j = i + 1; j <= l; j++) {
            sf += t->f[j - 1];
            if (j - 1 > i) pre = max64(pre, a[j - 1] + a[j] + z->ftmp[j - 1]);
            int64_t aj = a[j];
            int64_t start =
                max64(ay[l + 1] + pre, max64(aj + F[(size_t)j * SQ + (size_t)l], F[(size_t)i * SQ + (size_t)(j - 1)]));
            if (start > Ms) continue;
            const double *A = t->opt + tri(L, j, l) * W - aj; /* A[m] = Opt[m - aj][j][l] */
            const double *B = t->opt + tri(L, i, j - 1) * W;
            double jd = j;
            for (int64_t m = start; m <= Ms; m++) {
                double v = sf + A[m] + B[m], o = r[m];
                int lt = v < o;
                r[m] = lt ? v : o;
                wt[m] = lt ? jd : wt[m];
            }
        }
        /* chain: Fe_i with option o, (i+1, l) beside its xbar_{i+1}, B_i
         * with option o (its peaks: Fe_i beside y_{l+1}, then B_i); a leaf
         * wins ties, then the lower option */
        for (int o = 0; o < z->nopt[i]; o++) {
            size_t q = (size_t)i * MAXO + (size_t)o;
            int64_t svo = z->sv[q];
            int64_t di = z->d[i]; /* what Fe_i frees: (i+1, l) runs in m - sv_o + di */
            int64_t start = max64(z->needb[q], svo - di + F[(size_t)(i + 1) * SQ + (size_t)l]);
            start = max64(start, ay[l + 1] + svo + z->fetmp[q]); /* during Fe_i, beside y_{l+1} */
            if (start > Ms) continue;
            double c = t->f[i] + t->b[q], od = -o;
            const double *D = t->opt + tri(L, i + 1, l) * W; /* Opt[.][i+1][l], beyond Ms as at Ms */
            for (int64_t m = start; m <= Ms; m++) {
                double v = c + D[min64(m - svo + di, Ms)], ov = r[m];
                int lt = v < ov;
                r[m] = lt ? v : ov;
                wt[m] = lt ? od : wt[m];
            }
        }
    }
    for (size_t m = 0; m < W; m++) w[m] = (int16_t)wt[m];
}

/* Fills the DP table. Row (i, l) needs rows (j, l) for j > i and rows
 * (i, k) for k < l, so l goes up and, within it, i goes down: the rows of
 * column l, read by every i, stay in cache. */
static remat_status table_fill(table *t, const sizes *z) {
    int L = t->L;
    size_t W = t->W;
    double *wt = malloc(W * sizeof *wt);
    if (!wt) return remat__err(REMAT_NOMEM, "out of memory planning a chain of %d stages", L);
    for (int l = 0; l <= L; l++) {
        /* the base (l, l): Fe_l, B_l with the cheapest option that fits */
        double *r = t->opt + tri(L, l, l) * W;
        int16_t *w = t->what + tri(L, l, l) * W;
        for (size_t m = 0; m < W; m++) r[m] = INFINITY, w[m] = WHAT_NONE;
        for (int o = 0; o < z->nopt[l]; o++) {
            size_t q = (size_t)l * MAXO + (size_t)o;
            double v = t->f[l] + t->b[q];
            for (int64_t m = max64(0, z->need[q]); m <= t->Ms; m++)
                if (v < r[m]) r[m] = v, w[m] = (int16_t)-o;
        }
        for (int i = l - 1; i >= 0; i--) table_row(t, z, i, l, wt);
    }
    free(wt);
    return REMAT_OK;
}

typedef struct {
    remat_chain_op *v; /* owned */
    int n, cap;
} oplist;

static int oplist_push(oplist *o, remat_chain_op_kind k, int stage, int option) {
    if (o->n == o->cap) {
        int cap = o->cap ? 2 * o->cap : 64;
        if (cap < o->cap) return 0;
        remat_chain_op *v = realloc(o->v, (size_t)cap * sizeof *v);
        if (!v) return 0;
        o->v = v, o->cap = cap;
    }
    o->v[o->n++] = (remat_chain_op){.kind = k, .stage = stage, .option = option};
    return 1;
}

/* Pending work of the reconstruction: solve interval (i, l) with m, or
 * emit B_i (with `option`) once the interval above it is done. */
typedef struct {
    int emit_b;
    int i, l;
    int64_t m;
    int option;
} task;

/* Rebuilds the schedule of Opt[m][0][L] (persistent_rec of rotor, with an
 * explicit stack: the right part's tasks are pushed last so they run
 * first). */
static remat_status rebuild(const table *t, const sizes *z, int64_t m_top, oplist *out) {
    int L = t->L;
    size_t cap = 2 * ((size_t)L + 2), top = 0;
    task *stack = malloc(cap * sizeof *stack);
    if (!stack) return remat__err(REMAT_NOMEM, "out of memory rebuilding a chain schedule");
    remat_status rc = REMAT_OK;
    stack[top++] = (task){0, 0, L, m_top, 0};
    while (top > 0 && rc == REMAT_OK) {
        task k = stack[--top];
        if (top + 2 > cap) {
            task *s2 = realloc(stack, 2 * cap * sizeof *stack);
            if (!s2) {
                rc = remat__err(REMAT_NOMEM, "out of memory rebuilding a chain schedule");
                break;
            }
            stack = s2, cap *= 2;
        }
        int ok = 1;
        if (k.emit_b) {
            if (!oplist_push(out, REMAT_CHAIN_B, k.i, k.option))
                rc = remat__err(REMAT_NOMEM, "out of memory rebuilding a chain schedule");
            continue;
        }
        if (k.m < 0 || k.m > t->Ms || !isfinite(t->opt[tri(L, k.i, k.l) * t->W + (size_t)k.m])) {
            rc = remat__err(REMAT_INTERNAL, "chain schedule: interval %d..%d infeasible with %lld slots", k.i, k.l,
                            (long long)k.m);
            break;
        }
        int j = t->what[tri(L, k.i, k.l) * t->W + (size_t)k.m];
        if (j <= 0 && -j < z->nopt[k.i]) {
            int o = -j;
            if (k.i == L) {
                ok = oplist_push(out, REMAT_CHAIN_LOSS, L, 0);
            } else if (k.i == k.l) {
                ok = oplist_push(out, REMAT_CHAIN_FE, k.i, o) && oplist_push(out, REMAT_CHAIN_B, k.i, o);
            } else {
                ok = oplist_push(out, REMAT_CHAIN_FE, k.i, o);
                stack[top++] = (task){1, k.i, k.i, 0, o};
                stack[top++] =
                    (task){0, k.i + 1, k.l, min64(k.m - z->sv[(size_t)k.i * MAXO + (size_t)o] + z->d[k.i], t->Ms), 0};
            }
        } else if (j > k.i && j <= k.l) {
            ok = oplist_push(out, REMAT_CHAIN_CF, k.i, 0);
            for (int q = k.i + 1; ok && q < j; q++) ok = oplist_push(out, REMAT_CHAIN_FN, q, 0);
            stack[top++] = (task){0, k.i, j - 1, k.m, 0};
            stack[top++] = (task){0, j, k.l, k.m - z->a[j], 0};
        } else {
            rc = remat__err(REMAT_INTERNAL, "chain schedule: no choice recorded for %d..%d", k.i, k.l);
        }
        if (!ok) rc = remat__err(REMAT_NOMEM, "out of memory rebuilding a chain schedule");
    }
    free(stack);
    return rc;
}

/* Allocates t's tables (t->L and t->W set) and fills its costs from the
 * stages; 0 when out of memory (table_free then frees what was). */
static int table_alloc(table *t, const remat__stage_ex *stages) {
    int L = t->L;
    size_t cells = ((size_t)L + 1) * ((size_t)L + 2) / 2 * t->W;
    t->opt = malloc(cells * sizeof *t->opt);
    t->what = malloc(cells * sizeof *t->what);
    t->f = malloc(((size_t)L + 1) * sizeof *t->f);
    t->b = calloc(((size_t)L + 1) * MAXO, sizeof *t->b);
    if (!t->opt || !t->what || !t->f || !t->b) return 0;
    for (int k = 0; k < L; k++) {
        t->f[k] = stages[k].forward;
        for (int o = 0; o < stages[k].n_options; o++) t->b[(size_t)k * MAXO + (size_t)o] = stages[k].opt[o].backward;
    }
    t->f[L] = 0;
    return 1;
}

static void table_free(table *t) { free(t->opt), free(t->what), free(t->f), free(t->b); }

/* What remat__chain_solve_ex assumes of its arguments. */
static remat_status check_solve_args(const remat__stage_ex *stages, int n, int64_t output, int64_t budget, int slots) {
    remat_status rc = remat__chain_check_ex(stages, n, output);
    if (rc != REMAT_OK) return rc;
    if (n > MAX_STAGES) return remat__err(REMAT_UNSUPPORTED, "chain of %d stages: at most %d", n, MAX_STAGES);
    if (budget < 0) return remat__err(REMAT_INVALID, "budget is negative (%lld)", (long long)budget);
    if (slots < 0) return remat__err(REMAT_INVALID, "slots is negative (%d)", slots);
    return REMAT_OK;
}

/* REMAT_BUDGET for a budget below the chain's floor with S slots:
 * least_budget's answer (best, exact, need_slots), in words. */
static remat_status floor_error(int64_t budget, int64_t S, int64_t best, int64_t exact, int64_t need_slots) {
    if (best < 0)
        return remat__err(REMAT_BUDGET,
                          "no budget fits the chain with %lld memory slots: it needs at least %lld slots "
                          "(the model's exact floor is %lld)",
                          (long long)S, (long long)need_slots, (long long)exact);
    if (best == exact)
        return remat__err(REMAT_BUDGET, "budget %lld is too small: the smallest budget that fits is %lld",
                          (long long)budget, (long long)best);
    return remat__err(REMAT_BUDGET,
                      "budget %lld is too small: the smallest budget that fits is %lld with %lld memory "
                      "slots (the model's exact floor is %lld)",
                      (long long)budget, (long long)best, (long long)S, (long long)exact);
}

/* When the chain needs more slots of *unit than the budget holds (*need >
 * *Mslots): either a smaller budget's finer slots fit, and the chain is
 * planned in those (z refilled; *unit, *Mslots and *need change), or
 * REMAT_BUDGET names the smallest budget that fits. */
static remat_status finer_slots_or_floor(const remat__stage_ex *stages, int n, int64_t output, int64_t budget,
                                         int64_t S, sizes *z, int64_t *unit, int64_t *Mslots, int64_t *need) {
    /* the floor search fills the sizes tables once per bisection step
     * (at most 64, one per bit of the largest size) */
    remat_status rc = check_plan_cost(n, 0, 65, "finding the smallest budget that fits");
    if (rc != REMAT_OK) {
        char why[1024];
        snprintf(why, sizeof why, "%s", remat_last_error());
        return remat__err(REMAT_BUDGET,
                          "budget %lld is too small: with slots of %lld the chain needs at least "
                          "%lld; %s",
                          (long long)budget, (long long)*unit, (long long)(*need * *unit), why);
    }
    int64_t best, exact, need_slots;
    rc = least_budget(stages, n, output, S, &best, &exact, &need_slots);
    if (rc != REMAT_OK) return rc;
    if (best < 0 || best > budget) return floor_error(budget, S, best, exact, need_slots);
    /* Rounding to this budget's slot leaves no room, but a smaller
     * budget's finer slots do (best has a smaller unit, and every unit
     * from best's up is feasible at its top budget): plan for (unit - 1) *
     * S, the largest of those. So every budget from the one floor_error
     * would name up is feasible. */
    *unit -= 1;
    *Mslots = S;
    *need = *unit >= 1 ? sizes_fill(z, stages, output, *unit) : INT64_MAX;
    if (*unit < 1 || *need > *Mslots)
        return remat__err(REMAT_INTERNAL, "chain floor: budget %lld infeasible with slot %lld", (long long)budget,
                          (long long)*unit);
    return REMAT_OK;
}

/* Simulates the schedule rebuilt from the table into p's cost and peak;
 * REMAT_INTERNAL unless it simulates, reaches y_0 and stays within the
 * budget (the table and the simulator disagree). */
static remat_status check_schedule(const remat__stage_ex *stages, int n, int64_t output, int64_t budget,
                                   const oplist *ops, remat_chain_plan *p) {
    int complete = 0;
    remat_status rc = remat__chain_sim_run(stages, n, output, ops->v, ops->n, &p->cost, &p->peak, &complete);
    if (rc != REMAT_OK)
        return remat__err(REMAT_INTERNAL, "the chain schedule does not simulate: %s", remat_last_error());
    if (!complete || p->peak > budget)
        return remat__err(REMAT_INTERNAL, "the chain schedule %s (peak %lld, budget %lld)",
                          complete ? "exceeds the budget" : "does not reach y_0", (long long)p->peak,
                          (long long)budget);
    return REMAT_OK;
}

/* The plan in Mslots slots of `unit` (z filled for that unit, need its
 * floor in slots): the DP table, the schedule rebuilt from it, checked by
 * the simulator. *out gets the plan. */
static remat_status solve_in_slots(const remat__stage_ex *stages, int n, int64_t output, int64_t budget, const sizes *z,
                                   int64_t unit, int64_t Mslots, int64_t need, remat_chain_plan **out) {
    int L = n;
    /* Memory beyond what storing everything needs changes nothing: cap the
     * table there (this matters when slots is as large as the budget). */
    int64_t cap = store_all_slots(stages, n, output, unit);
    table t = {.L = L, .Ms = min64(Mslots, max64(cap, need))};
    t.W = (size_t)t.Ms + 1;
    /* the exact rows (those checked first are a bound) */
    remat_status rc = check_plan_cost(L, (int64_t)t.W, 1, "planning");
    if (rc != REMAT_OK) return rc;
    remat_chain_plan *p = calloc(1, sizeof *p);
    oplist ops = {0};
    if (!table_alloc(&t, stages) || !p) {
        double cells = (double)(((size_t)L + 1) * ((size_t)L + 2) / 2 * t.W);
        rc = remat__err(REMAT_NOMEM, "out of memory: the planning table of %d stages x %lld slots needs %.1f MiB", L,
                        (long long)t.W, cells * (sizeof(double) + sizeof(int16_t)) / 1048576.0);
    }
    if (rc == REMAT_OK) rc = table_fill(&t, z);
    if (rc == REMAT_OK) rc = rebuild(&t, z, min64(Mslots - z->a[0], t.Ms), &ops);
    if (rc == REMAT_OK) rc = check_schedule(stages, n, output, budget, &ops, p);
    if (rc == REMAT_OK) {
        p->ops = ops.v, p->n_ops = ops.n;
        ops.v = NULL;
        *out = p;
        p = NULL;
    }
    free(ops.v);
    free(p);
    table_free(&t);
    return rc;
}

remat_status remat__chain_solve_ex(const remat__stage_ex *stages, int n, int64_t output, int64_t budget, int slots,
                                   remat_chain_plan **out) {
    if (!out) return remat__err(REMAT_INVALID, "remat__chain_solve_ex: out is NULL");
    *out = NULL;
    remat_status rc = check_solve_args(stages, n, output, budget, slots);
    if (rc != REMAT_OK) return rc;
    int64_t S = slots ? slots : DEFAULT_SLOTS;
    int64_t unit = max64(1, ceil_div(budget, S));
    int64_t Mslots = budget / unit;
    /* Before anything is allocated: the table's rows are at most
     * min(Mslots, store-all) + 1 slots (store-all only grows them when the
     * budget is infeasible, which the floor search prices). */
    rc = check_plan_cost(n, min64(Mslots, store_all_slots(stages, n, output, unit)) + 1, 1, "planning");
    if (rc != REMAT_OK) return rc;
    sizes z;
    rc = sizes_init(&z, n);
    if (rc != REMAT_OK) return rc;
    int64_t need = sizes_fill(&z, stages, output, unit);
    if (need > Mslots) rc = finer_slots_or_floor(stages, n, output, budget, S, &z, &unit, &Mslots, &need);
    if (rc == REMAT_OK) rc = solve_in_slots(stages, n, output, budget, &z, unit, Mslots, need, out);
    sizes_free(&z);
    return rc;
}

/* ------------------------------------------------ a table for all budgets */

struct remat__chain_tab {
    remat__stage_ex *st; /* owned copy */
    int n;
    int64_t output, unit, top_slots;
    sizes z;
    table t;
};

void remat__chain_tab_free(remat__chain_tab *c) {
    if (!c) return;
    table_free(&c->t);
    sizes_free(&c->z);
    free(c->st);
    free(c);
}

remat_status remat__chain_tab_build(const remat__stage_ex *stages, int n, int64_t output, int64_t unit, int64_t top,
                                    remat__chain_tab **out) {
    if (!out) return remat__err(REMAT_INVALID, "remat__chain_tab_build: out is NULL");
    *out = NULL;
    remat_status rc = remat__chain_check_ex(stages, n, output);
    if (rc != REMAT_OK) return rc;
    if (n > MAX_STAGES) return remat__err(REMAT_UNSUPPORTED, "chain of %d stages: at most %d", n, MAX_STAGES);
    if (unit < 1 || top < 0)
        return remat__err(REMAT_INVALID, "chain table: unit %lld, top %lld", (long long)unit, (long long)top);
    int64_t Mslots = top / unit;
    rc = check_plan_cost(n, min64(Mslots, store_all_slots(stages, n, output, unit)) + 1, 1, "planning");
    if (rc != REMAT_OK) return rc;
    remat__chain_tab *c = calloc(1, sizeof *c);
    if (!c) return remat__err(REMAT_NOMEM, "out of memory planning a chain of %d stages", n);
    c->n = n, c->output = output, c->unit = unit, c->top_slots = Mslots;
    c->st = malloc((size_t)n * sizeof *c->st);
    rc = c->st ? sizes_init(&c->z, n) : remat__err(REMAT_NOMEM, "out of memory planning a chain of %d stages", n);
    if (rc != REMAT_OK) {
        remat__chain_tab_free(c);
        return rc;
    }
    memcpy(c->st, stages, (size_t)n * sizeof *c->st);
    sizes_fill(&c->z, stages, output, unit);
    int L = n;
    table *t = &c->t;
    t->L = L;
    t->Ms = max64(0, min64(Mslots - c->z.a[0], store_all_slots(stages, n, output, unit)));
    t->W = (size_t)t->Ms + 1;
    if (!table_alloc(t, stages)) {
        long long W = (long long)t->W; /* t goes with c */
        remat__chain_tab_free(c);
        return remat__err(REMAT_NOMEM, "out of memory: the planning table of %d stages x %lld slots", L, W);
    }
    rc = table_fill(t, &c->z);
    if (rc != REMAT_OK) {
        remat__chain_tab_free(c);
        return rc;
    }
    *out = c;
    return REMAT_OK;
}

/* The least slots (x_0 included) with a plan. */
static int64_t tab_floor_slots(const remat__chain_tab *c) { return c->z.a[0] + c->z.F[(size_t)c->n]; }

int64_t remat__chain_tab_floor(const remat__chain_tab *c) {
    int64_t f = tab_floor_slots(c);
    return f <= c->top_slots && f - c->z.a[0] <= c->t.Ms ? f * c->unit : -1;
}

remat_status remat__chain_tab_plan(const remat__chain_tab *c, int64_t budget, remat_chain_plan **out) {
    *out = NULL;
    int64_t slots = min64(budget / c->unit, c->top_slots), fl = tab_floor_slots(c);
    if (slots < fl)
        return remat__err(REMAT_BUDGET, "budget %lld is too small for the chain: its floor is %lld", (long long)budget,
                          (long long)(fl * c->unit));
    oplist ops = {0};
    remat_chain_plan *p = calloc(1, sizeof *p);
    if (!p) return remat__err(REMAT_NOMEM, "out of memory planning a chain");
    remat_status rc = rebuild(&c->t, &c->z, min64(slots - c->z.a[0], c->t.Ms), &ops);
    int complete = 0;
    if (rc == REMAT_OK) rc = remat__chain_sim_run(c->st, c->n, c->output, ops.v, ops.n, &p->cost, &p->peak, &complete);
    if (rc == REMAT_OK && (!complete || p->peak > slots * c->unit))
        rc = remat__err(REMAT_INTERNAL, "the chain schedule %s (peak %lld, budget %lld)",
                        complete ? "exceeds the budget" : "does not reach y_0", (long long)p->peak,
                        (long long)(slots * c->unit));
    if (rc != REMAT_OK) {
        free(ops.v), free(p);
        return rc;
    }
    p->ops = ops.v, p->n_ops = ops.n;
    *out = p;
    return REMAT_OK;
}

remat_status remat_chain_solve(const remat_stage *stages, int n, int64_t output, int64_t budget, int slots,
                               remat_chain_plan **out) {
    if (!out) return remat__err(REMAT_INVALID, "remat_chain_solve: out is NULL");
    *out = NULL;
    remat_status rc = remat__chain_check(stages, n, output);
    if (rc != REMAT_OK) return rc;
    remat__stage_ex *ex = remat__chain_to_ex(stages, n);
    if (!ex) return REMAT_NOMEM;
    rc = remat__chain_solve_ex(ex, n, output, budget, slots, out);
    free(ex);
    return rc;
}
