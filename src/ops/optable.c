/* optable.c: the op table, indexed by op id, made from REMAT__OP_LIST
 * (remat-impl.h). Each entry is defined once, in its op's file. Tests walk
 * this table, so an op added to the list is checked (finite differences,
 * shape errors, device kernels against the CPU's) without further ado.
 */
#include "../remat-impl.h"

const remat__op *const remat__ops[REMAT__N_OPS] = {
#define REMAT__OP_ENTRY(id, name) [REMAT__OP_##id] = &remat__op_##name,
    REMAT__OP_LIST(REMAT__OP_ENTRY)
#undef REMAT__OP_ENTRY
};

int remat__op_find(const char *name) {
    for (int i = 0; i < REMAT__N_OPS; i++)
        if (strcmp(remat__ops[i]->name, name) == 0) return i;
    return -1;
}

int remat__node_threads(const remat_graph *g, const remat__node *n, int pool) {
    /* Dispatching tiny ops to the pool costs more than it saves. An op's
     * work is its output's size, or for a loss (a scalar) its first
     * input's: a language model's logits are large. The choice depends on
     * the node only, so it is the same in every schedule. */
    int64_t work = remat__numel(&n->shape);
    if (n->leaf == REMAT__LEAF_NONE && (remat__ops[n->op]->flags & REMAT__OP_LOSS))
        work = remat__numel(&g->nodes[n->in[0]].shape);
    return work < 4096 ? 1 : pool;
}

const char *remat__node_label(const remat__node *n, char *buf, size_t cap) {
    const char *op = remat__ops[n->op]->name;
    if (n->name) snprintf(buf, cap, "%s '%s'", op, n->name);
    else snprintf(buf, cap, "%s", op);
    return buf;
}
