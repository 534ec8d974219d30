/* train.h: what `remat train` (cmd_train.c) shares with its progress
 * display (train_progress.c). */
#ifndef REMAT_CLI_TRAIN_H
#define REMAT_CLI_TRAIN_H

#include "cli.h"

/* What the display keeps between events. */
typedef struct {
    int quiet; /* not rank 0: nothing to print */
    int json, tty;
    int64_t epochs_total;
    /* streams */
    int64_t log_every, tokens_per_row; /* tokens_per_row: a language model's context, or 0 */
    double window_loss, window_seconds, epoch_loss;
    int64_t window_n, epoch_n, epoch; /* epoch_n: steps of `epoch` this run made (a resume starts mid-epoch) */
    int started;
    /* training states: the last one saved (for the closing line) */
    char last_state[4096];
    int64_t last_state_step;
} cli_progress;

/* The training loops' event callbacks (remat_train_opts.on_event; user is
 * a cli_progress): data sets, a bar per epoch then the evaluation;
 * streams, a line every log_every steps and one per epoch. Rank 0 prints,
 * in text or one JSON object per line. */
void cli_train_on_event(const remat_event *ev, void *user);
void cli_train_on_stream_event(const remat_event *ev, void *user);

#endif
