/* chain.c: the chain model the `optimal` strategy plans over (optimal.c
 * says what it is optimal over). The graph is cut into stages at its
 * articulation points (chain_cut.c), the values that jump over a cut are
 * carried in each stage they span (add_carried), and each stage is
 * measured from the op table (measure_stage): its costs, the bytes of its
 * input, the transient bytes of its forward, its storage options, and the
 * parameter gradients its backward makes in a traced step (held per
 * tensor from that backward to the step's end, as memplan.c holds them:
 * the chain DP holds them beside every later operation, rotor.c). A
 * chain plan (rotor's DP, offload's) is turned back into a schedule of the
 * step here (remat__chain_schedule), offloaded stages' copies included.
 */
#include "chain.h"
#include "chain_cut.h"
#include "offload.h"

#include <stdlib.h>
#include <string.h>

/* The most stages of a chain: a longer one (heavy's 100,000 adds) is
 * merged into MAX_CHAIN stages of about equal forward cost, since the DP
 * over it is O(slots n^3) (optimal.c). */
#define MAX_CHAIN 200

void remat__chain_free(remat__chain *c) {
    free(c->nodes), free(c->off), free(c->inputs), free(c->fwd), free(c->ex), free(c->opt_of), free(c->sel);
    memset(c, 0, sizeof *c);
}

int remat__expensive(const remat_graph *g, const remat__node *n) {
    remat_family f = remat__node_family(g, n);
    return f == REMAT_FAMILY_LINEAR || f == REMAT_FAMILY_CONV;
}

/* An op whose aux is larger than its output (attention's probabilities):
 * recomputing it is cheap for the bytes it frees. */
static int large_aux(const remat__prog *p, const remat__node *n) {
    const remat__op *op = remat__ops[n->op];
    return op->aux_bytes && op->aux_bytes(p->g, n) > (size_t)remat__vbytes(p, n);
}

static int64_t max64(int64_t a, int64_t b) { return a > b ? a : b; }

/* Per stage scratch, sized g->n, zero between uses. */
typedef struct {
    uint8_t *read; /* bit 1: output read by a backward of the stage; 2: aux read */
    uint8_t *drop; /* the option recomputes it */
    uint8_t *keep; /* what the option's forward keeps: bits as `read` */
    int32_t *last; /* last forward consumer inside the stage (creation index), or -1 */
    int32_t *stack;
    int32_t *pgrad; /* per parameter: the node whose backward makes its gradient (the last reader that writes
                     * it), or -1; a traced step's own per-tensor gradients only (param_grads) */
} scratch;

/* The transient peak of the stage's forward (nodes a..b) when the values
 * in `keep` stay and the others go after their last use inside the stage:
 * the largest sum, at any point, of the values made so far and not freed
 * (the output included) and the running node's workspace. */
static int64_t forward_peak(const remat__prog *p, const remat__chain *c, int a, int b, const uint8_t *keep,
                            const scratch *sc) {
    const remat_graph *g = p->g;
    int64_t live = 0, peak = 0;
    for (int j = a; j < b; j++) {
        int32_t u = c->nodes[j];
        const remat__node *nd = &g->nodes[u];
        const remat__op *op = remat__ops[nd->op];
        live += remat__vbytes(p, nd) + (op->aux_bytes ? (int64_t)op->aux_bytes(g, nd) : 0);
        peak = max64(peak, live + (int64_t)remat__ws_bytes(p, u, 0));
        /* inputs whose last forward use in the stage this was */
        for (int q = 0; q < nd->n_in; q++) {
            int32_t x = nd->in[q];
            if (x < c->nodes[a] || g->nodes[x].leaf != REMAT__LEAF_NONE || sc->last[x] != u || (keep && keep[x] & 1))
                continue;
            live -= remat__vbytes(p, &g->nodes[x]);
        }
        /* aux that no backward of this pass needs goes with the node */
        if (op->aux_bytes && !(keep && keep[u] & 2) && !(op->flags & REMAT__OP_STATEFUL))
            live -= (int64_t)op->aux_bytes(g, nd);
    }
    return peak;
}

