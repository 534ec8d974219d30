/* optimal.c: the `optimal` strategy.
 *
 * What it is optimal over. The graph is cut into a chain of stages at its
 * articulation points (the nodes every input-to-loss path goes through)
 * and at the points of a branch that depends on no node before it (a
 * siamese network's second view), with the shared side inputs (a traced
 * transformer's causal mask and rotary tables, read by every layer) set
 * aside (chain_cut.c): the values that jump over such a point are counted
 * in each stage they span (add_carried). The chain model is chain.c. Where there are side inputs, the
 * chain cut without setting them aside is planned too, and the plans of
 * both are candidates. Cut at full
 * resolution: every such point is a stage boundary, up to
 * MAX_CHAIN stages (a longer chain, such as heavy's 100,000 adds, is
 * merged into MAX_CHAIN stages of about equal forward cost). Each stage is
 * measured from the op table (measure_stage): its forward and backward
 * cost (seconds under a calibrated cost model, else FLOPs; the forward's
 * is a recomputation's, which can be less than a first forward's, as
 * BatchNorm's is: every plan runs each first forward once, so this shifts
 * every schedule's cost by the same constant), the bytes of its input,
 * the transient bytes of its forward (values between their
 * computation and their last use, workspace), and up to REMAT__MAX_OPTIONS
 * storage options for a forward that keeps what the backward reads:
 *   0 keep everything the backward reads;
 *   1 keep the expensive products (linear, conv; attention is one) and
 *     recompute the cheap values the backward reads just before it;
 *   2 keep everything but the outputs and aux of ops whose aux is larger
 *     than their output (attention's scores and softmax: Megatron-style
 *     selective recomputation), recomputed before the backward;
 *   3 both 1 and 2;
 * each with what it keeps, what its backward then costs, and the
 * transient bytes of its forward and its backward. "Keep only the stage
 * input" is the chain model's own CF (checkpoint) choice. Rotor's
 * persistent dynamic program (rotor.c, PLANNING.md 3.2) is solved once
 * over every budget at a fixed slot size (1/SLOTS of the chain's
 * store-all size, so rounding costs at most a few slots of the budget),
 * and its distinct plans across budgets are the chain candidates: within
 * the chain model and its rounding, each is the least-cost persistent
 * schedule at its budget (test_rotor checks the DP against exhaustive
 * search over persistent schedules, equal on every instance).
 *
 * Where the model is not exact. The chain model counts a stage's input,
 * output and kept values and its transient peaks; what it leaves out (the
 * batch statistics of BatchNorm kept from a stage's first forward to its
 * backward, the order in which a backward frees what it read, placement
 * in the arena) makes its peak an estimate. So every candidate is
 * simulated exactly: its memory plan is built and placed, and what it
 * holds (arena and resident blocks) decides whether it fits.
 *
 * The candidates (a table of generators, each making a fixed number of
 * schedules that do not depend on the budget): the chain plans above (at
 * most MAX_CHAIN_PLANS per chain), the keep-expensive selective schedules, store-all,
 * sqrt, every manual granularity (the first k remat_checkpoint marks; up
 * to MAX_MANUAL marks, else MAX_MANUAL granularities spread over them;
 * a traced step's checkpoint regions: per-layer checkpointing of them),
 * the DTR fallback on the whole step as one DAG (for graphs, or parts
 * of graphs, that are not chains), and store-all less the expensive
 * products cheapest to recompute (drop-expensive: a schedule that frees a
 * stage's output after its forward and recomputes it for the backward
 * that reads it, which the persistent chain DP cannot express), and each
 * of these less the recomputations that free nothing at its peak (pruned:
 * PRUNE_PASSES), and each with its recomputations moved as late as they
 * can go, then pruned (sunk; both in refine.c). Then the schedules
 * between them (optimal_relax.c): the selective level masks with one more
 * value dropped at a time (tightened), and from each candidate on the
 * frontier of what they hold and cost, the schedules that give back one
 * recomputation at a time up to the next one's peak (relaxed), each of
 * those tightened again (relaxed tightened), then the masks tightened by
 * a value and the kept inputs above it at a time; then, from each
 * candidate on the frontier, the schedules that make a value held across
 * the peak again just before its next read (split: nested recomputation,
 * which no level mask expresses; not under recompute_once); last, from
 * each candidate on the frontier, its mask with one of its costliest
 * recomputations given back and tightened again to its peak
 * (optimal_exchange.c: exchanged), the exchanged candidates on the
 * frontier split again. On graphs
 * of many nodes a
 * generator makes at most CAND_WORK / nodes schedules, spread the same
 * way. The fastest under the cost model that holds at most the budget
 * wins. Hence, by construction: a larger budget never gets a costlier
 * plan; no hand
 * plan among the candidates (sqrt; manual at every granularity on models
 * of up to MAX_MANUAL marks, which is the whole zoo but heavy) that fits a
 * budget beats it (test_dominance checks this on the zoo at bench sizes);
 * the smallest feasible budget it names is feasible and one byte less is
 * not.
 *
 * What "optimal" means, precisely: the least cost under the cost model
 * among these candidates, whose chain part is the exact optimum of the
 * persistent chain model (its stages, options and transient bytes) at the
 * DP's slot rounding, then sunk and pruned under the simulator's exact
 * count.
 * Not over every schedule of the graph: the ILP comparison (test_ilp,
 * scripts/gen_ilp_fixtures.py) states the gap to the rematerialization
 * ILP's true optimum on small graphs.
 */
