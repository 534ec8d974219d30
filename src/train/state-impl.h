/* state-impl.h: what the files of training states share: state.c (save,
 * find, load), state_meta.c (the metadata) and loop_state.c (the loops'
 * glue).
 */
#ifndef REMAT_TRAIN_STATE_IMPL_H
#define REMAT_TRAIN_STATE_IMPL_H

#include "../dist/comm.h"
#include "../session/session_api.h"
#include "safetensors.h"

#define STATE_FORMAT "1"
#define STATE_PREFIX "state-"
#define STATE_SUFFIX ".safetensors"

/* ------------------------------------------------- metadata (state_meta.c) */

/* Key, value pairs (owned), NULL-terminated once finished. */
typedef struct {
    char **kv;
    int n, cap; /* strings, not pairs */
    int oom;
} remat__state_meta;

void remat__meta_add(remat__state_meta *m, const char *key, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
void remat__meta_free(remat__state_meta *m);
/* The value of key (borrowed), NULL when absent. */
const char *remat__meta_get(const remat__state_meta *m, const char *key);
/* The metadata of a state of s: the session's, with o's and at's when
 * not NULL. */
void remat__meta_build(const remat_session *s, const remat_state_opts *o, const remat_train_progress *at,
                       remat__state_meta *m);
/* REMAT_INVALID naming `what`, with both values ("(none)" when absent). */
remat_status remat__meta_differs(const char *path, const char *what, const char *was, const char *now);
/* Both NULL or equal strings. */
int remat__meta_same(const char *a, const char *b);
/* The entries of f that must match now's, compared (remat__meta_differs
 * naming the first that does not). */
remat_status remat__meta_compare(const remat__st *f, const remat__state_meta *now);
/* Several ranks: the run's options, every rank's the same
 * (remat_comm_same), before anything a difference could hang. */
remat_status remat__state_same_run(remat_session *s, const remat_train_opts *o, int64_t batch, int64_t per_epoch,
                                   const char *data);

/* ---------------------------------------------------------- files (state.c) */

/* A state file found in a directory: its step (from its name) and path. */
typedef struct {
    int64_t step;
    char *path; /* owned */
} remat__state_entry;

/* The state files of dir, newest first (caller frees:
 * remat__state_free_entries). */
remat_status remat__state_list_entries(const char *dir, remat__state_entry **out, int *n);
void remat__state_free_entries(remat__state_entry *e, int n);
/* remat_state_load; *used (may be NULL) gets the file loaded (caller frees). */
remat_status remat__state_load_impl(remat_session *s, const remat_state_opts *o, const char *path,
                                    remat_train_progress *at, char **used);

#endif