/* The bytes of the parameter gradients node u's backward takes (memplan.c's
 * walk_bwd), each parameter once: with `made`, those it makes, held to the
 * step's end (sc->pgrad names u); else, where a traced step's gradients are
 * resident, the buffers it adds into them, held through its workspace. */
static int64_t param_grads(const remat__prog *p, int32_t u, const scratch *sc, int made) {
    const remat_graph *g = p->g;
    const remat__node *nd = &g->nodes[u];
    int64_t bytes = 0;
    for (int q = 0; q < nd->n_in; q++) {
        int32_t x = nd->in[q];
        if (g->nodes[x].leaf != REMAT__LEAF_PARAM || !remat__bwd_writes(p, nd, q)) continue;
        if (made ? sc->pgrad[x] != u : !(g->traced && p->grads_resident)) continue;
        int first = 1;
        for (int r = 0; r < q && first; r++)
            if (nd->in[r] == x && remat__bwd_writes(p, nd, r)) first = 0;
        if (first) bytes += (int64_t)remat__value_bytes(p, REMAT__VAL(x, REMAT__V_GRAD));
    }
    return bytes;
}

/* The transient peak of the stage's backward under an option: the values
 * it recomputes first (`drop`, with their workspace), then, backward over
 * the nodes, the gradients of the stage's inside values in flight (made by
 * the first backward that writes them, gone after their node's own
 * backward), the parameter gradients the stage makes (held from their node
 * on: *made gets their sum, the stage's `grads`), the buffers a backward
 * adds into resident ones, and the running node's workspace. */
static int64_t backward_peak(const remat__prog *p, const remat__chain *c, int a, int b, const uint8_t *drop,
                             const scratch *sc, int64_t *made) {
    const remat_graph *g = p->g;
    int64_t rec = 0, peak = 0;
    for (int j = a; drop && j < b; j++) {
        int32_t u = c->nodes[j];
        if (!drop[u]) continue;
        rec += remat__vbytes(p, &g->nodes[u]);
        peak = max64(peak, rec + (int64_t)remat__ws_bytes(p, u, 0));
    }
    int64_t grads = 0, kept = 0;
    int32_t lo = c->nodes[a], hi = c->nodes[b - 1];
    for (int j = b - 1; j >= a; j--) {
        int32_t u = c->nodes[j];
        const remat__node *nd = &g->nodes[u];
        if (!p->needs_grad[u]) continue;
        for (int q = 0; q < nd->n_in; q++) {
            int32_t x = nd->in[q];
            /* the first write of an inside value's gradient: its last consumer in creation order */
            if (x > lo && x < hi && remat__bwd_writes(p, nd, q) && g->nodes[x].leaf == REMAT__LEAF_NONE) {
                int first = 1;
                for (int k = j + 1; k < b && first; k++) {
                    const remat__node *nk = &g->nodes[c->nodes[k]];
                    for (int r = 0; r < nk->n_in; r++)
                        if (nk->in[r] == x && remat__bwd_writes(p, nk, r)) first = 0;
                }
                /* inputs of one node counted once */
                for (int r = 0; r < q && first; r++)
                    if (nd->in[r] == x) first = 0;
                if (first) grads += remat__vbytes(p, &g->nodes[x]);
            }
        }
        kept += param_grads(p, u, sc, 1);
        peak = max64(peak, rec + grads + kept + param_grads(p, u, sc, 0) + (int64_t)remat__ws_bytes(p, u, 1));
        if (u != hi && u > lo) grads -= remat__vbytes(p, nd); /* its own gradient is done */
        if (grads < 0) grads = 0;
    }
    *made = kept;
    return peak;
}

/* Marks in sc->drop what option o of the stage of nodes a..b recomputes
 * before its backward: the values its backward reads that o drops (cheap
 * ones for OPT_EXPENSIVE, a large aux for OPT_AUX, both for OPT_BOTH),
 * closed over the cheap producers inside the stage. 0, with nothing
 * marked, when o is no option of its own: it drops nothing (option 0 is
 * that), or, being both, one of the two kinds is missing (it is the other
 * option again). */
