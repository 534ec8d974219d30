/* test_guard.c: runs that cannot be mixed, a reader that cannot be fooled,
 * stops that save (issue 22; docs/training-state.md).
 *
 * Without arguments, through the library:
 * - lock: a state directory whose lock another process holds is refused
 *   at once, naming its pid and host, and gets no state; a run holds the
 *   lock while it trains and releases it after. A file another holder
 *   has locked (remat_lock, --save's) is refused naming it, and its lock
 *   file goes with the lock.
 * - reader: beside an intact state, newer files that are a FIFO, a sparse
 *   100 GiB file, an intact state stretched to 4 GiB, a state of another
 *   model, a state of the same model with larger tensors, a state holding
 *   a NaN, and the same step under two names (the damaged one listed
 *   first) are each skipped with a note naming the file, and the newest
 *   intact state is used, within a second (no FIFO blocks, no size is
 *   allocated); loaded directly, each is refused naming what is wrong (the
 *   tensor that holds the NaN). 5,000 damaged states are scanned in linear
 *   time.
 * - round trip: a state saved, loaded into a new session and saved again
 *   is the same file, byte for byte, and every metadata entry is compared
 *   by name, where the optimizer's step count differs from the session's
 *   (the optimizer replaced mid-run) and the data position is mid-epoch.
 * - stop: a stop flag raised during step 5 of 12 ends the loop after step
 *   5 with REMAT_STOPPED and a state of step 5; the resumed run ends with
 *   the uninterrupted run's weights, byte for byte. Without a state
 *   directory the message says nothing was saved; raised before the first
 *   step, that nothing was trained.
 *
 * `test_guard --lock CLI`: two `remat train` runs started together on one
 * state directory with different seeds, three times: one is refused,
 * naming the other's pid, and every state in the directory has the
 * winner's seed. Then one run training toward `--save W`, and a second
 * given the same W: refused at once naming the first, which writes W and
 * releases it.
 *
 * `test_guard --stop-mpi [--quick] CLI MPIRUN...`: the same on 2 ranks
 * (--quick, for the sanitizers: a run of 800 steps), the signal sent to one
 * rank (to mpirun itself, a loaded run was seen to end with no state: open).
 *
 * `test_guard --stop CLI`: SIGTERM at 10 random moments of a run with a
 * state directory: each time the run exits with 143 after writing a state
 * of the step in progress (the newest, named in its message), and the run
 * resumed to its end writes the uninterrupted run's weights, byte for
 * byte. SIGINT exits with 130, SIGHUP with 129, SIGUSR1 with 138; without a state directory
 * the message says what is lost; a second SIGTERM ends the run at once.
 */
#include "remat.h"
#include "check.h"
#include "train/safetensors.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* ------------------------------------------------------------ helpers */

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void make_tmpdir(char *dir, size_t cap, const char *tag) {
    snprintf(dir, cap, "/tmp/remat-guard-%s-XXXXXX", tag);
    CHECK(mkdtemp(dir) != NULL);
}

/* Removes dir with its files and the files of its folders (two levels). */
static void rm_rf(const char *dir) {
    DIR *d = opendir(dir);
    if (!d) return;
    for (struct dirent *e; (e = readdir(d));) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
        char p[4096];
        snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
        struct stat st;
        if (lstat(p, &st) == 0 && S_ISDIR(st.st_mode)) rm_rf(p);
        else unlink(p);
    }
    closedir(d);
    rmdir(dir);
}

static unsigned char *read_all(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    *n = 0;
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long len = ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *b = malloc(len > 0 ? (size_t)len + 1 : 1);
    if (b && len > 0 && fread(b, 1, (size_t)len, f) != (size_t)len) len = 0;
    fclose(f);
    *n = len > 0 ? (size_t)len : 0;
    if (b) b[*n] = 0;
    return b;
}

static void write_all(const char *path, const void *b, size_t n) {
    unlink(path);
    FILE *f = fopen(path, "wb");
    CHECK(f != NULL);
    if (!f) return;
    CHECK(fwrite(b, 1, n, f) == n);
    fclose(f);
}

static int same_file(const char *a, const char *b) {
    size_t na, nb;
    unsigned char *x = read_all(a, &na), *y = read_all(b, &nb);
    int same = x && y && na == nb && na > 0 && !memcmp(x, y, na);
    free(x), free(y);
    return same;
}

/* ------------------------------------------------------------- models */

typedef struct {
    remat_graph *g;
    remat_model m;
    remat_session *s;
} run;

/* An mlp (or cnn) on 1 x side x side images, batch 4, AdamW, seed 7. */
static remat_status open_run(run *r, const char *model, int64_t side) {
    memset(r, 0, sizeof *r);
    remat_status st = remat_graph_create(&r->g);
    if (st != REMAT_OK) return st;
    remat_model_opts mo;
    remat_model_opts_default(&mo);
    remat_model_opts_for(&mo, model);
    mo.batch = 4;
    mo.height = mo.width = side;
    if ((st = remat_model_build(r->g, &mo, &r->m)) != REMAT_OK) return st;
    remat_session_opts so;
    remat_session_opts_default(&so);
    so.threads = 1;
    so.seed = 7;
    remat_optim_opts oo;
    remat_optim_opts_default(&oo, REMAT_OPTIM_ADAMW);
    so.optim = &oo;
    return remat_session_create(&r->s, r->g, r->m.loss, &so);
}

static void close_run(run *r) {
    remat_session_destroy(r->s);
    remat_graph_destroy(r->g);
    memset(r, 0, sizeof *r);
}

typedef struct {
    int64_t nx, ny, classes;
} synth;

static remat_status synth_next(void *user, int64_t step, void *input, void *labels) {
    const synth *sy = user;
    float *x = input;
    int32_t *y = labels;
    for (int64_t i = 0; i < sy->nx; i++) {
        uint32_t h = (uint32_t)(i * 2654435761u) ^ (uint32_t)(step * 40503u + 17u);
        h ^= h >> 15, h *= 2246822519u, h ^= h >> 13;
        x[i] = (float)(h & 0xffff) / 32768.0f - 1.0f;
    }
    for (int64_t i = 0; i < sy->ny; i++) y[i] = (int32_t)((i * 7 + step * 3) % sy->classes);
    return REMAT_OK;
}

static synth synth_for(const run *r) {
    int64_t d[REMAT_MAX_DIMS], l[REMAT_MAX_DIMS];
    int nd = remat_node_shape(r->g, r->m.input, d), nl = remat_node_shape(r->g, r->m.logits, l);
    synth sy = {1, d[0], l[nl - 1]};
    for (int i = 0; i < nd; i++) sy.nx *= d[i];
    return sy;
}

