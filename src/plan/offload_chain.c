/* offload_chain.c: rotor's persistent chain DP with offload as a third
 * choice per stage (POFO-style: keep, recompute or offload), under a
 * device budget and a host budget (offload.h, remat__offload_solve).
 *
 * The model. Rotor's (rotor.c, PLANNING.md 3.1, transient bytes and
 * storage options included), plus: stage i <= L-2 may run an offloaded
 * Fe_i, which keeps option 0's xbar_{i+1} but moves its part beyond
 * x_{i+1} (H_i bytes) to the host. The copy out runs on the copy engine
 * beside the next operation (Fe_{i+1} or CF_{i+1}, f_{i+1} long); the
 * copy back beside B_{i+1}, which always precedes B_i. The device holds
 * H_i during Fe_i, those two operations and B_i; the host from Fe_i to
 * B_i. A copy of H bytes takes latency + H / bandwidth seconds, c_i; what
 * it does not hide is exposed: max(0, c_i - f_{i+1}) after the first and
 * max(0, c_i - b_{i+1}) before B_i (b_{i+1} of the option B_{i+1} runs).
 * These windows never overlap, so the engine is never busy when a copy is
 * issued and the stalls add up: the DP's cost is the timeline's
 * (offload_sim.c), which every solve checks.
 *
 * The recurrence. Opt[i][l][m][h] is rotor's Opt[m][i][l] (x_i resident
 * and not counted; y_{l+1} counted in m slots) with h host slots, and
 * gains a term for an offloaded Fe_i: f_i + b_i + P[i+1][l][m - a_{i+1}]
 * [h - hh_i]. P[k][l][m][h] is the interval k..l beside the copies of
 * H_{k-1} (hd_{k-1} device slots): its first operation and its last,
 * B_k, hold hd_{k-1} more, and it pays the two stalls of c_{k-1}. It
 * starts with Fe_k, plain (then Opt[k+1][l]) or offloaded (then
 * P[k+1][l]), or with a leaf: CF_k, Fn up to j-1, Opt[j][l], then k..j-1
 * as Q[k][j-1], which is the same as P but beside the copy back only.
 * A leaf's two parts run one after the other, so each gets all h slots.
 * With h = 0 no offload fits and Opt is rotor's table: the plan is
 * remat__chain_solve_ex's, at its cost; with h > 0 the choices only
 * grow, so the cost never rises.
 *
 * The tables are (L+1)(L+2)/2 x (M+1) x (H+1) doubles and int16 choices,
 * three of them; a solve is refused (naming the sizes) past 1 GiB or 1e10
 * steps.
 *
 * Ownership: the plan is the caller's (remat_chain_plan_destroy); nothing
 * else outlives a call.
 */
#include "offload.h"

#include "../remat-impl.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#define MAXO REMAT__MAX_OPTIONS
#define NONE INT16_MIN
#define OFF_CHOICE (-100)     /* the offloaded Fe; in Opt -1 - o is the plain Fe of option o, j > 0 a leaf at j; */
#define LEAF(j) (-1000 - (j)) /* in P and Q o >= 0 is the plain Fe of option o, LEAF(j) a leaf at j */
#define DEFAULT_SLOTS 500
#define DEFAULT_HOST_SLOTS 16
#define MAX_BYTES ((double)(1u << 30))
#define MAX_WORK 1e10

typedef struct {
    int L;
    int64_t Ms, Hs;
    size_t W, HW;
    int64_t *a;               /* L + 2: x_k in slots (a[L+1] = 0) */
    int *nopt;                /* L + 1 */
    int64_t *sv, *needb, *fe; /* (L+1) * MAXO: xbar, B's least m, Fe's xbar + fe_tmp */
    int64_t *ftmp, *hd, *hh;  /* L + 1: fwd_tmp; offloaded device / host slots (-1: not offloadable) */
    double *f, *b, *c;        /* f: L+1, b: (L+1) * MAXO, c: copy seconds of H_i */
    double *opt, *pt, *qt;    /* Opt, P and Q */
    int16_t *wo, *wp, *wq;    /* their choices */
} otab;

static int64_t cdiv(int64_t v, int64_t u) { return v / u + (v % u != 0); }
static int64_t max64(int64_t a, int64_t b) { return a > b ? a : b; }
static int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }

