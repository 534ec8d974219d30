/* leaves.c: the op-table entries of graph leaves (inputs, parameters,
 * buffers). They have no kernels: the executor copies bound input data in,
 * and parameters and buffers live in the session for its whole life. Their
 * shape is given by the builder, so the shape rule only checks the dtype.
 */
#include "../remat-impl.h"

static remat_status leaf_shape(const remat_graph *g, remat__node *n) {
    (void)g;
    if (n->leaf != REMAT__LEAF_INPUT && n->dtype != REMAT_F32)
        return remat__err(REMAT_INVALID, "parameter '%s' must be float32", n->name ? n->name : "");
    return REMAT_OK;
}

const remat__op remat__op_input = {.name = "input", .shape = leaf_shape};
const remat__op remat__op_param = {.name = "param", .shape = leaf_shape};
const remat__op remat__op_buffer = {.name = "buffer", .shape = leaf_shape};
