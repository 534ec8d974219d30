/* prefetch.c: the next run's inputs, copied to the device while a run
 * computes (remat_session_bind_next, remat_session_opts.prefetch).
 *
 * A run uploads each bound input when its forward instruction runs, into
 * the input's place in the arena, which the plan gives to other values
 * until then: the current run has no room for the next batch. So a
 * session made with opts.prefetch on a device whose backend can copy on a
 * second stream (backend.h: prefetch, prefetched) holds one more resident
 * block, PREFETCH, with a slot of each input's bytes, counted like the
 * other blocks (in the plan, its budget and held bytes; category
 * communication: bytes in transit between the host and the device).
 *
 * remat_session_bind_next(s, u, p) names p as input u's data for the next
 * run. When the current run has enqueued its work and before it waits
 * for it, p's bytes start their copy into u's slot on the second stream
 * (after this run's own read of the slot), overlapped with the run's
 * compute; the next run, if it binds u to p, takes its input from the slot
 * (a device-to-device copy after the transfer's event) instead of from
 * the host. A copy serves the one run after the one that made it, and
 * only where the binding is the same pointer; any other run uploads as
 * usual. The bytes are p's at the time of the copy, which the caller
 * keeps unchanged from bind_next until that next run returns: the same
 * bytes reach the arena either way, so the same bits come out.
 */
#include "../session/session.h"

#include <stdlib.h>

/* Whether the session keeps a PREFETCH block. */
static int wanted(const remat_session *s) { return s->opts.prefetch && s->be->prefetch && s->be->prefetched; }

remat_status remat__prefetch_init(remat_session *s) {
    if (!wanted(s)) return REMAT_OK;
    const remat_graph *g = s->g;
    int n = 0;
    for (int u = 0; u < g->n; u++) n += g->nodes[u].leaf == REMAT__LEAF_INPUT;
    s->pf_slot = malloc((size_t)g->n * sizeof *s->pf_slot);
    s->pf_dst = calloc((size_t)n + 1, sizeof *s->pf_dst);
    s->pf_bytes = calloc((size_t)n + 1, sizeof *s->pf_bytes);
    s->pf_next = calloc((size_t)n + 1, sizeof *s->pf_next);
    s->pf_src = calloc((size_t)n + 1, sizeof *s->pf_src);
    if (!s->pf_slot || !s->pf_dst || !s->pf_bytes || !s->pf_next || !s->pf_src)
        return remat__err(REMAT_NOMEM, "out of memory creating a session");
    for (int u = 0; u < g->n; u++) {
        s->pf_slot[u] = -1;
        if (g->nodes[u].leaf != REMAT__LEAF_INPUT) continue;
        s->pf_slot[u] = s->pf_n;
        s->pf_bytes[s->pf_n++] = remat__out_bytes(&g->nodes[u]);
    }
    if (!s->pf_n) return REMAT_OK;
    return remat__block_alloc(s, REMAT__BLK_PREFETCH, REMAT_MEM_COMM, s->pf_n, s->pf_bytes, s->pf_dst, 0);
}

void remat__prefetch_free(remat_session *s) {
    size_t counted = 0;
    for (int i = 0; i < s->pf_n; i++) counted += s->pf_bytes[i];
    remat__block_free(s, REMAT__BLK_PREFETCH, REMAT_MEM_COMM, counted);
    free(s->pf_slot), free(s->pf_dst), free(s->pf_bytes), free(s->pf_next), free(s->pf_src);
    s->pf_slot = NULL, s->pf_dst = NULL, s->pf_bytes = NULL, s->pf_next = NULL, s->pf_src = NULL;
    s->pf_n = 0;
}

remat_status remat__prefetch_take(remat_session *s, int32_t node, void *dst, const void *src, size_t bytes,
                                  int *taken) {
    *taken = 0;
    int k = s->pf_slot ? s->pf_slot[node] : -1;
    if (k < 0 || !src || s->pf_src[k] != src || bytes > s->pf_bytes[k]) return REMAT_OK;
    *taken = 1;
    return s->be->prefetched(s->dev, k, dst, s->pf_dst[k], bytes);
}

remat_status remat__prefetch_issue(remat_session *s, int ok) {
    remat_status st = REMAT_OK;
    for (int k = 0; k < s->pf_n; k++) {
        s->pf_src[k] = NULL; /* this run's copies served it alone */
        const void *p = s->pf_next[k];
        s->pf_next[k] = NULL;
        if (!ok || !p || st != REMAT_OK) continue;
        st = s->be->prefetch(s->dev, k, s->pf_dst[k], p, s->pf_bytes[k]);
        if (st == REMAT_OK) s->pf_src[k] = p;
    }
    return st;
}

remat_status remat_session_bind_next(remat_session *s, remat_node input, const void *data) {
    if (!s) return remat__err(REMAT_INVALID, "remat_session_bind_next: the session is NULL");
    if (input < 0 || input >= s->g->n || s->g->nodes[input].leaf != REMAT__LEAF_INPUT)
        return remat__err(REMAT_INVALID, "node %d is not an input", (int)input);
    if (s->pf_slot && s->pf_slot[input] >= 0) s->pf_next[s->pf_slot[input]] = data;
    return REMAT_OK;
}