static int option_drops(const remat__prog *p, const remat__chain *c, int a, int b, int o, const scratch *sc) {
    const remat_graph *g = p->g;
    int32_t lo = c->nodes[a], hi = c->nodes[b - 1];
    int top = 0, cheap = 0, aux = 0;
    for (int j = a; j < b; j++) {
        int32_t u = c->nodes[j];
        const remat__node *nd = &g->nodes[u];
        int dc = (o == OPT_EXPENSIVE || o == OPT_BOTH) && (sc->read[u] & 1) && u != hi && !remat__expensive(g, nd);
        int da = (o == OPT_AUX || o == OPT_BOTH) && (sc->read[u] & 3) && large_aux(p, nd) &&
                 !(remat__ops[nd->op]->flags & REMAT__OP_STATEFUL);
        cheap |= dc, aux |= da;
        if (dc || da) sc->drop[u] = 1, sc->stack[top++] = u;
    }
    if (o == OPT_BOTH ? !(cheap && aux) : o != OPT_ALL && !(cheap || aux)) {
        for (int j = a; j < b; j++) sc->drop[c->nodes[j]] = 0;
        return 0;
    }
    while (top > 0) {
        const remat__node *nd = &g->nodes[sc->stack[--top]];
        for (int q = 0; q < nd->n_in; q++) {
            int32_t x = nd->in[q];
            if (x > lo && x < hi && !sc->drop[x] && !remat__expensive(g, &g->nodes[x]) &&
                g->nodes[x].leaf == REMAT__LEAF_NONE && !(remat__ops[g->nodes[x].op]->flags & REMAT__OP_STATEFUL))
                sc->drop[x] = 1, sc->stack[top++] = x;
        }
    }
    return 1;
}

/* Measures stage i (nodes [off[i], off[i+1])) and its storage options. */
/* Option opt's saved bytes and backward seconds beyond the stage's output
 * and its backwards (already in opt): what it keeps of the values the
 * backwards read (sc->keep, set here; the caller clears it), and its
 * recomputations' seconds. */
static void option_keeps(const remat__prog *p, const remat__chain *c, int a, int b, const scratch *sc,
                         remat__stage_option *opt) {
    const remat_graph *g = p->g;
    int32_t lo = c->nodes[a], hi = c->nodes[b - 1];
    for (int j = a; j < b; j++) {
        int32_t u = c->nodes[j];
        const remat__node *nd = &g->nodes[u];
        const remat__op *op = remat__ops[nd->op];
        if (sc->drop[u]) {
            opt->backward += remat__node_rec_seconds(p, nd);
            continue;
        }
        sc->keep[u] = sc->read[u];
        if ((sc->read[u] & 1) && u != hi) opt->saved += remat__vbytes(p, nd);
        if ((sc->read[u] & 2) || (op->flags & REMAT__OP_STATEFUL))
            opt->saved += op->aux_bytes ? (int64_t)op->aux_bytes(g, nd) : 0;
    }
    /* what the recomputations read and the option does not recompute
     * (an expensive product no backward reads, the stage's first node)
     * stays from the forward to them: kept as well */
    for (int j = a; j < b; j++) {
        const remat__node *nd = &g->nodes[c->nodes[j]];
        for (int q = 0; sc->drop[c->nodes[j]] && q < nd->n_in; q++) {
            int32_t x = nd->in[q];
            if (x < lo || x >= hi || sc->drop[x] || (sc->keep[x] & 1) || g->nodes[x].leaf != REMAT__LEAF_NONE) continue;
            sc->keep[x] |= 1;
            opt->saved += remat__vbytes(p, &g->nodes[x]);
        }
    }
}

