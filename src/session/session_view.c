/* session_view.c: the session as the layers above the executor see it
 * (session_api.h): whether it can run, its options, its loss, its
 * profile. Apart from session.c, which calls every other file of the session, so
 * that the files which only check a session do not call back into it.
 */
#include "session.h"

remat_status remat__session_runnable(const remat_session *s, const char *what) {
    if (!s) return remat__err(REMAT_INVALID, "%s: the session is NULL", what);
    if (s->opts.plan_only)
        return remat__err(REMAT_INVALID,
                          "%s: the session was created to plan only (plan_only): it holds no "
                          "parameters or memory to run with",
                          what);
    return REMAT_OK;
}

const remat_session_opts *remat__session_opts(const remat_session *s) { return &s->opts; }

remat_node remat__session_loss(const remat_session *s) { return s->loss; }

double *remat__session_node_profile(remat_session *s) { return s->prof_node; }
