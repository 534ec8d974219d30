/* session.c: the session API: compile a graph for one loss, own the
 * parameters, gradients and schedules, and run steps.
 *
 * Parameters and buffers are allocated once (category PARAM) with their
 * gradients (GRAD); everything else is a value of a schedule, allocated and
 * freed by the executor during a step.
 */
#include "session.h"

#include <cblas.h>
#include <math.h>
#include <stdlib.h>
#include <unistd.h>

void remat_session_opts_default(remat_session_opts *o) {
    memset(o, 0, sizeof *o);
    o->threads = 0;
    o->seed = 42;
    o->strategy = REMAT_STRATEGY_AUTO;
}

/* (Re)builds the training schedule for the session's strategy and current
 * live state (parameters, gradients, optimizer state), then checks the
 * budget. */
remat_status remat__session_plan_train(remat_session *s) {
    remat__schedule sc;
    remat_status st;
    if (s->opts.strategy == REMAT_STRATEGY_OPTIMAL && s->opts.budget) {
        remat_mem_stats start = s->alloc.st;
        st = remat__optimal_schedule(&s->prog, s->loss, s->opts.budget, &start, &sc);
    } else {
        uint8_t *level = NULL;
        st = remat__strategy_levels(s->g, s->opts.strategy, &level);
        if (st == REMAT_OK) st = remat__schedule_build(&s->prog, s->loss, REMAT_NONE, 1, 1, level, &sc);
        free(level);
    }
    if (st != REMAT_OK) return st;
    remat__exec_forget(s, &s->train);
    remat__schedule_free(&s->train);
    s->train = sc;
    return remat__session_check_budget(s);
}

/* Fails with REMAT_BUDGET when the training step's predicted peak, from the
 * current live state, is above the budget. */
remat_status remat__session_check_budget(const remat_session *s) {
    if (!s->opts.budget) return REMAT_OK;
    remat_mem_stats pred;
    remat_status st = remat_session_predict(s, &pred);
    if (st != REMAT_OK) return st;
    size_t need = pred.peak[REMAT_MEM_TOTAL];
    if (need <= s->opts.budget) return REMAT_OK;
    return remat__err(REMAT_BUDGET,
                      "strategy '%s' needs %zu bytes (%.1f MiB) at the peak of a training step, above "
                      "the budget of %zu bytes (%.1f MiB): parameters %zu, gradients %zu, optimizer "
                      "state %zu, activations %zu, transient %zu, workspace %zu",
                      remat_strategy_str(s->opts.strategy), need, (double)need / 1048576.0, s->opts.budget,
                      (double)s->opts.budget / 1048576.0, pred.peak[REMAT_MEM_PARAM], pred.peak[REMAT_MEM_GRAD],
                      pred.peak[REMAT_MEM_OPTIM], pred.peak[REMAT_MEM_ACT], pred.peak[REMAT_MEM_TRANSIENT],
                      pred.peak[REMAT_MEM_WORKSPACE]);
}

/* Fills a parameter from its initializer: U(-a, a) or N(0, a^2) from
 * Philox keyed by the session seed and the node id, so that initial
 * weights depend only on (seed, graph). */
static void init_param(const remat__node *n, int32_t node, uint64_t seed, float *w) {
    int64_t numel = remat__numel(&n->shape);
    switch (n->init) {
    case REMAT_INIT_ZEROS:
        memset(w, 0, (size_t)numel * sizeof *w);
        break;
    case REMAT_INIT_ONES:
        for (int64_t i = 0; i < numel; i++) w[i] = 1.0f;
        break;
    case REMAT_INIT_UNIFORM: {
        uint32_t key[2] = {(uint32_t)seed, (uint32_t)(seed >> 32)};
        for (int64_t i = 0; i < numel; i += 4) {
            uint32_t ctr[4] = {(uint32_t)(i >> 2), (uint32_t)node, 0x696e6974u /* "init" */,
                               (uint32_t)((uint64_t)i >> 34)}, r[4];
            remat__philox(ctr, key, r);
            for (int j = 0; j < 4 && i + j < numel; j++)
                w[i + j] = (2.0f * remat__u01(r[j]) - 1.0f) * n->init_a;
        }
        break;
    }
    case REMAT_INIT_NORMAL: { /* Box-Muller on pairs of words, in double */
        uint32_t key[2] = {(uint32_t)seed, (uint32_t)(seed >> 32)};
        for (int64_t i = 0; i < numel; i += 4) {
            uint32_t ctr[4] = {(uint32_t)(i >> 2), (uint32_t)node, 0x6e6f726du /* "norm" */,
                               (uint32_t)((uint64_t)i >> 34)}, r[4];
            remat__philox(ctr, key, r);
            for (int j = 0; j < 4 && i + j < numel; j += 2) {
                double u1 = ((double)(r[j] >> 8) + 1.0) / 16777216.0; /* (0, 1]: log is finite */
                double u2 = (double)(r[j + 1] >> 8) / 16777216.0, rad = sqrt(-2.0 * log(u1));
                w[i + j] = (float)(rad * cos(6.283185307179586 * u2) * n->init_a);
                if (i + j + 1 < numel) w[i + j + 1] = (float)(rad * sin(6.283185307179586 * u2) * n->init_a);
            }
        }
        break;
    }
    }
}