static void measure_stage(const remat__prog *p, remat__chain *c, int i, const scratch *sc) {
    const remat_graph *g = p->g;
    remat__stage_ex *ex = &c->ex[i];
    int a = c->off[i], b = c->off[i + 1];
    int32_t lo = c->nodes[a], hi = c->nodes[b - 1];
    memset(ex, 0, sizeof *ex);
    if (i == 0) {
        for (int j = 0; j < c->n_inputs; j++) ex->input += remat__vbytes(p, &g->nodes[c->inputs[j]]);
    } else {
        ex->input = remat__vbytes(p, &g->nodes[c->nodes[a - 1]]);
    }
    int64_t out_bytes = remat__vbytes(p, &g->nodes[hi]);
    /* last forward consumer of every inside value, and what backwards read */
    double bwd = 0;
    for (int j = a; j < b; j++) {
        int32_t u = c->nodes[j];
        const remat__node *nd = &g->nodes[u];
        ex->forward += remat__node_rec_seconds(p, nd); /* a recomputation: the opening comment */
        for (int q = 0; q < nd->n_in; q++)
            if (nd->in[q] >= lo) sc->last[nd->in[q]] = u;
        if (!p->needs_grad[u]) continue;
        bwd += remat__node_bwd_seconds(p, nd);
        for (int q = 0; q < nd->n_in; q++)
            if ((nd->saves & REMAT__SAVE_IN(q)) && nd->in[q] >= lo && nd->in[q] < hi) sc->read[nd->in[q]] |= 1;
        if ((nd->saves & REMAT__SAVE_OUT) && u != hi) sc->read[u] |= 1;
        if (nd->saves & REMAT__SAVE_AUX) sc->read[u] |= 2;
    }
    ex->fwd_tmp = max64(0, forward_peak(p, c, a, b, NULL, sc) - out_bytes);
    /* The options: what each recomputes (sc->drop), closed over the cheap
     * producers inside the stage, and what it then keeps. */
    ex->n_options = 0;
    for (int o = 0; o < N_OPT; o++) {
        if (!option_drops(p, c, a, b, o, sc)) continue;
        remat__stage_option *opt = &ex->opt[ex->n_options];
        memset(opt, 0, sizeof *opt);
        opt->saved = out_bytes;
        opt->backward = bwd;
        option_keeps(p, c, a, b, sc, opt);
        int64_t fe = forward_peak(p, c, a, b, sc->keep, sc);
        for (int j = a; j < b; j++) sc->keep[c->nodes[j]] = 0;
        opt->fe_tmp = max64(0, fe - opt->saved);
        opt->bwd_tmp = backward_peak(p, c, a, b, o == OPT_ALL ? NULL : sc->drop, sc, &ex->grads);
        /* an option that keeps no less than option 0 is no option */
        if (o != OPT_ALL && opt->saved >= ex->opt[0].saved) {
            for (int j = a; j < b; j++) sc->drop[c->nodes[j]] = 0;
            continue;
        }
        for (int j = a; j < b; j++)
            if (sc->drop[c->nodes[j]]) c->sel[c->nodes[j]] |= (uint8_t)(1u << ex->n_options);
        c->opt_of[(size_t)i * REMAT__MAX_OPTIONS + (size_t)ex->n_options] = (uint8_t)o;
        ex->n_options++;
        for (int j = a; j < b; j++) sc->drop[c->nodes[j]] = 0;
    }
    for (int j = a; j < b; j++) {
        int32_t u = c->nodes[j];
        sc->read[u] = 0;
        const remat__node *nd = &g->nodes[u];
        for (int q = 0; q < nd->n_in; q++)
            if (nd->in[q] >= lo) sc->last[nd->in[q]] = -1;
    }
}

/* Adds to every stage the bytes of the values carried across it
 * (chain_cut.c: a branch's, a shared side input's): a value made in an
 * earlier stage and read after this one began, other than the stage's own
 * input, is held through its forward passes, and its gradient through its
 * backward. */
static void add_carried(const remat__prog *p, remat__chain *c, const int32_t *reach, int32_t *stage_of) {
    const remat_graph *g = p->g;
    for (int i = 0; i < c->n_stages; i++)
        for (int j = c->off[i]; j < c->off[i + 1]; j++) stage_of[c->nodes[j]] = i;
    for (int j = 0; j < c->off[c->n_stages]; j++) {
        int32_t s = c->nodes[j];
        int ks = stage_of[s], kr = stage_of[reach[s]];
        int from = s == c->nodes[c->off[ks + 1] - 1] ? ks + 2 : ks + 1; /* the next stage's input is its own */
        int64_t bytes = remat__vbytes(p, &g->nodes[s]);
        for (int i = from; i <= kr; i++) {
            remat__stage_ex *ex = &c->ex[i];
            ex->fwd_tmp += bytes;
            for (int o = 0; o < ex->n_options; o++) ex->opt[o].fe_tmp += bytes, ex->opt[o].bwd_tmp += bytes;
        }
    }
}

