/* session.c: the session API: compile a graph for one loss on one device,
 * own the parameters, gradients and schedules, and run steps.
 *
 * Parameters and buffers live in one resident block (category PARAM),
 * their gradients in another (GRAD), the optimizer's state in a third
 * (OPTIM, optim.c), data parallelism's in a fourth (COMM; blocks.c carves
 * them); everything else is a value of a schedule, placed by its memory
 * plan in the session's arena. The blocks and the arena are what the
 * session holds, and what a budget bounds.
 */
#include "session.h"
#include "../plan/bound.h"

#include <math.h>
#include <stdlib.h>

void remat_session_opts_default(remat_session_opts *o) {
    memset(o, 0, sizeof *o);
    o->threads = 0;
    o->seed = 42;
    o->strategy = REMAT_STRATEGY_AUTO;
    o->device = REMAT_DEVICE_CPU;
    o->host_latency = -1;
}

static remat_status remat__session_check_budget(const remat_session *s);

/* (Re)builds the training schedule for the session's strategy and current
 * live state (parameters, gradients, optimizer state), plans its memory,
 * then checks the budget. */
remat_status remat__session_plan_train(remat_session *s) {
    remat__planned pl = {0};
    remat_mem_stats start = s->alloc.st;
    const remat__buckets buckets = {s->dp.bucket_of, s->dp.nb, s->dp.at_end};
    remat__plan_req req = {&s->prog,
                           s->loss,
                           s->opts.budget,
                           &start,
                           remat__session_blocks_bytes(s),
                           s->opts.floor_out,
                           s->dp.active ? &buckets : NULL,
                           s->opts.host_budget,
                           0,
                           0};
    remat_status st =
        s->opts.host_budget ? remat__session_host_link(s, &req.host_bandwidth, &req.host_latency) : REMAT_OK;
    size_t bound = 0;
    if (st == REMAT_OK) st = remat__step_bound(&s->prog, s->loss, &bound);
    s->least = bound + req.held_outside;
    if (s->opts.bound_out) *s->opts.bound_out = s->least;
    if (st == REMAT_OK) st = remat__planners[s->opts.strategy].build(&req, &pl);
    if (st != REMAT_OK) {
        remat__planned_free(&pl);
        return st;
    }
    pl.valid = 1;
    remat__planned_free(&s->train);
    s->train = pl;
    return remat__session_check_budget(s);
}

/* Fails with REMAT_BUDGET when what the training step holds (its arena and
 * the resident blocks), from the current live state, is above the budget. */
static remat_status remat__session_check_budget(const remat_session *s) {
    if (!s->opts.budget) return REMAT_OK;
    remat_mem_stats pred;
    remat_status st = remat_session_predict(s, &pred);
    if (st != REMAT_OK) return st;
    size_t arena = s->train.mem.arena, held = arena + remat__session_blocks_bytes(s);
    if (held <= s->opts.budget) return REMAT_OK;
    return remat__err(REMAT_BUDGET,
                      "strategy '%s' holds %zu bytes (%.1f MiB) during a training step, above the budget of %zu "
                      "bytes (%.1f MiB): an arena of %zu bytes for a peak of %zu bytes of values (activations %zu, "
                      "transient %zu, workspace %zu), and %zu bytes of parameters, gradients and optimizer state"
                      "%s%s",
                      remat_strategy_str(s->opts.strategy), held, (double)held / 1048576.0, s->opts.budget,
                      (double)s->opts.budget / 1048576.0, arena,
                      pred.peak[REMAT_MEM_TOTAL] - pred.live[REMAT_MEM_TOTAL], pred.peak[REMAT_MEM_ACT],
                      pred.peak[REMAT_MEM_TRANSIENT], pred.peak[REMAT_MEM_WORKSPACE], remat__session_blocks_bytes(s),
                      s->blk_bytes[REMAT__BLK_COMM] ? " (of which communication: the accumulated gradients of the "
                                                      "micro-batches and the reductions' buffers)"
                                                    : "",
                      s->blk_bytes[REMAT__BLK_PREFETCH] ? " (and the next batch's inputs, opts.prefetch)" : "");
}

/* Fills a parameter from its initializer: U(-a, a) or N(0, a^2) from
 * Philox keyed by the session seed and the node id, so that initial
 * weights depend only on (seed, graph). */
