/* traced.c: an op traced from another framework.
 *
 * A graph file (graph/graph_json.c) describes a training step that some
 * other framework runs: PyTorch's aten ops, each with the bytes of its
 * output, the values its backward reads, its transient bytes and its
 * costs. Each becomes a node of this op, so that the planners, the
 * schedule builder and the memory plan see it exactly as they see an op
 * of the table: its output is a value of its recorded bytes (dtype
 * REMAT_U8, shape (bytes)), its save mask is the node's own, and its aux,
 * workspace and FLOPs come from the graph's per-node record
 * (remat_graph.traced). It has no kernels: a session on such a graph can
 * only plan (plan_only); the framework that traced it runs the plan.
 */
#include "../remat-impl.h"

static const remat__traced *rec(const remat_graph *g, const remat__node *n) {
    return g->traced ? &g->traced[n - g->nodes] : NULL;
}

/* The reader sets the shape and dtype; this checks what it set. */
static remat_status traced_shape(const remat_graph *g, remat__node *n) {
    (void)g;
    int scalar = n->shape.ndim == 0 && n->dtype == REMAT_F32; /* the loss */
    if (!scalar && (n->shape.ndim != 1 || n->shape.d[0] < 0 || n->dtype != REMAT_U8))
        return remat__err(REMAT_INVALID, "traced op '%s': its value must be (bytes) of dtype u8",
                          n->name ? n->name : "");
    return REMAT_OK;
}

static size_t traced_aux(const remat_graph *g, const remat__node *n) {
    const remat__traced *t = rec(g, n);
    return t ? t->aux : 0;
}

static size_t traced_fwd_ws(const remat_graph *g, const remat__node *n, int nth) {
    (void)nth;
    const remat__traced *t = rec(g, n);
    return t ? t->ws[0] : 0;
}

static size_t traced_bwd_ws(const remat_graph *g, const remat__node *n, int nth) {
    (void)nth;
    const remat__traced *t = rec(g, n);
    return t ? t->ws[1] : 0;
}

/* FLOPs when the file's costs are FLOPs; otherwise 0 (the costs are
 * seconds, which remat__prog_set_cost takes as they are). */
static double traced_flops(const remat_graph *g, const remat__node *n) {
    const remat__traced *t = rec(g, n);
    return t && !g->traced_seconds ? t->cost[0] : 0.0;
}

const remat__op remat__op_traced = {
    .name = "traced",
    .min_in = 0,
    .max_in = REMAT__MAX_IN,
    .shape = traced_shape,
    .aux_bytes = traced_aux,
    .fwd_ws = traced_fwd_ws,
    .bwd_ws = traced_bwd_ws,
    .flops = traced_flops,
    .family = REMAT_FAMILY_POINTWISE,
};