/* What a training call reports, and what a test does during it. */
typedef struct {
    int steps, saves, resumes, notes;
    int64_t resumed_at;
    char notes_text[8192];
    /* during the run */
    const char *lock_path; /* step 1: is this lock held? */
    int lock_held;         /* 1 held, 0 not, -1 not checked */
    long lock_pid;
    volatile sig_atomic_t *stop; /* raised at step stop_at */
    int64_t stop_at;
} trace;

static void on_event(const remat_event *ev, void *user) {
    trace *t = user;
    switch (ev->kind) {
    case REMAT_EVENT_STEP:
        t->steps++;
        if (t->lock_path && ev->step == 1) {
            int fd = open(t->lock_path, O_RDONLY | O_CLOEXEC);
            t->lock_held = fd >= 0 && flock(fd, LOCK_EX | LOCK_NB) != 0 && errno == EWOULDBLOCK;
            char who[128] = "";
            ssize_t k = fd >= 0 ? pread(fd, who, sizeof who - 1, 0) : -1;
            who[k > 0 ? k : 0] = 0;
            sscanf(who, "pid %ld", &t->lock_pid);
            if (fd >= 0) close(fd);
        }
        if (t->stop && ev->step == t->stop_at) *t->stop = SIGTERM;
        break;
    case REMAT_EVENT_SAVE: t->saves++; break;
    case REMAT_EVENT_RESUME:
        t->resumes++;
        t->resumed_at = ev->path ? ev->step : -1;
        break;
    case REMAT_EVENT_NOTE: {
        if (!ev->message || !strstr(ev->message, "skipping")) break; /* "nothing to train" */
        t->notes++;
        size_t at = strlen(t->notes_text);
        snprintf(t->notes_text + at, sizeof t->notes_text - at, "%s\n", ev->message ? ev->message : "");
        break;
    }
    default: break;
    }
}

static int count_states(const char *dir) {
    int64_t *steps;
    int n = 0;
    if (remat_state_list(dir, &steps, &n) != REMAT_OK) return -1;
    free(steps);
    return n;
}

/* --------------------------------------------------------------- lock */

static void lock_library(void) {
    char dir[256], lock[400];
    make_tmpdir(dir, sizeof dir, "lock");
    snprintf(lock, sizeof lock, "%s/remat.lock", dir);
    double t0 = now_s();
    /* another run holds the directory */
    int fd = open(lock, O_RDWR | O_CREAT | O_CLOEXEC, 0666);
    CHECK(fd >= 0 && flock(fd, LOCK_EX | LOCK_NB) == 0);
    const char who[] = "pid 4242 host testhost\n";
    CHECK(pwrite(fd, who, sizeof who - 1, 0) == (ssize_t)(sizeof who - 1));
    run r;
    CHECK_OK(open_run(&r, "mlp", 8));
    synth sy = synth_for(&r);
    trace t = {0};
    remat_train_opts to = {
        .epochs = 1, .steps = 3, .state_dir = dir, .save_every = 1, .on_event = on_event, .user = &t};
    double t1 = now_s();
    remat_status st = remat_train_stream(r.s, &r.m, synth_next, &sy, &to);
    double refused_s = now_s() - t1;
    CHECK_MSG(st == REMAT_INVALID && strstr(remat_last_error(), "in use by another run (pid 4242 on host testhost)") &&
                  strstr(remat_last_error(), dir),
              "a held directory: %s: %s", remat_status_str(st), remat_last_error());
    printf("  held by another run: %s\n", remat_last_error());
    CHECK_MSG(t.steps == 0 && count_states(dir) == 0, "a refused run trained %d steps, left %d states", t.steps,
              count_states(dir));
    CHECK_MSG(refused_s < 2.0, "refused after %.2f s", refused_s);
    close(fd); /* that run ends */
    /* now this run takes it, holds it while it trains, and lets it go */
    t = (trace){.lock_path = lock, .lock_held = -1};
    CHECK_OK(remat_train_stream(r.s, &r.m, synth_next, &sy, &to));
    CHECK_MSG(t.lock_held == 1 && t.lock_pid == (long)getpid(), "during the run: lock held %d by pid %ld", t.lock_held,
              t.lock_pid);
    fd = open(lock, O_RDONLY | O_CLOEXEC);
    CHECK_MSG(fd >= 0 && flock(fd, LOCK_EX | LOCK_NB) == 0, "the lock was not released after the run");
    if (fd >= 0) close(fd);
    CHECK(count_states(dir) == 3);
    close_run(&r);
    rm_rf(dir);
    printf("%-58s refused in %.3f s, naming it (%.2f s)\n", "a state directory another run holds", refused_s,
           now_s() - t0);
}

/* remat_lock (--save's): a file another holder has locked is refused,
 * naming the holder; the lock file goes with the lock, and the file can
 * be locked again after. */
static void lock_file(void) {
    char dir[256], target[400], hidden[400];
    make_tmpdir(dir, sizeof dir, "lockfile");
    snprintf(target, sizeof target, "%s/w.safetensors", dir);
    snprintf(hidden, sizeof hidden, "%s/.w.safetensors.lock", dir);
    remat_lock *a = NULL, *b = NULL;
    CHECK_OK(remat_lock_create(&a, target));
    CHECK(a && remat_lock_note(a) == NULL);
    size_t n;
    char *who = (char *)read_all(hidden, &n), want[800];
    snprintf(want, sizeof want, "pid %ld host ", (long)getpid());
    CHECK_MSG(who && !strncmp(who, want, strlen(want)), "the lock file says '%s'", who ? who : "(none)");
    free(who);
    /* a second holder (another open file: flock tells them apart even in one process) */
    remat_status st = remat_lock_create(&b, target);
    snprintf(want, sizeof want, "%s is being written by another run (pid %ld on host ", target, (long)getpid());
    CHECK_MSG(st == REMAT_INVALID && b == NULL && strstr(remat_last_error(), want), "a held file: %s: %s",
              remat_status_str(st), remat_last_error());
    remat_lock_destroy(a);
    CHECK_MSG(access(hidden, F_OK) != 0, "the lock file outlived its lock");
    CHECK_OK(remat_lock_create(&b, target));
    remat_lock_destroy(b);
    /* a folder that is not there: named */
    snprintf(target, sizeof target, "%s/no/such/w.safetensors", dir);
    st = remat_lock_create(&b, target);
    CHECK_MSG(st == REMAT_IO && b == NULL && strstr(remat_last_error(), "No such file"), "%s", remat_last_error());
    rm_rf(dir);
    printf("%-58s refused, naming it; its lock file removed with it\n", "a --save file another run holds");
}

/* ------------------------------------------------------------- reader */