static void init_param(const remat__node *n, int32_t node, uint64_t seed, float *w) {
    int64_t numel = remat__numel(&n->shape);
    switch (n->init) {
    case REMAT_INIT_ZEROS: memset(w, 0, (size_t)numel * sizeof *w); break;
    case REMAT_INIT_ONES:
        for (int64_t i = 0; i < numel; i++) w[i] = 1.0f;
        break;
    case REMAT_INIT_UNIFORM: {
        uint32_t key[2] = {(uint32_t)seed, (uint32_t)(seed >> 32)};
        for (int64_t i = 0; i < numel; i += 4) {
            uint32_t ctr[4] = {(uint32_t)(i >> 2), (uint32_t)node, 0x696e6974u /* "init" */,
                               (uint32_t)((uint64_t)i >> 34)},
                     r[4];
            remat__philox(ctr, key, r);
            for (int j = 0; j < 4 && i + j < numel; j++) w[i + j] = (2.0f * remat__u01(r[j]) - 1.0f) * n->init_a;
        }
        break;
    }
    case REMAT_INIT_NORMAL: { /* Box-Muller on pairs of words, in double */
        uint32_t key[2] = {(uint32_t)seed, (uint32_t)(seed >> 32)};
        for (int64_t i = 0; i < numel; i += 4) {
            uint32_t ctr[4] = {(uint32_t)(i >> 2), (uint32_t)node, 0x6e6f726du /* "norm" */,
                               (uint32_t)((uint64_t)i >> 34)},
                     r[4];
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

/* Allocates the parameter and gradient blocks and fills the parameters
 * from their initializers (on the host, then uploaded). */
/* Whether leaf n's gradient lives in the gradient block for the whole step:
 * every parameter's of remat's own graphs, and of a traced step whose
 * framework holds them (grads_resident); a traced step's others are its
 * memory plan's, made on demand as the framework that runs it does. */
static int grad_in_block(const remat_session *s, const remat__node *n) {
    return n->leaf == REMAT__LEAF_PARAM && (!s->g->traced || s->opts.grads_resident);
}

static remat_status alloc_params(remat_session *s) {
    const remat_graph *g = s->g;
    size_t *pb = calloc((size_t)g->n + 1, sizeof *pb), *gb = calloc((size_t)g->n + 1, sizeof *gb);
    void **pp = calloc((size_t)g->n + 1, sizeof *pp), **gp = calloc((size_t)g->n + 1, sizeof *gp);
    remat_status st = REMAT_OK;
    if (!pb || !gb || !pp || !gp) st = remat__err(REMAT_NOMEM, "out of memory creating a session");
    int np = 0, ng = 0;
    size_t largest = 0;
    for (int v = 0; v < g->n && st == REMAT_OK; v++) {
        const remat__node *n = &g->nodes[v];
        s->pindex[v] = -1;
        if (!remat__is_resident(n)) continue;
        s->params[np].node = v;
        s->pindex[v] = np;
        pb[np++] = remat__out_bytes(n);
        if (grad_in_block(s, n)) gb[ng++] = remat__out_bytes(n);
        if (remat__out_bytes(n) > largest) largest = remat__out_bytes(n);
    }
    s->n_params = np;
    /* zeroed: the padding between tensors must be finite (check_finite
     * scans the block whole) */
    if (st == REMAT_OK) st = remat__block_alloc(s, REMAT__BLK_PARAM, REMAT_MEM_PARAM, np, pb, pp, 1);
    if (st == REMAT_OK) st = remat__block_alloc(s, REMAT__BLK_GRAD, REMAT_MEM_GRAD, ng, gb, gp, 1);
    int fill = st == REMAT_OK && !s->opts.plan_only; /* plan-only: counted, nothing to fill */
    float *host = fill ? malloc(largest ? largest : 1) : NULL;
    if (fill && !host) st = remat__err(REMAT_NOMEM, "out of memory creating a session");
    for (int i = 0, j = 0; fill && i < np && st == REMAT_OK; i++) {
        remat__pslot *p = &s->params[i];
        const remat__node *n = &g->nodes[p->node];
        p->data = pp[i];
        if (grad_in_block(s, n)) p->grad = gp[j++];
        init_param(n, p->node, s->opts.seed, host);
        st = s->be->upload(s->dev, p->data, host, remat__out_bytes(n));
    }
    if (st == REMAT_OK && s->dev) st = s->be->sync(s->dev); /* host is freed next */
    free(host), free(pb), free(gb), free(pp), free(gp);
    return st;
}

/* A parameter the loss does not depend on would silently never train:
 * report it instead (read from a store-all schedule's backward). */
static remat_status check_used(remat_session *s) {
    const remat_graph *g = s->g;
    remat__schedule sc;
    remat_status st = remat__schedule_build(&s->prog, s->loss, REMAT_NONE, 1, 1, NULL, &sc);
    if (st != REMAT_OK) return st;
    uint8_t *used = calloc((size_t)g->n, 1);
    if (!used) st = remat__err(REMAT_NOMEM, "out of memory creating a session");
    for (int i = 0; used && i < sc.n; i++)
        if (sc.ins[i].kind == REMAT__I_BWD) {
            const remat__node *n = &g->nodes[sc.ins[i].node];
            for (int j = 0; j < n->n_in; j++) used[n->in[j]] = 1;
        }
    for (int v = 0; used && v < g->n && st == REMAT_OK; v++)
        if (g->nodes[v].leaf == REMAT__LEAF_PARAM && !used[v])
            st = remat__err(REMAT_INVALID,
                            "parameter '%s' does not influence the loss: "
                            "it would never receive a gradient",
                            g->nodes[v].name);
    free(used);
    remat__schedule_free(&sc);
    return st;
}

/* The communication buffers a traced step's framework holds for the whole
 * step (DDP's gradient buckets): counted, in the communication block. */
static remat_status framework_comm(remat_session *s) {
    size_t b = s->opts.framework_comm_bytes;
    if (!b) return REMAT_OK;
    if (!s->g->traced || !s->opts.plan_only)
        return remat__err(REMAT_INVALID, "framework_comm_bytes counts a traced step's framework's buffers: it plans a "
                                         "graph file (plan_only), not a step remat runs");
    if (s->dp.active)
        return remat__err(REMAT_INVALID, "framework_comm_bytes and remat's own data parallelism both hold the "
                                         "communication block: a traced step has the one or the other");
    void *ptr;
    return remat__block_alloc(s, REMAT__BLK_COMM, REMAT_MEM_COMM, 1, &b, &ptr, 0);
}

/* remat_session_create on this rank alone; *out is NULL on failure. */
/* The executor's tables per node and per value. */
static remat_status alloc_tables(remat_session *s) {
    size_t n = (size_t)s->g->n, nv = n * 3;
    s->pindex = malloc(n * sizeof *s->pindex);
    s->bound = calloc(n, sizeof *s->bound);
    s->vals = calloc(nv, sizeof *s->vals);
    s->vev = malloc(nv * sizeof *s->vev);
    s->hvals = calloc(nv, sizeof *s->hvals);
    s->hev = malloc(nv * sizeof *s->hev);
    s->copy_stamp = calloc(nv, sizeof *s->copy_stamp);
    s->params = calloc(n + 1, sizeof *s->params);
    if (!s->pindex || !s->bound || !s->vals || !s->vev || !s->hvals || !s->hev || !s->copy_stamp || !s->params)
        return remat__err(REMAT_NOMEM, "out of memory creating a session");
    return REMAT_OK;
}

/* The strategy (auto: optimal with a budget, else all), and what offload
 * needs: optimal within a budget, a backend that copies to the host. */
static remat_status resolve_strategy(remat_session *s) {
    remat_session_opts *o = &s->opts;
    if ((unsigned)o->strategy >= REMAT_STRATEGY_COUNT)
        return remat__err(REMAT_INVALID, "unknown strategy %d", (int)o->strategy);
    if (o->strategy == REMAT_STRATEGY_AUTO) o->strategy = o->budget ? REMAT_STRATEGY_OPTIMAL : REMAT_STRATEGY_ALL;
    if (o->host_budget && (o->strategy != REMAT_STRATEGY_OPTIMAL || !o->budget))
        return remat__err(REMAT_INVALID, "a host budget (offload) is planned by the optimal strategy within a "
                                         "budget: give a budget, and strategy optimal or auto");
    if (o->host_budget && !s->be->offload)
        return remat__err(REMAT_UNSUPPORTED, "the %s backend cannot offload to host memory",
                          remat_device_str(o->device));
    return REMAT_OK;
}

static remat_status create(remat_session **out, const remat_graph *g, remat_node loss, const remat_session_opts *o) {
    if (g->status != REMAT_OK) return remat__err(g->status, "the graph has an error: %s", g->error);
    if (loss < 0 || loss >= g->n) return remat__err(REMAT_INVALID, "loss node %d does not exist", (int)loss);
    if (g->nodes[loss].shape.ndim != 0 || g->nodes[loss].dtype != REMAT_F32)
        return remat__err(REMAT_SHAPE, "the loss must be a float32 scalar; node %d (%s) is not", (int)loss,
                          remat__ops[g->nodes[loss].op]->name);
    remat_session_opts opts;
    remat_session_opts_default(&opts);
    if (o) opts = *o;
    const remat__backend *be = remat__backend_of(opts.device);
    if (!be)
        return remat__err(REMAT_UNSUPPORTED, "device '%s' is not built into this libremat",
                          remat_device_str(opts.device));
    /* plan-only for a device that is not here: planned without it */
    int absent = remat_device_available(opts.device) != REMAT_OK;
    if (absent && !opts.plan_only) return remat__err(REMAT_UNSUPPORTED, "%s", remat_last_error());
    remat_status st = REMAT_OK;
    remat_session *s = calloc(1, sizeof *s);
    if (!s) return remat__err(REMAT_NOMEM, "out of memory creating a session");
    s->g = g;
    s->loss = loss;
    s->opts = opts;
    s->be = be;
    remat__alloc_init(&s->alloc);
    if (!absent) st = be->create(&s->dev, &s->opts, g);
    if (st == REMAT_OK) {
        remat__pool *pool = be->pool(s->dev);
        s->opts.threads = pool ? remat__pool_size(pool) : 1;
        st = remat__prog_init(&s->prog, g, s->opts.threads, s->opts.device, s->dev);
    }
    if (st == REMAT_OK && s->opts.precision != REMAT_PRECISION_FP32 && !be->convert)
        st = remat__err(REMAT_UNSUPPORTED,
                        "precision %s does not run on the %s in this build (its backend has no "
                        "bf16 conversions yet): use --precision fp32 there, or the CPU",
                        remat_precision_str(s->opts.precision), remat_device_str(s->opts.device));
    if (st == REMAT_OK) st = remat__prog_set_precision(&s->prog, s->opts.precision);
    const remat_cost_model *cm = s->opts.cost_model;
    if (st == REMAT_OK && cm) st = remat__cost_model_check(cm, "the session's cost model", REMAT_INVALID);
    if (st == REMAT_OK && cm && cm->calibrated &&
        (cm->device != s->opts.device || (cm->device == REMAT_DEVICE_CPU && cm->threads != s->opts.threads)))
        st = remat__err(REMAT_INVALID,
                        "the cost model was measured on the %s with %d threads, but this session runs "
                        "on the %s with %d: measure it again (remat calibrate --threads %d) or plan in FLOPs "
                        "without one",
                        remat_device_str(cm->device), cm->threads, remat_device_str(s->opts.device), s->opts.threads,
                        s->opts.threads);
    if (st == REMAT_OK && cm) remat__prog_set_cost(&s->prog, cm);
    s->prog.recompute_once = s->opts.recompute_once;
    s->prog.no_split = s->opts.no_split;
    s->prog.grads_resident = s->opts.grads_resident;
    s->opts.cost_model = NULL; /* copied: the caller's may go away */
    if (st == REMAT_OK) st = alloc_tables(s);
    if (st == REMAT_OK) st = resolve_strategy(s);
    if (st == REMAT_OK) st = check_used(s);
    if (st == REMAT_OK) st = alloc_params(s);
    if (st == REMAT_OK) st = remat__dp_init(s);       /* its block counts in the plan's budget */
    if (st == REMAT_OK) st = remat__prefetch_init(s); /* so does this one */
    if (st == REMAT_OK) st = framework_comm(s);       /* and this one */
    if (st == REMAT_OK && s->opts.optim) st = remat__optim_install(s, s->opts.optim);
    s->opts.optim = NULL; /* copied: the caller's may go away */
    if (st == REMAT_OK) st = remat__session_plan_train(s);
    if (st != REMAT_OK) {
        remat_session_destroy(s);
        return st;
    }
    *out = s;
    return REMAT_OK;
}

remat_status remat_session_create(remat_session **out, const remat_graph *g, remat_node loss,
                                  const remat_session_opts *o) {
    if (!out) return remat__err(REMAT_INVALID, "remat_session_create: out is NULL");
    *out = NULL;
    remat_session *s = NULL;
    remat_status st = g ? create(&s, g, loss, o) : remat__err(REMAT_INVALID, "remat_session_create: the graph is NULL");
    /* With several ranks, every one ends up here whatever failed, and
     * agrees: a rank's failure is every rank's, named; then the plans'
     * hashes are compared. */
    if (s) st = remat__dp_agree_plan(s, st);
    else if (o && o->comm) st = remat_comm_agree(o->comm, st);
    if (st != REMAT_OK) {
        remat_session_destroy(s);
        return st;
    }
    *out = s;
    return REMAT_OK;
}

/* Bytes counted for the tensors of a block. */
static size_t block_counted(const remat_session *s, int grads) {
    size_t b = 0;
    for (int i = 0; i < s->n_params; i++)
        if (!grads || remat__trainable(s, i)) b += remat__out_bytes(&s->g->nodes[s->params[i].node]);
    return b;
}

void remat_session_destroy(remat_session *s) {
    if (!s) return;
    if (s->dev) {
        s->be->sync(s->dev);
        remat__optim_state_free(s);
        remat__block_free(s, REMAT__BLK_GRAD, REMAT_MEM_GRAD, block_counted(s, 1));
        remat__block_free(s, REMAT__BLK_PARAM, REMAT_MEM_PARAM, block_counted(s, 0));
        remat__dp_free(s);
        remat__prefetch_free(s);
        remat__exec_release(s);
        s->be->destroy(s->dev);
    } else {
        remat__prefetch_free(s); /* a plan-only session's counted block and slots */
    }
    remat__planned_free(&s->train);
    remat__planned_free(&s->fwd[0]);
    remat__planned_free(&s->fwd[1]);
    remat__prog_free(&s->prog);
    free(s->pindex), free(s->bound), free(s->vals), free(s->vev), free(s->hvals), free(s->hev), free(s->copy_stamp),
        free(s->params), free(s->prof_node);
    free(s);
}

remat_status remat_session_bind(remat_session *s, remat_node input, const void *data) {
    if (input < 0 || input >= s->g->n || s->g->nodes[input].leaf != REMAT__LEAF_INPUT)
        return remat__err(REMAT_INVALID, "node %d is not an input", (int)input);
    s->bound[input] = data;
    return REMAT_OK;
}

const void *remat_session_binding(const remat_session *s, remat_node input) {
    if (input < 0 || input >= s->g->n || s->g->nodes[input].leaf != REMAT__LEAF_INPUT) return NULL;
    return s->bound[input];
}

remat_status remat_session_set_optimizer(remat_session *s, const remat_optim_opts *o) {
    if (!o) return remat__err(REMAT_INVALID, "remat_session_set_optimizer: options are NULL");
    remat_status st = remat__optim_install(s, o);
    if (st == REMAT_OK) st = remat__session_plan_train(s);
    st = remat__dp_agree_plan(s, st); /* several ranks: every one's plan, and the same */
    if (st != REMAT_OK) {
        remat__optim_state_free(s);
        s->has_optim = 0;
    }
    return st;
}

remat_status remat_session_step(remat_session *s, float *loss) {
    remat_status st = remat__session_runnable(s, "remat_session_step");
    if (st != REMAT_OK) return st;
    if (s->dp.active) return remat__dp_step(s, loss);
    st = remat__session_zero_grads(s);
    if (st != REMAT_OK) return st;
    remat__alloc_reset_peaks(&s->alloc);
    float l = NAN;
    st = remat__exec(s, &s->train, -1, &l, NULL);
    if (loss) *loss = l;
    return st;
}

remat_status remat_session_forward(remat_session *s, int train, float *loss, remat_node fetch, float *out) {
    remat_status rs = remat__session_runnable(s, "remat_session_forward");
    if (rs != REMAT_OK) return rs;
    train = train ? 1 : 0;
    if (fetch != REMAT_NONE && (fetch < 0 || fetch >= s->g->n || remat__is_resident(&s->g->nodes[fetch])))
        return remat__err(REMAT_INVALID, "fetch node %d is not a computed node", (int)fetch);
    if (fetch != REMAT_NONE && !out) return remat__err(REMAT_INVALID, "fetch given without an output buffer");
    remat__planned *pl = &s->fwd[train];
    if (!pl->valid || s->fwd_fetch[train] != fetch) {
        remat__planned_free(pl);
        remat_status st = remat__schedule_build(&s->prog, s->loss, fetch, train, 0, NULL, &pl->sc);
        if (st == REMAT_OK) st = remat__memplan_make(&s->prog, &pl->sc, &pl->mem);
        if (st != REMAT_OK) {
            remat__planned_free(pl);
            return st;
        }
        pl->valid = 1;
        s->fwd_fetch[train] = fetch;
    }
    remat__alloc_reset_peaks(&s->alloc);
    float l = NAN;
    remat_status st = remat__exec(s, pl, -1, &l, out);
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
    if (s->opts.device == REMAT_DEVICE_CPU) { /* host memory: the caller may use it directly */
        out->data = p->data;
        out->grad = p->grad;
    }
    return REMAT_OK;
}

remat_status remat_session_read_param(remat_session *s, int i, remat_param_part part, float *dst) {
    remat_status rs = remat__session_runnable(s, "remat_session_read_param");
    if (rs != REMAT_OK) return rs;
    if (i < 0 || i >= s->n_params)
        return remat__err(REMAT_INVALID, "parameter index %d is out of range 0..%d", i, s->n_params - 1);
    const remat__pslot *p = &s->params[i];
    const float *src = part == REMAT_PARAM_GRAD ? p->grad : p->data;
    if (!src) return remat__err(REMAT_INVALID, "'%s' is a buffer: it has no gradient", s->g->nodes[p->node].name);
    remat_status st = s->be->download(s->dev, dst, src, remat__out_bytes(&s->g->nodes[p->node]));
    remat_status sy = s->be->sync(s->dev);
    return st != REMAT_OK ? st : sy;
}

remat_status remat_session_write_param(remat_session *s, int i, const float *src) {
    remat_status rs = remat__session_runnable(s, "remat_session_write_param");
    if (rs != REMAT_OK) return rs;
    if (i < 0 || i >= s->n_params)
        return remat__err(REMAT_INVALID, "parameter index %d is out of range 0..%d", i, s->n_params - 1);
    const remat__pslot *p = &s->params[i];
    remat_status st = s->be->upload(s->dev, p->data, src, remat__out_bytes(&s->g->nodes[p->node]));
    remat_status sy = s->be->sync(s->dev);
    return st != REMAT_OK ? st : sy;
}

int remat_session_find_param(const remat_session *s, const char *name) {
    for (int i = 0; i < s->n_params; i++)
        if (strcmp(s->g->nodes[s->params[i].node].name, name) == 0) return i;
    return -1;
}

void remat_session_mem(const remat_session *s, remat_mem_stats *out) { *out = s->alloc.st; }

size_t remat_session_held_bytes(const remat_session *s) { return s->arena_bytes + remat__session_blocks_bytes(s); }

size_t remat_session_saved_bytes(const remat_session *s, remat_node n) {
    size_t b = 0;
    for (int i = 0; i < s->train.sc.n; i++) {
        const remat__instr *in = &s->train.sc.ins[i];
        if (in->kind != REMAT__I_FWD || in->node != n) continue;
        if (in->cat == REMAT_MEM_ACT) b += remat__value_bytes(&s->prog, REMAT__VAL(n, REMAT__V_OUT));
        if (in->aux_cat == REMAT_MEM_ACT) b += remat__value_bytes(&s->prog, REMAT__VAL(n, REMAT__V_AUX));
    }
    return b;
}

int remat_session_value_dtype(const remat_session *s, remat_node n) {
    return n >= 0 && n < s->g->n ? (int)remat__val_dtype(&s->prog, n) : -1;
}

int64_t remat_session_step_index(const remat_session *s) { return s->step; }

void remat_session_set_profiling(remat_session *s, int on) {
    s->profiling = on != 0;
    memset(s->prof_s, 0, sizeof s->prof_s);
    memset(s->prof_n, 0, sizeof s->prof_n);
    free(s->prof_node);
    /* per node too when it can be had (without, the per-op sums remain) */
    s->prof_node = on ? calloc(REMAT__PROF_NODE * (size_t)s->g->n + 1, sizeof *s->prof_node) : NULL;
}

int remat_session_profile(const remat_session *s, remat_profile_row *rows, int cap) {
    static const char *const kinds[REMAT__PROF_KINDS] = {"forward", "recompute", "backward",
                                                         "free",    "copy out",  "copy in"};
    int n = 0;
    for (int op = 0; op < REMAT__N_OPS; op++)
        for (int k = 0; k < REMAT__PROF_KINDS; k++) {
            if (!s->prof_n[op][k]) continue;
            if (n < cap)
                rows[n] = (remat_profile_row){remat__ops[op]->name, kinds[k], s->prof_s[op][k], s->prof_n[op][k]};
            n++;
        }
    return n;
}

remat_status remat_session_predict(const remat_session *s, remat_mem_stats *out) {
    remat_mem_stats start = s->alloc.st;
    remat__memplan_peaks(&s->train.mem, &start, out);
    return REMAT_OK;
}

const remat_graph *remat_session_graph(const remat_session *s) { return s->g; }

remat_status remat_session_plan(const remat_session *s, remat_plan_summary *out) {
    remat_mem_stats start = s->alloc.st;
    remat_status st = remat__schedule_summary(&s->prog, &s->train, &start, remat__session_blocks_bytes(s), out);
    out->strategy = s->opts.strategy;
    out->estimated_nodes = s->prog.estimated;
    out->bound_bytes = s->least;
    const remat_cost_model *cm = &s->prog.cost;
    if (st == REMAT_OK && cm->calibrated && s->has_optim)
        out->update_seconds =
            cm->update_s_per_param[s->optim.kind == REMAT_OPTIM_ADAMW] * (double)remat__session_trainable_numel(s);
    /* Boundaries: nodes whose output a recomputation starts from (an input
     * of a recomputed node that is itself never recomputed), whatever
     * planner made the schedule. */
    const remat_graph *g = s->g;
    uint8_t *flag = calloc((size_t)g->n + 1, 1); /* 1 recomputed, 2 counted */
    if (!flag) return st != REMAT_OK ? st : remat__err(REMAT_NOMEM, "out of memory summarizing a plan");
    for (int i = 0; i < s->train.sc.n; i++) {
        const remat__instr *in = &s->train.sc.ins[i];
        if (in->kind == REMAT__I_FWD && !in->first) flag[in->node] |= 1;
    }
    for (int i = 0; i < s->train.sc.n; i++) {
        const remat__instr *in = &s->train.sc.ins[i];
        if (in->kind != REMAT__I_FWD || in->first) continue;
        const remat__node *n = &g->nodes[in->node];
        for (int j = 0; j < n->n_in; j++) {
            int32_t x = n->in[j];
            if (g->nodes[x].leaf != REMAT__LEAF_NONE || flag[x]) continue;
            flag[x] = 2;
            out->kept_boundaries++;
        }
    }
    free(flag);
    return st;
}

int64_t remat_session_schedule_length(const remat_session *s) { return s->train.sc.n; }

remat_status remat_session_schedule_instr(const remat_session *s, int64_t i, remat_instr_info *out) {
    if (i < 0 || i >= s->train.sc.n) return remat__err(REMAT_INVALID, "instruction %lld is out of range", (long long)i);
    const remat__instr *in = &s->train.sc.ins[i];
    memset(out, 0, sizeof *out);
    out->node = in->node;
    out->op = remat__ops[s->g->nodes[in->node].op]->name;
    out->what = "";
    if (in->kind == REMAT__I_FREE) {
        static const char *const what[] = {"output", "aux", "gradient"};
        out->kind = "free";
        out->what = what[REMAT__VAL_KIND(in->value)];
    } else if (in->kind == REMAT__I_REDUCE) {
        out->kind = "reduce";
        out->what = "gradients"; /* of the bucket that starts at parameter `node` */
    } else if (in->kind == REMAT__I_OUT || in->kind == REMAT__I_IN) {
        static const char *const what[] = {"output", "aux", "gradient"};
        out->kind = in->kind == REMAT__I_OUT ? "copy out" : "copy in";
        out->what = what[REMAT__VAL_KIND(in->value)];
    } else if (in->kind == REMAT__I_BWD) {
        out->kind = "backward";
    } else {
        out->kind = in->first ? "forward" : "recompute";
        out->activation = in->cat == REMAT_MEM_ACT;
    }
    return REMAT_OK;
}
