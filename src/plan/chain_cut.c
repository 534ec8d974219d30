/* chain_cut.c: where `optimal` (optimal.c) cuts a step into a chain of
 * stages.
 *
 * A stage boundary is an op node u that the rest of the step reaches only
 * through u and through values carried across u (chain.c's add_carried
 * counts a carried value in every stage it spans). The points:
 *   - articulation points: no edge between two other op nodes jumps over
 *     them (remat__cut_points), nothing is carried;
 *   - the points of an independent branch, one that depends on no node
 *     before it (a siamese network's second view): only edges from nodes
 *     made before the branch began jump over them (the first view's
 *     features, read by the head), and those are carried;
 *   - either of these once the shared side inputs are set aside: a value
 *     that depends on no trainable parameter and whose ancestors are small
 *     (side_inputs) is carried across every point between it and its last
 *     reader. Traced transformers read such values in every layer (the
 *     causal mask made from a padding mask, position ids, rotary cos/sin
 *     tables), so without this no node would separate one layer from the
 *     next.
 *   - with skips aside as well (aside 2; optimal.c cuts this chain for
 *     traced steps), also these once the skip
 *     connections are carried: a value whose last consumer is a boundary
 *     of the cut above and more than one node after it (a residual
 *     stream's value, read again by the add that ends the block: a
 *     transformer's attention and MLP halves, a ResNet block). Without
 *     it no node inside a block is a boundary, so a chain schedule
 *     holds a block's whole backward at once, as per-layer
 *     checkpointing does; carried, the block's parts are stages of
 *     their own (a Llama MLP's norm, its gate and up projections, its
 *     down projection), each value carried counted in every stage it
 *     spans.
 * A side input is itself never a boundary by the independent-branch rule
 * (the mask's aranges would each cut a stage of their own in front of the
 * first layer): it joins the stage of the point after it, unless it is an
 * articulation point.
 */
#include "chain_cut.h"

#include <stdlib.h>
#include <string.h>

/* A side input's ancestors hold at most this share of the bytes of the
 * step's values: a frozen backbone (no parameter trains, but its values
 * are the bulk of the step) is not taken for one. */
#define SIDE_SHARE 16

/* side[u] = 1 for the side inputs among the needed op nodes: u depends on
 * no trainable parameter (p->needs_grad) and the bytes of u's value and
 * its op ancestors' (counted per path, so an upper bound) are at most
 * 1/SIDE_SHARE of the bytes of every needed op node's value. anc is
 * scratch of g->n entries. */
static void side_inputs(const remat__prog *p, const uint8_t *needed, uint8_t *side, double *anc) {
    const remat_graph *g = p->g;
    double total = 0;
    for (int32_t u = 0; u < g->n; u++)
        if (needed[u] && g->nodes[u].leaf == REMAT__LEAF_NONE) total += (double)remat__vbytes(p, &g->nodes[u]);
    for (int32_t u = 0; u < g->n; u++) {
        const remat__node *nd = &g->nodes[u];
        side[u] = 0, anc[u] = 0;
        if (!needed[u] || nd->leaf != REMAT__LEAF_NONE) continue;
        double a = (double)remat__vbytes(p, nd);
        for (int q = 0; q < nd->n_in; q++) {
            int32_t x = nd->in[q], dup = 0;
            for (int r = 0; r < q && !dup; r++) dup = nd->in[r] == x;
            if (!dup && g->nodes[x].leaf == REMAT__LEAF_NONE) a += anc[x];
        }
        anc[u] = a;
        side[u] = !p->needs_grad[u] && a * SIDE_SHARE <= total;
    }
}

/* The points (see the top of the file) given side[]: reach[u] is set to
 * u's last op consumer (u itself when none; -1 for a leaf or a node the
 * loss does not need); minsrc and far_of are scratch of g->n entries.
 * minsrc[u] is the first op node u depends on through other than side
 * inputs; far_of[u] is reach[u] for the nodes whose edges keep a point
 * from being one (-1 for side inputs). */
