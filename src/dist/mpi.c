/* mpi.c: the MPI communicator (built with REMAT_MPI; tested with Open MPI
 * from Debian's packages).
 *
 * It works on a duplicate of the caller's MPI communicator (MPI_COMM_WORLD
 * by default), so its messages never match the application's, with
 * MPI_ERRORS_RETURN set on it, so that a failing call comes back as a
 * status with MPI's message instead of ending the job behind the caller's
 * back. MPI is initialized here when nothing has initialized it (thread
 * level FUNNELED: only the thread that made the session calls MPI; the
 * kernels' pool threads never do), and then finalized when that
 * communicator is destroyed.
 */
#include "comm.h"

#include <limits.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

typedef struct {
    MPI_Comm comm;
    int finalize; /* this library initialized MPI: finalize it with this communicator */
} mpi_impl;

typedef struct {
    MPI_Request r[2];
} mpi_req;

/* A status naming the MPI call that failed and MPI's reason. */
static remat_status mpi_fail(int rc, const char *what) {
    char msg[MPI_MAX_ERROR_STRING + 1] = "";
    int len = 0;
    if (MPI_Error_string(rc, msg, &len) != MPI_SUCCESS) snprintf(msg, sizeof msg, "error %d", rc);
    return remat__err(REMAT_IO, "MPI: %s failed: %s", what, msg);
}

static void mpi_destroy(void *p) {
    mpi_impl *m = p;
    if (!m) return;
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (!finalized) {
        MPI_Comm_free(&m->comm);
        if (m->finalize) MPI_Finalize();
    }
    free(m);
}

static remat_status mpi_allgather(void *p, const void *mine, size_t bytes, void *all) {
    mpi_impl *m = p;
    if (bytes > INT_MAX) return remat__err(REMAT_UNSUPPORTED, "MPI: an allgather of %zu bytes per rank", bytes);
    int rc = MPI_Allgather(mine, (int)bytes, MPI_BYTE, all, (int)bytes, MPI_BYTE, m->comm);
    return rc == MPI_SUCCESS ? REMAT_OK : mpi_fail(rc, "MPI_Allgather");
}

static remat_status mpi_bcast(void *p, void *buf, size_t bytes, int root) {
    mpi_impl *m = p;
    if (bytes > INT_MAX) return remat__err(REMAT_UNSUPPORTED, "MPI: a broadcast of %zu bytes", bytes);
    int rc = MPI_Bcast(buf, (int)bytes, MPI_BYTE, root, m->comm);
    return rc == MPI_SUCCESS ? REMAT_OK : mpi_fail(rc, "MPI_Bcast");
}

static remat_status mpi_exchange_start(void *p, int peer, int tag, const float *send, float *recv, int64_t n,
                                       void **req) {
    mpi_impl *m = p;
    if (n > INT_MAX) return remat__err(REMAT_UNSUPPORTED, "MPI: an exchange of %lld floats", (long long)n);
    mpi_req *q = malloc(sizeof *q);
    if (!q) return remat__err(REMAT_NOMEM, "out of memory for an MPI exchange");
    /* the receive first: the partner's send finds it posted */
    int rc = MPI_Irecv(recv, (int)n, MPI_FLOAT, peer, tag, m->comm, &q->r[0]);
    if (rc == MPI_SUCCESS) {
        rc = MPI_Isend(send, (int)n, MPI_FLOAT, peer, tag, m->comm, &q->r[1]);
        if (rc != MPI_SUCCESS) {
            MPI_Cancel(&q->r[0]);
            MPI_Request_free(&q->r[0]);
        }
    }
    if (rc != MPI_SUCCESS) {
        free(q);
        return mpi_fail(rc, "MPI_Irecv/MPI_Isend");
    }
    *req = q;
    return REMAT_OK;
}

static remat_status mpi_exchange_test(void *p, void *req, int *done) {
    (void)p;
    mpi_req *q = req;
    int flag = 0;
    int rc = MPI_Testall(2, q->r, &flag, MPI_STATUSES_IGNORE);
    if (rc != MPI_SUCCESS) return mpi_fail(rc, "MPI_Testall");
    *done = flag != 0;
    if (flag) free(q);
    return REMAT_OK;
}

static remat_status mpi_split(void *p, int color, void **out, int *rank, int *size) {
    mpi_impl *m = p, *n = calloc(1, sizeof *n);
    if (!n) return remat__err(REMAT_NOMEM, "out of memory splitting a communicator");
    int me = 0;
    MPI_Comm_rank(m->comm, &me);
    int rc = MPI_Comm_split(m->comm, color, me, &n->comm);
    if (rc != MPI_SUCCESS) {
        free(n);
        return mpi_fail(rc, "MPI_Comm_split");
    }
    MPI_Comm_set_errhandler(n->comm, MPI_ERRORS_RETURN);
    MPI_Comm_rank(n->comm, rank);
    MPI_Comm_size(n->comm, size);
    *out = n;
    return REMAT_OK;
}

static void mpi_abort(void *p, int code) {
    mpi_impl *m = p;
    MPI_Abort(m ? m->comm : MPI_COMM_WORLD, code);
}

static const remat__comm_ops mpi_ops = {
    .kind = "mpi",
    .destroy = mpi_destroy,
    .allgather = mpi_allgather,
    .bcast = mpi_bcast,
    .exchange_start = mpi_exchange_start,
    .exchange_test = mpi_exchange_test,
    .split = mpi_split,
    .abort = mpi_abort,
};

remat_status remat__comm_mpi(remat_comm **out, const void *mpi_comm) {
    int inited = 0, finalized = 0;
    MPI_Initialized(&inited);
    MPI_Finalized(&finalized);
    if (finalized) return remat__err(REMAT_INVALID, "MPI has been finalized in this process: it cannot start again");
    mpi_impl *m = calloc(1, sizeof *m);
    if (!m) return remat__err(REMAT_NOMEM, "out of memory creating a communicator");
    if (!inited) {
        int provided = 0, rc = MPI_Init_thread(NULL, NULL, MPI_THREAD_FUNNELED, &provided);
        if (rc != MPI_SUCCESS) {
            free(m);
            return mpi_fail(rc, "MPI_Init_thread");
        }
        m->finalize = 1;
    }
    MPI_Comm base = mpi_comm ? *(const MPI_Comm *)mpi_comm : MPI_COMM_WORLD;
    int rc = MPI_Comm_dup(base, &m->comm);
    if (rc != MPI_SUCCESS) {
        if (m->finalize) MPI_Finalize();
        free(m);
        return mpi_fail(rc, "MPI_Comm_dup");
    }
    MPI_Comm_set_errhandler(m->comm, MPI_ERRORS_RETURN);
    int rank = 0, size = 1, len = 0;
    MPI_Comm_rank(m->comm, &rank);
    MPI_Comm_size(m->comm, &size);
    char host[MPI_MAX_PROCESSOR_NAME + 1] = "";
    if (MPI_Get_processor_name(host, &len) != MPI_SUCCESS) host[0] = 0;
    return remat__comm_wrap(&mpi_ops, m, rank, size, host, out);
}
