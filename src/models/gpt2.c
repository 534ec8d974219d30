/* gpt2.c: GPT-2 as nanoGPT lays it out (bench/torch/gpt2_model.py is the
 * same model in PyTorch, with the same state_dict names).
 *
 *   x = drop(wte[input] + wpe)                              (B, T, C)
 *   per block i:  x = x + drop(c_proj(attn(c_attn(ln_1(x)))))
 *                 x = x + drop(mlp.c_proj(gelu_tanh(mlp.c_fc(ln_2(x)))))
 *   logits = ln_f(x) wte^T (the head is tied to wte: no lm_head weight)
 *   loss = mean cross-entropy of logits (B*T, vocab) against target (B*T)
 *
 * input is (B, T) int32 tokens with T = context; wpe has `context` rows,
 * so every position has one. Linear layers hold nn.Linear weights
 * (out, in); the residual stream is kept as (B*T, C) so that they apply
 * directly, and c_attn's output is reshaped to (B, T, 3C) for attention.
 * Dropout p = 0.1 * dropout_scale after the embeddings and after each
 * residual branch, as nanoGPT; nanoGPT's dropout on the attention
 * probabilities is left out (the attention op keeps no mask). GELU is the
 * tanh approximation (GPT-2's). Initialization as GPT-2: linear and
 * embedding weights N(0, 0.02), the two c_proj weights of each block
 * N(0, 0.02 / sqrt(2 layers)), biases 0, LayerNorm weight 1 and bias 0.
 * Each block's output is a block end for checkpointing.
 */
#include "models.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>

#define GPT2_STD 0.02f
#define GPT2_DROPOUT 0.1f

static remat_node drop(remat_graph *g, remat_node x, const remat_model_opts *o) {
    float p = GPT2_DROPOUT * o->dropout_scale;
    return p > 0.0f ? remat_dropout(g, x, p) : x;
}

/* Names op node x, for `remat info` and error messages (op nodes' names
 * need not be unique; parameters' must). */
static remat_node named(remat_graph *g, remat_node x, const char *name) {
    if (x != REMAT_NONE && remat_node_set_name(g, x, name) != REMAT_OK)
        remat_graph_fail(g, REMAT_NOMEM, "%s", remat_last_error());
    return x;
}

/* nn.Linear(in, out) named `name` on x (N, in), GPT-2's initialization. */
static remat_node linear(remat_graph *g, const char *name, remat_node x, int64_t out, int64_t in, float std) {
    char buf[256];
    int64_t wd[2] = {out, in};
    snprintf(buf, sizeof buf, "%s.weight", name);
    remat_node w = remat_param(g, buf, 2, wd, REMAT_INIT_NORMAL, std);
    snprintf(buf, sizeof buf, "%s.bias", name);
    remat_node b = remat_param(g, buf, 1, &out, REMAT_INIT_ZEROS, 0);
    return named(g, remat_linear_op(g, x, w, b), name);
}

static remat_node block(remat_graph *g, remat_node x, int i, const remat_model_opts *o) {
    int64_t B = o->batch, T = o->context, C = o->embd;
    float proj_std = (float)(GPT2_STD / sqrt(2.0 * (double)o->layers));
    char name[128];
    /* attention: x (B*T, C) -> qkv (B, T, 3C) -> (B*T, C) */
    snprintf(name, sizeof name, "transformer.h.%d.ln_1", i);
    remat_node h = remat_layernorm(g, name, x);
    snprintf(name, sizeof name, "transformer.h.%d.attn.c_attn", i);
    h = linear(g, name, h, 3 * C, C, GPT2_STD);
    int64_t qd[3] = {B, T, 3 * C}, fd[2] = {B * T, C};
    h = remat_attention(g, remat_reshape(g, h, 3, qd), (int)o->heads);
    snprintf(name, sizeof name, "transformer.h.%d.attn.c_proj", i);
    h = linear(g, name, remat_reshape(g, h, 2, fd), C, C, proj_std);
    x = remat_add(g, x, drop(g, h, o));
    /* MLP: (B*T, C) -> (B*T, 4C) -> (B*T, C) */
    snprintf(name, sizeof name, "transformer.h.%d.ln_2", i);
    h = remat_layernorm(g, name, x);
    snprintf(name, sizeof name, "transformer.h.%d.mlp.c_fc", i);
    h = remat_gelu(g, linear(g, name, h, 4 * C, C, GPT2_STD), 1);
    snprintf(name, sizeof name, "transformer.h.%d.mlp.c_proj", i);
    h = linear(g, name, h, C, 4 * C, proj_std);
    x = remat_add(g, x, drop(g, h, o));
    return remat__model_block_end(g, x, i, o);
}