/* A copy of an intact state (src) at dst whose tensor `which` holds a NaN
 * at element 1, with a valid checksum: *name gets the tensor's name. */
static void plant_nan(const char *src, const char *dst, char *name, size_t cap) {
    remat__st *f = NULL;
    CHECK_OK(remat__st_open_checked(&f, src));
    if (!f) return;
    int n = remat__st_count(f), target = -1;
    remat__st_tensor *ts = calloc((size_t)n, sizeof *ts);
    void **bufs = calloc((size_t)n, sizeof *bufs);
    for (int i = 0; i < n; i++) {
        CHECK_OK(remat__st_get(f, i, &ts[i]));
        bufs[i] = malloc(ts[i].bytes);
        memcpy(bufs[i], ts[i].data, ts[i].bytes);
        ts[i].data = bufs[i];
        if (!strncmp(ts[i].name, "optim.", 6) && strstr(ts[i].name, "exp_avg_sq") && ts[i].bytes >= 8) target = i;
    }
    CHECK(target >= 0);
    if (target >= 0) {
        float nan = strtof("nan", NULL);
        memcpy((float *)bufs[target] + 1, &nan, 4);
        snprintf(name, cap, "%s", ts[target].name);
    }
    /* the metadata without the checksum's two entries (the writer adds them) */
    const char *kv[256];
    int k = 0;
    for (int i = 0; k < 254; i++) {
        const char *key = remat__st_metadata_key(f, i);
        if (!key) break;
        if (!strcmp(key, REMAT__ST_CRC_KEY) || !strcmp(key, REMAT__ST_SIZE_KEY)) continue;
        kv[k++] = key, kv[k++] = remat__st_metadata(f, key);
    }
    kv[k] = NULL;
    CHECK_OK(remat__st_write_ex(dst, n, ts, kv, 1));
    for (int i = 0; i < n; i++) free(bufs[i]);
    free(bufs), free(ts);
    remat__st_close(f);
}

/* Loads the newest usable state of dir into a fresh mlp session: its data
 * step (-1 on failure) and the notes in *t. */
static int64_t load_dir(const char *dir, trace *t, double *secs) {
    run r;
    CHECK_OK(open_run(&r, "mlp", 8));
    *t = (trace){0};
    double t0 = now_s();
    synth sy = synth_for(&r);
    /* through the loop, whose events carry the notes; 1 step asked: the
     * state is past it, nothing is trained */
    remat_train_opts to = {.epochs = 1, .steps = 1, .resume = dir, .on_event = on_event, .user = t};
    remat_status st = remat_train_stream(r.s, &r.m, synth_next, &sy, &to);
    *secs = now_s() - t0;
    if (st != REMAT_OK) printf("  load %s: %s\n", dir, remat_last_error());
    close_run(&r);
    return st == REMAT_OK && t->resumes ? t->resumed_at : -1;
}

static void reader(void) {
    char dir[256], p[600], intact[600], twin[600], twin_bad[600];
    make_tmpdir(dir, sizeof dir, "reader");
    double t0 = now_s();
    /* intact states of steps 3 and 14 */
    run a;
    CHECK_OK(open_run(&a, "mlp", 8));
    synth sy = synth_for(&a);
    remat_train_opts to = {.epochs = 1, .steps = 3};
    CHECK_OK(remat_train_stream(a.s, &a.m, synth_next, &sy, &to));
    snprintf(intact, sizeof intact, "%s/state-3.safetensors", dir);
    CHECK_OK(remat_state_save(a.s, NULL, NULL, intact));
    to.steps = 11; /* 11 more: step 14 */
    CHECK_OK(remat_train_stream(a.s, &a.m, synth_next, &sy, &to));
    char s14[600];
    snprintf(s14, sizeof s14, "%s/s14.keep", dir);
    CHECK_OK(remat_state_save(a.s, NULL, NULL, s14));
    close_run(&a);
    /* a state of another model (cnn), and of this one with larger tensors */
    char foreign[600], larger[600];
    snprintf(foreign, sizeof foreign, "%s/state-000000000012.safetensors", dir);
    snprintf(larger, sizeof larger, "%s/state-000000000013.safetensors", dir);
    CHECK_OK(open_run(&a, "cnn", 12));
    CHECK_OK(remat_state_save(a.s, NULL, NULL, foreign));
    close_run(&a);
    CHECK_OK(open_run(&a, "mlp", 12));
    CHECK_OK(remat_state_save(a.s, NULL, NULL, larger));
    close_run(&a);
    /* a FIFO, a sparse 100 GiB file, the intact state stretched to 4 GiB */
    char fifo[600], sparse[600], stretched[600];
    snprintf(fifo, sizeof fifo, "%s/state-000000000009.safetensors", dir);
    snprintf(sparse, sizeof sparse, "%s/state-000000000010.safetensors", dir);
    snprintf(stretched, sizeof stretched, "%s/state-000000000011.safetensors", dir);
    CHECK(mkfifo(fifo, 0666) == 0);
    int fd = open(sparse, O_WRONLY | O_CREAT | O_TRUNC, 0666);
    CHECK(fd >= 0 && ftruncate(fd, (off_t)100 << 30) == 0);
    if (fd >= 0) close(fd);
    size_t n;
    unsigned char *raw = read_all(intact, &n);
    write_all(stretched, raw, n);
    CHECK(truncate(stretched, (off_t)4 << 30) == 0);
    alarm(60); /* a FIFO that blocks would otherwise wait for ever */

    trace t;
    double secs;
    int64_t got = load_dir(dir, &t, &secs);
    printf("  notes:\n%s", t.notes_text);
    CHECK_MSG(got == 3 && t.notes == 5, "resumed at %lld with %d notes (want 3, 5)", (long long)got, t.notes);
    const struct {
        const char *file, *why;
    } skipped[] = {{fifo, "not a regular file (a FIFO)"},
                   {sparse, "header length 0"},
                   {stretched, "too long: the file has 4294967296 bytes"},
                   {foreign, "has no tensor"},
                   {larger, "has shape"}};
    for (int k = 0; k < 5; k++) {
        const char *at = strstr(t.notes_text, skipped[k].file);
        const char *eol = at ? strchr(at, '\n') : NULL;
        const char *why = at ? strstr(at, skipped[k].why) : NULL;
        CHECK_MSG(at && why && (!eol || why < eol), "no note for %s saying '%s'", skipped[k].file, skipped[k].why);
    }
    CHECK_MSG(secs < 2.0, "the resume past a FIFO and sparse files took %.2f s", secs);
    printf("%-58s skipped with notes in %.3f s\n", "FIFO, 100 GiB sparse, 4 GiB, foreign, larger", secs);

    /* each loaded directly: refused, naming what is wrong */
    run r;
    CHECK_OK(open_run(&r, "mlp", 8));
    for (int k = 0; k < 5; k++) {
        remat_status st = remat_state_load(r.s, NULL, skipped[k].file, NULL);
        CHECK_MSG(st != REMAT_OK && strstr(remat_last_error(), skipped[k].why), "load %s: %s", skipped[k].file,
                  remat_last_error());
    }
    CHECK(remat_session_step_index(r.s) == 0);

    /* the same step under two names, the damaged one listed first */
    snprintf(twin_bad, sizeof twin_bad, "%s/state-000000000014.safetensors", dir);
    snprintf(twin, sizeof twin, "%s/state-14.safetensors", dir);
    free(raw);
    raw = read_all(s14, &n);
    write_all(twin, raw, n);
    write_all(twin_bad, raw, n - 7);
    got = load_dir(dir, &t, &secs);
    CHECK_MSG(got == 14 && t.notes == 1 && strstr(t.notes_text, twin_bad) && strstr(t.notes_text, "truncated"),
              "two names of step 14: resumed at %lld, %d notes: %s", (long long)got, t.notes, t.notes_text);

    /* a NaN in an optimizer tensor: named, and skipped in a directory */
    char nan_state[600], tensor[256] = "";
    snprintf(nan_state, sizeof nan_state, "%s/state-000000000020.safetensors", dir);
    plant_nan(twin, nan_state, tensor, sizeof tensor);
    remat_status st = remat_state_load(r.s, NULL, nan_state, NULL);
    char want[400];
    snprintf(want, sizeof want, "tensor '%s' holds NaN at element 1", tensor);
    CHECK_MSG(st == REMAT_FORMAT && strstr(remat_last_error(), want), "a NaN: %s", remat_last_error());
    printf("  %s\n", remat_last_error());
    CHECK(remat_session_step_index(r.s) == 0);
    got = load_dir(dir, &t, &secs);
    CHECK_MSG(got == 14 && t.notes == 2 && strstr(t.notes_text, want), "past a NaN: resumed at %lld, %d notes",
              (long long)got, t.notes);
    close_run(&r);
    alarm(0);
    free(raw);
    printf("%-58s the intact one used; NaN named\n", "same step under two names; a NaN");

    /* linear scan: 5,000 damaged states above one intact */
    char many[400];
    snprintf(many, sizeof many, "%s/many", dir);
    mkdir(many, 0777);
    raw = read_all(intact, &n);
    snprintf(p, sizeof p, "%s/state-0.safetensors", many);
    write_all(p, raw, n);
    for (int i = 1; i <= 5000; i++) {
        snprintf(p, sizeof p, "%s/state-%d.safetensors", many, i);
        write_all(p, raw, 64);
    }
    free(raw);
    double t1 = now_s();
    int64_t step = -1;
    st = remat_state_find(many, NULL, NULL, NULL, &step);
    double scan_s = now_s() - t1;
    CHECK_MSG(st == REMAT_OK && step == 0, "find among 5,000 damaged: %s, step %lld", remat_last_error(),
              (long long)step);
    CHECK_MSG(scan_s < 2.0, "finding the intact state among 5,000 damaged ones took %.2f s", scan_s);
    printf("%-58s %.3f s\n", "5,000 damaged states scanned", scan_s);
    rm_rf(dir);
    printf("%-58s (%.2f s)\n", "reader", now_s() - t0);
}