static size_t tri(int L, int i, int l) {
    return (size_t)i * ((size_t)L + 1) - (size_t)i * ((size_t)i - 1) / 2 + (size_t)(l - i);
}
static size_t cell(const otab *t, int i, int l, int64_t m, int64_t h) {
    return (tri(t->L, i, l) * t->W + (size_t)m) * t->HW + (size_t)h;
}

static void otab_free(otab *t) {
    free(t->a), free(t->nopt), free(t->sv), free(t->needb), free(t->fe), free(t->ftmp), free(t->hd), free(t->hh);
    free(t->f), free(t->b), free(t->c), free(t->opt), free(t->pt), free(t->qt), free(t->wo), free(t->wp), free(t->wq);
}

/* The sizes in slots (rotor.c's sizes_fill, without the floor), the
 * costs, and what each stage may offload. */
static void otab_sizes(otab *t, const remat__stage_ex *st, int64_t output, remat__link link, int64_t unit,
                       int64_t hunit) {
    int L = t->L;
    for (int k = 0; k <= L; k++) t->a[k] = cdiv(k < L ? st[k].input : output, unit);
    t->a[L + 1] = 0;
    for (int i = 0; i <= L; i++) {
        t->nopt[i] = i < L ? st[i].n_options : 1;
        t->ftmp[i] = i < L ? cdiv(st[i].fwd_tmp, unit) : 0;
        t->f[i] = i < L ? st[i].forward : 0;
        for (int o = 0; o < t->nopt[i]; o++) {
            size_t q = (size_t)i * MAXO + (size_t)o;
            const remat__stage_option *p = i < L ? &st[i].opt[o] : NULL;
            t->sv[q] = p ? cdiv(p->saved, unit) : 0;
            t->fe[q] = t->sv[q] + (p ? cdiv(p->fe_tmp, unit) : 0);
            t->needb[q] = t->a[i] + t->a[i + 1] + t->sv[q] + (p ? cdiv(p->bwd_tmp, unit) : 0);
            t->b[q] = p ? p->backward : 0;
        }
        int64_t hb = i <= L - 2 ? st[i].opt[0].saved - st[i + 1].input : 0;
        t->hd[i] = hb > 0 ? t->sv[(size_t)i * MAXO] - t->a[i + 1] : -1;
        t->hh[i] = hb > 0 ? cdiv(hb, hunit) : -1;
        t->c[i] = hb > 0 ? remat__copy_seconds(link, hb) : 0;
    }
}

static double stall(double c, double window) { return c > window ? c - window : 0; }

/* Fe_i (option o) beside y_{l+1} and B_i, with `extra` slots more: the
 * least m of the pair. */
static int64_t pair_need(const otab *t, int i, int l, int o, int64_t extra) {
    size_t q = (size_t)i * MAXO + (size_t)o;
    return max64(t->needb[q], t->a[l + 1] + t->fe[q]) + extra;
}

/* Opt[i][l][m][h]: rotor's leaves and chain terms, and the offloaded Fe_i. */
static void fill_opt(otab *t, int i, int l, int64_t m, int64_t h) {
    double best = INFINITY;
    int16_t w = NONE;
    if (i < l) {
        double sf = 0;
        int64_t pre = t->a[i + 1] + t->ftmp[i];
        for (int j = i + 1; j <= l; j++) {
            sf += t->f[j - 1];
            if (j - 1 > i) pre = max64(pre, t->a[j - 1] + t->a[j] + t->ftmp[j - 1]);
            if (t->a[l + 1] + pre > m || t->a[j] > m) continue;
            double v = sf + t->opt[cell(t, j, l, m - t->a[j], h)] + t->opt[cell(t, i, j - 1, m, h)];
            if (v < best) best = v, w = (int16_t)j;
        }
    }
    for (int o = 0; o < t->nopt[i]; o++) {
        if (pair_need(t, i, l, o, 0) > m) continue;
        size_t q = (size_t)i * MAXO + (size_t)o;
        double v = t->f[i] + t->b[q] + (i < l ? t->opt[cell(t, i + 1, l, m - t->sv[q], h)] : 0);
        if (v < best) best = v, w = (int16_t)(-1 - o);
    }
    if (i < l && t->hd[i] >= 0 && t->hh[i] <= h && pair_need(t, i, l, 0, 0) <= m) {
        double v = t->f[i] + t->b[(size_t)i * MAXO] + t->pt[cell(t, i + 1, l, m - t->a[i + 1], h - t->hh[i])];
        if (v < best) best = v, w = OFF_CHOICE;
    }
    t->opt[cell(t, i, l, m, h)] = best, t->wo[cell(t, i, l, m, h)] = w;
}

