/* peak_memo.h: the peaks of schedules already measured, by content
 * (peak_memo.c), so that a planning measures each distinct schedule once.
 *
 * optimal's searches build many schedules that are equal: the same
 * recomputation dropped from candidates that differ elsewhere, a pruned
 * candidate made again from its recipe when it is split, exchanged or
 * placed, a level mask that two tightening paths reach. On densenet-bc
 * (batch 64) half of one planning's 34,556 measured schedules had been
 * measured before. A schedule's key is a
 * 128-bit hash of its instructions (two 64-bit hashes with different
 * seeds): two distinct schedules of one planning share a key with a
 * probability of about n^2 / 2^129 for n schedules, which for a million of
 * them is below 1e-26. Only schedules whose peak was measured (REMAT_OK)
 * are kept; one the step cannot run is measured each time, so its error
 * message is set as before. The memo changes no plan: a peak found in it
 * is the one the schedule's memory plan gives, and the work searches
 * count (instructions built) is counted as before.
 */
#ifndef REMAT_PEAK_MEMO_H
#define REMAT_PEAK_MEMO_H

#include "schedule.h"

/* A schedule's key. */
typedef struct {
    uint64_t a, b;
} remat__skey;

/* What a key's schedule measured: its values' peak and, for a level
 * mask's (remat__level_peak), its cost and the work building it took; for
 * a splitting's try (relax.c, under a key of its own), how many times its
 * peak is reached. */
typedef struct {
    size_t peak;
    double cost, work;
    int runs;
} remat__measured;

/* The peaks measured, by key: an open-addressed table, grown as it fills.
 * Zero-initialized it is empty. One planning's; not shared between
 * threads. */
typedef struct {
    remat__skey *key;     /* per slot; {0, 0}: empty */
    remat__measured *val; /* per slot */
    size_t n, cap;        /* entries, slots (a power of two, or 0) */
    long hits, asks;      /* what lookups found, for the tests */
} remat__peak_memo;

void remat__peak_memo_free(remat__peak_memo *m);

/* The key of sc's instructions (every field of each) and of its loss,
 * fetch and mode. */
remat__skey remat__schedule_key(const remat__schedule *sc);

/* The key of the schedule remat__level_peak builds from level (n nodes'
 * levels), sunk or not, for loss: apart from every schedule's key (other
 * seeds). */
remat__skey remat__level_key(const uint8_t *level, int32_t n, int sink, remat_node loss);

/* 1 and *out where key was measured; 0 else (m may be NULL). */
int remat__peak_memo_get(remat__peak_memo *m, remat__skey key, remat__measured *out);

/* Keeps what key's schedule measured (m may be NULL: nothing kept). Out of
 * memory it keeps nothing and the next lookup measures again: the memo
 * saves work, it decides nothing. */
void remat__peak_memo_put(remat__peak_memo *m, remat__skey key, remat__measured v);

#endif
