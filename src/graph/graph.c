/* graph.c: the graph builder.
 *
 * A graph is an array of nodes in creation order, which is a topological
 * order: a node's inputs always exist before it. Builder calls validate
 * through the op's shape rule; the first failure is kept as the graph's
 * status and message, and calls given REMAT_NONE pass it on silently, so a
 * whole model can be built before one check.
 */
#include "../remat-impl.h"

#include <stdarg.h>

#include <stdio.h>
#include <stdlib.h>

remat_status remat_graph_create(remat_graph **out) {
    if (!out) return remat__err(REMAT_INVALID, "remat_graph_create: out is NULL");
    remat_graph *g = calloc(1, sizeof *g);
    if (!g) return remat__err(REMAT_NOMEM, "out of memory creating a graph");
    *out = g;
    return REMAT_OK;
}

void remat_graph_destroy(remat_graph *g) {
    if (!g) return;
    for (int i = 0; i < g->n; i++) free(g->nodes[i].name);
    free(g->nodes);
    free(g->traced);
    free(g);
}

remat_status remat_graph_status(const remat_graph *g) { return g->status; }

const char *remat_graph_error(const remat_graph *g) { return g->status == REMAT_OK ? "no error" : g->error; }

static remat_node fail(remat_graph *g, remat_status s) {
    if (g->status == REMAT_OK) {
        g->status = s;
        snprintf(g->error, sizeof g->error, "%s", remat_last_error());
    } else {
        /* keep the first error visible as the thread's last error too */
        remat__err(g->status, "%s", g->error);
    }
    return REMAT_NONE;
}

remat_node remat__graph_add(remat_graph *g, const remat__node *proto) {
    if (!g) return REMAT_NONE;
    if (g->status != REMAT_OK) return fail(g, g->status);
    const remat__op *op = remat__ops[proto->op];
    if (proto->n_in < op->min_in || proto->n_in > op->max_in)
        return fail(g, remat__err(REMAT_INVALID, "%s takes %d to %d inputs, got %d", op->name, op->min_in, op->max_in,
                                  proto->n_in));
    for (int i = 0; i < proto->n_in; i++) {
        if (proto->in[i] == REMAT_NONE)
            return fail(g, remat__err(REMAT_INVALID, "%s: input %d is REMAT_NONE", op->name, i));
        if (proto->in[i] < 0 || proto->in[i] >= g->n)
            return fail(g, remat__err(REMAT_INVALID, "%s: input %d is node %d, which does not exist", op->name, i,
                                      (int)proto->in[i]));
    }
    if (proto->name) {
        for (int i = 0; i < g->n; i++)
            if (g->nodes[i].name && g->nodes[i].leaf != REMAT__LEAF_NONE && proto->leaf != REMAT__LEAF_NONE &&
                strcmp(g->nodes[i].name, proto->name) == 0)
                return fail(g, remat__err(REMAT_INVALID, "the name '%s' is used twice", proto->name));
    }
    if (g->n == g->cap) {
        int cap = g->cap ? 2 * g->cap : 64;
        remat__node *nodes = realloc(g->nodes, (size_t)cap * sizeof *nodes);
        if (!nodes) return fail(g, remat__err(REMAT_NOMEM, "out of memory growing the graph"));
        g->nodes = nodes;
        g->cap = cap;
    }
    remat__node n = *proto;
    n.name = NULL;
    if (proto->op != REMAT__OP_TRACED) n.saves = op->saves; /* a traced op brings its own */
    if (op->shape) {
        n.name = (char *)proto->name; /* borrowed for messages only */
        remat_status s = op->shape(g, &n);
        n.name = NULL;
        if (s != REMAT_OK) return fail(g, s);
    }
    if (proto->name) {
        n.name = strdup(proto->name);
        if (!n.name) return fail(g, remat__err(REMAT_NOMEM, "out of memory"));
    }
    g->nodes[g->n] = n;
    return g->n++;
}

/* ---------------------------------------------------------------- leaves */

static remat_node leaf(remat_graph *g, int op, remat__leaf kind, const char *name, remat_dtype dtype, int ndim,
                       const int64_t *dims, remat_init init, float a) {
    if (!g) return REMAT_NONE;
    if (g->status != REMAT_OK) return fail(g, g->status);
    if (!name || !*name) return fail(g, remat__err(REMAT_INVALID, "%s needs a name", remat__ops[op]->name));
    if (ndim < 0 || ndim > REMAT_MAX_DIMS || (ndim > 0 && !dims))
        return fail(g, remat__err(REMAT_INVALID, "%s '%s': %d dimensions (1..%d allowed)", remat__ops[op]->name, name,
                                  ndim, REMAT_MAX_DIMS));
    remat__node n = {.op = op, .leaf = kind, .name = (char *)name, .dtype = dtype, .init = init, .init_a = a};
    n.shape.ndim = ndim;
    for (int i = 0; i < ndim; i++) {
        if (dims[i] <= 0)
            return fail(g, remat__err(REMAT_SHAPE, "%s '%s': dimension %d is %lld, must be positive",
                                      remat__ops[op]->name, name, i, (long long)dims[i]));
        n.shape.d[i] = dims[i];
    }
    return remat__graph_add(g, &n);
}