/* P[k][l][m][h] (first) and Q[k][l][m][h] (k >= 1, stage k-1
 * offloadable): k..l beside the copies of H_{k-1}: its first operation
 * (P only) and its last, B_k, hold hd_{k-1} more and pay the stalls of
 * c_{k-1}. P starts with Fe_k or, a leaf, CF_k, whose left part is Q. */
static void fill_pq(otab *t, int k, int l, int64_t m, int64_t h, int first) {
    double best = INFINITY, c = t->c[k - 1], out = first ? stall(c, t->f[k]) : 0;
    int16_t w = NONE;
    int64_t x = t->hd[k - 1];
    double sf = 0;
    int64_t pre = t->a[k + 1] + t->ftmp[k];
    for (int j = k + 1; j <= l; j++) { /* leaf at j: CF_k (beside the copy out when first), Fn, then Q */
        sf += t->f[j - 1];
        if (j - 1 > k) pre = max64(pre, t->a[j - 1] + t->a[j] + t->ftmp[j - 1]);
        if (t->a[l + 1] + pre > m || t->a[j] > m) continue;
        if (first && t->a[l + 1] + t->a[k + 1] + t->ftmp[k] + x > m) continue;
        double v = sf + out + t->opt[cell(t, j, l, m - t->a[j], h)] + t->qt[cell(t, k, j - 1, m, h)];
        if (v < best) best = v, w = (int16_t)LEAF(j);
    }
    for (int o = 0; o < t->nopt[k]; o++) {
        size_t q = (size_t)k * MAXO + (size_t)o;
        if (max64(t->needb[q] + x, t->a[l + 1] + t->fe[q] + (first ? x : 0)) > m) continue;
        double v = t->f[k] + t->b[q] + out + stall(c, t->b[q]);
        if (k < l) v += t->opt[cell(t, k + 1, l, m - t->sv[q], h)];
        if (v < best) best = v, w = (int16_t)o;
    }
    if (k < l && t->hd[k] >= 0 && t->hh[k] <= h &&
        max64(t->needb[(size_t)k * MAXO] + x, t->a[l + 1] + t->fe[(size_t)k * MAXO] + (first ? x : 0)) <= m) {
        double v = t->f[k] + t->b[(size_t)k * MAXO] + out + stall(c, t->b[(size_t)k * MAXO]) +
                   t->pt[cell(t, k + 1, l, m - t->a[k + 1], h - t->hh[k])];
        if (v < best) best = v, w = OFF_CHOICE;
    }
    size_t at = cell(t, k, l, m, h);
    if (first) t->pt[at] = best, t->wp[at] = w;
    else t->qt[at] = best, t->wq[at] = w;
}

/* Rows by l up, i down: every row reads rows of shorter intervals or of
 * the same l with a larger i. */
static void otab_fill(otab *t) {
    for (int l = 0; l <= t->L; l++)
        for (int i = l; i >= 0; i--)
            for (int64_t m = 0; m <= t->Ms; m++)
                for (int64_t h = 0; h <= t->Hs; h++) {
                    size_t at = cell(t, i, l, m, h);
                    if (i >= 1 && i < t->L && t->hd[i - 1] >= 0) {
                        fill_pq(t, i, l, m, h, 0);
                        fill_pq(t, i, l, m, h, 1);
                    } else {
                        t->pt[at] = t->qt[at] = INFINITY, t->wp[at] = t->wq[at] = NONE;
                    }
                    fill_opt(t, i, l, m, h);
                }
}

typedef struct {
    int kind; /* 0 Opt, 1 P, 2 emit B, 3 Q */
    int i, l;
    int64_t m, h;
    int option;
} task;

typedef struct {
    remat_chain_op *v;
    int n, cap;
} oplist;

static int push_op(oplist *o, remat_chain_op_kind k, int stage, int option) {
    if (o->n == o->cap) {
        int cap = o->cap ? 2 * o->cap : 64;
        remat_chain_op *v = realloc(o->v, (size_t)cap * sizeof *v);
        if (!v) return 0;
        o->v = v, o->cap = cap;
    }
    o->v[o->n++] = (remat_chain_op){.kind = k, .stage = stage, .option = option};
    return 1;
}

