/* ilp_graphs.c: the graphs of test_ilp (ilp_graphs.h). The random ones
 * are chains of linear, relu, gelu, layernorm, softmax, dropout and
 * attention blocks, most with residual skips, ending in a cross-entropy
 * loss, built from fixed seeds so that they are the same everywhere; the
 * traced ones are graph files read as `remat plan --graph` reads them. */
#include "ilp_graphs.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Eleven random graphs of 8 to 20 op nodes, fixed seeds; then the traced
 * steps (scripts/gen_traced_graphs.py): an MLP and a CNN with BatchNorm
 * (11 and 13 traced ops), two residual blocks (26), one-layer GPT-2 (44)
 * and Llama (55). */
const ilp_case ilp_cases[] = {
    {"chain08", 0, 11, 8, 0, 0}, {"chain14", 0, 12, 14, 0, 0},   {"res08", 0, 21, 8, 1, 0},
    {"res10", 0, 22, 10, 1, 0},  {"res12", 0, 23, 12, 1, 0},     {"res14", 0, 24, 14, 1, 0},
    {"res16", 0, 25, 16, 1, 0},  {"res18", 0, 26, 18, 1, 0},     {"res20", 0, 27, 20, 1, 0},
    {"attn12", 0, 31, 12, 1, 1}, {"attn16", 0, 32, 16, 1, 1},    {"mlp_bn", 1, 0, 0, 0, 0},
    {"cnn_bn", 1, 0, 0, 0, 0},   {"resnet_tiny", 1, 0, 0, 0, 0}, {"gpt2_1l", 1, 0, 0, 0, 0},
    {"llama_1l", 1, 0, 0, 0, 0},
};
const int ilp_n_cases = (int)(sizeof ilp_cases / sizeof ilp_cases[0]);

/* ------------------------------------------------------- random graphs */

/* Rows of every activation: one sequence of 16 tokens. */
#define ROWS 16
#define CLASSES 8
#define MAX_VALS 64

static uint32_t rnd(uint32_t *s) { /* xorshift32: the same graphs everywhere */
    uint32_t x = *s;
    x ^= x << 13, x ^= x >> 17, x ^= x << 5;
    return *s = x;
}

typedef struct {
    remat_graph *g;
    uint32_t rng;
    int made;  /* op nodes so far */
    int n_lin; /* parameter name counter */
    remat_node vals[MAX_VALS];
    int64_t width[MAX_VALS];
    int n_vals;
} builder;

static int64_t width_of(const builder *b, remat_node x) {
    int64_t d[REMAT_MAX_DIMS];
    int nd = remat_node_shape(b->g, x, d);
    return d[nd - 1];
}

/* Records x as a candidate skip source and returns it. */
static remat_node op(builder *b, remat_node x) {
    b->made++;
    if (b->n_vals < MAX_VALS) b->vals[b->n_vals] = x, b->width[b->n_vals++] = width_of(b, x);
    return x;
}

static remat_node linear(builder *b, remat_node x, int64_t out) {
    char name[16];
    snprintf(name, sizeof name, "l%d", b->n_lin++);
    return op(b, remat_linear(b->g, name, x, out, (int)(rnd(&b->rng) & 1)));
}

/* An earlier value as wide as x, at least two nodes back, or REMAT_NONE. */
static remat_node skip_source(builder *b, remat_node x) {
    int64_t w = width_of(b, x);
    int cand[MAX_VALS], n = 0;
    for (int i = 0; i + 2 < b->n_vals; i++)
        if (b->width[i] == w && b->vals[i] != x) cand[n++] = i;
    return n ? b->vals[cand[rnd(&b->rng) % (uint32_t)n]] : REMAT_NONE;
}

/* linear to 3C, (1, ROWS, 3C), causal attention with 2 heads, back to
 * (ROWS, C): four op nodes, the attention's aux (its probabilities)
 * larger than its output. */
