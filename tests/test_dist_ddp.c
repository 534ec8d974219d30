/* test_dist_ddp.c: remat's data-parallel training against PyTorch's
 * DistributedDataParallel (gloo, 2 processes), from the fixture that
 * bench/torch/ddp_fixture.py writes (tests/fixtures/ddp_cnn.safetensors):
 * remat's cnn on 1x4x4 images, dropout off, from the same initial weights,
 * three SGD steps on the same global batches of 64. Run under mpirun with
 * 2 ranks (micro-batches of 32, one per rank, as DDP's two processes) and
 * alone (the same two micro-batches, accumulated: the same bits as 2
 * ranks). Each step's loss must be within 1e-5 (relative) of DDP's mean
 * loss, and every weight after the third step within 1e-5 of its tensor's
 * largest magnitude. The initial weights are recomputed here by the
 * generator's rule (fill, as test_torch.c).
 */
#include "remat.h"

#include "check.h"
#include "fixture_fill.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define FIXTURE "fixtures/ddp_cnn.safetensors"
#define BATCH 64
#define MICRO 32
#define STEPS 3
#define SIZE 4
#define TOL 1e-5

/* Every trainable parameter from fill(name_seed(name), bound of its
 * layer's weight: 1/sqrt(fan in)). */
static void init_weights(remat_session *s) {
    for (int i = 0; i < remat_session_param_count(s); i++) {
        remat_param_info p, w;
        remat_session_param(s, i, &p);
        char wname[256];
        snprintf(wname, sizeof wname, "%s", p.name);
        char *dot = strrchr(wname, '.');
        if (!p.trainable || !dot) continue;
        snprintf(dot, sizeof wname - (size_t)(dot - wname), ".weight");
        int wi = remat_session_find_param(s, wname);
        if (wi < 0 || remat_session_param(s, wi, &w) != REMAT_OK) continue;
        float *v = malloc((size_t)p.numel * sizeof *v);
        if (!v) continue;
        fill(name_seed(p.name), p.numel, (float)(1.0 / sqrt((double)(w.numel / w.dims[0]))), v);
        CHECK_OK(remat_session_write_param(s, i, v));
        free(v);
    }
}

int main(void) {
    remat_set_blas_threads(1);
    remat_comm *c = NULL;
    CHECK_OK(remat_comm_create_env(&c));
    if (!c) return check_exit("test_dist_ddp");
    int rank = remat_comm_rank(c), ranks = remat_comm_size(c);
    remat_model_opts mo;
    remat_model_opts_for(&mo, "cnn");
    mo.batch = MICRO, mo.channels = 1, mo.height = SIZE, mo.width = SIZE, mo.dropout_scale = 0.0f;
    remat_graph *g = NULL;
    remat_model m;
    CHECK_OK(remat_graph_create(&g));
    CHECK_OK(remat_model_build(g, &mo, &m));
    remat_optim_opts oo;
    remat_optim_opts_default(&oo, REMAT_OPTIM_SGD);
    oo.lr = 0.05f, oo.momentum = 0.9f, oo.weight_decay = 1e-4f;
    remat_session_opts so;
    remat_session_opts_default(&so);
    so.threads = 1, so.optim = &oo, so.comm = c, so.micro_batches = BATCH / MICRO;
    remat_session *s = NULL;
    CHECK_OK(remat_session_create(&s, g, m.loss, &so));
    /* the fixture's batches and results */
    float *x = malloc((size_t)STEPS * BATCH * SIZE * SIZE * sizeof *x), losses[STEPS];
    int32_t *y = malloc((size_t)STEPS * BATCH * sizeof *y);
    int64_t xd[5] = {STEPS, BATCH, 1, SIZE, SIZE}, yd[2] = {STEPS, BATCH}, ld[1] = {STEPS};
    CHECK_OK(remat_safetensors_read(FIXTURE, "input", REMAT_F32, 5, xd, x));
    CHECK_OK(remat_safetensors_read(FIXTURE, "target", REMAT_I32, 2, yd, y));
    CHECK_OK(remat_safetensors_read(FIXTURE, "losses", REMAT_F32, 1, ld, losses));
    if (!s || !x || !y) {
        free(x), free(y);
        remat_session_destroy(s), remat_graph_destroy(g), remat_comm_destroy(c);
        return check_exit("test_dist_ddp");
    }
    init_weights(s);
    remat_dist_info di;
    remat_session_dist(s, &di);
    int64_t row0 = di.first_micro_batch * MICRO, sample = SIZE * SIZE; /* this rank's rows of a batch */
    for (int step = 0; step < STEPS; step++) {
        float loss = 0;
        CHECK_OK(remat_session_bind(s, m.input, x + ((size_t)step * BATCH + (size_t)row0) * (size_t)sample));
        CHECK_OK(remat_session_bind(s, m.labels, y + (size_t)step * BATCH + (size_t)row0));
        CHECK_OK(remat_session_step(s, &loss));
        CHECK_MSG(fabs((double)loss - (double)losses[step]) <= TOL * fabs((double)losses[step]),
                  "rank %d of %d, step %d: loss %.9g, DDP's %.9g", rank, ranks, step + 1, (double)loss,
                  (double)losses[step]);
        CHECK_OK(remat_session_update(s));
    }
    remat_session_bind(s, m.input, NULL);
    remat_session_bind(s, m.labels, NULL);
    double worst = 0;
    char worst_name[128] = "";
    for (int i = 0; i < remat_session_param_count(s); i++) {
        remat_param_info p;
        remat_session_param(s, i, &p);
        char key[160];
        snprintf(key, sizeof key, "step3.%s", p.name);
        float *got = malloc((size_t)p.numel * sizeof *got), *want = malloc((size_t)p.numel * sizeof *want);
        if (!got || !want) {
            free(got), free(want);
            continue;
        }
        CHECK_OK(remat_session_read_param(s, i, REMAT_PARAM_VALUE, got));
        CHECK_OK(remat_safetensors_read(FIXTURE, key, REMAT_F32, p.ndim, p.dims, want));
        double big = 0, err = 0;
        for (int64_t k = 0; k < p.numel; k++) {
            if (fabs(want[k]) > big) big = fabs(want[k]);
            if (fabs((double)got[k] - (double)want[k]) > err) err = fabs((double)got[k] - (double)want[k]);
        }
        CHECK_MSG(err <= TOL * big,
                  "rank %d of %d: %s differs from DDP's by %.3g, more than %g of its largest "
                  "magnitude %.3g",
                  rank, ranks, p.name, err, TOL, big);
        if (big > 0 && err / big > worst) worst = err / big, snprintf(worst_name, sizeof worst_name, "%s", p.name);
        free(got), free(want);
    }
    if (rank == 0)
        printf("test_dist_ddp: %d rank%s, %d steps against DDP (gloo, 2 processes): the largest difference is "
               "%.2g of a tensor's largest magnitude (%s), the bound %g\n",
               ranks, ranks == 1 ? "" : "s", STEPS, worst, worst_name, TOL);
    free(x), free(y);
    remat_session_destroy(s);
    remat_graph_destroy(g);
    remat_comm_destroy(c);
    return check_exit("test_dist_ddp");
}
