/* synth.c: synthetic batches (`--data synthetic`) for any model.
 *
 * The model's nodes say what a batch is: the input's and labels' shapes
 * and dtypes (remat_node_shape, remat_node_dtype), so no model is named
 * here. Float tensors (images, siamese-resnet50's second view, heavy's
 * target) are uniform on [-1, 1); int32 inputs are token ids on
 * [0, vocab); int32 labels are uniform on [0, the logits' last
 * dimension), the classes of a classifier or a language model's
 * vocabulary. Element i of batch `step` comes from splitmix64 of (seed,
 * step, tensor, i), so a batch is the same whoever asks for it.
 */
#include "cli.h"

#include <string.h>

static uint64_t splitmix64(uint64_t x) {
    x += 0x9E3779B97F4A7C15ull;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}

static int64_t numel(const remat_graph *g, remat_node n, int *ndim) {
    int64_t d[REMAT_MAX_DIMS], k = 1;
    *ndim = n == REMAT_NONE ? -1 : remat_node_shape(g, n, d);
    for (int i = 0; i < *ndim; i++) k *= d[i];
    return *ndim < 0 ? 0 : k;
}

int cli_synth_init(cli_synth *s, const remat_graph *g, const remat_model *m, const remat_model_opts *mo,
                   uint64_t seed) {
    memset(s, 0, sizeof *s);
    s->seed = seed;
    int nd;
    s->nx = numel(g, m->input, &nd);
    if (nd < 0) return cli_fail("model '%s' has no input node", mo->name);
    s->ny = numel(g, m->labels, &nd);
    s->x_int = remat_node_dtype(g, m->input) == REMAT_I32;
    s->y_int = s->ny && remat_node_dtype(g, m->labels) == REMAT_I32;
    s->x_range = mo->vocab;
    int64_t ld[REMAT_MAX_DIMS];
    int nl = m->logits == REMAT_NONE ? -1 : remat_node_shape(g, m->logits, ld);
    s->y_range = nl > 0 ? ld[nl - 1] : mo->classes;
    if ((s->x_int && s->x_range < 1) || (s->y_int && s->y_range < 1))
        return cli_fail("model '%s': no range for synthetic int32 data (vocab %lld, classes %lld)", mo->name,
                        (long long)s->x_range, (long long)s->y_range);
    return 0;
}

static void fill(uint64_t key, int64_t n, int is_int, int64_t range, void *out) {
    if (is_int) {
        int32_t *y = out;
        for (int64_t i = 0; i < n; i++) y[i] = (int32_t)(splitmix64(key + (uint64_t)i) % (uint64_t)range);
    } else {
        float *x = out;
        for (int64_t i = 0; i < n; i++)
            x[i] = (float)(splitmix64(key + (uint64_t)i) >> 40) * (2.0f / 16777216.0f) - 1.0f;
    }
}

remat_status cli_synth_next(void *user, int64_t step, void *input, void *labels) {
    const cli_synth *s = user;
    uint64_t key = splitmix64(s->seed ^ splitmix64((uint64_t)step));
    fill(splitmix64(key ^ 1), s->nx, s->x_int, s->x_range, input);
    if (labels && s->ny) fill(splitmix64(key ^ 2), s->ny, s->y_int, s->y_range, labels);
    return REMAT_OK;
}
