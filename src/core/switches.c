/* switches.c: the environment switches of the CUDA kernels' bf16 policy,
 * read where a plan for the device is made (plan/precision.c, with or
 * without a GPU here) and where a session's kernels are chosen
 * (cuda/backend.cu, cuda/k_conv.cu), so that both read them alike and a
 * misspelt value is refused, naming it, rather than ignored.
 */
#include "../remat-impl.h"

#include <stdlib.h>
#include <string.h>

remat_status remat__cuda_bf16_env(remat__cuda_switches *s) {
    const char *e = getenv("REMAT_CUDA_BF16"), *c = getenv("REMAT_CUDA_CONV16");
    s->views = REMAT__CUDA_NATIVE;
    s->conv_nhwc = 0;
    if (e && !strcmp(e, "views")) s->views = REMAT__CUDA_VIEWS;
    else if (e && !strcmp(e, "elementwise-views")) s->views = REMAT__CUDA_ELEMENTWISE_VIEWS;
    else if (e && *e)
        return remat__err(REMAT_INVALID,
                          "REMAT_CUDA_BF16 is '%s': it takes views or elementwise-views (unset: "
                          "the native bf16 kernels)",
                          e);
    if (c && !strcmp(c, "nhwc")) s->conv_nhwc = 1;
    else if (c && *c && strcmp(c, "nchw"))
        return remat__err(REMAT_INVALID, "REMAT_CUDA_CONV16 is '%s': it takes nchw (the default) or nhwc", c);
    return REMAT_OK;
}
