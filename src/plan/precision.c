/* precision.c: the precision policy's plan (remat_precision).
 *
 * Under bf16 each computed value is stored in the dtype its op's rule
 * gives (remat__op.autocast): products store bf16, losses float32, the
 * other ops their first (or widest) float input's dtype. Kernels compute
 * in float32: a kernel that reads a bf16 value, or a product that reads
 * any float value (it sees the value rounded through bf16, a weight's bf16
 * copy as PyTorch's autocast makes it), reads a float32 copy made in its
 * workspace; a kernel whose value is bf16 writes a float32 buffer that is
 * rounded into it; an input gradient of a bf16 value, or any input
 * gradient of a product, is accumulated in a float32 buffer and then
 * rounded through bf16 into the gradient (PyTorch's bf16 gradient of the
 * value or of the bf16 copy). These buffers are workspace, so the plan
 * counts them; the layout is one function, read by the executor
 * (exec/views.c) and by the workspace sizes here. An elementwise op
 * (REMAT__OP_ELEMENTWISE: relu, dropout, add, mul, gelu, reshape) runs slice by
 * slice, and a plane-wise one (REMAT__OP_PLANEWISE: the poolings) a block
 * of planes at a time, so its views are one block long whatever its
 * tensors' size.
 */
#include "memplan.h"

#include <stdlib.h>
#include <string.h>

static int is_float(remat_dtype t) { return t == REMAT_F32 || t == REMAT_BF16; }

/* The dtype node u stores under bf16, from its inputs' (creation order is
 * topological, so theirs are set). */
static remat_dtype rule_dtype(const remat__prog *p, int32_t u) {
    const remat__node *n = &p->g->nodes[u];
    if (n->leaf != REMAT__LEAF_NONE || n->dtype != REMAT_F32) return n->dtype;
    int rule = remat__ops[n->op]->autocast;
    if (rule == REMAT__AC_LOW) return REMAT_BF16;
    if (rule != REMAT__AC_FIRST && rule != REMAT__AC_PROMOTE) return REMAT_F32;
    remat_dtype t = REMAT_BF16;
    for (int i = 0; i < n->n_in; i++) {
        remat_dtype d = (remat_dtype)p->dt[n->in[i]];
        if (!is_float(d)) continue;
        if (rule == REMAT__AC_FIRST) return d;
        if (d == REMAT_F32) t = REMAT_F32;
    }
    return t;
}

/* Does the kernel of node n see input i through a float32 copy, and is
 * its gradient rounded through bf16? Both when the input is bf16, or when
 * n is a product and the input is a float value. */
static int through_bf16(const remat__prog *p, const remat__node *n, int i) {
    remat_dtype d = remat__val_dtype(p, n->in[i]);
    if (d == REMAT_BF16) return 1;
    return p->dt && d == REMAT_F32 && remat__ops[n->op]->autocast == REMAT__AC_LOW;
}

/* Adds a float32 buffer of the numel elements to the layout. */
static int64_t buffer(remat__shim *s, size_t *at, int64_t numel) {
    int64_t off = (int64_t)*at;
    *at += remat__arena_rounded((size_t)numel * sizeof(float));
    s->any = 1;
    return off;
}

void remat__shim_layout(const remat__prog *p, int32_t u, int backward, remat__shim *s) {
    const remat_graph *g = p->g;
    const remat__node *n = &g->nodes[u];
    size_t at = 0;
    memset(s, 0, sizeof *s);
    s->out = s->dout = -1;
    for (int i = 0; i < REMAT__MAX_IN; i++) s->in[i] = s->din[i] = -1;
    if (!p->dt || n->leaf != REMAT__LEAF_NONE || p->native[u]) return;
    int out_bf16 = p->dt[u] == REMAT_BF16;
    int64_t numel = remat__numel(&n->shape);
    unsigned flags = remat__ops[n->op]->flags;
    int64_t units = numel; /* elements; a plane-wise op's: its input's planes */
    if ((flags & REMAT__OP_ELEMENTWISE) && numel > REMAT__SHIM_SLICE) s->slice = REMAT__SHIM_SLICE;
    if (flags & REMAT__OP_PLANEWISE) {
        const remat__shape *x = &g->nodes[n->in[0]].shape;
        int64_t plane = remat__numel(x) / (x->d[0] * x->d[1]), per = REMAT__SHIM_SLICE / plane;
        units = x->d[0] * x->d[1];
        s->planes = 1;
        s->slice = per < 1 ? 1 : per < units ? per : 0;
        if (!s->slice) s->planes = 0;
    }
#define LEN(x) (s->slice ? s->slice * ((x) / units) : (x)) /* a view's elements */
    for (int i = 0; i < n->n_in; i++) {
        const remat__node *src = &g->nodes[n->in[i]];
        int read = !backward || (n->saves & REMAT__SAVE_IN(i)) || remat__is_resident(src);
        if (read && through_bf16(p, n, i)) s->in[i] = buffer(s, &at, LEN(remat__numel(&src->shape)));
    }
    if (out_bf16 && (!backward || (n->saves & REMAT__SAVE_OUT))) s->out = buffer(s, &at, LEN(numel));
    if (backward && out_bf16) s->dout = buffer(s, &at, LEN(numel));
    for (int i = 0; i < n->n_in && backward; i++)
        if (remat__bwd_writes(p, n, i) && through_bf16(p, n, i))
            s->din[i] = buffer(s, &at, LEN(remat__numel(&g->nodes[n->in[i]].shape)));
#undef LEN
    s->kernel = at;
}