/* One task of the rebuild: emits its first operations and pushes the
 * rest (the right part last, so it runs first). 0 when out of memory. */
static int rebuild_task(const otab *t, task k, task *stack, size_t *top, oplist *out) {
    if (k.kind == 2) return push_op(out, REMAT_CHAIN_B, k.i, k.option);
    size_t at = cell(t, k.i, k.l, k.m, k.h);
    int w = k.kind == 0 ? t->wo[at] : k.kind == 1 ? t->wp[at] : t->wq[at];
    if (k.kind == 0 && k.i == t->L) return push_op(out, REMAT_CHAIN_LOSS, t->L, 0);
    if (k.kind != 0 && w <= LEAF(0)) { /* leaf at j; its left part ends beside the copy back */
        int j = LEAF(0) - w, ok = push_op(out, REMAT_CHAIN_CF, k.i, 0);
        for (int q = k.i + 1; ok && q < j; q++) ok = push_op(out, REMAT_CHAIN_FN, q, 0);
        stack[(*top)++] = (task){3, k.i, j - 1, k.m, k.h, 0};
        stack[(*top)++] = (task){0, j, k.l, k.m - t->a[j], k.h, 0};
        return ok;
    }
    if (k.kind == 0 && w > 0) { /* leaf at j */
        int ok = push_op(out, REMAT_CHAIN_CF, k.i, 0);
        for (int q = k.i + 1; ok && q < w; q++) ok = push_op(out, REMAT_CHAIN_FN, q, 0);
        stack[(*top)++] = (task){0, k.i, w - 1, k.m, k.h, 0};
        stack[(*top)++] = (task){0, w, k.l, k.m - t->a[w], k.h, 0};
        return ok;
    }
    int off = w == OFF_CHOICE, o = off ? 0 : (k.kind == 0 ? -1 - w : w);
    int opt = off ? REMAT__OFFLOAD_OPTION : o;
    if (!push_op(out, REMAT_CHAIN_FE, k.i, opt)) return 0;
    if (k.i == k.l) return push_op(out, REMAT_CHAIN_B, k.i, opt);
    stack[(*top)++] = (task){2, k.i, k.i, 0, 0, opt};
    if (off) stack[(*top)++] = (task){1, k.i + 1, k.l, k.m - t->a[k.i + 1], k.h - t->hh[k.i], 0};
    else stack[(*top)++] = (task){0, k.i + 1, k.l, k.m - t->sv[(size_t)k.i * MAXO + (size_t)o], k.h, 0};
    return 1;
}

static remat_status rebuild(const otab *t, int64_t m, int64_t h, oplist *out) {
    size_t cap = 3 * ((size_t)t->L + 2), top = 0;
    task *stack = malloc(cap * sizeof *stack);
    if (!stack) return remat__err(REMAT_NOMEM, "out of memory rebuilding a chain schedule");
    stack[top++] = (task){0, 0, t->L, m, h, 0};
    int ok = 1;
    while (ok && top > 0) {
        task k = stack[--top];
        const int16_t *wt = k.kind == 0 ? t->wo : k.kind == 1 ? t->wp : t->wq;
        if (k.kind != 2 && wt[cell(t, k.i, k.l, k.m, k.h)] == NONE) {
            free(stack);
            return remat__err(REMAT_INTERNAL, "offload schedule: interval %d..%d has no choice", k.i, k.l);
        }
        if (top + 2 > cap) {
            task *s2 = realloc(stack, 2 * cap * sizeof *stack);
            if (!s2) break;
            stack = s2, cap *= 2;
        }
        ok = rebuild_task(t, k, stack, &top, out);
    }
    ok = ok && top == 0;
    free(stack);
    return ok ? REMAT_OK : remat__err(REMAT_NOMEM, "out of memory rebuilding a chain schedule");
}

/* The largest useful m (rotor.c's store_all_slots: twice every value). */
static int64_t store_all(const otab *t) {
    int64_t cap = 0;
    for (int k = 0; k <= t->L; k++) {
        int64_t big = t->ftmp[k];
        for (int o = 0; k < t->L && o < t->nopt[k]; o++)
            big = max64(big, t->needb[(size_t)k * MAXO + (size_t)o] + t->fe[(size_t)k * MAXO + (size_t)o]);
        cap += 2 * (t->a[k] + big);
    }
    return cap;
}

