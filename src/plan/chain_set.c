/* chain_set.c: the chains optimal.c plans one step as (remat__cut_chains):
 * cut with its shared side inputs set aside and without, and for a traced
 * step with its skips aside too; each planned with and without a traced
 * step's parameter gradients; and twins marked the other way as to the
 * stages that drop their input (chain.c). Each chain's DP plans are
 * candidates, so no way of counting loses a plan.
 */
#include "chain_set.h"

#include <string.h>

remat_status remat__cut_chains(const remat__plan_req *r, remat__chain *c, remat__chain_set *cs) {
    memset(c, 0, REMAT__N_CHAINS * sizeof *c);
    int n_ch = 1;
    /* stages that drop their input (chain.c's mark_drops): remat's own
     * steps' chains have the marks (their plain twins below); a traced
     * step's are plain, and their marked twins chain-drop's, after every
     * other generator: among the chain generator's they took its sampling
     * (optimal.c's CAND_WORK) and pruning work (PRUNE_WORK) from the plain chains (a
     * traced Llama's plan at per-layer's peak: +33.3% FLOPs, not +26.3%) */
    int drops = !r->p->g->traced;
    remat_status st = remat__chain_init_model(r->p, r->loss, 1, 1, drops, &c[0]);
    if (st == REMAT_OK && c[0].n_side) /* and the chain without setting them aside */
        st = remat__chain_init_model(r->p, r->loss, 0, 1, drops, &c[n_ch++]);
    /* and, for a traced step, the chain with the skips set aside too, where
     * there are some (remat's own zoo keeps its two chains and their
     * planning time: test_dominance); its schedules that recompute an op
     * twice are not candidates even for nested plans (they measured 4.5%
     * above their prediction on a GPT-2 with dropout, a modelling gap not
     * yet found) */
    int skips = -1, aside[REMAT__N_CUTS] = {1, 0, 2};
    if (st == REMAT_OK && r->p->g->traced) {
        st = remat__chain_init_model(r->p, r->loss, 2, 1, drops, &c[n_ch]);
        if (st == REMAT_OK && c[n_ch].n_side > c[0].n_side) aside[n_ch] = 2, skips = n_ch++;
        else remat__chain_free(&c[n_ch]);
    }
    /* and each without a traced step's parameter gradients: the model
     * that counts them is the closer one (mlp_bn's floor gap to the ILP:
     * 64% without, 9.4% with), but it still overestimates what a stage
     * holds (its input through its backward, xbar with the output), so its
     * DP's plans at the tightest budgets are not always the simulator's
     * leanest (without these twins, the floors of test_traced_chain's
     * gpt2_tiny and llama_tiny were 3.3% and 8.7% higher) */
    int cuts = n_ch;
    for (int k = 0; k < cuts && st == REMAT_OK && r->p->g->traced && !r->p->grads_resident; k++)
        st = remat__chain_init_model(r->p, r->loss, aside[k], 0, drops, &c[n_ch++]);
    /* and each that has stages dropping their input the other way: the
     * model that frees such an input is the closer one (resnet50 b16's
     * floor 0.8% lower), but its DP's plan at a budget is not always the
     * simulator's leanest (without the plain twins, test_ilp's random
     * graphs had one plan fewer at the ILP's optimum). In a traced step,
     * only the chains without the parameter gradients get marked twins:
     * they make its tightest plans, where freeing a stage's input lowers
     * the floor (per_layer.py's Llama, 4 layers: the nested floor 0.948 ->
     * 0.922 of per-layer checkpointing's peak, BERT 0.892 -> 0.881), and
     * each twin is one more DP over every budget (planning those 1.0 s ->
     * 1.4 s; a twin of every chain: 1.8 s -> 2.5 s at 8 layers x 512, with
     * no floor lower) */
    int twins = n_ch;
    for (int k = 0; k < twins && st == REMAT_OK; k++) {
        cs->other[k] = -1;
        if (drops && !remat__chain_drops(&c[k])) continue;
        if (!drops && k < cuts) continue;
        st = remat__chain_init_model(r->p, r->loss, aside[k % cuts], k < cuts, !drops, &c[n_ch]);
        if (st == REMAT_OK && !drops && !remat__chain_drops(&c[n_ch])) { /* no stage drops its input */
            remat__chain_free(&c[n_ch]);
            continue;
        }
        cs->other[k] = n_ch++;
    }
    cs->n_ch = n_ch, cs->cuts = cuts, cs->twins = twins, cs->skips = skips, cs->drops = drops;
    if (st != REMAT_OK)
        for (int k = 0; k < REMAT__N_CHAINS; k++) remat__chain_free(&c[k]);
    return st;
}
