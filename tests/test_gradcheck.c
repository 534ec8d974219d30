/* test_gradcheck.c: every op's backward against central finite differences.
 *
 * The test walks the op table itself: every op with kernels must have at
 * least one case below, or the test fails, so a new op cannot skip it. Each
 * case makes the op's inputs trainable parameters (remat differentiates with
 * respect to parameters only), reduces the op's output to a scalar with MSE
 * against a fixed random target (loss ops are the loss themselves), and
 * compares every parameter's analytic gradient with (L(w+h) - L(w-h)) / 2h
 * at a sample of elements, with 1 and 2 threads.
 */
#include "../src/remat-impl.h"
#include "check.h"

#include <stdlib.h>

#include "opcases.h"

static uint32_t rng_state = 12345;
static float frand(void) { /* uniform in [-1, 1) */
    rng_state = rng_state * 1664525u + 1013904223u;
    return (float)(rng_state >> 8) / 8388608.0f - 1.0f;
}

static double loss_at(remat_session *s) {
    float l = 0.0f;
    remat_status st = remat_session_forward(s, 1, &l, REMAT_NONE, NULL);
    if (st != REMAT_OK) fprintf(stderr, "forward failed: %s\n", remat_last_error());
    return (double)l;
}

static void run_case(int ci, int threads) {
    gcase c = {.extra = REMAT_NONE};
    CHECK_OK(remat_graph_create(&c.g));
    cases[ci].build(&c);
    remat_node loss = c.out, target = REMAT_NONE;
    int is_loss = remat__ops[c.g->nodes[c.out].op]->flags & REMAT__OP_LOSS;
    if (!is_loss) {
        int64_t dims[4];
        int nd = remat_node_shape(c.g, c.out, dims);
        target = remat_input(c.g, "target", REMAT_F32, nd, dims);
        loss = remat_mse(c.g, c.out, target);
    }
    CHECK_MSG(remat_graph_status(c.g) == REMAT_OK, "%s: %s", cases[ci].op, remat_graph_error(c.g));
    remat_session_opts o;
    remat_session_opts_default(&o);
    o.threads = threads;
    remat_session *s = NULL;
    CHECK_OK(remat_session_create(&s, c.g, loss, &o));
    if (!s) {
        remat_graph_destroy(c.g);
        return;
    }
    /* Inputs: random values; with kinks, distinct values of magnitude >= 0.1
     * spaced by >= 0.05, so that +-h never crosses a kink. */
    float *tbuf = NULL;
    int32_t *lbuf = NULL;
    if (target != REMAT_NONE) {
        int64_t n = remat__numel(&c.g->nodes[target].shape);
        tbuf = malloc((size_t)n * sizeof *tbuf);
        for (int64_t i = 0; i < n; i++) tbuf[i] = frand();
        remat_session_bind(s, target, tbuf);
    }
    if (c.extra != REMAT_NONE) {
        int64_t n = remat__numel(&c.g->nodes[c.extra].shape);
        lbuf = malloc((size_t)n * sizeof *lbuf);
        for (int64_t i = 0; i < n; i++) lbuf[i] = (int32_t)(i * 3 % c.classes);
        remat_session_bind(s, c.extra, lbuf);
    }
    int np = remat_session_param_count(s);
    for (int p = 0; p < np; p++) {
        remat_param_info pi;
        remat_session_param(s, p, &pi);
        if (!pi.trainable) continue;
        for (int64_t i = 0; i < pi.numel; i++) {
            if (c.kinks) {
                int64_t k = (i * 7919) % pi.numel; /* a permutation when numel is not a multiple of 7919 */
                float v = 0.1f + 0.05f * (float)k;
                pi.data[i] = k % 2 ? -v : v;
            } else {
                pi.data[i] = frand();
            }
        }
    }
    float l0 = 0.0f;
    CHECK_OK(remat_session_step(s, &l0));
    const double h = 1e-2;
    for (int p = 0; p < np; p++) {
        remat_param_info pi;
        remat_session_param(s, p, &pi);
        if (!pi.trainable) continue;
        double gmax = 0.0;
        for (int64_t i = 0; i < pi.numel; i++) gmax = fmax(gmax, fabs(pi.grad[i]));
        int64_t stride = pi.numel > 24 ? pi.numel / 24 : 1;
        for (int64_t i = 0; i < pi.numel; i += stride) {
            float w0 = pi.data[i];
            pi.data[i] = (float)(w0 + h);
            double lp = loss_at(s);
            pi.data[i] = (float)(w0 - h);
            double lm = loss_at(s);
            pi.data[i] = w0;
            double fd = (lp - lm) / (2.0 * h), an = pi.grad[i];
            double tol = 5e-3 * fabs(an) + 1e-3 * gmax + 1e-6;
            CHECK_MSG(fabs(fd - an) <= tol,
                      "%s (case %d, %d threads) d/d%s[%lld]: analytic %.7g, "
                      "finite difference %.7g",
                      cases[ci].op, ci, threads, pi.name, (long long)i, an, fd);
        }
        CHECK_MSG(gmax > 0.0, "%s: gradient of %s is all zero", cases[ci].op, pi.name);
    }
    remat_session_destroy(s);
    remat_graph_destroy(c.g);
    free(tbuf), free(lbuf);
}

int main(void) {
    /* Every op with kernels has a case. */
    for (int op = 0; op < REMAT__N_OPS; op++) {
        if (!remat__ops[op]->forward) continue;
        int found = 0;
        for (int ci = 0; ci < N_CASES; ci++) found |= strcmp(cases[ci].op, remat__ops[op]->name) == 0;
        CHECK_MSG(found, "op '%s' has no finite-difference case", remat__ops[op]->name);
        CHECK_MSG(remat__ops[op]->backward != NULL, "op '%s' has no backward", remat__ops[op]->name);
#ifdef REMAT_HAVE_CUDA
        /* A CUDA build runs every op on the device too (test_cuda compares). */
        const remat__dev_kernels *dk = remat__ops[op]->cuda;
        CHECK_MSG(dk && dk->forward && dk->backward, "op '%s' has no CUDA kernels", remat__ops[op]->name);
#endif
    }
    /* Save masks: an op saves only inputs it can have, below input 30. */
    for (int op = 0; op < REMAT__N_OPS; op++) {
        const remat__op *o = remat__ops[op];
        int lim = o->max_in < REMAT__SAVE_IN_LIMIT ? o->max_in : REMAT__SAVE_IN_LIMIT;
        unsigned in_bits = o->saves & ~(REMAT__SAVE_OUT | REMAT__SAVE_AUX);
        CHECK_MSG(o->max_in <= REMAT__MAX_IN, "op '%s' takes up to %d inputs, nodes hold %d", o->name, o->max_in,
                  REMAT__MAX_IN);
        CHECK_MSG((in_bits >> lim) == 0, "op '%s' saves an input beyond its %d", o->name, lim);
    }
    for (int ci = 0; ci < N_CASES; ci++) {
        CHECK_MSG(remat__op_find(cases[ci].op) >= 0, "case for unknown op '%s'", cases[ci].op);
        run_case(ci, 1);
        run_case(ci, 2);
        printf("gradcheck %-15s case %2d ok so far (%d failures)\n", cases[ci].op, ci, check_failures);
    }
    return check_exit("test_gradcheck");
}