/* Marks the stages whose input no backward reads and no later stage
 * (drop_input, rotor.h): neither the node that makes it (stage i-1's
 * last) nor a node of stage i saves it, and stage i holds its last
 * reader. The DP and its simulator then free it once the stage's last
 * forward has run, as the schedule does (every value is freed after its
 * last use): the chain model no longer holds such an input, the logits
 * before a loss, through the backwards after it. */
static void mark_drops(const remat__prog *p, remat__chain *c, const int32_t *reach, const int32_t *stage_of) {
    const remat_graph *g = p->g;
    for (int i = 1; i < c->n_stages; i++) {
        int32_t s = c->nodes[c->off[i] - 1];
        int read = stage_of[reach[s]] != i || (p->needs_grad[s] && (g->nodes[s].saves & REMAT__SAVE_OUT));
        for (int j = c->off[i]; j < c->off[i + 1] && !read; j++) {
            const remat__node *nd = &g->nodes[c->nodes[j]];
            for (int q = 0; q < nd->n_in && p->needs_grad[c->nodes[j]]; q++)
                read |= nd->in[q] == s && (nd->saves & REMAT__SAVE_IN(q));
        }
        c->ex[i].drop_input = !read;
    }
}

remat_status remat__chain_init(const remat__prog *p, remat_node loss, int aside, remat__chain *c) {
    return remat__chain_init_model(p, loss, aside, 1, 1, c);
}

int remat__chain_drops(const remat__chain *c) {
    for (int i = 0; i < c->n_stages; i++)
        if (c->ex[i].drop_input) return 1;
    return 0;
}

/* Longer chains are merged into MAX_CHAIN stages of about equal forward
 * cost: the DP is cubic in the number of stages. A merged stage's
 * backward needs what each of its parts needs. */
static void merge_stages(remat__chain *c) {
    if (c->n_stages <= MAX_CHAIN) return;
    double total = 0, acc = 0;
    for (int i = 0; i < c->n_stages; i++) total += c->fwd[i] + 1e-30;
    int out_n = 0;
    for (int i = 0; i < c->n_stages; i++) {
        acc += c->fwd[i] + 1e-30;
        if (acc >= total * (out_n + 1) / MAX_CHAIN || i == c->n_stages - 1) c->off[++out_n] = c->off[i + 1];
    }
    c->n_stages = out_n;
}

