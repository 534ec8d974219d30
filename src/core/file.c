/* file.c: remat__write_atomic, the one way remat writes a file (remat.h's
 * remat_file_write_atomic for the command line and plan/cost.c, training
 * states and weights through safetensors.c): a temporary
 * ".<name>.tmp.<pid>.<16 hex digits>" beside the target, created with
 * O_EXCL (two writers never share one), written, flushed and fsync'ed,
 * renamed over the target, then the folder fsync'ed. Any failure removes
 * the temporary; a killed writer leaves it behind, and the next write to
 * the same name (or a training state directory's scan) removes the
 * temporaries of that name whose process is gone or that nobody has
 * touched for an hour. Readers never look at temporaries: their names
 * match no file remat reads.
 */
#ifndef _POSIX_C_SOURCE
#define _POSIX_C_SOURCE 200809L
#endif

#include "../remat-impl.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* A name that no other writer picks: pid, clock, a counter and an
 * address mixed by splitmix64 (O_EXCL settles any collision anyway). */
static uint64_t tmp_random(void) {
    static _Atomic uint64_t counter;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    uint64_t z = (uint64_t)ts.tv_sec * 1000000007ull ^ (uint64_t)ts.tv_nsec ^ (uint64_t)getpid() << 40 ^
                 (uint64_t)(uintptr_t)&ts ^ ++counter * 0x9e3779b97f4a7c15ull;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* Splits path into its folder ("." when it has none) and base name;
 * both malloc'd. 0 on success; -1 out of memory, -2 no base name. */
static int split_path(const char *path, char **dir, char **base) {
    const char *slash = strrchr(path, '/');
    const char *b = slash ? slash + 1 : path;
    *dir = *base = NULL;
    if (!*b) return -2;
    size_t dn = slash ? (slash == path ? 1 : (size_t)(slash - path)) : 1;
    *dir = malloc(dn + 1);
    *base = malloc(strlen(b) + 1);
    if (!*dir || !*base) {
        free(*dir), free(*base);
        *dir = *base = NULL;
        return -1;
    }
    memcpy(*dir, slash ? path : ".", dn);
    (*dir)[dn] = 0;
    strcpy(*base, b);
    return 0;
}

int remat__tmp_parse(const char *name, char *base, size_t cap, long *pid) {
    if (name[0] != '.') return 0;
    const char *t = NULL;
    for (const char *p = strstr(name, ".tmp."); p; p = strstr(p + 1, ".tmp.")) t = p;
    if (!t || t == name + 1) return 0;
    const char *q = t + 5, *dot = strchr(q, '.');
    if (!dot || dot == q || !dot[1]) return 0;
    long v = 0;
    for (const char *c = q; c < dot; c++) {
        if (*c < '0' || *c > '9' || v > 99999999) return 0;
        v = v * 10 + (*c - '0');
    }
    for (const char *c = dot + 1; *c; c++)
        if (!((*c >= '0' && *c <= '9') || (*c >= 'a' && *c <= 'f'))) return 0;
    size_t bn = (size_t)(t - (name + 1));
    if (bn + 1 > cap) return 0;
    memcpy(base, name + 1, bn);
    base[bn] = 0;
    *pid = v;
    return 1;
}

/* Temporaries untouched this long are stale even if their pid is alive
 * (reused, or in another PID namespace): a writer touches its file with
 * every write. */
#define STALE_SECONDS 3600

int remat__remove_stale_tmp(const char *dir, int (*keep_base)(const char *base, const void *arg), const void *arg) {
    DIR *d = opendir(dir);
    if (!d) return 0;
    int removed = 0;
    time_t now = time(NULL);
    for (struct dirent *e; (e = readdir(d));) {
        char base[512], full[4096];
        long pid;
        if (!remat__tmp_parse(e->d_name, base, sizeof base, &pid) || !keep_base(base, arg)) continue;
        int gone = pid > 0 && kill((pid_t)pid, 0) != 0 && errno == ESRCH;
        struct stat st;
        if ((size_t)snprintf(full, sizeof full, "%s/%s", dir, e->d_name) >= sizeof full) continue;
        if (lstat(full, &st) != 0 || !S_ISREG(st.st_mode)) continue;
        if (!gone && (pid_t)pid == getpid()) continue; /* this process may be writing it */
        if (gone || now - st.st_mtime > STALE_SECONDS) removed += unlink(full) == 0;
    }
    closedir(d);
    return removed;
}

static int same_base(const char *base, const void *arg) { return strcmp(base, (const char *)arg) == 0; }

remat_status remat__write_atomic(const char *path, remat__writer fn, void *ctx) {
    if (!path || !*path || !fn) return remat__err(REMAT_INVALID, "remat__write_atomic: no path or writer");
    char *dir, *base;
    int sp = split_path(path, &dir, &base);
    if (sp == -2) return remat__err(REMAT_INVALID, "cannot write %s: the path names a directory", path);
    if (sp) return remat__err(REMAT_NOMEM, "%s: out of memory", path);
    size_t cap = strlen(dir) + strlen(base) + 64;
    char *tmp = malloc(cap);
    if (!tmp) {
        free(dir), free(base);
        return remat__err(REMAT_NOMEM, "%s: out of memory", path);
    }
    remat__remove_stale_tmp(dir, same_base, base);
    remat_status rc = REMAT_OK;
    int fd = -1;
    for (int tries = 0; fd < 0 && tries < 100; tries++) {
        snprintf(tmp, cap, "%s/.%s.tmp.%ld.%016llx", dir, base, (long)getpid(), (unsigned long long)tmp_random());
        fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
        if (fd < 0 && errno != EEXIST) break;
    }
    if (fd < 0) {
        rc = remat__err(REMAT_IO, "cannot write %s: cannot create a temporary file in %s: %s", path, dir,
                        strerror(errno));
        goto done;
    }
    FILE *fp = fdopen(fd, "wb");
    if (!fp) {
        rc = remat__err(REMAT_IO, "cannot write %s: %s", path, strerror(errno));
        close(fd);
        unlink(tmp);
        goto done;
    }
    errno = 0;
    rc = fn(fp, ctx);
    int err = errno;
    if (rc == REMAT_IO) rc = remat__err(REMAT_IO, "cannot write %s: %s", path, err ? strerror(err) : "write error");
    if (rc == REMAT_OK && (fflush(fp) != 0 || fsync(fileno(fp)) != 0))
        rc = remat__err(REMAT_IO, "cannot write %s: %s", path, strerror(errno));
    if (fclose(fp) != 0 && rc == REMAT_OK) rc = remat__err(REMAT_IO, "cannot write %s: %s", path, strerror(errno));
    if (rc == REMAT_OK && rename(tmp, path) != 0)
        rc = remat__err(REMAT_IO, "cannot write %s: cannot rename the temporary file to it: %s", path, strerror(errno));
    if (rc != REMAT_OK) {
        unlink(tmp);
        goto done;
    }
    /* the rename itself is durable once the folder is synced (a folder
     * that cannot be synced, EINVAL on some file systems, is not an error) */
    int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd >= 0) {
        if (fsync(dfd) != 0 && errno != EINVAL && errno != EROFS)
            rc = remat__err(REMAT_IO, "cannot write %s: cannot sync its folder %s: %s", path, dir, strerror(errno));
        close(dfd);
    }
done:
    free(tmp), free(dir), free(base);
    return rc;
}

typedef struct {
    const void *data;
    size_t bytes;
} buffer;

static remat_status write_buffer(FILE *fp, void *ctx) {
    const buffer *b = ctx;
    return b->bytes == 0 || fwrite(b->data, 1, b->bytes, fp) == b->bytes ? REMAT_OK : REMAT_IO;
}

remat_status remat_file_write_atomic(const char *path, const void *data, size_t bytes) {
    if (bytes && !data) return remat__err(REMAT_INVALID, "remat_file_write_atomic: %s: no data", path ? path : "");
    buffer b = {data, bytes};
    return remat__write_atomic(path, write_buffer, &b);
}
