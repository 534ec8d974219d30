/* loop_state.c: the glue that lets the training loops (loop.c) save and
 * resume training states (state.c): the state directory's lock, the
 * resume at a loop's start, a save when one is due, a stop on request.
 */
#include "state-impl.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <zlib.h>

static void emit(const remat__loop_state *ls, remat_event *ev) {
    if (ls->o->on_event) ls->o->on_event(ev, ls->o->user);
}

static void note_event(const char *path, const char *why, void *user) {
    const remat__loop_state *ls = user;
    char msg[1200];
    snprintf(msg, sizeof msg, "skipping %s: %s", path, why);
    remat_event ev = {.kind = REMAT_EVENT_NOTE, .path = path, .message = msg};
    emit(ls, &ev);
}

/* 1 if a and b are the same directory. */
static int same_dir(const char *a, const char *b) {
    struct stat x, y;
    return stat(a, &x) == 0 && stat(b, &y) == 0 && x.st_dev == y.st_dev && x.st_ino == y.st_ino;
}

/* The folder of a file path (malloc'd). */
static char *folder_of(const char *path) {
    const char *slash = strrchr(path, '/');
    size_t n = slash ? (slash == path ? 1 : (size_t)(slash - path)) : 1;
    char *d = malloc(n + 1);
    if (!d) return NULL;
    memcpy(d, slash ? path : ".", n);
    d[n] = 0;
    return d;
}

/* ---------------------------------------------------------------- lock */

#define LOCK_NAME "remat.lock"

/* Takes the exclusive lock of a state directory for the run (*fd, held
 * until remat__loop_state_end or the process's end; core/lock.c). The
 * file says who holds it for the message another run gets, and stays
 * when the run ends. A file system that has no locks gets a note and no
 * protection; a held lock is refused at once. */
static remat_status lock_dir(remat__loop_state *ls, const char *dir, int *fd) {
    size_t len = strlen(dir) + sizeof LOCK_NAME + 2;
    char *p = malloc(len);
    *fd = -1;
    if (!p) return remat__err(REMAT_NOMEM, "out of memory");
    snprintf(p, len, "%s/" LOCK_NAME, dir);
    remat__lock_holder h;
    int r = remat__lock_take(p, fd, &h), e = errno;
    free(p);
    if (r == 1 && h.pid)
        return remat__err(REMAT_INVALID,
                          "the state directory %s is in use by another run (pid %ld on host %s): "
                          "two runs cannot save their states in one directory; wait for that run to end, or "
                          "give this one another directory",
                          dir, h.pid, h.host);
    if (r == 1)
        return remat__err(REMAT_INVALID,
                          "the state directory %s is in use by another run (it holds %s/" LOCK_NAME
                          "): two runs cannot save their states in one directory; wait for that run to end, or "
                          "give this one another directory",
                          dir, dir);
    if (r < 0 && (e == ENOLCK || e == EOPNOTSUPP || e == ENOSYS || e == EINVAL)) {
        char msg[1200];
        snprintf(msg, sizeof msg,
                 "cannot lock the state directory %s (%s): this file system has no locks, so nothing "
                 "keeps another run from saving its states there too",
                 dir, strerror(e));
        remat_event ev = {.kind = REMAT_EVENT_NOTE, .message = msg};
        emit(ls, &ev);
        return REMAT_OK;
    }
    if (r < 0)
        return remat__err(REMAT_IO, "cannot lock the state directory %s: %s/" LOCK_NAME ": %s", dir, dir, strerror(e));
    return REMAT_OK;
}