remat_status remat__chain_init_model(const remat__prog *p, remat_node loss, int aside, int grads, int drops,
                                     remat__chain *c) {
    const remat_graph *g = p->g;
    int n = g->n;
    memset(c, 0, sizeof *c);
    uint8_t *needed = calloc((size_t)n, 1);
    int32_t *stack = malloc((size_t)n * sizeof *stack);
    int32_t *cut = malloc((size_t)n * sizeof *cut), *reach = malloc((size_t)n * sizeof *reach);
    scratch sc = {calloc((size_t)n, 1),
                  calloc((size_t)n, 1),
                  calloc((size_t)n, 1),
                  malloc((size_t)n * sizeof(int32_t)),
                  malloc((size_t)n * sizeof(int32_t)),
                  malloc((size_t)n * sizeof(int32_t))};
    c->nodes = malloc((size_t)n * sizeof *c->nodes);
    c->off = malloc(((size_t)n + 2) * sizeof *c->off);
    c->inputs = malloc((size_t)n * sizeof *c->inputs);
    c->fwd = calloc((size_t)n + 1, sizeof *c->fwd);
    remat_status rc = REMAT_OK;
    if (!needed || !stack || !cut || !reach || !sc.read || !sc.drop || !sc.keep || !sc.last || !sc.stack || !sc.pgrad ||
        !c->nodes || !c->off || !c->inputs || !c->fwd) {
        rc = remat__err(REMAT_NOMEM, "out of memory planning");
        goto out;
    }
    for (int u = 0; u < n; u++) sc.last[u] = sc.pgrad[u] = -1;
    remat__mark_needed(g, loss, needed, stack);
    for (int32_t u = 0; u < n; u++)
        if (needed[u] && g->nodes[u].leaf == REMAT__LEAF_INPUT) c->inputs[c->n_inputs++] = u;
    int k = 0;
    rc = remat__chain_points(p, needed, aside, cut, reach, stack, &k, &c->n_side);
    if (rc != REMAT_OK) goto out;
    /* Stages: (cut[j-1], cut[j]], the last one ending at the loss. */
    int m = 0, s = 0;
    c->off[0] = 0;
    for (int32_t u = 0; u < n; u++) {
        const remat__node *nd = &g->nodes[u];
        if (!needed[u] || nd->leaf != REMAT__LEAF_NONE) continue;
        c->nodes[m++] = u;
        if (s < k && u == cut[s]) {
            s++;
            c->off[++c->n_stages] = m;
        }
    }
    if (c->off[c->n_stages] != m) c->off[++c->n_stages] = m;
    /* a traced step's parameter gradients, per tensor from the first
     * backward that writes one (its last reader's: the backwards run in
     * reverse creation order) to the step's end, unless resident */
    for (int j = 0; j < m && grads && g->traced && !p->grads_resident; j++) {
        const remat__node *nd = &g->nodes[c->nodes[j]];
        for (int q = 0; q < nd->n_in && p->needs_grad[c->nodes[j]]; q++)
            if (g->nodes[nd->in[q]].leaf == REMAT__LEAF_PARAM && remat__bwd_writes(p, nd, q))
                sc.pgrad[nd->in[q]] = c->nodes[j];
    }
    for (int i = 0; i < c->n_stages; i++)
        for (int j = c->off[i]; j < c->off[i + 1]; j++) c->fwd[i] += remat__node_seconds(p, &g->nodes[c->nodes[j]]);
    c->output = remat__vbytes(p, &g->nodes[loss]);
    merge_stages(c);
    c->ex = calloc((size_t)c->n_stages + 1, sizeof *c->ex);
    c->opt_of = calloc(((size_t)c->n_stages + 1) * REMAT__MAX_OPTIONS, 1);
    c->sel = calloc((size_t)n, 1);
    if (!c->ex || !c->opt_of || !c->sel) {
        rc = remat__err(REMAT_NOMEM, "out of memory planning");
        goto out;
    }
    for (int i = 0; i < c->n_stages; i++) measure_stage(p, c, i, &sc);
    add_carried(p, c, reach, stack);
    if (drops) mark_drops(p, c, reach, stack); /* stack: each node's stage, from add_carried */
out:
    free(needed), free(stack), free(cut), free(reach), free(sc.read), free(sc.drop), free(sc.keep), free(sc.last),
        free(sc.stack), free(sc.pgrad);
    if (rc != REMAT_OK) remat__chain_free(c);
    return rc;
}

/* The values stage st's backward reads that its forward made, but its
 * output (the next stage's input): what an offloaded Fe_st copies to the
 * host (REMAT__VAL ids into v, their count returned; mark is g->n
 * bytes of zeros, left zero). */
static int offload_values(const remat__prog *p, const remat__chain *c, int st, uint8_t *mark, int32_t *v) {
    const remat_graph *g = p->g;
    int a = c->off[st], b = c->off[st + 1], k = 0;
    for (int j = a; j < b; j++) mark[c->nodes[j]] = 1;
    for (int j = a; j < b; j++) {
        int32_t u = c->nodes[j];
        const remat__node *n = &g->nodes[u];
        if (!p->needs_grad[u]) continue;
        for (int q = 0; q < n->n_in; q++)
            if ((n->saves & REMAT__SAVE_IN(q)) && mark[n->in[q]] == 1)
                v[k++] = REMAT__VAL(n->in[q], REMAT__V_OUT), mark[n->in[q]] |= 2;
        if ((n->saves & REMAT__SAVE_OUT) && !(mark[u] & 2)) v[k++] = REMAT__VAL(u, REMAT__V_OUT), mark[u] |= 2;
        if ((n->saves & REMAT__SAVE_AUX) && !(mark[u] & 4)) v[k++] = REMAT__VAL(u, REMAT__V_AUX), mark[u] |= 4;
    }
    for (int j = a; j < b; j++) mark[c->nodes[j]] = 0;
    int32_t last = REMAT__VAL(c->nodes[b - 1], REMAT__V_OUT), m = 0;
    for (int i = 0; i < k; i++)
        if (v[i] != last && remat__value_bytes(p, v[i])) v[m++] = v[i];
    return m;
}