static remat_node attention_block(builder *b, remat_node x) {
    int64_t c = width_of(b, x);
    remat_node h = linear(b, x, 3 * c);
    h = op(b, remat_reshape(b->g, h, 3, (int64_t[]){1, ROWS, 3 * c}));
    h = op(b, remat_attention(b->g, h, 2));
    return op(b, remat_reshape(b->g, h, 2, (int64_t[]){ROWS, c}));
}

/* One random step of the chain; fewer than `left` op nodes. */
static remat_node step(builder *b, const ilp_case *sp, remat_node x, int left) {
    static const int64_t widths[] = {16, 32, 64};
    uint32_t r = rnd(&b->rng) % 16;
    if (sp->attention && left > 4 && r < 3) return attention_block(b, x);
    if (sp->skips && r < 7) {
        remat_node s = skip_source(b, x);
        if (s != REMAT_NONE) return op(b, r < 6 ? remat_add(b->g, x, s) : remat_mul(b->g, x, s));
    }
    switch (rnd(&b->rng) % 8) {
    case 0:
    case 1: return linear(b, x, widths[rnd(&b->rng) % 3]);
    case 2:
    case 3: return op(b, remat_relu(b->g, x));
    case 4: return op(b, remat_gelu(b->g, x, 0));
    case 5: {
        char name[16];
        snprintf(name, sizeof name, "ln%d", b->n_lin++);
        return op(b, remat_layernorm(b->g, name, x));
    }
    case 6: return op(b, remat_softmax(b->g, x));
    default: return op(b, remat_dropout(b->g, x, 0.1f));
    }
}

/* The graph of a spec: inputs first (so that the store-all order starts
 * with them, as every planner's schedules do), a linear, random steps,
 * then a linear to the classes and the loss. */
static remat_status random_graph(const ilp_case *sp, remat_graph **gp, remat_node *loss) {
    builder b = {.rng = sp->seed * 2654435761u + 1};
    remat_status st = remat_graph_create(&b.g);
    if (st != REMAT_OK) return st;
    int64_t xd[2] = {ROWS, 16 << (rnd(&b.rng) % 2)}, n = ROWS;
    remat_node x = remat_input(b.g, "input", REMAT_F32, 2, xd);
    remat_node y = remat_input(b.g, "target", REMAT_I32, 1, &n);
    x = linear(&b, x, 32);
    while (b.made < sp->n_ops - 2) x = step(&b, sp, x, sp->n_ops - 2 - b.made);
    x = linear(&b, x, CLASSES);
    *loss = remat_cross_entropy(b.g, x, y);
    *gp = b.g;
    return remat_graph_status(b.g);
}

/* ------------------------------------------------------ traced graphs */

/* The whole of a file, NUL-terminated (the caller frees), or NULL. */
static char *slurp(const char *path) {
    FILE *fp = fopen(path, "rb");
    if (!fp) return NULL;
    char *buf = NULL;
    long n = fseek(fp, 0, SEEK_END) == 0 ? ftell(fp) : -1;
    if (n >= 0 && fseek(fp, 0, SEEK_SET) == 0 && (buf = malloc((size_t)n + 1)) != NULL) {
        if (fread(buf, 1, (size_t)n, fp) == (size_t)n) buf[n] = 0;
        else free(buf), buf = NULL;
    }
    fclose(fp);
    return buf;
}

static remat_status traced_graph(const ilp_case *c, remat_graph **g, remat_node *loss) {
    static const char *const dirs[] = {"graphs/ilp", "tests/graphs/ilp"};
    char path[512], *text = NULL;
    for (int i = 0; i < 2 && !text; i++) {
        snprintf(path, sizeof path, "%s/%s.json", dirs[i], c->name);
        text = slurp(path);
    }
    if (!text) {
        fprintf(stderr, "cannot read graphs/ilp/%s.json (run from tests/ or the repository root)\n", c->name);
        return REMAT_IO;
    }
    remat_status st = remat_graph_read_json(text, g, loss);
    free(text);
    return st;
}

remat_status ilp_graph_build(const ilp_case *c, remat_graph **g, remat_node *loss) {
    return c->traced ? traced_graph(c, g, loss) : random_graph(c, g, loss);
}