/* REMAT_CUDA_BF16=views runs every CUDA kernel on float32 views, as
 * before the CUDA backend had bf16 kernels, and =elementwise-views the
 * elementwise ops alone (REMAT__OP_ELEMENTWISE): what test_cuda compares
 * the native kernels against, bit for bit where they promise it. */
static int cuda_views_only(const remat__op *op, const remat__cuda_switches *sw) {
    return sw->views == REMAT__CUDA_VIEWS ||
           (sw->views == REMAT__CUDA_ELEMENTWISE_VIEWS && (op->flags & REMAT__OP_ELEMENTWISE));
}

/* Node u's kernels on its values in their stored dtypes, where its op has
 * such kernels for it on the device: their workspace replaces the float32
 * kernels' (and no views are laid out). On the CPU the op's bf16_ws says
 * so; on a device its device kernels' (remat__dev_kernels.bf16_ws), asked
 * with the device's context, or with NULL in a plan for a device that is
 * not here, where a node whose bytes depend on the device (asks_device)
 * is an estimate: remat__prog_init counted it in p->estimated already. */
static void native_kernels(remat__prog *p, int32_t u, const remat__cuda_switches *sw) {
    const remat__node *n = &p->g->nodes[u];
    const remat__op *op = remat__ops[n->op];
    size_t f, b;
    if (n->leaf != REMAT__LEAF_NONE) return;
    if (p->device == REMAT_DEVICE_CPU) {
        if (!op->bf16_ws || !op->bf16_ws(p->g, n, p->dt, remat__node_threads(p->g, n, p->nth), &f, &b)) return;
    } else {
        if (!op->cuda || !op->cuda->bf16_ws || cuda_views_only(op, sw)) return;
        if (!op->cuda->bf16_ws(p->dev, p->g, n, p->dt, &f, &b)) return;
    }
    p->native[u] = 1;
    p->ws[2 * (size_t)u] = f;
    p->ws[2 * (size_t)u + 1] = b;
}

remat_status remat__prog_set_precision(remat__prog *p, remat_precision precision) {
    const remat_graph *g = p->g;
    p->precision = precision;
    if (precision == REMAT_PRECISION_FP32) return REMAT_OK;
    if (precision != REMAT_PRECISION_BF16)
        return remat__err(REMAT_INVALID, "unknown precision %d (known: fp32, bf16)", (int)precision);
    remat__cuda_switches sw = {REMAT__CUDA_NATIVE, 0};
    remat_status st = p->device == REMAT_DEVICE_CPU ? REMAT_OK : remat__cuda_bf16_env(&sw);
    if (st != REMAT_OK) return st;
    if (g->traced)
        return remat__err(REMAT_UNSUPPORTED,
                          "a traced graph's values have its framework's dtypes: plan it in the "
                          "precision it was traced in (precision %s is for remat's own graphs)",
                          remat_precision_str(precision));
    p->dt = malloc((size_t)g->n + 1);
    p->native = calloc((size_t)g->n + 1, 1);
    if (!p->dt || !p->native) return remat__err(REMAT_NOMEM, "out of memory analysing the graph");
    for (int32_t u = 0; u < g->n; u++) {
        const remat__node *n = &g->nodes[u];
        if (n->leaf == REMAT__LEAF_NONE && !remat__ops[n->op]->autocast)
            return remat__err(REMAT_INTERNAL, "op '%s' has no rule under precision bf16", remat__ops[n->op]->name);
        p->dt[u] = (uint8_t)rule_dtype(p, u);
    }
    remat__prog_size_values(p);
    for (int32_t u = 0; u < g->n; u++) native_kernels(p, u, &sw);
    for (int32_t u = 0; u < g->n; u++)
        for (int b = 0; b < 2; b++) {
            remat__shim s;
            remat__shim_layout(p, u, b, &s);
            if (s.any) p->ws[2 * (size_t)u + b] += s.kernel;
        }
    return REMAT_OK;
}