remat_node remat_input(remat_graph *g, const char *name, remat_dtype dtype, int ndim, const int64_t *dims) {
    if (dtype != REMAT_F32 && dtype != REMAT_I32)
        return g ? fail(g, remat__err(REMAT_INVALID, "input '%s': unknown dtype %d", name ? name : "", (int)dtype))
                 : REMAT_NONE;
    return leaf(g, REMAT__OP_INPUT, REMAT__LEAF_INPUT, name, dtype, ndim, dims, REMAT_INIT_ZEROS, 0);
}

remat_node remat_param(remat_graph *g, const char *name, int ndim, const int64_t *dims, remat_init init, float a) {
    return leaf(g, REMAT__OP_PARAM, REMAT__LEAF_PARAM, name, REMAT_F32, ndim, dims, init, a);
}

remat_node remat_buffer(remat_graph *g, const char *name, int ndim, const int64_t *dims, remat_init init) {
    return leaf(g, REMAT__OP_BUFFER, REMAT__LEAF_BUFFER, name, REMAT_F32, ndim, dims, init, 0);
}

/* ------------------------------------------------------------- op nodes */

static remat_node op_node(remat_graph *g, int op, int n_in, const remat_node *in) {
    if (!g) return REMAT_NONE;
    remat__node n = {.op = op, .n_in = n_in};
    for (int i = 0; i < n_in && i < REMAT__MAX_IN; i++) n.in[i] = in[i];
    if (n_in > REMAT__MAX_IN) n.n_in = REMAT__MAX_IN + 1; /* rejected by the arity check */
    return remat__graph_add(g, &n);
}

remat_node remat_linear_op(remat_graph *g, remat_node x, remat_node w, remat_node b) {
    remat_node in[3] = {x, w, b};
    return op_node(g, REMAT__OP_LINEAR, b == REMAT_NONE ? 2 : 3, in);
}

remat_node remat_conv2d_op(remat_graph *g, remat_node x, remat_node w, remat_node b, int stride, int padding) {
    if (!g) return REMAT_NONE;
    remat__node n = {
        .op = REMAT__OP_CONV2D, .n_in = b == REMAT_NONE ? 2 : 3, .in = {x, w, b}, .iattr = {stride, padding}};
    return remat__graph_add(g, &n);
}

remat_node remat_batchnorm2d_op(remat_graph *g, remat_node x, remat_node weight, remat_node bias,
                                remat_node running_mean, remat_node running_var, float eps, float momentum) {
    if (!g) return REMAT_NONE;
    remat__node n = {.op = REMAT__OP_BATCHNORM2D,
                     .n_in = 5,
                     .in = {x, weight, bias, running_mean, running_var},
                     .fattr = {eps, momentum}};
    return remat__graph_add(g, &n);
}

remat_node remat_relu(remat_graph *g, remat_node x) { return op_node(g, REMAT__OP_RELU, 1, &x); }

static remat_node pool(remat_graph *g, int op, remat_node x, int kernel, int stride, int padding) {
    if (!g) return REMAT_NONE;
    remat__node n = {.op = op, .n_in = 1, .in = {x}, .iattr = {kernel, stride, padding}};
    return remat__graph_add(g, &n);
}

remat_node remat_maxpool2d(remat_graph *g, remat_node x, int kernel, int stride, int padding) {
    return pool(g, REMAT__OP_MAXPOOL2D, x, kernel, stride, padding);
}

remat_node remat_avgpool2d(remat_graph *g, remat_node x, int kernel, int stride, int padding) {
    return pool(g, REMAT__OP_AVGPOOL2D, x, kernel, stride, padding);
}

remat_node remat_global_avgpool(remat_graph *g, remat_node x) { return op_node(g, REMAT__OP_GLOBAL_AVGPOOL, 1, &x); }

remat_node remat_dropout(remat_graph *g, remat_node x, float p) {
    if (!g) return REMAT_NONE;
    remat__node n = {.op = REMAT__OP_DROPOUT, .n_in = 1, .in = {x}, .fattr = {p}};
    return remat__graph_add(g, &n);
}