/* --------------------------------------------------------- round trip */

static void round_trip(void) {
    char dir[256], a_path[400], b_path[400];
    make_tmpdir(dir, sizeof dir, "trip");
    snprintf(a_path, sizeof a_path, "%s/a.safetensors", dir);
    snprintf(b_path, sizeof b_path, "%s/b.safetensors", dir);
    run r;
    CHECK_OK(open_run(&r, "mlp", 8));
    synth sy = synth_for(&r);
    remat_train_opts to = {.epochs = 1, .steps = 3};
    CHECK_OK(remat_train_stream(r.s, &r.m, synth_next, &sy, &to));
    /* the optimizer replaced mid-run: its step count restarts */
    remat_optim_opts oo;
    remat_optim_opts_default(&oo, REMAT_OPTIM_ADAMW);
    CHECK_OK(remat_session_set_optimizer(r.s, &oo));
    to.steps = 2;
    CHECK_OK(remat_train_stream(r.s, &r.m, synth_next, &sy, &to));
    static const char *const run_kv[] = {"--opt", "x", NULL};
    remat_state_opts so = {.batch = 4, .data_seed = 9, .data = "data X", .batches_per_epoch = 2, .run = run_kv};
    remat_train_progress at = {.data_step = 5, .epoch = 2, .position = 1};
    CHECK_OK(remat_state_save(r.s, &so, &at, a_path));
    close_run(&r);

    CHECK_OK(open_run(&r, "mlp", 8));
    remat_train_progress back = {0};
    CHECK_OK(remat_state_load(r.s, &so, a_path, &back));
    CHECK_MSG(back.data_step == 5 && back.epoch == 2 && back.position == 1, "progress back: %lld %lld %lld",
              (long long)back.data_step, (long long)back.epoch, (long long)back.position);
    CHECK_OK(remat_state_save(r.s, &so, &back, b_path));
    close_run(&r);

    /* every metadata entry by name, then every tensor, then the bytes */
    remat__st *fa = NULL, *fb = NULL;
    CHECK_OK(remat__st_open_checked(&fa, a_path));
    CHECK_OK(remat__st_open_checked(&fb, b_path));
    int entries = 0, tensors = 0;
    for (int i = 0; fa && fb; i++) {
        const char *key = remat__st_metadata_key(fa, i);
        if (!key) break;
        const char *va = remat__st_metadata(fa, key), *vb = remat__st_metadata(fb, key);
        CHECK_MSG(vb && !strcmp(va, vb), "metadata \"%s\": saved '%s', saved again after a load '%s'", key, va,
                  vb ? vb : "(none)");
        entries++;
    }
    CHECK(fa && fb && remat__st_metadata_key(fb, entries) == NULL);
    CHECK_MSG(fa && !strcmp(remat__st_metadata(fa, "optim.step"), "2") && !strcmp(remat__st_metadata(fa, "step"), "5"),
              "the test needs optim.step (2) != step (5)");
    for (int i = 0; fa && fb && i < remat__st_count(fa); i++) {
        remat__st_tensor x, y;
        CHECK_OK(remat__st_get(fa, i, &x));
        int j = remat__st_find(fb, x.name);
        CHECK_MSG(j >= 0 && remat__st_get(fb, j, &y) == REMAT_OK && x.bytes == y.bytes &&
                      !memcmp(x.data, y.data, x.bytes),
                  "tensor '%s' differs after a round trip", x.name);
        tensors++;
    }
    remat__st_close(fa), remat__st_close(fb);
    CHECK_MSG(same_file(a_path, b_path), "the state saved again after a load is not the same file");
    rm_rf(dir);
    printf("%-58s %d metadata entries, %d tensors, same bytes\n", "save, load, save", entries, tensors);
}