static int points(const remat_graph *g, const uint8_t *needed, const uint8_t *side, int32_t *out, int32_t *reach,
                  int32_t *minsrc, int32_t *far_of) {
    int n = g->n, k = 0, levels = 1;
    for (int u = 0; u < n; u++) reach[u] = needed[u] && g->nodes[u].leaf == REMAT__LEAF_NONE ? u : -1;
    for (int c = 0; c < n; c++) {
        const remat__node *nd = &g->nodes[c];
        minsrc[c] = c;
        if (reach[c] < 0) continue;
        for (int i = 0; i < nd->n_in; i++) {
            int32_t x = nd->in[i];
            if (g->nodes[x].leaf != REMAT__LEAF_NONE) continue;
            if (reach[x] < c) reach[x] = c;
            if (!side[x] && minsrc[x] < minsrc[c]) minsrc[c] = minsrc[x];
        }
    }
    for (int u = 0; u < n; u++) far_of[u] = side[u] ? -1 : reach[u];
    /* range maxima of far_of: level l holds the largest of [v, v + 2^l);
     * without the memory, the articulation points alone */
    while ((1 << levels) < n) levels++;
    int32_t *table = malloc((size_t)levels * (size_t)n * sizeof *table);
    if (table) memcpy(table, far_of, (size_t)n * sizeof *table);
    for (int l = 1; table && l < levels; l++)
        for (int v = 0; v + (1 << l) <= n; v++) {
            int32_t a = table[(size_t)(l - 1) * n + v], b = table[(size_t)(l - 1) * n + v + (1 << (l - 1))];
            table[(size_t)l * n + v] = a > b ? a : b;
        }
    /* the farthest consumer of any op node before u, and of any but the
     * side inputs */
    int32_t far = -1, far_main = -1;
    for (int u = 0; u < n; u++) {
        if (reach[u] < 0) continue;
        int point;
        if (side[u]) {
            point = far <= u;
        } else {
            int lo = minsrc[u], len = u - lo, l = 0;
            point = far_main <= u || len == 0; /* len 0: u depends on no op node but side inputs */
            if (!point && table) {             /* the farthest consumer of the nodes in [minsrc[u], u) */
                while ((2 << l) <= len) l++;
                int32_t a = table[(size_t)l * n + lo], b = table[(size_t)l * n + u - (1 << l)];
                point = (a > b ? a : b) <= u;
            }
        }
        if (point) out[k++] = u;
        if (reach[u] > far) far = reach[u];
        if (far_of[u] > far_main) far_main = far_of[u];
    }
    free(table);
    return k;
}

remat_status remat__chain_points(const remat__prog *p, const uint8_t *needed, int aside, int32_t *out, int32_t *reach,
                                 int32_t *scratch, int *n_points, int *n_side) {
    const remat_graph *g = p->g;
    uint8_t *side = calloc((size_t)g->n + 1, 1);
    double *anc = malloc(((size_t)g->n + 1) * sizeof *anc);
    int32_t *far_of = malloc(((size_t)g->n + 1) * sizeof *far_of);
    if (!side || !anc || !far_of) {
        free(side), free(anc), free(far_of);
        return remat__err(REMAT_NOMEM, "out of memory planning");
    }
    *n_side = 0;
    if (aside) side_inputs(p, needed, side, anc);
    *n_points = points(g, needed, side, out, reach, scratch, far_of);
    if (aside >= 2) { /* the skips into the boundaries just found: carried, and cut again */
        uint8_t *is_point = calloc((size_t)g->n + 1, 1);
        if (!is_point) {
            free(side), free(anc), free(far_of);
            return remat__err(REMAT_NOMEM, "out of memory planning");
        }
        for (int k = 0; k < *n_points; k++) is_point[out[k]] = 1;
        for (int32_t u = 0; u < g->n; u++)
            if (reach[u] > u + 1 && is_point[reach[u]]) side[u] = 1;
        free(is_point);
        *n_points = points(g, needed, side, out, reach, scratch, far_of);
    }
    for (int32_t u = 0; u < g->n; u++) *n_side += side[u];
    free(side), free(anc), free(far_of);
    return REMAT_OK;
}