static int is_dir(const char *path) {
    struct stat st;
    return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

/* remat__loop_state_begin on this rank. Rank 0, which writes the states,
 * takes the state directory's lock first (when it exists yet; else after
 * the resume, which then reads another directory or fails), so that two
 * runs never both pass the "no other run's states" check. */
/* Whether a state can be written in dir: a file of the temporaries'
 * pattern made and removed (never read, and removed as stale should this
 * process die right here). */
static remat_status probe_writable(const char *dir) {
    size_t len = strlen(dir) + 64;
    char *probe = malloc(len);
    if (!probe) return remat__err(REMAT_NOMEM, "out of memory");
    snprintf(probe, len, "%s/.probe.tmp.%ld.%08lx", dir, (long)getpid(),
             (unsigned long)((uintptr_t)probe & 0xffffffffu));
    remat_status rc = REMAT_OK;
    int fd = open(probe, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
    if (fd < 0 && errno != EEXIST) rc = remat__err(REMAT_IO, "cannot save states in %s: %s", dir, strerror(errno));
    if (fd >= 0) close(fd), unlink(probe);
    free(probe);
    return rc;
}

static remat_status begin(remat__loop_state *ls, remat_session *s, const remat_train_opts *o, int64_t batch,
                          int64_t per_epoch, const char *data, int64_t *start) {
    if (o->save_every < 0)
        return remat__err(REMAT_INVALID, "save_every must be >= 0, got %lld", (long long)o->save_every);
    if (o->keep < 0) return remat__err(REMAT_INVALID, "keep must be >= 0 (0 keeps every state), got %d", o->keep);
    ls->so = (remat_state_opts){.batch = batch,
                                .data_seed = o->seed,
                                .data = data,
                                .batches_per_epoch = per_epoch,
                                .run = o->run,
                                .note = note_event,
                                .user = ls};
    int writer = o->state_dir && remat_comm_rank(remat__session_comm(s)) == 0;
    remat_status rc = REMAT_OK;
    if (writer && is_dir(o->state_dir)) rc = lock_dir(ls, o->state_dir, &ls->lock_fd);
    if (rc != REMAT_OK) return rc;
    char *resumed_dir = NULL;
    if (o->resume) {
        int resume_is_dir = is_dir(o->resume);
        remat_train_progress at;
        char *used = NULL;
        rc = remat__state_load_impl(s, &ls->so, o->resume, &at, &used);
        int64_t *steps = NULL;
        int n = -1;
        if (rc == REMAT_NOT_FOUND && resume_is_dir && remat_state_list(o->resume, &steps, &n) == REMAT_OK && n == 0) {
            char msg[1200];
            snprintf(msg, sizeof msg, "%s holds no training state yet: training starts at step 0", o->resume);
            remat_event ev = {.kind = REMAT_EVENT_RESUME, .message = msg};
            emit(ls, &ev);
            rc = REMAT_OK;
            resumed_dir = malloc(strlen(o->resume) + 1);
            if (resumed_dir) strcpy(resumed_dir, o->resume);
        } else if (rc == REMAT_OK) {
            *start = at.data_step;
            resumed_dir = resume_is_dir ? malloc(strlen(o->resume) + 1) : folder_of(used);
            if (resumed_dir && resume_is_dir) strcpy(resumed_dir, o->resume);
            remat_event ev = {.kind = REMAT_EVENT_RESUME,
                              .step = at.data_step,
                              .epoch = at.epoch,
                              .step_in_epoch = at.position,
                              .path = used};
            emit(ls, &ev);
        }
        free(steps);
        free(used);
    }
    if (rc == REMAT_OK && o->state_dir) {
        /* fail before the first step when states cannot be written (by
         * rank 0, the one that writes them) */
        if (writer && mkdir(o->state_dir, 0777) != 0 && errno != EEXIST)
            rc = remat__err(REMAT_IO, "cannot create the state directory %s: %s", o->state_dir, strerror(errno));
        if (rc == REMAT_OK && writer && ls->lock_fd < 0) rc = lock_dir(ls, o->state_dir, &ls->lock_fd);
        /* a fresh run must not mix its states with another run's: the
         * next resume would pick the newest of either */
        remat__state_entry *e = NULL;
        int n = 0;
        remat_status lr = rc == REMAT_OK ? remat__state_list_entries(o->state_dir, &e, &n) : REMAT_OK;
        if (lr == REMAT_OK && n > 0 && !(resumed_dir && same_dir(resumed_dir, o->state_dir))) {
            rc = remat__err(REMAT_INVALID,
                            "the state directory %s already holds %d training state%s (the newest: %s): "
                            "resume from %s, or save the states of this run in an empty directory",
                            o->state_dir, n, n == 1 ? "" : "s", e[0].path, n == 1 ? "it" : "them");
        } else if (lr != REMAT_OK && lr != REMAT_NOT_FOUND) {
            rc = lr;
        }
        remat__state_free_entries(e, n);
        if (rc == REMAT_OK && writer) rc = probe_writable(o->state_dir);
    }
    free(resumed_dir);
    return rc;
}

remat_status remat__loop_state_begin(remat__loop_state *ls, remat_session *s, const remat_train_opts *o, int64_t batch,
                                     int64_t per_epoch, const char *data, int64_t *start) {
    remat_comm *comm = remat__session_comm(s);
    int ranks = remat_comm_size(comm);
    memset(ls, 0, sizeof *ls);
    ls->o = o;
    ls->last_saved = -1;
    ls->lock_fd = -1;
    ls->per_epoch = per_epoch;
    *start = 0;
    if (ranks > 1) {
        remat_status rc = remat__state_same_run(s, o, batch, per_epoch, data);
        if (rc != REMAT_OK) return rc;
    }
    if (!o->state_dir && !o->resume) return REMAT_OK;
    remat_status rc = begin(ls, s, o, batch, per_epoch, data, start);
    ls->start = *start;
    if (ranks == 1) return rc;
    /* every rank read the same state: the same data step */
    rc = remat_comm_agree(comm, rc);
    int64_t *steps = rc == REMAT_OK ? malloc((size_t)ranks * sizeof *steps) : NULL;
    if (rc == REMAT_OK && !steps) return remat__err(REMAT_NOMEM, "out of memory"); /* the others may wait: abort */
    if (rc == REMAT_OK) rc = remat_comm_allgather(comm, start, sizeof *start, steps);
    for (int r = 1; rc == REMAT_OK && r < ranks; r++)
        if (steps[r] != steps[0])
            rc = remat__err(REMAT_INVALID,
                            "the ranks resumed from different states: rank 0 at step %lld, rank %d at "
                            "step %lld (every rank must see the same state directory)",
                            (long long)steps[0], r, (long long)steps[r]);
    if (rc != REMAT_OK) remat__comm_failed_together(comm);
    free(steps);
    return rc;
}

remat_status remat__loop_state_step(remat__loop_state *ls, remat_session *s, int64_t done, int last) {
    const remat_train_opts *o = ls->o;
    remat_comm *comm = remat__session_comm(s);
    if (!o || !o->state_dir || done == ls->last_saved) return REMAT_OK;
    if (!last && !(o->save_every > 0 && done % o->save_every == 0)) return REMAT_OK;
    remat_train_progress at = {.data_step = done,
                               .epoch = ls->per_epoch > 0 ? done / ls->per_epoch : 0,
                               .position = ls->per_epoch > 0 ? done % ls->per_epoch : done};
    char *path = NULL;
    /* rank 0 writes (every rank holds the same state); the others learn
     * whether it could */
    remat_status rc =
        remat_comm_rank(comm) == 0 ? remat_state_save_dir(s, &ls->so, &at, o->state_dir, o->keep, &path) : REMAT_OK;
    if (remat_comm_size(comm) > 1) rc = remat_comm_agree(comm, rc);
    if (rc != REMAT_OK) {
        free(path);
        return rc;
    }
    ls->last_saved = done;
    if (path) {
        remat_event ev = {
            .kind = REMAT_EVENT_SAVE, .step = done, .epoch = at.epoch, .step_in_epoch = at.position, .path = path};
        emit(ls, &ev);
    }
    free(path);
    return REMAT_OK;
}

remat_status remat__loop_state_stop(remat__loop_state *ls, remat_session *s, int64_t done, int64_t total) {
    const remat_train_opts *o = ls->o;
    remat_comm *comm = remat__session_comm(s);
    int ranks = remat_comm_size(comm);
    if (!o || !o->stop || done >= total) return REMAT_OK;
    int mine = *o->stop, asked = mine;
    if (ranks > 1) {
        int *all = malloc((size_t)ranks * sizeof *all);
        if (!all) return remat__err(REMAT_NOMEM, "out of memory"); /* the others may wait: the caller aborts */
        remat_status rc = remat_comm_allgather(comm, &mine, sizeof mine, all);
        asked = 0;
        for (int r = 0; rc == REMAT_OK && r < ranks && !asked; r++) asked = all[r];
        free(all);
        if (rc != REMAT_OK) return rc;
        if (asked) *o->stop = asked;
    }
    if (!asked) return REMAT_OK;
    /* every rank stops here: a state of this step, unless it has one */
    remat_status rc = REMAT_OK;
    int saved = done == ls->last_saved;
    if (o->state_dir && !saved && done > ls->start) {
        rc = remat__loop_state_step(ls, s, done, 1);
        saved = rc == REMAT_OK;
    }
    if (rc == REMAT_OK) {
        if (done == ls->start)
            rc = remat__err(REMAT_STOPPED,
                            "stopped on request before the first step of this run (step %lld of %lld): "
                            "nothing was trained, nothing is lost",
                            (long long)done + 1, (long long)total);
        else if (o->state_dir && saved)
            rc = remat__err(REMAT_STOPPED,
                            "stopped on request after step %lld of %lld; the training state of step %lld "
                            "is in %s",
                            (long long)done, (long long)total, (long long)done, o->state_dir);
        else
            rc = remat__err(REMAT_STOPPED,
                            "stopped on request after step %lld of %lld with no state directory: the "
                            "%lld step%s trained in this run %s not saved",
                            (long long)done, (long long)total, (long long)(done - ls->start),
                            done - ls->start == 1 ? "" : "s", done - ls->start == 1 ? "is" : "are");
    }
    if (ranks > 1) remat__comm_failed_together(comm);
    return rc;
}

void remat__loop_state_end(remat__loop_state *ls) {
    if (ls && ls->lock_fd >= 0) close(ls->lock_fd);
    if (ls) ls->lock_fd = -1;
}
