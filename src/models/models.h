/* models.h: what the model files share (parts.c). Each model is a line of
 * the table in models.c: its name, a description, a builder and its
 * defaults. */
#ifndef REMAT_MODELS_H
#define REMAT_MODELS_H

#include "remat.h" /* models are built from the public API alone */

typedef struct {
    const char *name;
    const char *describe;
    remat_status (*build)(remat_graph *g, const remat_model_opts *o, remat_model *m);
    void (*defaults)(remat_model_opts *o); /* NULL: none */
} remat__model_entry;

/* Marks the output of block i with remat_checkpoint when the options ask. */
remat_node remat__model_block_end(remat_graph *g, remat_node x, int i, const remat_model_opts *o);

/* The image classifier wrapper: input (B,C,H,W) float, labels (B) int32,
 * logits from body, cross-entropy loss; reports the graph's first error. */
remat_status remat__model_classifier(remat_graph *g, const remat_model_opts *o, remat_model *m,
                                     remat_node (*body)(remat_graph *, remat_node, const remat_model_opts *));

/* The CNN models (resnet.c, densenet.c): builders for the table. */
remat_status remat__model_resnet18(remat_graph *g, const remat_model_opts *o, remat_model *m);
remat_status remat__model_resnet50(remat_graph *g, const remat_model_opts *o, remat_model *m);
remat_status remat__model_siamese_resnet50(remat_graph *g, const remat_model_opts *o, remat_model *m);
remat_status remat__model_densenet_bc(remat_graph *g, const remat_model_opts *o, remat_model *m);

/* GPT-2 (gpt2.c): `gpt2` takes the options' transformer sizes, `gpt2-small`
 * forces GPT-2 small's (remat__model_gpt2_small_sizes). */
remat_status remat__model_gpt2(remat_graph *g, const remat_model_opts *o, remat_model *m);
remat_status remat__model_gpt2_small(remat_graph *g, const remat_model_opts *o, remat_model *m);
void remat__model_gpt2_small_sizes(remat_model_opts *o);
#endif