remat_status remat_session_create(remat_session **out, const remat_graph *g, remat_node loss,
                                  const remat_session_opts *o) {
    if (!out || !g) return remat__err(REMAT_INVALID, "remat_session_create: NULL argument");
    *out = NULL;
    if (g->status != REMAT_OK)
        return remat__err(g->status, "the graph has an error: %s", g->error);
    if (loss < 0 || loss >= g->n)
        return remat__err(REMAT_INVALID, "loss node %d does not exist", (int)loss);
    if (g->nodes[loss].shape.ndim != 0 || g->nodes[loss].dtype != REMAT_F32)
        return remat__err(REMAT_SHAPE, "the loss must be a float32 scalar; node %d (%s) is not",
                          (int)loss, remat__ops[g->nodes[loss].op]->name);
    remat_session *s = calloc(1, sizeof *s);
    if (!s) return remat__err(REMAT_NOMEM, "out of memory creating a session");
    s->g = g;
    s->loss = loss;
    remat_session_opts_default(&s->opts);
    if (o) s->opts = *o;
    int nth = s->opts.threads;
    if (nth <= 0) {
        long nc = sysconf(_SC_NPROCESSORS_ONLN);
        nth = nc > 0 ? (int)nc : 1;
    }
    s->opts.threads = nth;
    remat__alloc_init(&s->alloc);
    /* Kernels split the work themselves: BLAS runs single-threaded inside
     * each pool thread, never both at once. */
    openblas_set_num_threads(1);
    remat_status st = remat__pool_create(&s->pool, nth);
    if (st == REMAT_OK) st = remat__prog_init(&s->prog, g, nth);
    if (st == REMAT_OK && s->opts.cost_model) s->prog.cost = *s->opts.cost_model;
    s->opts.cost_model = NULL; /* copied: the caller's may go away */
    size_t nv = (size_t)g->n * 3;
    if (st == REMAT_OK) {
        s->pindex = malloc((size_t)g->n * sizeof *s->pindex);
        s->bound = calloc((size_t)g->n, sizeof *s->bound);
        s->vals = calloc(nv, sizeof *s->vals);
        s->vcat = malloc(nv);
        s->params = calloc((size_t)g->n, sizeof *s->params);
        if (!s->pindex || !s->bound || !s->vals || !s->vcat || !s->params)
            st = remat__err(REMAT_NOMEM, "out of memory creating a session");
        else
            memset(s->vcat, REMAT_MEM_TRANSIENT, nv);
    }
    if (s->opts.strategy == REMAT_STRATEGY_AUTO)
        s->opts.strategy = s->opts.budget ? REMAT_STRATEGY_OPTIMAL : REMAT_STRATEGY_ALL;
    /* The unused-parameter check reads a store-all schedule; the strategy's
     * own schedule is made once the parameters are allocated. */
    if (st == REMAT_OK) st = remat__schedule_build(&s->prog, loss, REMAT_NONE, 1, 1, NULL, &s->train);
    /* Parameters: allocate, initialize, and refuse ones the loss ignores. */
    for (int v = 0; v < g->n && st == REMAT_OK; v++) {
        const remat__node *n = &g->nodes[v];
        s->pindex[v] = -1;
        if (!remat__is_resident(n)) continue;
        remat__pslot *p = &s->params[s->n_params];
        p->node = v;
        size_t bytes = remat__out_bytes(n);
        p->data = remat__alloc_get(&s->alloc, REMAT_MEM_PARAM, bytes);
        if (!p->data) { st = REMAT_NOMEM; break; }
        init_param(n, v, s->opts.seed, p->data);
        if (n->leaf == REMAT__LEAF_PARAM) {
            p->grad = remat__alloc_zeroed(&s->alloc, REMAT_MEM_GRAD, bytes);
            if (!p->grad) { st = REMAT_NOMEM; break; }
        }
        s->pindex[v] = s->n_params++;
    }
    if (st == REMAT_OK) {
        /* A parameter the loss does not depend on would silently never
         * train: report it instead. */
        uint8_t *used = calloc((size_t)g->n, 1);
        if (!used) st = remat__err(REMAT_NOMEM, "out of memory creating a session");
        for (int i = 0; used && i < s->train.n; i++)
            if (s->train.ins[i].kind == REMAT__I_BWD) {
                const remat__node *n = &g->nodes[s->train.ins[i].node];
                for (int j = 0; j < n->n_in; j++) used[n->in[j]] = 1;
            }
        for (int v = 0; used && v < g->n && st == REMAT_OK; v++)
            if (g->nodes[v].leaf == REMAT__LEAF_PARAM && !used[v])
                st = remat__err(REMAT_INVALID, "parameter '%s' does not influence the loss: "
                                "it would never receive a gradient", g->nodes[v].name);
        free(used);
    }
    if (st == REMAT_OK) st = remat__session_plan_train(s);
    if (st != REMAT_OK) {
        remat_session_destroy(s);
        return st;
    }
    *out = s;
    return REMAT_OK;
}