static remat_status gpt2(remat_graph *g, const remat_model_opts *o, remat_model *m) {
    if (o->batch <= 0 || o->layers <= 0 || o->embd <= 0 || o->heads <= 0 || o->context <= 0 || o->vocab <= 1 ||
        o->embd % o->heads != 0 || o->layers > INT32_MAX || o->heads > INT32_MAX || o->vocab > INT32_MAX)
        return remat_error(REMAT_INVALID,
                           "model '%s': batch, layers, embd, heads, context must be positive, "
                           "vocab above 1 and heads must divide embd (got batch %lld, layers %lld, embd %lld, "
                           "heads %lld, context %lld, vocab %lld)",
                           o->name, (long long)o->batch, (long long)o->layers, (long long)o->embd, (long long)o->heads,
                           (long long)o->context, (long long)o->vocab);
    int64_t B = o->batch, T = o->context, C = o->embd;
    int64_t xd[2] = {B, T}, BT = B * T, ed[2] = {o->vocab, C}, pd[2] = {T, C}, fd[2] = {BT, C};
    m->input = remat_input(g, "input", REMAT_I32, 2, xd);
    m->labels = remat_input(g, "target", REMAT_I32, 1, &BT);
    remat_node wte = remat_param(g, "transformer.wte.weight", 2, ed, REMAT_INIT_NORMAL, GPT2_STD);
    remat_node wpe = remat_param(g, "transformer.wpe.weight", 2, pd, REMAT_INIT_NORMAL, GPT2_STD);
    remat_node x = named(g, remat_embedding_op(g, m->input, wte), "transformer.wte"); // (B, T, C)
    x = named(g, remat_add_broadcast(g, x, wpe), "transformer.wpe");                  // (B, T, C)
    x = remat_reshape(g, drop(g, x, o), 2, fd);                                       // (B*T, C)
    for (int i = 0; i < o->layers && remat_graph_status(g) == REMAT_OK; i++) x = block(g, x, i, o);
    x = remat_layernorm(g, "transformer.ln_f", x);
    m->logits = named(g, remat_linear_op(g, x, wte, REMAT_NONE), "lm_head"); // (B*T, vocab), tied to wte: no bias
    m->loss = remat_cross_entropy(g, m->logits, m->labels);
    if (remat_graph_status(g) != REMAT_OK)
        return remat_error(remat_graph_status(g), "model '%s': %s", o->name, remat_graph_error(g));
    return REMAT_OK;
}

remat_status remat__model_gpt2(remat_graph *g, const remat_model_opts *o, remat_model *m) { return gpt2(g, o, m); }

void remat__model_gpt2_small_sizes(remat_model_opts *o) {
    o->layers = 12, o->embd = 768, o->heads = 12, o->context = 1024, o->vocab = 50257;
}

/* GPT-2 small (124M parameters) whatever sizes the options carry. */
remat_status remat__model_gpt2_small(remat_graph *g, const remat_model_opts *o, remat_model *m) {
    remat_model_opts s = *o;
    remat__model_gpt2_small_sizes(&s);
    return gpt2(g, &s, m);
}