remat_node remat_reshape(remat_graph *g, remat_node x, int ndim, const int64_t *dims) {
    if (!g) return REMAT_NONE;
    if (ndim < 1 || ndim > REMAT_MAX_DIMS || !dims)
        return fail(g, remat__err(REMAT_INVALID, "reshape: %d dimensions (1..%d allowed)", ndim, REMAT_MAX_DIMS));
    /* The target shape travels in iattr: [0] = ndim, [1..4] = dims. */
    remat__node n = {.op = REMAT__OP_RESHAPE, .n_in = 1, .in = {x}, .iattr = {ndim}};
    for (int i = 0; i < ndim; i++) n.iattr[1 + i] = dims[i];
    return remat__graph_add(g, &n);
}

remat_node remat_flatten(remat_graph *g, remat_node x) {
    if (!g) return REMAT_NONE;
    if (g->status != REMAT_OK) return fail(g, g->status);
    if (x < 0 || x >= g->n)
        return fail(g, remat__err(REMAT_INVALID, "flatten: input is node %d, which does not exist", (int)x));
    const remat__shape *s = &g->nodes[x].shape;
    int64_t rest = 1;
    for (int i = 1; i < s->ndim; i++) rest *= s->d[i];
    int64_t dims[2] = {s->ndim ? s->d[0] : 1, rest};
    return remat_reshape(g, x, 2, dims);
}

remat_node remat_add(remat_graph *g, remat_node a, remat_node b) {
    remat_node in[2] = {a, b};
    return op_node(g, REMAT__OP_ADD, 2, in);
}

remat_node remat_mul(remat_graph *g, remat_node a, remat_node b) {
    remat_node in[2] = {a, b};
    return op_node(g, REMAT__OP_MUL, 2, in);
}

remat_node remat_concat(remat_graph *g, int n, const remat_node *xs) {
    if (!g) return REMAT_NONE;
    if (n < 1 || !xs) return fail(g, remat__err(REMAT_INVALID, "concat: needs at least one input"));
    return op_node(g, REMAT__OP_CONCAT, n, xs);
}

remat_node remat_cross_entropy(remat_graph *g, remat_node logits, remat_node labels) {
    remat_node in[2] = {logits, labels};
    return op_node(g, REMAT__OP_CROSS_ENTROPY, 2, in);
}

remat_node remat_mse(remat_graph *g, remat_node pred, remat_node target) {
    remat_node in[2] = {pred, target};
    return op_node(g, REMAT__OP_MSE, 2, in);
}

remat_node remat_gelu(remat_graph *g, remat_node x, int tanh_approx) {
    if (!g) return REMAT_NONE;
    remat__node n = {.op = REMAT__OP_GELU, .n_in = 1, .in = {x}, .iattr = {tanh_approx ? 1 : 0}};
    return remat__graph_add(g, &n);
}

remat_node remat_layernorm_op(remat_graph *g, remat_node x, remat_node w, remat_node b, float eps) {
    if (!g) return REMAT_NONE;
    remat__node n = {.op = REMAT__OP_LAYERNORM, .n_in = 3, .in = {x, w, b}, .fattr = {eps}};
    return remat__graph_add(g, &n);
}

remat_node remat_softmax(remat_graph *g, remat_node x) {
    if (!g) return REMAT_NONE;
    remat__node n = {.op = REMAT__OP_SOFTMAX, .n_in = 1, .in = {x}};
    return remat__graph_add(g, &n);
}

remat_node remat_attention(remat_graph *g, remat_node qkv, int heads) {
    if (!g) return REMAT_NONE;
    remat__node n = {.op = REMAT__OP_ATTENTION, .n_in = 1, .in = {qkv}, .iattr = {heads}};
    return remat__graph_add(g, &n);
}

remat_node remat_permute(remat_graph *g, remat_node x, int ndim, const int *perm) {
    if (!g) return REMAT_NONE;
    remat__node n = {.op = REMAT__OP_PERMUTE, .n_in = 1, .in = {x}};
    /* A permutation of the wrong length becomes all -1: the shape rule
     * names the op and the input's shape. */
    for (int i = 0; i < REMAT_MAX_DIMS; i++) n.iattr[i] = i < ndim && perm ? perm[i] : -1;
    if (x >= 0 && x < g->n && ndim != g->nodes[x].shape.ndim)
        for (int i = 0; i < REMAT_MAX_DIMS; i++) n.iattr[i] = -1;
    return remat__graph_add(g, &n);
}

remat_node remat_transpose(remat_graph *g, remat_node x, int d0, int d1) {
    if (!g) return REMAT_NONE;
    int perm[REMAT_MAX_DIMS] = {0, 1, 2, 3};
    int nd = x >= 0 && x < g->n ? g->nodes[x].shape.ndim : 0;
    if (d0 < 0 || d0 >= nd || d1 < 0 || d1 >= nd) {
        perm[0] = -1; /* rejected by the shape rule, which names the shapes */
    } else {
        perm[d0] = d1;
        perm[d1] = d0;
    }
    return remat_permute(g, x, nd, perm);
}