void remat_session_destroy(remat_session *s) {
    if (!s) return;
    for (int i = 0; i < s->n_params; i++) {
        remat__pslot *p = &s->params[i];
        size_t bytes = remat__out_bytes(&s->g->nodes[p->node]);
        remat__alloc_put(&s->alloc, REMAT_MEM_PARAM, p->data, bytes);
        remat__alloc_put(&s->alloc, REMAT_MEM_GRAD, p->grad, bytes);
        remat__alloc_put(&s->alloc, REMAT_MEM_OPTIM, p->m, bytes);
        remat__alloc_put(&s->alloc, REMAT_MEM_OPTIM, p->v, bytes);
    }
    remat__exec_release(s);
    remat__schedule_free(&s->train);
    remat__schedule_free(&s->fwd[0]);
    remat__schedule_free(&s->fwd[1]);
    remat__prog_free(&s->prog);
    remat__pool_destroy(s->pool);
    free(s->pindex), free(s->bound), free(s->vals), free(s->vcat), free(s->params);
    free(s);
}

remat_status remat_session_bind(remat_session *s, remat_node input, const void *data) {
    if (input < 0 || input >= s->g->n || s->g->nodes[input].leaf != REMAT__LEAF_INPUT)
        return remat__err(REMAT_INVALID, "node %d is not an input", (int)input);
    s->bound[input] = data;
    return REMAT_OK;
}

remat_status remat_session_step(remat_session *s, float *loss) {
    for (int i = 0; i < s->n_params; i++)
        if (s->params[i].grad)
            memset(s->params[i].grad, 0, remat__out_bytes(&s->g->nodes[s->params[i].node]));
    remat__alloc_reset_peaks(&s->alloc);
    float l = NAN;
    remat_status st = remat__exec(s, &s->train, &l, NULL);
    if (loss) *loss = l;
    return st;
}

remat_status remat_session_forward(remat_session *s, int train, float *loss, remat_node fetch,
                                   float *out) {
    train = train ? 1 : 0;
    if (fetch != REMAT_NONE && (fetch < 0 || fetch >= s->g->n || remat__is_resident(&s->g->nodes[fetch])))
        return remat__err(REMAT_INVALID, "fetch node %d is not a computed node", (int)fetch);
    if (fetch != REMAT_NONE && !out) return remat__err(REMAT_INVALID, "fetch given without an output buffer");
    if (!s->fwd_valid[train] || s->fwd_fetch[train] != fetch) {
        remat__exec_forget(s, &s->fwd[train]);
        remat__schedule_free(&s->fwd[train]);
        s->fwd_valid[train] = 0;
        remat_status st = remat__schedule_build(&s->prog, s->loss, fetch, train, 0, NULL, &s->fwd[train]);
        if (st != REMAT_OK) return st;
        s->fwd_valid[train] = 1;
        s->fwd_fetch[train] = fetch;
    }
    remat__alloc_reset_peaks(&s->alloc);
    float l = NAN;
    remat_status st = remat__exec(s, &s->fwd[train], &l, out);
    if (loss) *loss = l;
    return st;
}

int remat_session_param_count(const remat_session *s) { return s->n_params; }