/* Where the copies of an offloaded Fe_i at operation t go (offload.h's
 * timeline): its OUTs right after it, the device instances' FREEs once
 * the next operation is done (before operation t + 2), the INs before the
 * operation before B_i. at[k] (-1 none) is the stage whose FREEs (free_at)
 * or INs (in_at) come before operation k's instructions. */
static remat_status offload_points(const remat_chain_plan *plan, int nops, int32_t *free_at, int32_t *in_at) {
    for (int k = 0; k <= nops; k++) free_at[k] = in_at[k] = -1;
    for (int t = 0; t < nops; t++) {
        remat_chain_op op = remat_chain_plan_op(plan, t);
        if (op.kind != REMAT_CHAIN_FE || op.option != REMAT__OFFLOAD_OPTION) continue;
        int tb = t + 1;
        while (tb < nops && !(remat_chain_plan_op(plan, tb).kind == REMAT_CHAIN_B &&
                              remat_chain_plan_op(plan, tb).stage == op.stage))
            tb++;
        if (tb >= nops || tb - 2 <= t)
            return remat__err(REMAT_INTERNAL,
                              "chain plan: offloaded Fe_%d at operation %d has no B_%d two "
                              "operations later",
                              op.stage, t, op.stage);
        free_at[t + 2] = op.stage, in_at[tb - 1] = op.stage;
    }
    return REMAT_OK;
}

/* Appends instructions of `kind` for the values of stage st that an
 * offloaded Fe copies (offload_values). */
static void emit_copies(const remat__prog *p, const remat__chain *c, int st, remat__ikind kind, uint8_t *mark,
                        int32_t *v, remat__schedule *out) {
    int k = offload_values(p, c, st, mark, v);
    for (int i = 0; i < k; i++)
        out->ins[out->n++] = (remat__instr){.kind = (uint8_t)kind, .node = REMAT__VAL_NODE(v[i]), .value = v[i]};
}

remat_status remat__chain_emit(const remat__prog *p, const remat__chain *c, const remat_chain_plan *plan,
                               remat_node loss, remat__schedule *out) {
    memset(out, 0, sizeof *out);
    out->train = 1;
    out->backward = 1;
    out->loss = loss;
    out->fetch = REMAT_NONE;
    out->origin = "chain";
    int nops = remat_chain_plan_length(plan);
    size_t cap = (size_t)c->n_inputs + 1;
    for (int i = 0; i < nops; i++) {
        remat_chain_op op = remat_chain_plan_op(plan, i);
        size_t len = op.stage < c->n_stages ? (size_t)(c->off[op.stage + 1] - c->off[op.stage]) : 0;
        cap += 2 * len; /* a B's recomputations and backwards */
        if (op.kind == REMAT_CHAIN_FE && op.option == REMAT__OFFLOAD_OPTION)
            cap += 6 * len; /* out, free, in: out and aux */
    }
    int32_t *at = malloc(2 * ((size_t)nops + 1) * sizeof *at), *v = malloc(3 * ((size_t)p->g->n + 1) * sizeof *v);
    uint8_t *mark = calloc((size_t)p->g->n + 1, 1);
    out->ins = malloc(cap * sizeof *out->ins);
    if (!out->ins || !at || !v || !mark) {
        free(at), free(v), free(mark), free(out->ins), out->ins = NULL;
        return remat__err(REMAT_NOMEM, "out of memory planning");
    }
    out->cap = (int)cap;
    int32_t *free_at = at, *in_at = at + nops + 1;
    remat_status st = offload_points(plan, nops, free_at, in_at);
    for (int j = 0; j < c->n_inputs; j++)
        out->ins[out->n++] = (remat__instr){.kind = REMAT__I_FWD, .node = c->inputs[j]};
    for (int i = 0; i <= nops && st == REMAT_OK; i++) {
        if (free_at[i] >= 0) emit_copies(p, c, free_at[i], REMAT__I_FREE, mark, v, out);
        if (in_at[i] >= 0) emit_copies(p, c, in_at[i], REMAT__I_IN, mark, v, out);
        if (i == nops) break;
        remat_chain_op op = remat_chain_plan_op(plan, i);
        if (op.kind == REMAT_CHAIN_LOSS || op.stage >= c->n_stages) continue;
        int a = c->off[op.stage], b = c->off[op.stage + 1];
        int o = op.option == REMAT__OFFLOAD_OPTION ? 0 : op.option;
        if (op.kind == REMAT_CHAIN_B) {
            uint8_t bit = (uint8_t)(1u << o);
            for (int j = a; j < b; j++) /* the option's recomputations first */
                if (c->sel[c->nodes[j]] & bit)
                    out->ins[out->n++] = (remat__instr){.kind = REMAT__I_FWD, .node = c->nodes[j]};
            for (int j = b - 1; j >= a; j--)
                if (p->needs_grad[c->nodes[j]])
                    out->ins[out->n++] = (remat__instr){.kind = REMAT__I_BWD, .node = c->nodes[j]};
        } else {
            for (int j = a; j < b; j++) out->ins[out->n++] = (remat__instr){.kind = REMAT__I_FWD, .node = c->nodes[j]};
            if (op.kind == REMAT_CHAIN_FE && op.option == REMAT__OFFLOAD_OPTION)
                emit_copies(p, c, op.stage, REMAT__I_OUT, mark, v, out);
        }
    }
    free(at), free(v), free(mark);
    if (st == REMAT_OK) st = remat__schedule_add_frees(p, out);
    if (st == REMAT_OK) st = remat__schedule_categorize(p, out);
    if (st != REMAT_OK) remat__schedule_free(out);
    return st;
}