/* --------------------------------------------------------------- stop */

static void stop_library(void) {
    char dir[256], sdir[400], ref[400], fin[400];
    make_tmpdir(dir, sizeof dir, "stop");
    snprintf(sdir, sizeof sdir, "%s/states", dir);
    snprintf(ref, sizeof ref, "%s/ref.safetensors", dir);
    snprintf(fin, sizeof fin, "%s/fin.safetensors", dir);
    double t0 = now_s();
    run r;
    CHECK_OK(open_run(&r, "mlp", 8));
    synth sy = synth_for(&r);
    remat_train_opts to = {.epochs = 1, .steps = 12};
    CHECK_OK(remat_train_stream(r.s, &r.m, synth_next, &sy, &to));
    CHECK_OK(remat_safetensors_save(r.s, ref));
    close_run(&r);

    /* raised during step 5 */
    volatile sig_atomic_t stop = 0;
    trace t = {.stop = &stop, .stop_at = 5};
    CHECK_OK(open_run(&r, "mlp", 8));
    to = (remat_train_opts){.epochs = 1,
                            .steps = 12,
                            .state_dir = sdir,
                            .save_every = 100,
                            .on_event = on_event,
                            .user = &t,
                            .stop = &stop};
    remat_status st = remat_train_stream(r.s, &r.m, synth_next, &sy, &to);
    CHECK_MSG(st == REMAT_STOPPED && strstr(remat_last_error(), "stopped on request after step 5 of 12") &&
                  strstr(remat_last_error(), sdir),
              "stopped: %s: %s", remat_status_str(st), remat_last_error());
    printf("  %s\n", remat_last_error());
    int64_t step = -1;
    CHECK_OK(remat_state_find(sdir, NULL, NULL, NULL, &step));
    CHECK_MSG(step == 5 && t.steps == 5 && t.saves == 1, "state of step %lld after %d steps", (long long)step, t.steps);
    close_run(&r);
    /* resumed to the end: the uninterrupted run's weights */
    stop = 0;
    t = (trace){0};
    CHECK_OK(open_run(&r, "mlp", 8));
    to.resume = sdir;
    CHECK_OK(remat_train_stream(r.s, &r.m, synth_next, &sy, &to));
    CHECK(t.resumed_at == 5 && t.steps == 7);
    CHECK_OK(remat_safetensors_save(r.s, fin));
    CHECK_MSG(same_file(ref, fin), "the stopped and resumed run's weights differ from the uninterrupted run's");
    close_run(&r);

    /* no state directory: what is lost */
    stop = 0;
    t = (trace){.stop = &stop, .stop_at = 2};
    CHECK_OK(open_run(&r, "mlp", 8));
    to = (remat_train_opts){.epochs = 1, .steps = 12, .on_event = on_event, .user = &t, .stop = &stop};
    st = remat_train_stream(r.s, &r.m, synth_next, &sy, &to);
    CHECK_MSG(st == REMAT_STOPPED && strstr(remat_last_error(), "after step 2 of 12 with no state directory: the 2 "
                                                                "steps trained in this run are not saved"),
              "no state directory: %s", remat_last_error());
    /* raised before the first step */
    t = (trace){0};
    st = remat_train_stream(r.s, &r.m, synth_next, &sy, &to);
    CHECK_MSG(st == REMAT_STOPPED && t.steps == 0 && strstr(remat_last_error(), "nothing was trained"),
              "before the first step: %s", remat_last_error());
    close_run(&r);
    rm_rf(dir);
    printf("%-58s state of step 5, resumed: same bytes (%.2f s)\n", "stop flag during step 5 of 12", now_s() - t0);
}

/* ---------------------------------------------------------------- CLI */

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;
static double rng_u01(void) {
    rng_state ^= rng_state << 13, rng_state ^= rng_state >> 7, rng_state ^= rng_state << 17;
    return (double)(rng_state >> 11) / 9007199254740992.0;
}