remat_status remat_session_param(const remat_session *s, int i, remat_param_info *out) {
    if (i < 0 || i >= s->n_params)
        return remat__err(REMAT_INVALID, "parameter index %d is out of range 0..%d", i, s->n_params - 1);
    const remat__pslot *p = &s->params[i];
    const remat__node *n = &s->g->nodes[p->node];
    memset(out, 0, sizeof *out);
    out->name = n->name;
    out->ndim = n->shape.ndim;
    for (int d = 0; d < n->shape.ndim; d++) out->dims[d] = n->shape.d[d];
    out->numel = remat__numel(&n->shape);
    out->trainable = n->leaf == REMAT__LEAF_PARAM;
    out->data = p->data;
    out->grad = p->grad;
    return REMAT_OK;
}

int remat_session_find_param(const remat_session *s, const char *name) {
    for (int i = 0; i < s->n_params; i++)
        if (strcmp(s->g->nodes[s->params[i].node].name, name) == 0) return i;
    return -1;
}

void remat_session_mem(const remat_session *s, remat_mem_stats *out) { *out = s->alloc.st; }

size_t remat_session_saved_bytes(const remat_session *s, remat_node n) {
    size_t b = 0;
    for (int i = 0; i < s->train.n; i++) {
        const remat__instr *in = &s->train.ins[i];
        if (in->kind != REMAT__I_FWD || in->node != n) continue;
        if (in->cat == REMAT_MEM_ACT) b += remat__value_bytes(s->g, REMAT__VAL(n, REMAT__V_OUT));
        if (in->aux_cat == REMAT_MEM_ACT) b += remat__value_bytes(s->g, REMAT__VAL(n, REMAT__V_AUX));
    }
    return b;
}

int64_t remat_session_step_index(const remat_session *s) { return s->step; }

void remat_session_set_profiling(remat_session *s, int on) {
    s->profiling = on != 0;
    memset(s->prof_s, 0, sizeof s->prof_s);
    memset(s->prof_n, 0, sizeof s->prof_n);
}

int remat_session_profile(const remat_session *s, remat_profile_row *rows, int cap) {
    static const char *const kinds[4] = {"forward", "recompute", "backward", "free"};
    int n = 0;
    for (int op = 0; op < REMAT__N_OPS; op++)
        for (int k = 0; k < 4; k++) {
            if (!s->prof_n[op][k]) continue;
            if (n < cap) rows[n] = (remat_profile_row){remat__ops[op]->name, kinds[k], s->prof_s[op][k], s->prof_n[op][k]};
            n++;
        }
    return n;
}

remat_status remat_session_predict(const remat_session *s, remat_mem_stats *out) {
    remat_mem_stats start = s->alloc.st;
    return remat__simulate(&s->prog, &s->train, &start, out);
}

const remat_graph *remat_session_graph(const remat_session *s) { return s->g; }

remat_status remat_session_plan(const remat_session *s, remat_plan_summary *out) {
    remat_mem_stats start = s->alloc.st;
    remat_status st = remat__schedule_summary(&s->prog, &s->train, &start, out);
    out->strategy = s->opts.strategy;
    uint8_t *level = NULL;
    if (st == REMAT_OK) st = remat__strategy_levels(s->g, s->opts.strategy, &level);
    if (level) {
        /* boundaries: op nodes kept at some level that feed a node dropped at
         * that level */
        uint8_t *counted = calloc((size_t)s->g->n, 1);
        for (int u = 0; counted && u < s->g->n; u++) {
            const remat__node *n = &s->g->nodes[u];
            if (remat__is_resident(n)) continue;
            for (int i = 0; i < n->n_in; i++) {
                int32_t x = n->in[i];
                if (level[x] < level[u] && s->g->nodes[x].leaf == REMAT__LEAF_NONE && !counted[x]) {
                    counted[x] = 1;
                    out->kept_boundaries++;
                }
            }
        }
        free(counted);
        free(level);
    }
    return st;
}

int64_t remat_session_schedule_length(const remat_session *s) { return s->train.n; }

remat_status remat_session_schedule_instr(const remat_session *s, int64_t i, remat_instr_info *out) {
    if (i < 0 || i >= s->train.n)
        return remat__err(REMAT_INVALID, "instruction %lld is out of range", (long long)i);
    const remat__instr *in = &s->train.ins[i];
    memset(out, 0, sizeof *out);
    out->node = in->node;
    out->op = remat__ops[s->g->nodes[in->node].op]->name;
    out->what = "";
    if (in->kind == REMAT__I_FREE) {
        static const char *const what[] = {"output", "aux", "gradient"};
        out->kind = "free";
        out->what = what[REMAT__VAL_KIND(in->value)];
    } else if (in->kind == REMAT__I_BWD) {
        out->kind = "backward";
    } else {
        out->kind = in->first ? "forward" : "recompute";
        out->activation = in->cat == REMAT_MEM_ACT;
    }
    return REMAT_OK;
}
