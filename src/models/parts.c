/* parts.c: what every model file builds with: the end of a block,
 * marked as a checkpoint when the options ask, and the image classifier
 * wrapper. Apart from the zoo's table (models.c), which calls the model
 * files, so that they do not call back into it. */
#include "models.h"

/* Marks the output of block `i` (0-based) when the options ask for it. */
remat_node remat__model_block_end(remat_graph *g, remat_node x, int i, const remat_model_opts *o) {
    return o->checkpoint_blocks < 0 || i < o->checkpoint_blocks ? remat_checkpoint(g, x) : x;
}

/* Classifiers over images: input (B,C,H,W), labels (B), cross-entropy. */
remat_status remat__model_classifier(remat_graph *g, const remat_model_opts *o, remat_model *m,
                                     remat_node (*body)(remat_graph *, remat_node, const remat_model_opts *)) {
    if (o->batch <= 0 || o->channels <= 0 || o->height <= 0 || o->width <= 0 || o->classes <= 1)
        return remat_error(REMAT_INVALID,
                           "model '%s': batch, input shape and classes must be positive "
                           "(got batch %lld, %lldx%lldx%lld, %lld classes)",
                           o->name, (long long)o->batch, (long long)o->channels, (long long)o->height,
                           (long long)o->width, (long long)o->classes);
    int64_t xd[4] = {o->batch, o->channels, o->height, o->width};
    m->input = remat_input(g, "input", REMAT_F32, 4, xd);
    m->labels = remat_input(g, "target", REMAT_I32, 1, &o->batch);
    m->logits = body(g, m->input, o);
    m->loss = remat_cross_entropy(g, m->logits, m->labels);
    if (remat_graph_status(g) != REMAT_OK)
        return remat_error(remat_graph_status(g), "model '%s': %s", o->name, remat_graph_error(g));
    return REMAT_OK;
}
