/* lock.c: exclusive locks between processes, so that two runs never write
 * one thing at once: a training state directory (train/state.c, held for
 * the whole run) and a file a run will write at its end (remat_lock, the
 * CLI's --save, held from the start of the run until it is written).
 *
 * A lock is an flock on a small file that says who holds it ("pid <pid>
 * host <host>"), so that the run refused can name the holder. flock locks
 * belong to the open file and the kernel drops them with it, also after a
 * kill: a crashed holder never leaves a stale lock, only its file. A lock
 * file that is removed on release (remat_lock) could be locked by one
 * process after another has already created its successor; so after the
 * flock the file is checked to still be the one at the path, and opened
 * again if not. On a file system without flock (some network mounts),
 * the lock protects nothing and says so.
 */
#include "../remat-impl.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* Reads the holder's name; the holder writes it right after taking the
 * lock, so a reader that finds it empty gives it a moment. */
static void read_holder(int fd, remat__lock_holder *h) {
    char who[256] = "";
    for (int i = 0; i < 20; i++) {
        ssize_t k = pread(fd, who, sizeof who - 1, 0);
        who[k > 0 ? k : 0] = 0;
        if (k > 0 && who[k - 1] == '\n') break;
        nanosleep(&(struct timespec){0, 10000000}, NULL);
    }
    who[strcspn(who, "\n")] = 0;
    h->pid = 0;
    h->host[0] = 0;
    if (sscanf(who, "pid %ld host %127s", &h->pid, h->host) != 2) h->pid = 0, h->host[0] = 0;
}

static void write_holder(int fd) {
    char host[128] = "?", who[256];
    if (gethostname(host, sizeof host) != 0) snprintf(host, sizeof host, "?");
    host[sizeof host - 1] = 0;
    for (char *c = host; *c; c++)
        if (*c == ' ' || *c == '\n') *c = '_';
    int k = snprintf(who, sizeof who, "pid %ld host %s\n", (long)getpid(), host);
    if (ftruncate(fd, 0) != 0 || pwrite(fd, who, (size_t)k, 0) != k) {
        /* the lock holds all the same; only a refused run's message would lack a name */
    }
}

int remat__lock_take(const char *path, int *fd, remat__lock_holder *holder) {
    *fd = -1;
    for (int tries = 0; tries < 100; tries++) {
        int f = open(path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0666);
        if (f < 0) return -1;
        if (flock(f, LOCK_EX | LOCK_NB) != 0) {
            int e = errno;
            if (e == EWOULDBLOCK || e == EINTR) {
                read_holder(f, holder);
                close(f);
                return 1;
            }
            close(f);
            errno = e;
            return -1;
        }
        /* still the file at the path (not one its last holder removed)? */
        struct stat a, b;
        if (fstat(f, &a) == 0 && stat(path, &b) == 0 && a.st_dev == b.st_dev && a.st_ino == b.st_ino) {
            write_holder(f);
            *fd = f;
            return 0;
        }
        close(f);
    }
    errno = EAGAIN;
    return -1;
}

struct remat_lock {
    char *path; /* the lock file, removed on release; NULL when unprotected */
    int fd;
    char note[1200];
};

remat_status remat_lock_create(remat_lock **out, const char *target) {
    *out = NULL;
    if (!target || !*target) return remat__err(REMAT_INVALID, "remat_lock_create: no file to lock");
    remat_lock *l = calloc(1, sizeof *l);
    size_t len = strlen(target);
    char *p = malloc(len + 8);
    if (!l || !p) {
        free(l), free(p);
        return remat__err(REMAT_NOMEM, "out of memory locking %s", target);
    }
    /* ".<name>.lock" beside the target */
    const char *slash = strrchr(target, '/');
    size_t dir = slash ? (size_t)(slash - target) + 1 : 0;
    memcpy(p, target, dir);
    snprintf(p + dir, len + 8 - dir, ".%s.lock", target + dir);
    l->fd = -1;
    remat__lock_holder h;
    int r = remat__lock_take(p, &l->fd, &h);
    if (r == 1) {
        remat_status st =
            h.pid ? remat__err(REMAT_INVALID,
                               "%s is being written by another run (pid %ld on host %s): two runs "
                               "cannot write one file; wait for that run to end, or give this one another name",
                               target, h.pid, h.host)
                  : remat__err(REMAT_INVALID,
                               "%s is being written by another run (it holds %s): two runs cannot "
                               "write one file; wait for that run to end, or give this one another name",
                               target, p);
        free(p), free(l);
        return st;
    }
    if (r < 0 && (errno == ENOLCK || errno == EOPNOTSUPP || errno == ENOSYS || errno == EINVAL)) {
        snprintf(l->note, sizeof l->note,
                 "cannot lock %s (%s): this file system has no locks, so nothing keeps "
                 "another run from writing it too",
                 target, strerror(errno));
        free(p);
        *out = l;
        return REMAT_OK;
    }
    if (r < 0) {
        remat_status st = remat__err(REMAT_IO, "cannot lock %s: %s: %s", target, p, strerror(errno));
        free(p), free(l);
        return st;
    }
    l->path = p;
    *out = l;
    return REMAT_OK;
}

const char *remat_lock_note(const remat_lock *l) { return l && l->note[0] ? l->note : NULL; }

void remat_lock_destroy(remat_lock *l) {
    if (!l) return;
    if (l->path) unlink(l->path); /* before the close: a run that opens it now is refused or opens anew */
    if (l->fd >= 0) close(l->fd);
    free(l->path);
    free(l);
}
