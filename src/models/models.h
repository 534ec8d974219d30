/* models.h: what the model files share. Each model is a line of the table
 * in models.c: its name, a description, a builder and its defaults. */
#ifndef REMAT_MODELS_H
#define REMAT_MODELS_H

#include "../remat-impl.h"

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

#endif