remat_status remat__chain_schedule(const remat__prog *p, remat_node loss, const remat_chain_plan *plan,
                                   remat__schedule *out) {
    remat__chain c;
    memset(out, 0, sizeof *out);
    remat_status st = remat__chain_init(p, loss, 1, &c);
    if (st != REMAT_OK) return st;
    st = remat__chain_emit(p, &c, plan, loss, out);
    remat__chain_free(&c);
    return st;
}

/* What a candidate costs under the cost model (recomputations and
 * exposed copies included). */
double remat__schedule_cost(const remat__prog *p, const remat__schedule *sc) {
    double t = sc->stall;
    for (int i = 0; i < sc->n; i++) {
        const remat__instr *in = &sc->ins[i];
        if (in->kind != REMAT__I_FWD && in->kind != REMAT__I_BWD) continue;
        const remat__node *nd = &p->g->nodes[in->node];
        t += in->kind == REMAT__I_BWD ? remat__node_bwd_seconds(p, nd)
             : in->first              ? remat__node_seconds(p, nd)
                                      : remat__node_rec_seconds(p, nd);
    }
    return t;
}

/* The chain optimal plans over (offload.h's planner reads it): its
 * stages with their options, malloc'd into *st (the caller frees), their
 * count, the loss input's bytes, and each stage's first node into
 * *first (malloc'd, may be NULL). */
remat_status remat__optimal_chain(const remat__prog *p, remat_node loss, remat__stage_ex **st, int *n, int64_t *output,
                                  int32_t **first) {
    remat__chain c;
    remat_status rc = remat__chain_init(p, loss, 1, &c);
    if (rc != REMAT_OK) return rc;
    *st = malloc(((size_t)c.n_stages + 1) * sizeof **st);
    if (first) *first = malloc(((size_t)c.n_stages + 1) * sizeof **first);
    if (!*st || (first && !*first)) {
        free(*st), *st = NULL;
        if (first) free(*first), *first = NULL;
        remat__chain_free(&c);
        return remat__err(REMAT_NOMEM, "out of memory planning");
    }
    memcpy(*st, c.ex, (size_t)c.n_stages * sizeof **st);
    for (int i = 0; first && i < c.n_stages; i++) (*first)[i] = c.nodes[c.off[i]];
    *n = c.n_stages, *output = c.output;
    remat__chain_free(&c);
    return REMAT_OK;
}
