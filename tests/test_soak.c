/* test_soak.c: a long run that saves often stays the same size (issue 22;
 * docs/training-state.md).
 *
 * `test_soak CLI`: `remat train --model mlp --image 1x8x8 --data synthetic`
 * for 20,000 steps with a training state every 100 steps, `--keep 3` and a
 * state directory (200 saves, 197 removals). While it runs, the driver
 * samples the run's resident memory (VmRSS in /proc/<pid>/status) and the
 * state directory's listing every millisecond or so, reading the run's
 * progress from the newest state's step. It checks:
 * - memory is flat after warm-up: the most resident memory seen from the
 *   state of step 1,000 on, while the run trains (before its final
 *   state), exceeds the most seen between steps 1,000 and 2,000 by less
 *   than 2 MiB (windows, so that a sample taken during a save, which holds
 *   a state's bytes for a moment, is compared with another such; a leak
 *   of one state's 600 KB per save would grow by about 110 MiB). What the
 *   process touches while it exits (libraries' teardown, tens of MiB) is
 *   printed, not bounded: it happens once;
 * - the directory never holds more than keep + 1 files of states and
 *   temporaries together (the new state before the oldest is removed, or
 *   a temporary being written beside keep states), never more than one
 *   temporary, and at the end exactly the states of steps 19,800, 19,900
 *   and 20,000 (and remat.lock);
 * - the run exits 0.
 * It prints the measured figures.
 *
 * `test_soak --quick CLI` (the sanitizers' build): 3,000 steps, the same
 * directory checks; memory is printed but not bounded, since AddressSanitizer
 * holds freed memory in its quarantine and grows its shadow by design (leaks
 * are LeakSanitizer's job there, at the run's exit).
 */
#include "check.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define KEEP 3
#define SAVE_EVERY 100
#define WARM_STEP 1000        /* memory is flat from here on */
#define WINDOW_END 2000       /* the reference window: steps WARM_STEP..WINDOW_END */
#define GROWTH_KIB (2 * 1024) /* the bound on growth after the reference window */

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* VmRSS of pid in KiB; -1 once it is gone. */
static long rss_kib(pid_t pid) {
    char path[64], line[256];
    snprintf(path, sizeof path, "/proc/%ld/status", (long)pid);
    FILE *f = fopen(path, "r");
    if (!f) return -1;
    long kib = -1;
    while (fgets(line, sizeof line, f))
        if (sscanf(line, "VmRSS: %ld kB", &kib) == 1) break;
    fclose(f);
    return kib;
}

/* What one listing of the state directory holds. */
typedef struct {
    int states, temporaries, others;
    long long newest; /* the newest state's step, -1 without one */
} listing;

static int list_dir(const char *dir, listing *l) {
    memset(l, 0, sizeof *l);
    l->newest = -1;
    DIR *d = opendir(dir);
    if (!d) return -1;
    for (struct dirent *e; (e = readdir(d));) {
        const char *n = e->d_name;
        long long step;
        char tail[32];
        if (!strcmp(n, ".") || !strcmp(n, "..") || !strcmp(n, "remat.lock")) continue;
        if (n[0] == '.' && strstr(n, ".tmp.")) { /* a state being written, or the start's probe */
            l->temporaries++;
        } else if (sscanf(n, "state-%lld%31s", &step, tail) == 2 && !strcmp(tail, ".safetensors")) {
            l->states++;
            if (step > l->newest) l->newest = step;
        } else {
            l->others++;
            fprintf(stderr, "  unexpected in the state directory: %s\n", n);
        }
    }
    closedir(d);
    return 0;
}