static pid_t spawn(const char *cli, const char *const *args, const char *log) {
    unlink(log); /* not the last run's, read before the child opens it */
    pid_t pid = fork();
    if (pid == 0) {
        int fd = open(log, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        if (fd >= 0) dup2(fd, 1), dup2(fd, 2), close(fd);
        const char *argv[64];
        int k = 0;
        argv[k++] = cli;
        for (int i = 0; args[i] && k < 63; i++) argv[k++] = args[i];
        argv[k] = NULL;
        execv(cli, (char *const *)argv);
        _exit(127);
    }
    return pid;
}

/* The exit status, or 1000 + the signal that ended it. */
static int wait_rc(pid_t pid) {
    int status = 0;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {}
    return WIFEXITED(status) ? WEXITSTATUS(status) : WIFSIGNALED(status) ? 1000 + WTERMSIG(status) : -1;
}

static void sleep_s(double s) {
    struct timespec ts = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
    nanosleep(&ts, NULL);
}

#define TRAIN                                                                                                          \
    "train", "--model", "mlp", "--image", "1x8x8", "--data", "synthetic", "--batch", "4", "--threads", "1",            \
        "--log-every", "100000"

static int lock_test(const char *cli) {
    char dir[256], sdir[400], log[2][400];
    make_tmpdir(dir, sizeof dir, "lockcli");
    snprintf(sdir, sizeof sdir, "%s/states", dir);
    double t0 = now_s();
    for (int round = 0; round < 3; round++) {
        rm_rf(sdir);
        const char *seeds[2] = {"11", "22"};
        pid_t pid[2];
        for (int k = 0; k < 2; k++) {
            snprintf(log[k], sizeof log[k], "%s/log%d.txt", dir, k);
            const char *args[] = {TRAIN, "--steps",      "400", "--seed", seeds[k], "--state-dir",
                                  sdir,  "--save-every", "20",  "--keep", "0",      NULL};
            pid[k] = spawn(cli, args, log[k]);
        }
        int rc[2] = {wait_rc(pid[0]), wait_rc(pid[1])};
        int win = rc[0] == 0 ? 0 : 1, lose = 1 - win;
        size_t n;
        char *out = (char *)read_all(log[lose], &n);
        char want[128];
        snprintf(want, sizeof want, "in use by another run (pid %ld on host ", (long)pid[win]);
        CHECK_MSG(rc[win] == 0 && rc[lose] == 1 && out && (strstr(out, want) || strstr(out, "already holds")),
                  "round %d: exit %d and %d: %s", round, rc[0], rc[1], out ? out : "");
        if (round == 0 && out) printf("  refused: %s", strstr(out, "remat:") ? strstr(out, "remat:") : out);
        int by_lock = out && strstr(out, want) != NULL;
        free(out);
        /* every state is the winner's: its seed */
        int64_t *steps;
        int ns = 0, theirs = 0;
        CHECK_OK(remat_state_list(sdir, &steps, &ns));
        for (int i = 0; i < ns; i++) {
            char p[600];
            snprintf(p, sizeof p, "%s/state-%012lld.safetensors", sdir, (long long)steps[i]);
            remat__st *f = NULL;
            CHECK_OK(remat__st_open_checked(&f, p));
            const char *seed = f ? remat__st_metadata(f, "rng.seed") : NULL;
            theirs += seed && !strcmp(seed, seeds[win]);
            remat__st_close(f);
        }
        free(steps);
        CHECK_MSG(ns == 20 && theirs == ns, "round %d: %d states, %d of them the winner's (seed %s)", round, ns, theirs,
                  seeds[win]);
        printf("  round %d: run %d (seed %s) won, the other refused %s; %d states, all of seed %s\n", round, win,
               seeds[win], by_lock ? "by the lock" : "(the winner had finished)", ns, seeds[win]);
    }
    /* --save: a second run given the file while the first trains toward
     * it is refused at once, naming the first, which then writes it; the
     * lock goes with the write, and a later run may write the file */
    char wfile[600], hidden[600], wlog[2][400];
    snprintf(wfile, sizeof wfile, "%s/w.safetensors", dir);
    snprintf(hidden, sizeof hidden, "%s/.w.safetensors.lock", dir);
    for (int k = 0; k < 2; k++) snprintf(wlog[k], sizeof wlog[k], "%s/wlog%d.txt", dir, k);
    unlink(wfile);
    const char *first[] = {TRAIN, "--steps", "3000", "--seed", "11", "--save", wfile, NULL};
    pid_t a = spawn(cli, first, wlog[0]);
    /* until the first holds the lock (its file names it) */
    char want[800];
    snprintf(want, sizeof want, "pid %ld host ", (long)a);
    int held = 0;
    for (int i = 0; i < 1000 && !held; i++) {
        size_t n;
        char *who = (char *)read_all(hidden, &n);
        held = who && !strncmp(who, want, strlen(want));
        free(who);
        if (!held) sleep_s(0.01);
    }
    CHECK_MSG(held, "the first run never locked %s", wfile);
    const char *second[] = {TRAIN, "--steps", "10", "--seed", "22", "--save", wfile, NULL};
    double ts = now_s();
    int rc2 = wait_rc(spawn(cli, second, wlog[1]));
    double refused_s = now_s() - ts;
    int first_alive = waitpid(a, NULL, WNOHANG) == 0;
    size_t n;
    char *out = (char *)read_all(wlog[1], &n);
    snprintf(want, sizeof want, "%s is being written by another run (pid %ld on host ", wfile, (long)a);
    CHECK_MSG(rc2 == 1 && out && strstr(out, want) && first_alive, "a second --save %s: exit %d%s: %s", wfile, rc2,
              first_alive ? "" : " after the first had ended", out ? out : "");
    if (out && strstr(out, "remat:")) printf("  refused: %s", strstr(out, "remat:"));
    free(out);
    int rc1 = first_alive ? wait_rc(a) : 0;
    out = (char *)read_all(wlog[0], &n);
    CHECK_MSG(rc1 == 0 && out && strstr(out, "saved weights to ") && access(wfile, F_OK) == 0,
              "the first run: exit %d: %s", rc1, out ? out : "");
    free(out);
    CHECK_MSG(access(hidden, F_OK) != 0, "%s is left after the first run", hidden);
    /* the file written, a later run may replace it */
    CHECK_MSG(wait_rc(spawn(cli, second, wlog[1])) == 0, "a run after the first could not write %s", wfile);
    printf("  --save held by a training run: a second refused in %.2f s, naming it\n", refused_s);
    rm_rf(dir);
    printf("lock test: %.1f s\n", now_s() - t0);
    return check_exit("test_guard --lock");
}

/* Waits until the run's log (--log-every 10) shows a step >= target:
 * 1; 0 when the process ended first (its exit status in *rc, as
 * wait_rc gives it). Progress, not time, places the signals: the machine's
 * load cannot make a stop land before the first step or after the last. */
static int wait_for_step(pid_t pid, const char *log, int64_t target, int *rc) {
    for (;;) {
        size_t n;
        char *out = (char *)read_all(log, &n);
        int64_t step = -1;
        for (const char *p = out; p && (p = strstr(p, " step ")); p += 6) {
            char *end;
            long long v = strtoll(p + 6, &end, 10);
            if (*end == '/') step = v;
        }
        free(out);
        if (step >= target) return 1;
        int status;
        if (waitpid(pid, &status, WNOHANG) == pid) {
            *rc = WIFEXITED(status) ? WEXITSTATUS(status) : WIFSIGNALED(status) ? 1000 + WTERMSIG(status) : -1;
            return 0;
        }
        sleep_s(0.0005);
    }
}

#define STOP_STEPS "3000"

/* The newest state's step in dir, or -1. */
static int64_t newest(const char *dir) {
    int64_t step = -1;
    if (remat_state_find(dir, NULL, NULL, NULL, &step) != REMAT_OK) return -1;
    return step;
}

static int stop_test(const char *cli) {
    char dir[256], sdir[400], ref[400], fin[400], log[400];
    make_tmpdir(dir, sizeof dir, "stopcli");
    snprintf(sdir, sizeof sdir, "%s/states", dir);
    snprintf(ref, sizeof ref, "%s/ref.safetensors", dir);
    snprintf(fin, sizeof fin, "%s/fin.safetensors", dir);
    snprintf(log, sizeof log, "%s/log.txt", dir);
    double t0 = now_s();
    /* the uninterrupted run, and its time to scale the delays */
    const char *ref_args[] = {TRAIN, "--steps", STOP_STEPS, "--seed", "5", "--save", ref, NULL};
    double tr = now_s();
    int rc = wait_rc(spawn(cli, ref_args, log));
    double t_ref = now_s() - tr;
    CHECK_MSG(rc == 0, "the uninterrupted run failed (%d); see %s", rc, log);
    if (rc) return check_exit("test_guard --stop");
    mkdir(sdir, 0777);

    const char *run_args[] = {TRAIN, "--steps",      STOP_STEPS, "--seed",      "5",  "--resume",
                              sdir,  "--save-every", "1000",     "--log-every", "10", NULL};
    int stops = 0;
    int64_t last = 0;
    char seen[1024] = "";
    size_t at = 0;
    while (stops < 10) {
        pid_t pid = spawn(cli, run_args, log);
        /* 1 to 200 steps into the run, and a random moment of a step */
        int64_t target = last + 1 + (int64_t)(rng_u01() * 200);
        if (wait_for_step(pid, log, target, &rc)) {
            sleep_s(rng_u01() * 0.002);
            kill(pid, SIGTERM);
            rc = wait_rc(pid);
        }
        size_t n;
        char *out = (char *)read_all(log, &n);
        if (rc == 0) { /* finished before the signal */
            free(out);
            break;
        }
        stops++;
        int64_t step = newest(sdir);
        char want[128];
        snprintf(want, sizeof want, "stopped on request after step %lld of " STOP_STEPS, (long long)step);
        int before_first = out && strstr(out, "before the first step");
        CHECK_MSG(rc == 143 && out && strstr(out, "remat: SIGTERM: ") && (strstr(out, want) || before_first) &&
                      (before_first || strstr(out, "continue with --resume")),
                  "stop %d: exit %d, newest state %lld: %s", stops, rc, (long long)step, out ? out : "");
        CHECK_MSG(step > last || (before_first && step == last), "stop %d: the newest state went from %lld to %lld",
                  stops, (long long)last, (long long)step);
        if (stops == 1 && out)
            printf("  %s", strstr(out, "remat: SIGTERM: s") ? strstr(out, "remat: SIGTERM: s") : out);
        at += (size_t)snprintf(seen + at, sizeof seen - at, "%s%lld", at ? " " : "", (long long)step);
        if (at >= sizeof seen) at = sizeof seen - 1;
        last = step;
        free(out);
    }
    CHECK_MSG(stops == 10, "only %d stops before the run finished", stops);
    const char *fin_args[] = {TRAIN, "--steps", STOP_STEPS, "--seed", "5", "--resume", sdir, "--save", fin, NULL};
    rc = wait_rc(spawn(cli, fin_args, log));
    CHECK_MSG(rc == 0 && same_file(ref, fin),
              "the resumed run (exit %d) did not end with the uninterrupted run's "
              "weights",
              rc);
    printf("  10 SIGTERMs, states after each: %s; resumed to the end: the same weights\n", seen);

    /* SIGINT, SIGHUP and SIGUSR1; no state directory; a second signal */
    const struct {
        int sig, want;
        const char *name;
    } other[] = {{SIGINT, 130, "SIGINT"}, {SIGHUP, 129, "SIGHUP"}, {SIGUSR1, 138, "SIGUSR1"}};
    for (size_t k = 0; k < sizeof other / sizeof other[0]; k++) {
        char odir[500];
        snprintf(odir, sizeof odir, "%s/%s", dir, other[k].name);
        const char *o_args[] = {TRAIN,         "--steps", STOP_STEPS,    "--seed", "5",
                                "--state-dir", odir,      "--log-every", "10",     NULL};
        pid_t pid = spawn(cli, o_args, log);
        if (wait_for_step(pid, log, 50, &rc)) {
            kill(pid, other[k].sig);
            rc = wait_rc(pid);
        }
        size_t n;
        char *out = (char *)read_all(log, &n);
        int64_t step = newest(odir);
        char want[160];
        snprintf(want, sizeof want, "remat: %s: stopped on request after step %lld", other[k].name, (long long)step);
        CHECK_MSG(rc == other[k].want && out && step > 0 && strstr(out, want), "%s: exit %d, state %lld: %s",
                  other[k].name, rc, (long long)step, out ? out : "");
        free(out);
    }
    const char *bare_args[] = {TRAIN, "--steps", STOP_STEPS, "--seed", "5", "--save", fin, "--log-every", "10", NULL};
    pid_t pid = spawn(cli, bare_args, log);
    if (wait_for_step(pid, log, 50, &rc)) {
        kill(pid, SIGTERM);
        rc = wait_rc(pid);
    }
    size_t n;
    char *out = (char *)read_all(log, &n);
    CHECK_MSG(rc == 143 && out && strstr(out, "with no state directory") && strstr(out, "not saved") &&
                  strstr(out, "--save was not written"),
              "no state directory: exit %d: %s", rc, out ? out : "");
    if (out && strstr(out, "remat: SIGTERM: s")) printf("  %s", strstr(out, "remat: SIGTERM: s"));
    free(out);
    /* twice: at once, by the signal (steps of tens of milliseconds, so that
     * the step in progress cannot end the run between the two) */
    const char *long_args[] = {"train",     "--model", "mlp", "--image",     "1x160x160", "--data",
                               "synthetic", "--batch", "16",  "--threads",   "1",         "--steps",
                               "100000",    "--seed",  "5",   "--log-every", "1",         NULL};
    pid = spawn(cli, long_args, log);
    double ts = now_s();
    if (wait_for_step(pid, log, 2, &rc)) {
        kill(pid, SIGTERM);
        /* the second once the first was handled (two pending signals of
         * one kind are one): the handler says so in the log */
        for (int i = 0; i < 5000; i++) {
            size_t n;
            char *out = (char *)read_all(log, &n);
            int seen_first = out && strstr(out, "send it again to stop at once");
            free(out);
            if (seen_first) break;
            sleep_s(0.0002);
        }
        kill(pid, SIGTERM);
        ts = now_s();
        rc = wait_rc(pid);
    }
    CHECK_MSG(rc == 1000 + SIGTERM, "two SIGTERMs: exit %d (want the signal's)", rc);
    printf("  a second SIGTERM ended the run in %.3f s, by the signal\n", now_s() - ts);
    rm_rf(dir);
    printf("stop test: %.1f s (uninterrupted run %.2f s)\n", now_s() - t0, t_ref);
    return check_exit("test_guard --stop");
}

/* The launcher (argv: mpirun and its flags up to the rank count's flag)
 * with "2", then the CLI and args. */
static pid_t spawn_mpi(char **launcher, int nl, const char *cli, const char *const *args, const char *log) {
    const char *all[96];
    int k = 0;
    for (int i = 0; i < nl && k < 80; i++) all[k++] = launcher[i];
    all[k++] = "2";
    for (int i = 0; args[i] && k < 95; i++) all[k++] = i == 0 ? cli : args[i];
    all[k] = NULL;
    unlink(log);
    pid_t pid = fork();
    if (pid == 0) {
        int fd = open(log, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        if (fd >= 0) dup2(fd, 1), dup2(fd, 2), close(fd);
        execvp(all[0], (char *const *)all);
        _exit(127);
    }
    return pid;
}

/* A child of pid (a rank that mpirun started), the last found; 0 if none. */
static pid_t child_of(pid_t parent) {
    DIR *d = opendir("/proc");
    pid_t found = 0;
    for (struct dirent *e; d && (e = readdir(d));) {
        char p[300], buf[512];
        if (e->d_name[0] < '0' || e->d_name[0] > '9') continue;
        snprintf(p, sizeof p, "/proc/%s/stat", e->d_name);
        FILE *f = fopen(p, "r");
        if (!f) continue;
        size_t n = fread(buf, 1, sizeof buf - 1, f);
        fclose(f);
        buf[n] = 0;
        const char *rp = strrchr(buf, ')'); /* "pid (comm) state ppid ..." */
        char st;
        long ppid;
        if (rp && sscanf(rp + 1, " %c %ld", &st, &ppid) == 2 && ppid == (long)parent && strstr(buf, "(remat)"))
            found = (pid_t)atol(e->d_name);
    }
    if (d) closedir(d);
    return found;
}

/* mpirun forwards a signal late (Open MPI: often 1,000 steps of this
 * model later): more steps than the single process's run. */
#define STOP_STEPS_MPI "6000"

/* Under mpirun with 2 ranks: SIGUSR1 to mpirun (which forwards it to
 * every rank; stops 1, 4, 7, 10) or SIGTERM to one rank only (the ranks
 * agree on the stop after every step; the others), at 10 moments; each
 * time every rank stops after the same step and rank 0 writes its state;
 * resumed to the end, the uninterrupted 2-rank run's weights. Not SIGTERM
 * to mpirun: Open MPI 4's mpirun kills the ranks 1 s after it forwards
 * SIGTERM, which on a loaded machine comes before a rank has finished its
 * step and saved (docs/training-state.md). */
static int stop_mpi_test(const char *cli, char **launcher, int nl, int quick) {
    /* the sanitizers' build: a shorter run, signals fewer steps apart */
    const char *steps = quick ? "800" : STOP_STEPS_MPI;
    int apart = quick ? 20 : 200;
    char dir[256], sdir[400], ref[400], fin[400], log[400];
    make_tmpdir(dir, sizeof dir, "stopmpi");
    snprintf(sdir, sizeof sdir, "%s/states", dir);
    snprintf(ref, sizeof ref, "%s/ref.safetensors", dir);
    snprintf(fin, sizeof fin, "%s/fin.safetensors", dir);
    snprintf(log, sizeof log, "%s/log.txt", dir);
    double t0 = now_s();
    const char *ref_args[] = {"remat", TRAIN, "--steps", steps, "--seed", "5", "--save", ref, NULL};
    double tr = now_s();
    int rc = wait_rc(spawn_mpi(launcher, nl, cli, ref_args, log));
    double t_ref = now_s() - tr;
    CHECK_MSG(rc == 0, "the uninterrupted run failed (%d); see %s", rc, log);
    if (rc) return check_exit("test_guard --stop-mpi");
    mkdir(sdir, 0777);
    const char *run_args[] = {"remat",    TRAIN, "--steps",     steps, "--seed", "5",
                              "--resume", sdir,  "--log-every", "10",  NULL};
    int stops = 0, to_rank = 0;
    int64_t last = 0;
    char seen[1024] = "";
    size_t at = 0;
    while (stops < 10) {
        pid_t pid = spawn_mpi(launcher, nl, cli, run_args, log);
        int64_t target = last + 1 + (int64_t)(rng_u01() * apart);
        pid_t rank = 0;
        if (wait_for_step(pid, log, target, &rc)) {
            sleep_s(rng_u01() * 0.002);
            rank = stops % 3 == 0 ? 0 : child_of(pid);
            kill(rank ? rank : pid, rank ? SIGTERM : SIGUSR1);
            to_rank += rank != 0;
            rc = wait_rc(pid);
        }
        size_t n;
        char *out = (char *)read_all(log, &n);
        if (rc == 0 && out && !strstr(out, "stopped on request")) { /* finished first */
            free(out);
            break;
        }
        stops++;
        int64_t step = newest(sdir);
        char want[160];
        snprintf(want, sizeof want, "stopped on request after step %lld of %s", (long long)step, steps);
        int before_first = out && strstr(out, "before the first step");
        CHECK_MSG(rc != 0 && out && (strstr(out, want) || before_first) && !strstr(out, "failed alone"),
                  "stop %d (to %s): exit %d, newest state %lld: %s", stops, rank ? "a rank" : "mpirun", rc,
                  (long long)step, out ? out : "");
        CHECK_MSG(step > last || (before_first && step == last), "stop %d: the newest state went from %lld to %lld",
                  stops, (long long)last, (long long)step);
        at +=
            (size_t)snprintf(seen + at, sizeof seen - at, "%s%lld%s", at ? " " : "", (long long)step, rank ? "r" : "");
        if (at >= sizeof seen) at = sizeof seen - 1;
        last = step;
        free(out);
    }
    CHECK_MSG(stops == 10 && to_rank >= 5 && to_rank <= 6, "%d stops (%d to one rank) before the run finished", stops,
              to_rank);
    const char *fin_args[] = {"remat", TRAIN, "--steps", steps, "--seed", "5", "--resume", sdir, "--save", fin, NULL};
    rc = wait_rc(spawn_mpi(launcher, nl, cli, fin_args, log));
    CHECK_MSG(rc == 0 && same_file(ref, fin),
              "the resumed run (exit %d) did not end with the uninterrupted run's "
              "weights",
              rc);
    printf("  2 ranks, 10 stops (SIGUSR1 to mpirun; r: SIGTERM to one rank), states after each: %s; resumed: the "
           "same weights\n",
           seen);
    rm_rf(dir);
    printf("stop test on 2 ranks: %.1f s (uninterrupted run %.2f s)\n", now_s() - t0, t_ref);
    return check_exit("test_guard --stop-mpi");
}

/* --------------------------------------------------------------- main */

int main(int argc, char **argv) {
    if (argc == 3 && !strcmp(argv[1], "--lock")) return lock_test(argv[2]);
    if (argc == 3 && !strcmp(argv[1], "--stop")) return stop_test(argv[2]);
    if (argc >= 5 && !strcmp(argv[1], "--stop-mpi") && !strcmp(argv[2], "--quick"))
        return stop_mpi_test(argv[3], argv + 4, argc - 4, 1);
    if (argc >= 4 && !strcmp(argv[1], "--stop-mpi")) return stop_mpi_test(argv[2], argv + 3, argc - 3, 0);
    remat_set_blas_threads(1);
    lock_library();
    lock_file();
    reader();
    round_trip();
    stop_library();
    return check_exit("test_guard");
}
