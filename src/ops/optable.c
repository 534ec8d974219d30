/* optable.c: the op table. Each entry is defined once, in its op's file;
 * this list gives every op its id. Tests walk this table, so an op added
 * here is checked (finite differences, shape errors) without further ado.
 */
#include "../remat-impl.h"

const remat__op *const remat__ops[REMAT__N_OPS] = {
    [REMAT__OP_INPUT] = &remat__op_input,
    [REMAT__OP_PARAM] = &remat__op_param,
    [REMAT__OP_BUFFER] = &remat__op_buffer,
    [REMAT__OP_LINEAR] = &remat__op_linear,
    [REMAT__OP_CONV2D] = &remat__op_conv2d,
    [REMAT__OP_BATCHNORM2D] = &remat__op_batchnorm2d,
    [REMAT__OP_RELU] = &remat__op_relu,
    [REMAT__OP_MAXPOOL2D] = &remat__op_maxpool2d,
    [REMAT__OP_AVGPOOL2D] = &remat__op_avgpool2d,
    [REMAT__OP_GLOBAL_AVGPOOL] = &remat__op_global_avgpool,
    [REMAT__OP_DROPOUT] = &remat__op_dropout,
    [REMAT__OP_RESHAPE] = &remat__op_reshape,
    [REMAT__OP_ADD] = &remat__op_add,
    [REMAT__OP_CONCAT] = &remat__op_concat,
    [REMAT__OP_CROSS_ENTROPY] = &remat__op_cross_entropy,
    [REMAT__OP_MSE] = &remat__op_mse,
    [REMAT__OP_MUL] = &remat__op_mul,
    [REMAT__OP_LAYERNORM] = &remat__op_layernorm,
    [REMAT__OP_GELU] = &remat__op_gelu,
    [REMAT__OP_EMBEDDING] = &remat__op_embedding,
    [REMAT__OP_SOFTMAX] = &remat__op_softmax,
    [REMAT__OP_ATTENTION] = &remat__op_attention,
    [REMAT__OP_PERMUTE] = &remat__op_permute,
    [REMAT__OP_SLICE] = &remat__op_slice,
    [REMAT__OP_ADD_BROADCAST] = &remat__op_add_broadcast,
};

int remat__op_find(const char *name) {
    for (int i = 0; i < REMAT__N_OPS; i++)
        if (strcmp(remat__ops[i]->name, name) == 0) return i;
    return -1;
}
