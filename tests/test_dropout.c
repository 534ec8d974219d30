/* test_dropout.c: dropout's statistics and its replayable mask.
 *
 * On 200,000 ones with p = 0.3: the dropped fraction is within 5 standard
 * deviations of p, kept values are exactly 1/(1-p), neighbouring elements
 * are uncorrelated; the same (seed, step) replays the same mask, another
 * step or seed gives another; backward passes gradient exactly where the
 * forward kept; evaluation mode is the identity. The mask is exactly its
 * definition: element i is kept when word i % 4 of Philox at counter
 * (i / 4, node, step, "drop" ^ (i >> 34)) with the seed as key, as a
 * uniform in [0, 1), is at least p.
 */
#include "remat.h"
#include "check.h"
#include "../src/remat-impl.h" /* remat__philox, for the mask's definition */

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define N 200000

int main(void) {
    const float p = 0.3f;
    remat_graph *g;
    CHECK_OK(remat_graph_create(&g));
    int64_t n = N;
    remat_node x = remat_param(g, "x", 1, &n, REMAT_INIT_ONES, 0);
    remat_node d = remat_dropout(g, x, p);
    remat_node t = remat_input(g, "t", REMAT_F32, 1, &n);
    remat_node loss = remat_mse(g, d, t);
    CHECK_OK(remat_graph_status(g));
    remat_session_opts o;
    remat_session_opts_default(&o);
    o.seed = 7;
    o.threads = 2;
    remat_session *s;
    CHECK_OK(remat_session_create(&s, g, loss, &o));
    float *zeros = calloc(N, sizeof *zeros), *y1 = malloc(N * sizeof *y1), *y2 = malloc(N * sizeof *y2);
    remat_session_bind(s, t, zeros);

    CHECK_OK(remat_session_forward(s, 1, NULL, d, y1));
    int64_t dropped = 0, bad = 0;
    float scale = 1.0f / (1.0f - p);
    for (int i = 0; i < N; i++) {
        if (y1[i] == 0.0f) dropped++;
        else if (y1[i] != scale) bad++;
    }
    double frac = (double)dropped / N, sigma = sqrt(p * (1 - p) / N);
    printf("dropped fraction %.5f (p = %.2f, sigma %.5f)\n", frac, (double)p, sigma);
    CHECK_MSG(fabs(frac - p) < 5 * sigma, "dropped fraction %.5f", frac);
    CHECK(bad == 0);
    int64_t differ = 0;
    for (int i = 0; i < N; i++) {
        uint32_t ctr[4] = {(uint32_t)(i / 4), (uint32_t)d, 0u, 0x64726f70u}, key[2] = {7u, 0u}, r[4];
        remat__philox(ctr, key, r);
        differ += (remat__u01(r[i % 4]) >= p) != (y1[i] != 0.0f);
    }
    CHECK_MSG(differ == 0, "%lld elements differ from the mask's definition", (long long)differ);
    /* lag-1 correlation of the keep indicator */
    double mk = 1.0 - frac, cov = 0.0;
    for (int i = 0; i + 1 < N; i++) cov += ((y1[i] != 0) - mk) * ((y1[i + 1] != 0) - mk);
    double corr = cov / (N - 1) / (mk * (1 - mk));
    printf("lag-1 correlation %.5f\n", corr);
    CHECK(fabs(corr) < 5.0 / sqrt((double)N));

    /* replay: same seed and step, same mask */
    CHECK_OK(remat_session_forward(s, 1, NULL, d, y2));
    CHECK(memcmp(y1, y2, N * sizeof *y1) == 0);

    /* backward: gradient exactly where kept, 2*y/N*scale there */
    float l;
    CHECK_OK(remat_session_step(s, &l));
    remat_param_info pi;
    remat_session_param(s, 0, &pi);
    int64_t mismatch = 0;
    for (int i = 0; i < N; i++) {
        float expect = y1[i] == 0.0f ? 0.0f : (float)(2.0 * (double)y1[i] / N) * scale;
        if ((pi.grad[i] == 0.0f) != (y1[i] == 0.0f) || fabsf(pi.grad[i] - expect) > 1e-6f * fabsf(expect)) mismatch++;
    }
    CHECK_MSG(mismatch == 0, "%lld gradients disagree with the forward mask", (long long)mismatch);

    /* another step draws another mask */
    remat_optim_opts oo;
    remat_optim_opts_default(&oo, REMAT_OPTIM_SGD);
    oo.lr = 1e-9f; /* keep x (almost) at ones */
    CHECK_OK(remat_session_set_optimizer(s, &oo));
    CHECK_OK(remat_session_update(s));
    CHECK(remat_session_step_index(s) == 1);
    CHECK_OK(remat_session_forward(s, 1, NULL, d, y2));
    int64_t both = 0, same = 0;
    for (int i = 0; i < N; i++) {
        both += y1[i] == 0.0f && y2[i] == 0.0f;
        same += (y1[i] == 0.0f) == (y2[i] == 0.0f);
    }
    double fboth = (double)both / N;
    printf("dropped at both steps %.5f (independent: %.5f)\n", fboth, (double)(p * p));
    CHECK(fabs(fboth - p * p) < 5 * sqrt(p * p * (1 - p * p) / N));
    CHECK(same < N);

    /* evaluation mode is the identity */
    CHECK_OK(remat_session_forward(s, 0, NULL, d, y2));
    remat_session_param(s, 0, &pi);
    CHECK(memcmp(y2, pi.data, N * sizeof *y2) == 0);
    remat_session_destroy(s);

    /* another seed, another mask */
    o.seed = 8;
    CHECK_OK(remat_session_create(&s, g, loss, &o));
    remat_session_bind(s, t, zeros);
    CHECK_OK(remat_session_forward(s, 1, NULL, d, y2));
    same = 0;
    for (int i = 0; i < N; i++) same += (y1[i] == 0.0f) == (y2[i] == 0.0f);
    CHECK(same < N * 0.7);
    remat_session_destroy(s);
    remat_graph_destroy(g);
    free(zeros), free(y1), free(y2);
    return check_exit("test_dropout");
}
