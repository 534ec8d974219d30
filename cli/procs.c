/* procs.c: child processes driven over pipes, for `remat bench`.
 *
 * A row of the benchmark runs in a child forked before anything is built,
 * so its peak resident set size (from wait4) is its own. The parent writes
 * one-byte commands to the child and reads fixed-size replies; the child
 * closes the pipes of the children started before it, so that every pipe
 * has one reader and one writer and a child's end is seen as end of input.
 */
#include "cli.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/time.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

int cli_write_all(int fd, const void *buf, size_t n) {
    const char *p = buf;
    while (n) {
        ssize_t k = write(fd, p, n);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) return -1;
        p += k, n -= (size_t)k;
    }
    return 0;
}

int cli_read_all(int fd, void *buf, size_t n) {
    char *p = buf;
    while (n) {
        ssize_t k = read(fd, p, n);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) return -1;
        p += k, n -= (size_t)k;
    }
    return 0;
}

int cli_proc_start(cli_proc *p, const cli_proc *others, int n_others, void (*fn)(void *arg, int cmd, int res),
                   void *arg) {
    int to_child[2], from_child[2];
    p->pid = 0, p->cmd = p->res = -1;
    if (pipe(to_child) != 0) return -1;
    if (pipe(from_child) != 0) {
        close(to_child[0]), close(to_child[1]);
        return -1;
    }
    fflush(stdout), fflush(stderr);
    pid_t pid = fork();
    if (pid < 0) {
        close(to_child[0]), close(to_child[1]), close(from_child[0]), close(from_child[1]);
        return -1;
    }
    if (pid == 0) {
        close(to_child[1]), close(from_child[0]);
        for (int j = 0; j < n_others; j++) {
            if (others[j].cmd >= 0) close(others[j].cmd);
            if (others[j].res >= 0) close(others[j].res);
        }
        fn(arg, to_child[0], from_child[1]);
        _exit(0);
    }
    close(to_child[0]), close(from_child[1]);
    p->pid = pid, p->cmd = to_child[1], p->res = from_child[0];
    return 0;
}

size_t cli_proc_end(cli_proc *p, int *signal_no) {
    *signal_no = 0;
    if (p->pid <= 0) return 0;
    if (p->cmd >= 0) {
        char q = 'Q';
        (void)cli_write_all(p->cmd, &q, 1);
        close(p->cmd);
        p->cmd = -1;
    }
    int status = 0;
    struct rusage ru;
    memset(&ru, 0, sizeof ru);
    while (wait4(p->pid, &status, 0, &ru) < 0 && errno == EINTR) {}
    if (WIFSIGNALED(status)) *signal_no = WTERMSIG(status);
    if (p->res >= 0) close(p->res), p->res = -1;
    p->pid = 0;
    return (size_t)ru.ru_maxrss * 1024; /* Linux: KiB */
}

static void idle(void *arg, int cmd, int res) { (void)arg, (void)cmd, (void)res; }

size_t cli_idle_rss(void) {
    cli_proc p;
    int sig;
    if (cli_proc_start(&p, NULL, 0, idle, NULL) != 0) return 0;
    return cli_proc_end(&p, &sig);
}