/* Allocates the per-stage arrays of t (L set). */
static remat_status otab_alloc_sizes(otab *t) {
    int L = t->L;
    size_t no = ((size_t)L + 1) * MAXO;
    t->a = calloc((size_t)L + 2, sizeof *t->a), t->nopt = calloc((size_t)L + 1, sizeof *t->nopt);
    t->sv = calloc(no, sizeof *t->sv), t->needb = calloc(no, sizeof *t->needb), t->fe = calloc(no, sizeof *t->fe);
    t->ftmp = calloc((size_t)L + 1, sizeof *t->ftmp), t->hd = calloc((size_t)L + 1, sizeof *t->hd);
    t->hh = calloc((size_t)L + 1, sizeof *t->hh), t->f = calloc((size_t)L + 1, sizeof *t->f);
    t->b = calloc(no, sizeof *t->b), t->c = calloc((size_t)L + 1, sizeof *t->c);
    if (!t->a || !t->nopt || !t->sv || !t->needb || !t->fe || !t->ftmp || !t->hd || !t->hh || !t->f || !t->b || !t->c)
        return remat__err(REMAT_NOMEM, "out of memory planning a chain of %d stages with offload", L);
    return REMAT_OK;
}

/* Allocates the tables of t (Ms and Hs set), refusing sizes past the
 * limits with the figures. */
static remat_status otab_alloc_tables(otab *t) {
    int L = t->L;
    t->W = (size_t)t->Ms + 1, t->HW = (size_t)t->Hs + 1;
    double n = (double)L + 1, cells = n * (n + 1) / 2 * (double)t->W * (double)t->HW;
    double bytes = 3 * cells * (sizeof(double) + sizeof(int16_t)), work = cells * (3 * n + 3 * MAXO);
    if (bytes > MAX_BYTES || work > MAX_WORK)
        return remat__err(REMAT_UNSUPPORTED,
                          "a chain of %d stages with offload is too large to plan: %lld device "
                          "x %lld host slots need %.0f MiB of tables (limit %.0f) and %.2g steps (limit %.2g); use "
                          "fewer slots",
                          L, (long long)t->Ms, (long long)t->Hs, bytes / 1048576, MAX_BYTES / 1048576, work, MAX_WORK);
    size_t nc = (size_t)cells;
    t->opt = malloc(nc * sizeof *t->opt), t->pt = malloc(nc * sizeof *t->pt), t->qt = malloc(nc * sizeof *t->qt);
    t->wo = malloc(nc * sizeof *t->wo), t->wp = malloc(nc * sizeof *t->wp), t->wq = malloc(nc * sizeof *t->wq);
    if (!t->opt || !t->pt || !t->qt || !t->wo || !t->wp || !t->wq)
        return remat__err(REMAT_NOMEM, "out of memory: offload tables of %.0f MiB", bytes / 1048576);
    return REMAT_OK;
}

/* Host slots: of min(host budget, everything offloadable) / host_slots
 * bytes; the top row never exceeds what offloading everything needs. */
static void host_grid(const remat__stage_ex *st, int n, int64_t host_budget, int host_slots, int64_t *hunit,
                      int64_t *htop) {
    int64_t all = 0;
    for (int i = 0; i + 2 <= n; i++) all += max64(0, st[i].opt[0].saved - st[i + 1].input);
    int64_t span = min64(host_budget, all);
    *hunit = max64(1, cdiv(span, host_slots > 0 ? host_slots : DEFAULT_HOST_SLOTS));
    int64_t sum = 0;
    for (int i = 0; i + 2 <= n; i++) sum += cdiv(max64(0, st[i].opt[0].saved - st[i + 1].input), *hunit);
    *htop = span > 0 ? min64(host_budget / *hunit, sum) : 0;
}

/* REMAT_BUDGET for a budget no plan with offload fits, with what rotor's
 * DP (no offload) names as its floor. */
static remat_status too_small(const remat__stage_ex *st, int n, int64_t output, int64_t budget, int64_t host_budget,
                              int slots) {
    remat_chain_plan *p = NULL;
    remat_status rc = remat__chain_solve_ex(st, n, output, budget, slots, &p);
    remat_chain_plan_destroy(p);
    char why[512] = "";
    if (rc == REMAT_BUDGET) snprintf(why, sizeof why, "; without offload: %s", remat_last_error());
    return remat__err(REMAT_BUDGET, "budget %lld is too small for the chain with %lld host bytes for offload%s",
                      (long long)budget, (long long)host_budget, why);
}

