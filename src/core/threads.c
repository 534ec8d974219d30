/* threads.c: the executor's thread pool.
 *
 * Kernels never create threads; they receive (thread index, thread count)
 * and split their own work. A run wakes the workers, does part 0 on the
 * calling thread, and waits until every part is done. A barrier lets a
 * kernel separate phases (per-thread partial sums, then a reduction).
 */
#include "../remat-impl.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>

struct remat__pool {
    int n; /* threads, the caller included */
    pthread_t *threads;
    pthread_mutex_t mu;
    pthread_cond_t wake, done;
    uint64_t generation; /* bumped for each run */
    int pending;         /* workers still running the current task */
    int quit;
    remat__task fn;
    void *ctx;
    /* sense-reversing barrier */
    atomic_int bar_count;
    atomic_int bar_sense;
};

typedef struct {
    remat__pool *p;
    int ith;
} worker_arg;

static void *worker(void *arg) {
    worker_arg *w = arg;
    remat__pool *p = w->p;
    int ith = w->ith;
    free(w);
    uint64_t seen = 0;
    for (;;) {
        pthread_mutex_lock(&p->mu);
        while (p->generation == seen && !p->quit) pthread_cond_wait(&p->wake, &p->mu);
        if (p->quit) {
            pthread_mutex_unlock(&p->mu);
            return NULL;
        }
        seen = p->generation;
        remat__task fn = p->fn;
        void *ctx = p->ctx;
        pthread_mutex_unlock(&p->mu);

        fn(ctx, ith, p->n);

        pthread_mutex_lock(&p->mu);
        if (--p->pending == 0) pthread_cond_signal(&p->done);
        pthread_mutex_unlock(&p->mu);
    }
}

remat_status remat__pool_create(remat__pool **out, int nthreads) {
    *out = NULL;
    if (nthreads < 1 || nthreads > 1024)
        return remat__err(REMAT_INVALID, "thread count %d is out of range 1..1024", nthreads);
    remat__pool *p = calloc(1, sizeof *p);
    if (!p) return remat__err(REMAT_NOMEM, "out of memory creating a thread pool");
    p->n = nthreads;
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->wake, NULL);
    pthread_cond_init(&p->done, NULL);
    atomic_init(&p->bar_count, 0);
    atomic_init(&p->bar_sense, 0);
    if (nthreads > 1) {
        p->threads = calloc((size_t)nthreads - 1, sizeof *p->threads);
        if (!p->threads) {
            remat__pool_destroy(p);
            return remat__err(REMAT_NOMEM, "out of memory creating a thread pool");
        }
        for (int i = 1; i < nthreads; i++) {
            worker_arg *w = malloc(sizeof *w);
            if (w) *w = (worker_arg){p, i};
            if (!w || pthread_create(&p->threads[i - 1], NULL, worker, w) != 0) {
                free(w);
                p->n = i; /* destroy joins only the threads started */
                remat__pool_destroy(p);
                return remat__err(REMAT_INTERNAL, "could not start thread %d", i);
            }
        }
    }
    *out = p;
    return REMAT_OK;
}

void remat__pool_destroy(remat__pool *p) {
    if (!p) return;
    pthread_mutex_lock(&p->mu);
    p->quit = 1;
    pthread_cond_broadcast(&p->wake);
    pthread_mutex_unlock(&p->mu);
    for (int i = 1; i < p->n && p->threads; i++) pthread_join(p->threads[i - 1], NULL);
    free(p->threads);
    pthread_mutex_destroy(&p->mu);
    pthread_cond_destroy(&p->wake);
    pthread_cond_destroy(&p->done);
    free(p);
}

int remat__pool_size(const remat__pool *p) { return p->n; }

void remat__pool_run(remat__pool *p, remat__task fn, void *ctx) {
    if (p->n == 1) {
        fn(ctx, 0, 1);
        return;
    }
    pthread_mutex_lock(&p->mu);
    p->fn = fn;
    p->ctx = ctx;
    p->pending = p->n - 1;
    p->generation++;
    pthread_cond_broadcast(&p->wake);
    pthread_mutex_unlock(&p->mu);

    fn(ctx, 0, p->n);

    pthread_mutex_lock(&p->mu);
    while (p->pending > 0) pthread_cond_wait(&p->done, &p->mu);
    pthread_mutex_unlock(&p->mu);
}

void remat__pool_barrier(remat__pool *p) {
    if (!p || p->n == 1) return;
    int sense = atomic_load(&p->bar_sense);
    if (atomic_fetch_add(&p->bar_count, 1) == p->n - 1) {
        atomic_store(&p->bar_count, 0);
        atomic_store(&p->bar_sense, !sense);
    } else {
        while (atomic_load(&p->bar_sense) == sense) sched_yield();
    }
}