remat_node remat_slice(remat_graph *g, remat_node x, int dim, int64_t start, int64_t len) {
    if (!g) return REMAT_NONE;
    remat__node n = {.op = REMAT__OP_SLICE, .n_in = 1, .in = {x}, .iattr = {dim, start, len}};
    return remat__graph_add(g, &n);
}

remat_node remat_add_broadcast(remat_graph *g, remat_node x, remat_node b) {
    if (!g) return REMAT_NONE;
    remat__node n = {.op = REMAT__OP_ADD_BROADCAST, .n_in = 2, .in = {x, b}};
    return remat__graph_add(g, &n);
}

remat_node remat_embedding_op(remat_graph *g, remat_node ids, remat_node w) {
    if (!g) return REMAT_NONE;
    remat__node n = {.op = REMAT__OP_EMBEDDING, .n_in = 2, .in = {ids, w}};
    return remat__graph_add(g, &n);
}

/* --------------------------------------------------------- introspection */

int remat_graph_node_count(const remat_graph *g) { return g->n; }

int remat_node_shape(const remat_graph *g, remat_node n, int64_t *dims) {
    if (n < 0 || n >= g->n) return -1;
    const remat__shape *s = &g->nodes[n].shape;
    if (dims)
        for (int i = 0; i < s->ndim; i++) dims[i] = s->d[i];
    return s->ndim;
}

const char *remat_node_op(const remat_graph *g, remat_node n) {
    if (n < 0 || n >= g->n) return "";
    return remat__ops[g->nodes[n].op]->name;
}

remat_status remat_graph_fail(remat_graph *g, remat_status st, const char *fmt, ...) {
    if (!g) return st;
    if (g->status == REMAT_OK) {
        char msg[sizeof g->error];
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(msg, sizeof msg, fmt, ap);
        va_end(ap);
        remat__err(st, "%s", msg);
    }
    fail(g, st);
    return g->status;
}

remat_node remat_graph_find(const remat_graph *g, const char *name) {
    if (!g || !name) return REMAT_NONE;
    for (int i = 0; i < g->n; i++)
        if (g->nodes[i].name && strcmp(g->nodes[i].name, name) == 0) return i;
    return REMAT_NONE;
}

remat_status remat_node_set_name(remat_graph *g, remat_node n, const char *name) {
    if (!g || n < 0 || n >= g->n)
        return remat__err(REMAT_INVALID, "remat_node_set_name: node %d does not exist", (int)n);
    if (g->nodes[n].leaf != REMAT__LEAF_NONE)
        return remat__err(REMAT_INVALID, "remat_node_set_name: node %d is a leaf, named when created", (int)n);
    char *c = name ? strdup(name) : NULL;
    if (name && !c) return remat__err(REMAT_NOMEM, "out of memory naming node %d", (int)n);
    free(g->nodes[n].name);
    g->nodes[n].name = c;
    return REMAT_OK;
}

const char *remat_node_name(const remat_graph *g, remat_node n) {
    if (n < 0 || n >= g->n || !g->nodes[n].name) return "";
    return g->nodes[n].name;
}

int remat_node_dtype(const remat_graph *g, remat_node n) {
    if (!g || n < 0 || n >= g->n) return -1;
    return (int)g->nodes[n].dtype;
}

static remat_node mark(remat_graph *g, remat_node x, int depth) {
    if (x < 0 || x >= g->n) return fail(g, remat__err(REMAT_INVALID, "checkpoint: node %d does not exist", (int)x));
    if (depth > 200) return fail(g, remat__err(REMAT_INVALID, "checkpoint scopes nest deeper than 200"));
    uint8_t c = (uint8_t)(depth + 1);
    if (!g->nodes[x].checkpoint || c < g->nodes[x].checkpoint) g->nodes[x].checkpoint = c;
    return x;
}

remat_node remat_checkpoint(remat_graph *g, remat_node x) {
    if (!g) return REMAT_NONE;
    if (g->status != REMAT_OK) return fail(g, g->status);
    return mark(g, x, g->ckpt_depth);
}

remat_status remat_checkpoint_begin(remat_graph *g) {
    if (!g) return remat__err(REMAT_INVALID, "remat_checkpoint_begin: graph is NULL");
    g->ckpt_depth++;
    return REMAT_OK;
}

remat_node remat_checkpoint_end(remat_graph *g, remat_node x) {
    if (!g) return REMAT_NONE;
    if (g->status != REMAT_OK) return fail(g, g->status);
    if (g->ckpt_depth == 0)
        return fail(g, remat__err(REMAT_INVALID, "remat_checkpoint_end without remat_checkpoint_begin"));
    g->ckpt_depth--;
    return mark(g, x, g->ckpt_depth);
}
