/* ilp_graphs.h: the graphs test_ilp measures remat's `optimal` on against
 * the rematerialization ILP: random graphs remat builds from fixed seeds,
 * and training steps traced from small PyTorch models (graph files under
 * tests/graphs/ilp, from scripts/gen_traced_graphs.py). */
#ifndef REMAT_ILP_GRAPHS_H
#define REMAT_ILP_GRAPHS_H

#include <remat.h>
#include <stdint.h>

typedef struct {
    const char *name;
    int traced; /* read from tests/graphs/ilp/<name>.json; the rest is unused */
    uint32_t seed;
    int n_ops;     /* op nodes, the final linear and the loss included */
    int skips;     /* residual adds (and gating muls) of earlier values */
    int attention; /* attention blocks: linear to 3C, reshape, attention, reshape */
} ilp_case;

extern const ilp_case ilp_cases[];
extern const int ilp_n_cases;

/* The graph of a case and its loss; the caller owns *g
 * (remat_graph_destroy). A traced case's file is looked for under
 * graphs/ilp (the tests' working directory) and tests/graphs/ilp (the
 * repository root's); REMAT_IO with a message when neither is there. */
remat_status ilp_graph_build(const ilp_case *c, remat_graph **g, remat_node *loss);

#endif