#include "optimal-impl.h"
#include "offload.h"
#include "planner.h"
#include "refine.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The slots of the DP's memory grid: SLOTS slots over the store-all size,
 * fewer when the stages are many (the DP is O(slots n^3)); with 200
 * stages (chain.c's MAX_CHAIN, the most) the table takes about 0.5 s. */
#define SLOTS 2000
#define MIN_SLOTS 400
#define DP_WORK 4e8
/* At most this many distinct chain plans are simulated (spread evenly over
 * the budgets where the plan changes, the smallest and largest always). */
#define MAX_CHAIN_PLANS 48

static int64_t max64(int64_t a, int64_t b) { return a > b ? a : b; }

/* What a candidate holds: its placed arena and the resident blocks. */
static remat_status held_bytes(const remat__prog *p, const remat__schedule *sc, size_t held_outside, size_t *held) {
    remat__memplan m;
    remat_status st = remat__memplan_build(p, sc, &m);
    if (st == REMAT_OK) st = remat__memplan_place(&m);
    if (st == REMAT_OK) *held = m.arena + held_outside;
    remat__memplan_free(&m);
    return st;
}

/* A strategy's schedule as a candidate (store-all, sqrt), or given levels. */
static remat_status levels_schedule(const remat__prog *p, remat_node loss, const uint8_t *level, remat__schedule *sc) {
    return remat__schedule_build(p, loss, REMAT_NONE, 1, 1, level, sc);
}

static remat_status strategy_schedule(const remat__prog *p, remat_node loss, remat_strategy strategy,
                                      remat__schedule *sc) {
    uint8_t *level = NULL;
    remat_status st = remat__strategy_levels(p->g, strategy, &level);
    if (st == REMAT_OK) st = levels_schedule(p, loss, level, sc);
    free(level);
    return st;
}

/* The keep-expensive (keep_cheap 0) and drop-expensive (1) candidates
 * (levels.c's remat__selective_levels), N_SELECTIVE of each. */
static remat_status keep_expensive_schedule(const remat__prog *p, remat_node loss, int j, int n, int keep_cheap,
                                            remat__schedule *sc) {
    uint8_t *level = NULL;
    remat_status st = remat__selective_levels(p, j, n, keep_cheap, &level);
    if (st == REMAT_OK) st = levels_schedule(p, loss, level, sc);
    free(level);
    if (st == REMAT_OK) sc->origin = keep_cheap ? "drop-expensive" : "keep-expensive";
    return st;
}

/* ------------------------------------------------------ the candidates */

/* DTR work per candidate (values visited): about 0.1 s on one core. */
#define DTR_WORK ((int64_t)10 * 1000 * 1000)
#define N_DTR 8
#define MAX_MANUAL 64
/* Each candidate is a schedule of the whole step, built and measured: on
 * a graph of many nodes (heavy's 100,000) a generator makes at most
 * CAND_WORK / nodes of them (at least 4), so that planning stays seconds. */
#define CAND_WORK 1e6

static remat_status gen_keep_expensive(const gen_ctx *x, int j, int n, remat__schedule *sc) {
    return keep_expensive_schedule(x->p, x->loss, j, n, 0, sc);
}
static remat_status gen_drop_expensive(const gen_ctx *x, int j, int n, remat__schedule *sc) {
    return keep_expensive_schedule(x->p, x->loss, j + 1, n, 1, sc);
}
static remat_status gen_all(const gen_ctx *x, int j, int n, remat__schedule *sc) {
    (void)j, (void)n;
    return strategy_schedule(x->p, x->loss, REMAT_STRATEGY_ALL, sc);
}
static remat_status gen_sqrt(const gen_ctx *x, int j, int n, remat__schedule *sc) {
    (void)j, (void)n;
    return strategy_schedule(x->p, x->loss, REMAT_STRATEGY_SQRT, sc);
}
/* The manual strategy on the first j + 1 marked boundaries (the model's
 * --checkpoint-blocks granularities); at most MAX_MANUAL of them, spread
 * evenly over the marks. */
static remat_status gen_manual(const gen_ctx *x, int j, int n, remat__schedule *sc) {
    if (x->regions) return strategy_schedule(x->p, x->loss, REMAT_STRATEGY_MANUAL, sc); /* per-layer checkpointing */
    int k = x->n_marks <= n ? j + 1 : (int)((int64_t)(j + 1) * x->n_marks / n);
    const remat_graph *g = x->p->g;
    uint8_t *level = malloc((size_t)g->n + 1);
    if (!level) return remat__err(REMAT_NOMEM, "out of memory planning");
    memset(level, REMAT__LEVEL_NONE, (size_t)g->n);
    int32_t last = x->marks[k - 1];
    for (int i = 0; i < k; i++) level[x->marks[i]] = 0;
    for (int32_t u = 0; u < g->n; u++)
        if (g->nodes[u].leaf != REMAT__LEAF_NONE || u > last) level[u] = 0;
    remat_status st = levels_schedule(x->p, x->loss, level, sc);
    free(level);
    if (st == REMAT_OK) sc->origin = "levels";
    return st;
}
/* The chain DP's distinct plans over every budget, of each chain of
 * ch[lo, hi) in turn. */
static int n_chain_plans(const gen_ctx *x, int lo, int hi) {
    int n = 0;
    for (int k = lo; k < hi; k++) n += x->ch[k].n_chain;
    return n;
}
/* Which chain of ch[lo, hi) candidate j of n is (its plan's index in it
 * to *i). */
static int chain_of(const gen_ctx *x, int lo, int hi, int j, int n, int *i) {
    int total = n_chain_plans(x, lo, hi), k = lo;
    *i = n >= total || n < 2 ? j : (int)((int64_t)j * (total - 1) / (n - 1)); /* spread when capped */
    while (k + 1 < hi && *i >= x->ch[k].n_chain) *i -= x->ch[k++].n_chain;
    return k;
}
static remat_status chain_schedule(const gen_ctx *x, int k, int i, remat__schedule *sc) {
    remat_chain_plan *plan = NULL;
    remat_status st = remat__chain_tab_plan(x->ch[k].tab, x->ch[k].chain_at[i], &plan);
    if (st != REMAT_OK) return st;
    st = remat__chain_emit(x->p, x->ch[k].c, plan, x->loss, sc);
    remat_chain_plan_destroy(plan);
    return st;
}
static remat_status gen_chain(const gen_ctx *x, int j, int n, remat__schedule *sc) {
    int i, k = chain_of(x, 0, x->n_main, j, n, &i);
    return chain_schedule(x, k, i, sc);
}
/* A traced step's marked chains, after every other generator, so that
 * they only add schedules (remat__cut_chains). */
static remat_status gen_chain_drop(const gen_ctx *x, int j, int n, remat__schedule *sc) {
    int i, k = chain_of(x, x->n_main, x->n_ch, j, n, &i);
    return chain_schedule(x, k, i, sc);
}
/* DTR on the whole step at DAG budgets from its floor to below its total
 * (the top is store-all, a candidate already). */
static remat_status gen_dtr(const gen_ctx *x, int j, int n, remat__schedule *sc) {
    int64_t mem = x->dfloor + (int64_t)((double)(x->dtop - x->dfloor) * j / n);
    return remat__train_dag_schedule(x->p, x->dag, mem, DTR_WORK, sc);
}

typedef struct {
    const char *name;
    remat_status (*make)(const gen_ctx *x, int j, int n, remat__schedule *sc);
} generator;

static const generator generators[] = {
    {"keep-expensive", gen_keep_expensive},
    {"all", gen_all},
    {"sqrt", gen_sqrt},
    {"manual", gen_manual},
    {"chain", gen_chain},
    {"dtr", gen_dtr},
    {"drop-expensive", gen_drop_expensive},
    {"chain-drop", gen_chain_drop},
};

/* How many schedules generator gi makes. */
static int gen_count(const gen_ctx *x, size_t gi) {
    const char *nm = generators[gi].name;
    int n = 1, cap = (int)fmax(4, CAND_WORK / (x->p->g->n + 1));
    if (strcmp(nm, "keep-expensive") == 0 || strcmp(nm, "drop-expensive") == 0) n = N_SELECTIVE;
    if (strcmp(nm, "manual") == 0) n = x->regions ? 1 : x->n_marks < MAX_MANUAL ? x->n_marks : MAX_MANUAL;
    if (strcmp(nm, "chain") == 0) n = n_chain_plans(x, 0, x->n_main);
    if (strcmp(nm, "chain-drop") == 0) n = n_chain_plans(x, x->n_main, x->n_ch);
    if (strcmp(nm, "dtr") == 0) n = x->dag ? N_DTR : 0;
    return n < cap ? n : cap;
}

/* Two chain plans are the same schedule. */
static int same_plan(const remat_chain_plan *a, const remat_chain_plan *b) {
    int n = remat_chain_plan_length(a);
    if (n != remat_chain_plan_length(b)) return 0;
    for (int i = 0; i < n; i++) {
        remat_chain_op x = remat_chain_plan_op(a, i), y = remat_chain_plan_op(b, i);
        if (x.kind != y.kind || x.stage != y.stage || x.option != y.option) return 0;
    }
    return 1;
}

/* The DP over every budget, and the budgets at which its plan changes
 * (each plan once): the chain candidates. */
static remat_status chain_candidates(const remat__chain *c, chain_cands *x) {
    x->c = c;
    int64_t top = c->output + 1;
    for (int i = 0; i < c->n_stages; i++) {
        int64_t big = c->ex[i].fwd_tmp;
        for (int o = 0; o < c->ex[i].n_options; o++)
            big = max64(big, c->ex[i].opt[o].saved + max64(c->ex[i].opt[o].bwd_tmp, c->ex[i].opt[o].fe_tmp));
        top += 2 * (c->ex[i].input + big) + c->ex[i].grads;
    }
    double n3 = (double)c->n_stages * c->n_stages * c->n_stages / 6.0 + 1;
    int64_t slots = (int64_t)fmin(SLOTS, fmax(MIN_SLOTS, DP_WORK / n3));
    int64_t unit = top / slots + 1;
    remat__chain_tab *tab = NULL;
    remat_status st = remat__chain_tab_build(c->ex, c->n_stages, c->output, unit, unit * (slots + 2), &tab);
    if (st != REMAT_OK) return st;
    x->tab = tab;
    int64_t lo = remat__chain_tab_floor(tab);
    if (lo < 0) return REMAT_OK; /* no chain plan fits even the top: other candidates remain */
    int64_t hi = unit * (slots + 2);
    /* the distinct plans, budget by budget (a rebuild is O(stages)) */
    int cap = 256, n = 0;
    int64_t *at = malloc((size_t)cap * sizeof *at);
    remat_chain_plan *prev = NULL;
    for (int64_t b = lo; b <= hi && st == REMAT_OK; b += unit) {
        remat_chain_plan *pl = NULL;
        st = remat__chain_tab_plan(tab, b, &pl);
        if (st == REMAT_INTERNAL) {
            /* the DP's schedule at this budget does not fit when simulated:
             * in slots, what a stage that drops its input frees after Fe_i
             * is that input rounded up (rotor.c's d), up to a slot more
             * than its bytes (566 bytes over, on a Swin Transformer traced
             * on PyTorch 2.1.2). Rounded down, the DP would be safe but
             * lose plans that fit (that graph's floor 0.6% higher). The
             * simulator decides: no chain candidate at this budget */
            st = REMAT_OK;
            continue;
        }
        if (st != REMAT_OK) break;
        if (prev && same_plan(prev, pl)) {
            remat_chain_plan_destroy(pl);
            continue;
        }
        remat_chain_plan_destroy(prev);
        prev = pl;
        if (n == cap) {
            int64_t *a2 = realloc(at, 2 * (size_t)cap * sizeof *at);
            if (!a2) {
                st = remat__err(REMAT_NOMEM, "out of memory planning");
                break;
            }
            at = a2, cap *= 2;
        }
        if (at) at[n++] = b;
    }
    remat_chain_plan_destroy(prev);
    if (!at && st == REMAT_OK) st = remat__err(REMAT_NOMEM, "out of memory planning");
    if (st != REMAT_OK) {
        free(at);
        return st;
    }
    /* at most MAX_CHAIN_PLANS of them: the first and last always */
    if (n > MAX_CHAIN_PLANS) {
        for (int j = 0; j < MAX_CHAIN_PLANS; j++) at[j] = at[(int64_t)j * (n - 1) / (MAX_CHAIN_PLANS - 1)];
        n = MAX_CHAIN_PLANS;
    }
    x->chain_at = at, x->n_chain = n;
    return REMAT_OK;
}

/* Takes out of chain t's candidates the plans that chain k has too: twins
 * (the same cut, with and without drop_input) share their stages, so the
 * same operations make the same schedule, measured once. */
static remat_status drop_shared(chain_cands *ch, int k, int t) {
    remat_chain_plan *mine[MAX_CHAIN_PLANS] = {0};
    remat_status st = REMAT_OK;
    int n = 0;
    for (int j = 0; j < ch[k].n_chain && st == REMAT_OK; j++)
        st = remat__chain_tab_plan(ch[k].tab, ch[k].chain_at[j], &mine[n++]);
    for (int j = 0; j < ch[t].n_chain && st == REMAT_OK;) {
        remat_chain_plan *pl = NULL;
        int dup = 0;
        st = remat__chain_tab_plan(ch[t].tab, ch[t].chain_at[j], &pl);
        for (int q = 0; q < n && st == REMAT_OK && !dup; q++) dup = same_plan(mine[q], pl);
        remat_chain_plan_destroy(pl);
        if (!dup) {
            j++;
            continue;
        }
        memmove(&ch[t].chain_at[j], &ch[t].chain_at[j + 1], (size_t)(ch[t].n_chain - j - 1) * sizeof(int64_t));
        ch[t].n_chain--;
    }
    for (int q = 0; q < n; q++) remat_chain_plan_destroy(mine[q]);
    return st;
}

/* Pruning and sinking (refine.c) build at most this many instructions per
 * planning, in the candidates' order. */
#define PRUNE_WORK 4e7

/* Which storage options the chain's stages offer, and which of them the
 * chain DP's distinct plans choose for some stage, per kind (OPT_ALL,
 * OPT_EXPENSIVE, OPT_AUX, OPT_BOTH): test_optimal checks that each kind
 * wins somewhere, so that none is kept without a use. */
remat_status remat__optimal_options(const remat__prog *p, remat_node loss, int offered[4], int chosen[4]) {
    for (int o = 0; o < N_OPT; o++) offered[o] = chosen[o] = 0;
    remat__chain c;
    chain_cands x = {0};
    remat_status st = remat__chain_init(p, loss, 1, &c);
    if (st != REMAT_OK) return st;
    st = chain_candidates(&c, &x);
    for (int i = 0; i < c.n_stages; i++)
        for (int k = 0; k < c.ex[i].n_options; k++) offered[c.opt_of[(size_t)i * REMAT__MAX_OPTIONS + (size_t)k]]++;
    for (int j = 0; j < x.n_chain && st == REMAT_OK; j++) {
        remat_chain_plan *plan = NULL;
        st = remat__chain_tab_plan(x.tab, x.chain_at[j], &plan);
        for (int i = 0; st == REMAT_OK && i < remat_chain_plan_length(plan); i++) {
            remat_chain_op op = remat_chain_plan_op(plan, i);
            if (op.kind == REMAT_CHAIN_FE)
                chosen[c.opt_of[(size_t)op.stage * REMAT__MAX_OPTIONS + (size_t)op.option]]++;
        }
        remat_chain_plan_destroy(plan);
    }
    remat__chain_free(&c);
    remat__chain_tab_free((remat__chain_tab *)x.tab);
    free(x.chain_at);
    return st;
}

/* Candidate k's schedule before its splitting moves. */
static remat_status make_base(const gen_ctx *x, const cand *k, remat__schedule *sc, double *spent) {
    if (k->last >= 0 && k->base) { /* relaxed */
        remat_status st = REMAT_OK;
        for (int s = 0; st == REMAT_OK && s <= k->steps; s++) {
            remat__schedule t;
            st = remat__without(x->p, s ? sc : k->base, s < k->steps ? k->relax[s] : k->last, &t);
            if (s) remat__schedule_free(sc);
            *sc = t;
            if (st == REMAT_OK && spent) *spent += t.n;
        }
        return st;
    }
    remat_status st =
        k->last >= 0 || k->mask ? remat__optimal_tightened(x, k, sc) : generators[k->gi].make(x, k->j, k->count, sc);
    double work = k->prune, sunk = 0; /* sink never stops for work: sunk counts what it took */
    if (st == REMAT_OK && spent) *spent += sc->n;
    if (st == REMAT_OK && k->sink) {
        remat__schedule t;
        st = remat__sink(x->p, sc, &t, &sunk);
        remat__schedule_free(sc);
        if (st != REMAT_OK) return st;
        *sc = t;
        if (spent) *spent -= sunk;
    }
    if (st != REMAT_OK || k->prune <= 0) return st;
    st = remat__prune(x->p, sc, &work, x->memo);
    if (spent) *spent += k->prune - work;
    if (st != REMAT_OK) remat__schedule_free(sc);
    return st;
}

/* Candidate k's schedule, sunk and pruned where it is a sunk or pruned one,
 * then split where it is a split one. */
static remat_status make_cand(const gen_ctx *x, const cand *k, remat__schedule *sc, double *spent) {
    remat_status st = make_base(x, k, sc, spent);
    for (int s = 0; st == REMAT_OK && s < k->splits; s++) {
        remat__schedule t;
        st = remat__resplit(x->p, sc, &k->split[3 * s], &t);
        remat__schedule_free(sc);
        if (st != REMAT_OK) return st;
        *sc = t;
        if (spent) *spent += t.n;
    }
    return st;
}

/* Places candidate k (made again from its generator, and pruned again
 * where it is a pruned one) and returns what it holds in k->held; with
 * keep, the winner: it is finished (remat__plan_finish) and kept with its
 * memory plan in *keep. */
static remat_status place_cand(const gen_ctx *x, cand *k, const remat__plan_req *r, remat__planned *keep) {
    remat__schedule sc;
    remat_status st = make_cand(x, k, &sc, NULL);
    if (st != REMAT_OK) return st;
    if (!keep) {
        st = held_bytes(x->p, &sc, r->held_outside, &k->held);
        remat__schedule_free(&sc);
        return st;
    }
    char name[128]; /* the candidate's name, cut to what the schedule has room for */
    snprintf(name, sizeof name, "%s %d/%d%s%s%s%s", generators[k->gi].name, k->j + 1, k->count, k->sink ? " sunk" : "",
             k->prune > 0 ? " pruned" : "",
             k->last < 0 ? (k->mask ? " exchanged" : "")
             : k->base   ? " relaxed"
             : k->mask   ? " relaxed tightened"
                         : " tightened",
             k->splits ? " split" : "");
    memcpy(sc.candidate, name, sizeof sc.candidate - 1);
    sc.candidate[sizeof sc.candidate - 1] = 0;
    st = remat__plan_finish(r, &sc, keep);
    if (st == REMAT_OK) k->held = keep->mem.arena + r->held_outside;
    return st;
}

/* What the generators share, made once per planning (the n_ch chains c). */
static remat_status gen_init(const remat__prog *p, remat_node loss, const remat__chain *c, int n_ch, gen_ctx *x) {
    const remat_graph *g = p->g;
    *x = (gen_ctx){.p = p, .loss = loss, .n_ch = n_ch, .n_main = n_ch, .gi_keep = -1, .gi_drop = -1, .make = make_cand};
    for (int gi = 0; gi < (int)(sizeof generators / sizeof *generators); gi++) {
        if (generators[gi].make == gen_keep_expensive) x->gi_keep = gi;
        if (generators[gi].make == gen_drop_expensive) x->gi_drop = gi;
    }
    remat__train_dag *dag = NULL;
    remat_status st = REMAT_OK;
    for (int k = 0; k < n_ch && st == REMAT_OK; k++) st = chain_candidates(&c[k], &x->ch[k]);
    if (st == REMAT_OK) st = remat__train_dag_build(p, loss, &dag);
    if (st == REMAT_OK && dag) {
        x->dag = dag;
        x->dfloor = remat__train_dag_floor(dag), x->dtop = remat__train_dag_total(dag);
    }
    x->marks = st == REMAT_OK ? malloc(((size_t)g->n + 1) * sizeof *x->marks) : NULL;
    if (st == REMAT_OK && !x->marks) st = remat__err(REMAT_NOMEM, "out of memory planning");
    for (int32_t u = 0; st == REMAT_OK && u < g->n; u++)
        if (g->nodes[u].checkpoint == 1) x->marks[x->n_marks++] = u;
    x->regions = remat__has_regions(g);
    if (st == REMAT_OK && !(x->memo = calloc(1, sizeof *x->memo)))
        st = remat__err(REMAT_NOMEM, "out of memory planning");
    if (st != REMAT_OK) remat__train_dag_free(dag), x->dag = NULL;
    return st;
}

static void gen_free(gen_ctx *x) {
    for (int k = 0; k < REMAT__N_CHAINS; k++)
        remat__chain_tab_free((remat__chain_tab *)x->ch[k].tab), free(x->ch[k].chain_at);
    free(x->marks);
    if (x->memo) remat__peak_memo_free(x->memo);
    free(x->memo);
    remat__train_dag_free((remat__train_dag *)x->dag);
}

/* Prunes *sc while *work lasts and offers it as candidate k pruned (its
 * cost and lower bound measured again): always, or only where pruning made
 * it cheaper than k. */
static remat_status offer_pruned(const gen_ctx *x, remat__schedule *sc, cand k, int always, size_t held_outside,
                                 double *work, cand *cands, int *nc) {
    const remat__prog *p = x->p;
    double allowed = *work > 0 ? *work : 0; /* what make_cand allows the same pruning */
    remat_status st = allowed > 0 && remat__nth_recompute(sc, 0) >= 0 ? remat__prune(p, sc, work, x->memo) : REMAT_OK;
    double cost = st == REMAT_OK && allowed > *work ? remat__schedule_cost(p, sc) : k.cost;
    size_t pk = 0;
    if (st != REMAT_OK || (!always && cost >= k.cost)) return st;
    st = remat__values_peak_memo(p, sc, &pk, x->memo);
    if (st == REMAT_OK) k.cost = cost, k.lb = pk + held_outside, k.prune = allowed, cands[(*nc)++] = k;
    return st;
}

/* Every candidate of every generator, measured cheaply: its cost and the
 * peak of its values (with the blocks, a lower bound of what it holds). */
static remat_status measure_all(const gen_ctx *x, size_t held_outside, cand **out, int *nc) {
    const remat__prog *p = x->p;
    int total = 0;
    for (size_t gi = 0; gi < sizeof generators / sizeof generators[0]; gi++) total += gen_count(x, gi);
    cand *cands = calloc(3 * (size_t)total + 1, sizeof *cands); /* each, it pruned, it sunk */
    if (!cands) return remat__err(REMAT_NOMEM, "out of memory planning");
    remat_status st = REMAT_OK;
    double work = PRUNE_WORK;
    *nc = 0;
    for (size_t gi = 0; gi < sizeof generators / sizeof generators[0] && st == REMAT_OK; gi++) {
        int count = gen_count(x, gi);
        for (int j = 0; j < count && st == REMAT_OK; j++) {
            remat__schedule sc;
            st = generators[gi].make(x, j, count, &sc);
            if (st == REMAT_BUDGET) { /* a generator with nothing at this j (DTR below its floor) */
                st = REMAT_OK;
                continue;
            }
            if (st != REMAT_OK) break;
            size_t pk = 0;
            int i, lo = generators[gi].make == gen_chain ? 0 : x->n_main;
            int chain = generators[gi].make == gen_chain || generators[gi].make == gen_chain_drop;
            int once =
                p->recompute_once || (chain && x->ch[chain_of(x, lo, lo ? x->n_ch : x->n_main, j, count, &i)].once);
            if (remat__runnable(p, &sc, once)) {
                st = remat__values_peak_memo(p, &sc, &pk, x->memo);
                double cost = remat__schedule_cost(p, &sc);
                cand k = {.gi = (int)gi, .j = j, .count = count, .cost = cost, .lb = pk + held_outside, .last = -1};
                if (st == REMAT_OK) cands[(*nc)++] = k;
                /* sunk (before sc is pruned in place), then pruned to its own peak */
                remat__schedule sunk = {0};
                int sinks = st == REMAT_OK && work > 0 && remat__nth_recompute(&sc, 0) >= 0 && !remat__offloads(&sc);
                if (sinks) st = remat__sink(p, &sc, &sunk, &work);
                if (st == REMAT_OK) st = offer_pruned(x, &sc, k, 0, held_outside, &work, cands, nc);
                if (st == REMAT_UNSUPPORTED) st = REMAT_OK; /* reads a value overwritten in place: not a candidate */
                size_t spk = 0;
                remat_status ss =
                    sinks && st == REMAT_OK ? remat__values_peak_memo(p, &sunk, &spk, x->memo) : REMAT_UNSUPPORTED;
                if (ss == REMAT_OK && spk + held_outside < k.lb) /* it lowers the peak: a candidate */
                    k.sink = 1, ss = offer_pruned(x, &sunk, k, 1, held_outside, &work, cands, nc);
                if (ss != REMAT_OK && ss != REMAT_UNSUPPORTED) st = ss;
                remat__schedule_free(&sunk);
            }
            remat__schedule_free(&sc);
        }
    }
    *out = cands;
    return st;
}

/* In order of cost, the first candidate whose placed arena fits wins
 * (equal costs: the one that holds less); -1 when none fits. */
static remat_status choose(const gen_ctx *x, cand *cands, int nc, const remat__plan_req *r, int *win) {
    remat_status st = REMAT_OK;
    *win = -1;
    qsort(cands, (size_t)nc, sizeof *cands, remat__optimal_by_cost);
    for (int k = 0; k < nc && st == REMAT_OK; k++) {
        if (*win >= 0 && cands[k].cost > cands[*win].cost) break;
        if (cands[k].lb > r->budget) continue;
        st = place_cand(x, &cands[k], r, NULL);
        if (st == REMAT_OK && cands[k].held <= r->budget && (*win < 0 || cands[k].held < cands[*win].held)) *win = k;
    }
    return st;
}

/* None fits: in order of the lower bound until it passes the least held
 * found, which is the smallest feasible budget. */
static remat_status none_fits(const gen_ctx *x, cand *cands, int nc, const remat__plan_req *r) {
    remat_status st = REMAT_OK;
    qsort(cands, (size_t)nc, sizeof *cands, remat__optimal_by_lb);
    size_t least = (size_t)-1;
    for (int k = 0; k < nc && st == REMAT_OK && cands[k].lb < least; k++) {
        if (!cands[k].held) st = place_cand(x, &cands[k], r, NULL);
        if (st == REMAT_OK && cands[k].held < least) least = cands[k].held;
    }
    if (st != REMAT_OK) return st;
    if (r->floor) *r->floor = least;
    return remat__err(REMAT_BUDGET,
                      "no schedule fits the budget of %zu bytes (%.1f MiB); the smallest feasible budget is %zu "
                      "bytes (%.1f MiB), of which %zu are parameters, gradients and optimizer state",
                      r->budget, (double)r->budget / 1048576.0, least, (double)least / 1048576.0, r->held_outside);
}

/* What the generators share, over the chains cs cut. */
static remat_status chains_ctx(const remat__plan_req *r, const remat__chain *c, const remat__chain_set *cs,
                               gen_ctx *x) {
    remat_status st = gen_init(r->p, r->loss, c, cs->n_ch, x);
    if (!cs->drops) x->n_main = cs->twins;
    if (st == REMAT_OK && cs->skips >= 0) x->ch[cs->skips].once = 1;
    if (st == REMAT_OK && cs->skips >= 0 && cs->twins > cs->cuts) x->ch[cs->skips + cs->cuts].once = 1;
    for (int k = 0; k < cs->twins && st == REMAT_OK; k++) {
        if (cs->other[k] < 0) continue;
        if (k % cs->cuts == cs->skips) x->ch[cs->other[k]].once = 1; /* the skips' twins too */
        st = drop_shared(x->ch, k, cs->other[k]);
    }
    return st;
}

/* The candidates are first measured cheaply; placing an arena (quadratic
 * in the events) is done only where it can decide (choose, none_fits).
 * The winner's memory plan is placed once and kept. */
remat_status remat__optimal_plan(const remat__plan_req *r, remat__planned *out) {
    memset(out, 0, sizeof *out);
    remat__chain c[REMAT__N_CHAINS];
    remat__chain_set cs;
    gen_ctx x;
    cand *cands = NULL;
    int nc = 0, win = -1;
    remat_status st = remat__cut_chains(r, c, &cs);
    if (st != REMAT_OK) return st;
    st = chains_ctx(r, c, &cs, &x);
    if (st == REMAT_OK) st = measure_all(&x, r->held_outside, &cands, &nc);
    relaxation tight[4 * N_SELECTIVE], *rel = NULL; /* 2 passes of the 2 selective kinds */
    memset(tight, 0, sizeof tight);
    int n_tight = 0, n_rel = 0;
    if (st == REMAT_OK) st = remat__optimal_tighten(&x, r->held_outside, 0, &cands, &nc, tight, &n_tight);
    if (st == REMAT_OK && !(rel = calloc((size_t)(n_rel = nc) + 1, sizeof *rel)))
        st = remat__err(REMAT_NOMEM, "out of memory planning");
    if (st == REMAT_OK) st = remat__optimal_relax(&x, r->held_outside, &cands, &nc, rel);
    relaxation *retight = NULL;
    int n_retight = 0;
    if (st == REMAT_OK)
        st = remat__optimal_retighten(&x, r->held_outside, &cands, &nc, rel, n_rel, &retight, &n_retight);
    /* last, so that the frontier the relaxations start from is the one-node
     * tightening's: these only add candidates */
    if (st == REMAT_OK)
        st = remat__optimal_tighten(&x, r->held_outside, REMAT__TIGHTEN_DEPTH, &cands, &nc, tight, &n_tight);
    int32_t **split = NULL, **split2 = NULL;
    int n_split = 0, n_split2 = 0;
    if (st == REMAT_OK) st = remat__optimal_split(&x, r->held_outside, 0, &cands, &nc, &split, &n_split);
    uint8_t **exchanged = NULL;
    int n_exchanged = 0;
    if (st == REMAT_OK) st = remat__optimal_exchange(&x, r->held_outside, &cands, &nc, &exchanged, &n_exchanged);
    if (st == REMAT_OK) st = remat__optimal_split(&x, r->held_outside, 1, &cands, &nc, &split2, &n_split2);
    if (st == REMAT_OK) st = choose(&x, cands, nc, r, &win);
    int offloaded = 0; /* offload, with a host budget, where it costs less */
    if (st == REMAT_OK) st = remat__offload_plan(r, win >= 0 ? cands[win].cost : INFINITY, out, &offloaded);
    if (st == REMAT_OK && !offloaded) st = win >= 0 ? place_cand(&x, &cands[win], r, out) : none_fits(&x, cands, nc, r);
    free(cands);
    for (int k = 0; k < n_tight; k++) free(tight[k].path);
    for (int k = 0; rel && k < n_rel; k++) {
        free(rel[k].path);
        remat__schedule_free(&rel[k].base);
    }
    free(rel);
    for (int k = 0; k < n_retight; k++) free(retight[k].path), free(retight[k].mask);
    free(retight);
    for (int k = 0; k < n_split; k++) free(split[k]);
    for (int k = 0; k < n_split2; k++) free(split2[k]);
    free(split), free(split2);
    for (int k = 0; k < n_exchanged; k++) free(exchanged[k]);
    free(exchanged);
    for (int k = 0; k < REMAT__N_CHAINS; k++) remat__chain_free(&c[k]);
    gen_free(&x);
    return st;
}