/* Simulates the rebuilt schedule and checks it against both budgets. */
static remat_status plan_out(const remat__stage_ex *st, int n, int64_t output, remat__link link, int64_t budget,
                             int64_t host_budget, double dp_cost, oplist *ops, remat_chain_plan **plan,
                             remat__offload_result *res) {
    remat__offload_result r;
    remat_status rc = remat__offload_simulate(st, n, output, link, ops->v, ops->n, &r);
    if (rc != REMAT_OK)
        return remat__err(REMAT_INTERNAL, "the offload schedule does not simulate: %s", remat_last_error());
    if (fabs(r.cost - dp_cost) > 1e-9 * fmax(1, fabs(dp_cost)))
        return remat__err(REMAT_INTERNAL, "the offload DP costs its schedule %.17g, the simulator %.17g", dp_cost,
                          r.cost);
    if (r.peak > budget || r.host_peak > host_budget)
        return remat__err(REMAT_INTERNAL,
                          "the offload schedule holds %lld device bytes (budget %lld) and %lld host "
                          "bytes (budget %lld)",
                          (long long)r.peak, (long long)budget, (long long)r.host_peak, (long long)host_budget);
    *plan = remat__chain_plan_make(ops->v, ops->n, r.cost, r.peak);
    if (!*plan) return REMAT_NOMEM;
    if (res) *res = r;
    return REMAT_OK;
}

/* The table for the budgets, filled (REMAT_BUDGET, unset, when x_0
 * alone passes the budget). */
static remat_status otab_build(otab *t, const remat__stage_ex *st, int n, int64_t output, remat__link link,
                               int64_t budget, int64_t host_budget, int slots, int host_slots) {
    int64_t S = slots ? slots : DEFAULT_SLOTS, hunit, htop, unit = max64(1, cdiv(budget, S));
    host_grid(st, n, host_budget, host_slots, &hunit, &htop);
    t->L = n;
    remat_status rc = otab_alloc_sizes(t);
    if (rc != REMAT_OK) return rc;
    otab_sizes(t, st, output, link, unit, hunit);
    int64_t top = budget / unit - t->a[0];
    if (top < 0) return REMAT_BUDGET;
    t->Ms = min64(top, store_all(t)), t->Hs = htop;
    rc = otab_alloc_tables(t);
    if (rc == REMAT_OK) otab_fill(t);
    return rc;
}

remat_status remat__offload_solve(const remat__stage_ex *st, int n, int64_t output, remat__link link, int64_t budget,
                                  int64_t host_budget, int slots, int host_slots, remat_chain_plan **plan,
                                  remat__offload_result *res) {
    if (!plan) return remat__err(REMAT_INVALID, "remat__offload_solve: plan is NULL");
    *plan = NULL;
    double c;
    int64_t p;
    remat_status rc = remat__chain_simulate_ex(st, n, output, NULL, 0, &c, &p); /* validates the chain */
    if (rc != REMAT_OK) return rc;
    if (budget < 0 || host_budget < 0 || slots < 0 || host_slots < 0 || !(link.bandwidth > 0) || !(link.latency >= 0))
        return remat__err(REMAT_INVALID,
                          "offload plan: budget %lld, host budget %lld, slots %d and %d, link %g B/s "
                          "and %g s",
                          (long long)budget, (long long)host_budget, slots, host_slots, link.bandwidth, link.latency);
    otab t = {0};
    rc = otab_build(&t, st, n, output, link, budget, host_budget, slots, host_slots);
    if (rc == REMAT_BUDGET) rc = too_small(st, n, output, budget, host_budget, slots);
    oplist ops = {0};
    if (rc == REMAT_OK && !isfinite(t.opt[cell(&t, 0, n, t.Ms, t.Hs)]))
        rc = too_small(st, n, output, budget, host_budget, slots);
    if (rc == REMAT_OK) rc = rebuild(&t, t.Ms, t.Hs, &ops);
    if (rc == REMAT_OK)
        rc = plan_out(st, n, output, link, budget, host_budget, t.opt[cell(&t, 0, n, t.Ms, t.Hs)], &ops, plan, res);
    free(ops.v);
    otab_free(&t);
    return rc;
}