static int soak(const char *cli, int quick) {
    const long long steps = quick ? 3000 : 20000;
    char dir[256], sdir[400], log[400], steps_s[32], keep_s[16], every_s[16];
    snprintf(dir, sizeof dir, "/tmp/remat-soak-XXXXXX");
    if (!mkdtemp(dir)) {
        fprintf(stderr, "test_soak: cannot create a folder in /tmp: %s\n", strerror(errno));
        return 1;
    }
    snprintf(sdir, sizeof sdir, "%s/states", dir);
    snprintf(log, sizeof log, "%s/log.txt", dir);
    snprintf(steps_s, sizeof steps_s, "%lld", steps);
    snprintf(keep_s, sizeof keep_s, "%d", KEEP);
    snprintf(every_s, sizeof every_s, "%d", SAVE_EVERY);
    const char *argv[] = {
        cli,           "train", "--model",      "mlp",   "--image", "1x8x8", "--data",      "synthetic",
        "--batch",     "4",     "--threads",    "1",     "--steps", steps_s, "--log-every", "1000",
        "--state-dir", sdir,    "--save-every", every_s, "--keep",  keep_s,  NULL};
    double t0 = now_s();
    pid_t pid = fork();
    if (pid == 0) {
        int fd = open(log, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        if (fd >= 0) dup2(fd, 1), dup2(fd, 2), close(fd);
        execv(cli, (char *const *)argv);
        _exit(127);
    }
    CHECK(pid > 0);
    /* sample until it exits */
    long first = -1, window_max = -1, after_max = -1, last = -1, exit_max = -1, samples = 0;
    long long first_step = -1, after_max_step = -1;
    int most_files = 0, most_temps = 0, most_states = 0, status = 0, done = 0;
    while (!done) {
        listing l;
        long kib = rss_kib(pid);
        int listed = list_dir(sdir, &l) == 0;
        if (waitpid(pid, &status, WNOHANG) == pid) done = 1;
        if (done || !listed) {
            if (!done) nanosleep(&(struct timespec){0, 1000000}, NULL);
            continue;
        }
        samples++;
        if (l.states + l.temporaries > most_files) most_files = l.states + l.temporaries;
        if (l.temporaries > most_temps) most_temps = l.temporaries;
        if (l.states > most_states) most_states = l.states;
        CHECK_MSG(l.states + l.temporaries <= KEEP + 1 && l.temporaries <= 1 && l.others == 0,
                  "at step %lld the state directory holds %d states and %d temporaries (and %d other files)", l.newest,
                  l.states, l.temporaries, l.others);
        if (kib > 0 && l.newest >= steps) exit_max = kib > exit_max ? kib : exit_max;
        if (kib > 0 && l.newest >= WARM_STEP && l.newest < steps) {
            if (first < 0) first = kib, first_step = l.newest;
            if (l.newest <= WINDOW_END && kib > window_max) window_max = kib;
            if (kib > after_max) after_max = kib, after_max_step = l.newest;
            last = kib;
        }
        nanosleep(&(struct timespec){0, 1000000}, NULL);
    }
    double secs = now_s() - t0;
    int rc = WIFEXITED(status) ? WEXITSTATUS(status) : 1000 + (WIFSIGNALED(status) ? WTERMSIG(status) : 0);
    if (rc != 0) {
        char buf[4096] = "";
        FILE *f = fopen(log, "r");
        if (f) buf[fread(buf, 1, sizeof buf - 1, f)] = 0, fclose(f);
        fprintf(stderr, "the run exited with %d:\n%s\n", rc, buf);
    }
    CHECK(rc == 0);
    /* the end: exactly the newest KEEP states */
    listing end;
    CHECK(list_dir(sdir, &end) == 0);
    CHECK_MSG(end.states == KEEP && end.temporaries == 0 && end.newest == steps,
              "at the end: %d states (newest %lld), %d temporaries", end.states, end.newest, end.temporaries);
    for (int k = 0; k < KEEP; k++) {
        char p[600];
        snprintf(p, sizeof p, "%s/state-%012lld.safetensors", sdir, steps - (long long)k * SAVE_EVERY);
        CHECK_MSG(access(p, F_OK) == 0, "%s is missing", p);
    }
    CHECK_MSG(first > 0 && window_max > 0, "no memory sample from step %d on (%ld samples)", WARM_STEP, samples);
    long growth = after_max - window_max;
    printf("%lld steps (save every %d, keep %d) in %.1f s, %ld samples\n", steps, SAVE_EVERY, KEEP, secs, samples);
    printf("  resident memory: %ld KiB at step %lld (the first sample from step %d), at most %ld KiB over steps "
           "%d-%d,\n  at most %ld KiB over the whole run (at step %lld), %ld KiB at the last sample before the final "
           "state:\n  growth %+ld KiB (bound: %s%d KiB); after the final state, while the process exits: %ld KiB\n",
           first, first_step, WARM_STEP, window_max, WARM_STEP, WINDOW_END, after_max, after_max_step, last, growth,
           quick ? "none under the sanitizers, else " : "", GROWTH_KIB, exit_max);
    printf("  state directory: at most %d states and temporaries together (bound %d), %d states, %d temporar%s "
           "at once\n",
           most_files, KEEP + 1, most_states, most_temps, most_temps == 1 ? "y" : "ies");
    if (!quick)
        CHECK_MSG(growth < GROWTH_KIB, "resident memory grew by %ld KiB after steps %d-%d (bound %d KiB)", growth,
                  WARM_STEP, WINDOW_END, GROWTH_KIB);
    /* remove what the run left */
    DIR *d = opendir(sdir);
    for (struct dirent *e; d && (e = readdir(d));) {
        char p[700];
        snprintf(p, sizeof p, "%s/%s", sdir, e->d_name);
        if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) unlink(p);
    }
    if (d) closedir(d);
    rmdir(sdir), unlink(log), rmdir(dir);
    return check_exit(quick ? "test_soak --quick" : "test_soak");
}

int main(int argc, char **argv) {
    if (argc == 2) return soak(argv[1], 0);
    if (argc == 3 && !strcmp(argv[1], "--quick")) return soak(argv[2], 1);
    fprintf(stderr, "usage: test_soak [--quick] REMAT_CLI\n");
    return 2;
}
