#!/usr/bin/env python3
"""Optima of the rematerialization ILP for tests/test_ilp.c.

Run from the repository root, with a Python that has scipy (>= 1.9, for
scipy.optimize.milp and its HiGHS solver) and numpy (the tests' venv does
not install them; a venv of its own does):

    build/tests/test_ilp --export /tmp/ilp-dags
    python3 -m venv /tmp/ilp-venv && /tmp/ilp-venv/bin/pip install scipy numpy
    /tmp/ilp-venv/bin/python scripts/gen_ilp_fixtures.py /tmp/ilp-dags tests/fixtures/ilp

(--only NAME for one graph). The first command writes, per test graph
(the random ones and the traced PyTorch steps of tests/graphs/ilp, see
scripts/gen_traced_graphs.py), the training step's data-flow DAG as
remat's schedule simulator sees it and remat's `optimal` plans at six
budgets (see test_ilp.c). This script solves Checkmate's ILP (Jain et al.,
"Checkmate: Breaking the Memory Wall with Optimal Tensor
Rematerialization", MLSys 2020) on each DAG at a set of memory limits and
writes tests/fixtures/ilp/<graph>.json: the DAG (the test compares it with
what it exports now, so a change of the op table or cost model asks for a
regeneration), remat's plans at its budgets, and per limit the optimum,
HiGHS's dual bound, whether the solve was proven optimal, and the optimal
plan itself (test_ilp replays it through remat's simulator). It takes
about a minute (two cores) for the random graphs and several more for the
traced ones (gpt2_1l's 75 operations and llama_1l's 102 take the most);
each solve has a time limit (--time-limit, seconds, 60 by default). The
output is deterministic for a given HiGHS.

The formulation. The operations 0..T-1 are the store-all schedule's
(inputs, forwards in creation order, backwards in reverse creation order);
stage t is the span in which operation t runs for the first time (the
frontier), after recomputing earlier forwards, each at most once and in
that order (Checkmate's frontier-advancing schedules). Variables:
  R[t,k]  binary: operation k runs in stage t (R[t,t] = 1; a backward runs
          only in its own stage: it accumulates into gradients);
  S[t,v]  binary: value v is kept from stage t-1 into stage t;
  L[t,v,k] in [0,1]: v is live while operation k of stage t runs;
  A[t,k]  in [0,1]: forward k of stage t allocates its aux (it does not
          when the aux is kept: a recomputation may reuse it).
Constraints: an operation's inputs are kept or recomputed earlier in its
stage; a kept value was kept or computed in the previous stage; at every
operation k of every stage, live values + what k allocates (its output
and aux, or the gradients it is the first to write) + its workspace +
the gradients in flight <= the limit. Objective: the sum of the costs of
the operations run (remat's cost model: a forward costs its FLOPs, a
backward twice that; an input costs 0).

The memory model is remat's simulator (src/plan/memplan.c) with every value
freed right after its last use, which is how remat's own liveness
(remat__schedule_add_frees) frees the chain and DTR plans:
  - values are forward outputs, aux (layernorm's statistics, attention's
    probabilities) and gradients, at their exact bytes; parameters,
    parameter gradients and optimizer state are resident and not counted
    (test_ilp plans with no resident blocks);
  - while an operation runs, its inputs, what it allocates, its kernel's
    workspace and everything still needed later are live: the simulator's
    peak at that operation;
  - a value is freed right after its last reader; a recomputed output is
    a new instance (the old one went after its last use before it);
  - gradients: allocated (zeroed) by the first backward that writes them,
    freed after the backward that reads them last; the loss's gradient is
    seeded by its own backward; a traced step's parameter gradients
    ("to_end") are held from their first writer to the step's end. They
    run in a fixed order, so their bytes are constants per stage.
The differences from remat's simulator:
  - frees: plans built from checkpoint levels (build.c: store-all, sqrt,
    manual, keep-expensive) free a boundary only when the backward
    frontier passes it, later than its last use; the simulator charges
    them more than the ILP does, never less. test_ilp compares at remat's
    simulated peak P, which is a sound limit for the ILP (C*(P) <= C);
  - the ILP lets a kept aux be reused by a recomputation (build.c's plans
    do) or made again (add_frees's plans do); both are valid executions;
  - the arena: remat's budget bounds its placed arena (256-byte aligned
    blocks, fragmentation); the ILP bounds live bytes, like the
    simulator's unplaced peak;
  - the schedule space: Checkmate's (frontier-advancing in the store-all
    order, recomputations in creation order within a stage); remat's plans
    lie in it (test_ilp checks each), so the ILP is a true lower bound on
    them. Two restrictions, neither of which a remat plan needs: an input
    is uploaded once, as every remat planner does (the executor could
    upload it again, free under the cost model: --reupload-inputs allows
    it, and then the ILP undercuts remat by up to 17% at tight limits
    with no better planning); and a forward whose values nothing can read
    any more is never recomputed (pure waste; leaving those variables out
    makes the ILP several times faster). A remat plan that does recompute
    such a forward is placed in the ILP without it ("dead_recomputations";
    test_ilp drops the same ones before its own simulation).
Before writing a fixture the script places every exported remat plan in
the ILP (its R and least S) and checks it satisfies the constraints, and
records the ILP's peak for it ("ilp_model_peak"): test_ilp checks that it
equals its own eager-free simulation of the plan, so the two memory models
agree exactly on remat's plans.

Every optimal plan of the ILP is checked the same way: the script
recomputes its peak from the constraint rows (it must be within the limit),
and test_ilp replays it through remat's simulator, which must agree on its
peak and cost.

The memory limits solved per graph: each distinct values peak of remat's
exported plans (the exact comparison), and a grid of GRID limits up to the
store-all peak (a lower bound for plans that have changed since the
export). A solve is "optimal" when HiGHS proves it within a relative gap
of 1e-9; test_ilp asserts only against those, and a time-limited one keeps
its best plan and HiGHS's bound for reading.
"""
import argparse
import json
import os
import re
import sys
import time

import numpy as np
from scipy.optimize import Bounds, LinearConstraint, milp
from scipy.sparse import coo_array

GRID = 6
MIP_REL_GAP = 1e-9


class Dag:
    """The exported DAG: operations in frontier order, values, readers.
    reupload: an input may be uploaded again (at cost 0) in a later stage."""

    def __init__(self, d, reupload=False):
        self.ops = d["ops"]
        self.reupload = reupload
        self.T = len(self.ops)
        self.bytes = {v["id"]: int(v["bytes"]) for v in d["values"]}
        self.kind = {v["id"]: v["kind"] for v in d["values"]}
        self.pos = {(o["kind"], o["node"]): k for k, o in enumerate(self.ops)}
        self.fwd = [o["kind"] == "F" for o in self.ops]
        self.producer, self.readers = {}, {}
        first, last = {}, {}
        for k, o in enumerate(self.ops):
            for v in o["writes"]:
                if self.kind[v] == "grad":
                    first.setdefault(v, k)
                    last[v] = k
                else:
                    assert v not in self.producer and o["kind"] == "F", "one forward writes each value"
                    self.producer[v] = k
            for v in o["reads"]:
                if self.kind[v] == "grad":
                    first.setdefault(v, k)
                    last[v] = k
                else:
                    self.readers.setdefault(v, []).append(k)
        # gradients: live from their first writer to their last touch; a
        # traced step's parameter gradients ("to_end") to the step's end
        held = {v["id"] for v in d["values"] if v.get("to_end")}
        self.grad_span = {v: (first[v], self.T - 1 if v in held else last[v]) for v in first}
        self.fvals = sorted(self.producer)
        self.comp = [self.computable(t) for t in range(self.T)]

    def computable(self, t):
        """Operations stage t may run: t, and the earlier forwards whose
        values someone may still read (stage t itself, a later stage, or
        another such forward); running any other is pure waste (and
        leaving them out makes the ILP several times faster). Inputs are
        uploaded once, as by every remat plan, unless reupload."""
        useful = set()
        for k in range(t - 1, -1, -1):
            if not self.fwd[k] or (self.ops[k]["op"] == "input" and not self.reupload):
                continue
            for v in self.ops[k]["writes"]:
                if any(r >= t or r in useful for r in self.readers.get(v, [])):
                    useful.add(k)
                    break
        return sorted(useful) + [t]

    def grads_in_flight(self, t):
        """Bytes of gradients live before operation t's stage runs."""
        return sum(self.bytes[v] for v, (a, b) in self.grad_span.items() if a < t <= b)

    def grads_new(self, t):
        return sum(self.bytes[v] for v, (a, b) in self.grad_span.items() if a == t)


class Ilp:
    """Checkmate's ILP on a Dag; the memory limit is the right-hand side
    of the memory rows, so one model serves every limit."""

    def __init__(self, dag):
        self.dag = dag
        self.names, self.lb, self.ub, self.integ = [], [], [], []
        self.index = {}
        self.rows = []  # (coefficients {var: c}, lo, hi)
        self.mem = []  # (coefficients, constant): peak at one operation of one stage
        self.build()

    def var(self, key, lo, hi, integer):
        self.index[key] = len(self.names)
        self.names.append(key)
        self.lb.append(lo)
        self.ub.append(hi)
        self.integ.append(1 if integer else 0)
        return self.index[key]

    def row(self, coef, lo, hi):
        self.rows.append((coef, lo, hi))

    def R(self, t, k):
        return self.index.get(("R", t, k))

    def S(self, t, v):
        return self.index.get(("S", t, v))

    def build(self):
        d = self.dag
        for t in range(d.T):
            for k in d.comp[t]:
                self.var(("R", t, k), 1 if k == t else 0, 1, True)
        # S[t,v]: v could be held (kept or computed in stage t-1) and is read
        # in stage t (by t or a recomputation) or later
        for t in range(1, d.T):
            comp = set(d.comp[t])
            for v in d.fvals:
                p = d.producer[v]
                if p >= t or not any(r >= t or r in comp for r in d.readers.get(v, [])):
                    continue
                if self.S(t - 1, v) is None and self.R(t - 1, p) is None:
                    continue
                self.var(("S", t, v), 0, 1, True)
        for t in range(d.T):
            self.build_stage(t)

    def build_stage(self, t):
        d = self.dag
        comp = d.comp[t]
        # dependencies: each value an operation reads is kept, or computed before it in the stage
        for k in comp:
            for v in d.ops[k]["reads"]:
                if d.kind[v] == "grad":
                    continue
                coef = {self.R(t, k): 1}
                if self.S(t, v) is not None:
                    coef[self.S(t, v)] = -1
                p = d.producer[v]
                if p < k and self.R(t, p) is not None:
                    coef[self.R(t, p)] = -1
                self.row(coef, -np.inf, 0)
        # keeping: what enters stage t+1 was kept into stage t or computed in it
        for v in d.fvals:
            s1 = self.S(t + 1, v)
            if s1 is None:
                continue
            coef = {s1: 1}
            if self.S(t, v) is not None:
                coef[self.S(t, v)] = -1
            if self.R(t, d.producer[v]) is not None:
                coef[self.R(t, d.producer[v])] = -1
            self.row(coef, -np.inf, 0)
        for k in comp:
            self.build_memory(t, k)

    def live(self, t, k, v):
        """L[t,v,k] >= each way v can be live at operation k of stage t;
        returns the variable, or None when it never is. Each bound is
        (variables at 1, variables at 0): L >= sum(ones) - sum(zeros) -
        (len(ones) - 1). Where the dependency and keeping rows already
        make v present whenever it is needed, "needed" alone is the
        bound, which keeps the LP relaxation tight."""
        d = self.dag
        p = d.producer[v]
        sv, sn, rp = self.S(t, v), self.S(t + 1, v), self.R(t, p)
        later = [j for j in d.readers.get(v, []) if j >= k and self.R(t, j) is not None]
        needed = [self.R(t, j) for j in later] + ([sn] if sn is not None else [])
        if p < k or rp is None:
            # one instance: kept, or computed earlier in this stage; a
            # reader at or after k, or keeping v for stage t+1, needs it
            if sv is None and (rp is None or p >= k):
                return None
            pairs = [([b], []) for b in needed]
        elif sv is None:
            return None  # at or before the recomputation, only a kept instance could be live
        elif d.kind[v] == "aux":
            # a kept aux: the recomputation at p reuses it, or makes it
            # again (then the kept one was not needed after all)
            pairs = [([b], [rp]) for b in needed] + [([sv, b], []) for b in needed]
        else:
            # a kept output, until the recomputation at p makes a new one
            pairs = [([self.R(t, j)], [] if j < p else [rp]) for j in later]
            pairs += [([sn], [rp])] if sn is not None else []
        if not pairs:
            return None
        x = self.var(("L", t, v, k), 0, 1, False)
        for ones, zeros in pairs:
            # L >= sum(ones) - sum(zeros) - (len(ones) - 1)
            coef = {x: 1}
            for a in ones:
                coef[a] = coef.get(a, 0) - 1
            for z in zeros:
                coef[z] = coef.get(z, 0) + 1
            self.row(coef, -(len(ones) - 1), np.inf)
        return x

    def build_memory(self, t, k):
        d = self.dag
        o = d.ops[k]
        coef, const = {}, d.grads_in_flight(t)
        for v in d.fvals:
            x = self.live(t, k, v)
            if x is not None:
                coef[x] = d.bytes[v]
        r = self.R(t, k)
        if d.fwd[k]:
            coef[r] = coef.get(r, 0) + int(o["ws"])
            for v in o["writes"]:
                s = self.S(t, v)
                if d.kind[v] == "aux" and s is not None:
                    # allocated unless the kept one is reused: A >= R - S
                    a = self.var(("A", t, k), 0, 1, False)
                    self.row({a: 1, r: -1, s: 1}, 0, np.inf)
                    coef[a] = d.bytes[v]
                else:
                    coef[r] = coef.get(r, 0) + d.bytes[v]
        else:
            const += int(o["ws"]) + d.grads_new(t)
        self.mem.append((coef, const))

    def cost(self):
        c = np.zeros(len(self.names))
        for key, i in self.index.items():
            if key[0] == "R":
                c[i] = self.dag.ops[key[2]]["cost"]
        return c

    def matrices(self, limit):
        data, ri, ci, lo, hi = [], [], [], [], []
        for n, (coef, a, b) in enumerate(self.rows):
            for j, c in coef.items():
                data.append(c), ri.append(n), ci.append(j)
            lo.append(a), hi.append(b)
        base = len(self.rows)
        for n, (coef, const) in enumerate(self.mem):
            for j, c in coef.items():
                data.append(c), ri.append(base + n), ci.append(j)
            lo.append(-np.inf), hi.append(limit - const)
        A = coo_array((data, (ri, ci)), shape=(base + len(self.mem), len(self.names))).tocsr()
        return A, np.array(lo, dtype=float), np.array(hi, dtype=float)

    def solve(self, limit, time_limit):
        A, lo, hi = self.matrices(limit)
        t0 = time.monotonic()
        res = milp(self.cost(), integrality=np.array(self.integ), bounds=Bounds(self.lb, self.ub),
                   constraints=LinearConstraint(A, lo, hi),
                   options={"time_limit": time_limit, "mip_rel_gap": MIP_REL_GAP, "disp": False})
        out = {"limit": limit}
        self.seconds = time.monotonic() - t0
        if res.status == 2:
            out.update(status="infeasible", optimal=True)
        elif res.x is not None:
            plan = self.plan(res.x)
            peak = self.check_plan([(self.dag.ops[k]["kind"], self.dag.ops[k]["node"]) for k in plan], limit)
            if peak > limit:
                sys.exit(f"the ILP's own plan at limit {limit} peaks at {peak}: the formulation is wrong")
            out.update(status="optimal" if res.status == 0 else "time limit", optimal=bool(res.status == 0),
                       cost=sum(self.dag.ops[k]["cost"] for k in plan), bound=float(res.mip_dual_bound),
                       peak=int(round(peak)), plan=plan)
        else:
            out.update(status=res.message, optimal=False)
        return out

    def plan(self, x):
        """The operations a solution runs, in order (positions in the DAG):
        test_ilp replays them through remat's simulator."""
        d = self.dag
        return [k for t in range(d.T) for k in d.comp[t] if x[self.R(t, k)] > 0.5]

    # ---------------------------------------------------- remat's plans

    def assignment(self, schedule):
        """The ILP's variables for a remat plan (R from its operations, the
        least S that holds it, L and A at their least): raises when the
        plan is outside the ILP's space."""
        d = self.dag
        self.dead = 0
        stages, cur = [[] for _ in range(d.T)], []
        nxt = 0
        for kind, node in schedule:
            k = d.pos[(kind, int(node))]
            if k == nxt:
                stages[nxt] = cur + [k]
                cur, nxt = [], nxt + 1
            elif k < nxt and d.fwd[k] and (not cur or k > cur[-1]):
                if self.R(nxt, k) is not None:
                    cur.append(k)
                elif d.ops[k]["op"] == "input":
                    raise ValueError(f"input {node} uploaded again: outside the ILP's space")
                else:  # a recomputation nothing reads: the ILP leaves it out
                    self.dead += 1
            else:
                raise ValueError(f"operation {kind}{node} at stage {nxt}: outside the ILP's space")
        if nxt != d.T or cur:
            raise ValueError("the plan does not run every operation once")
        x = np.zeros(len(self.names))
        for t, ks in enumerate(stages):
            for k in ks:
                x[self.R(t, k)] = 1
        # least S, backwards: v enters stage t if a reader of the entering
        # instance runs in t, or it goes on to t+1 without being recomputed in t
        for t in range(d.T - 1, 0, -1):
            ran = set(stages[t])
            for v in d.fvals:
                p = d.producer[v]
                if p >= t:
                    continue
                end = p if p in ran else d.T
                need = any(j in ran and j < end for j in d.readers.get(v, []))
                need = need or (p not in ran and self.S(t + 1, v) is not None and x[self.S(t + 1, v)] > 0.5)
                if need:
                    if self.S(t, v) is None:
                        raise ValueError(f"the plan keeps value {v} into stage {t}, which the ILP cannot")
                    x[self.S(t, v)] = 1
        # L and A at the least their rows allow
        for key, i in self.index.items():
            if key[0] in ("L", "A"):
                x[i] = 0
        for coef, lo, _hi in self.rows:
            free = [j for j in coef if self.names[j][0] in ("L", "A")]
            if len(free) == 1 and coef[free[0]] == 1 and lo > -np.inf:
                j = free[0]
                need = lo - sum(c * x[q] for q, c in coef.items() if q != j)
                x[j] = max(x[j], need)
        return x

    def check_plan(self, schedule, limit):
        """The ILP's peak for a remat plan; raises if the plan breaks a
        constraint other than the memory limit."""
        x = self.assignment(schedule)
        A, lo, hi = self.matrices(limit)
        ax = A @ x
        n = len(self.rows)
        bad = np.nonzero((ax[:n] < lo[:n] - 1e-9) | (ax[:n] > hi[:n] + 1e-9))[0]
        if len(bad):
            coef, a, b = self.rows[bad[0]]
            raise ValueError(f"remat's plan breaks ILP row {bad[0]}: {[self.names[j] for j in coef]}")
        return max(sum(c * x[j] for j, c in coef.items()) + const for coef, const in self.mem)


def store_all_peak(ilp):
    """The ILP's peak of the store-all plan (every operation once)."""
    d = ilp.dag
    return ilp.check_plan([(o["kind"], o["node"]) for o in d.ops], 0)


def limits_for(ilp, rows):
    peaks = sorted({int(r["values_peak"]) for r in rows})
    top = int(round(store_all_peak(ilp)))
    lo = min(peaks) if peaks else top
    grid = {int(lo + (top - lo) * i / GRID) for i in range(1, GRID + 1)}
    return sorted(set(peaks) | grid)


def fixture(path, time_limit, reupload):
    with open(path) as f:
        exp = json.load(f)
    dag = Dag(exp["dag"], reupload)
    ilp = Ilp(dag)
    rows = []
    for r in exp["remat"]:
        peak = ilp.check_plan(r["schedule"], r["values_peak"])
        if peak > r["values_peak"]:
            sys.exit(f"{exp['name']} @{r['budget']}: the ILP charges remat's plan {peak} B, above its "
                     f"simulated peak {r['values_peak']}: the memory models disagree")
        rows.append({k: r[k] for k in ("budget", "cost", "values_peak", "held", "candidate")}
                    | {"ilp_model_peak": int(round(peak)), "dead_recomputations": ilp.dead})
    sols = []
    for limit in limits_for(ilp, exp["remat"]):
        s = ilp.solve(limit, time_limit)
        sols.append(s)
        print(f"  {exp['name']} limit {limit:6d}: {s['status']:10s} {s.get('cost', float('nan')):12.0f}"
              f" ({ilp.seconds:.2f} s)", flush=True)
    n_int = sum(ilp.integ)
    return {"name": exp["name"], "reupload_inputs": reupload,
            "ilp_size": {"variables": len(ilp.names), "binaries": n_int, "rows": len(ilp.rows) + len(ilp.mem)},
            "remat": rows, "ilp": sols, "dag": exp["dag"]}


def dumps(obj):
    """JSON, one field a line but lists of numbers on one line: small
    fixtures that diff well."""
    text = json.dumps(obj, indent=1)
    return re.sub(r"\[\s*([-0-9.e, \n]*?)\s*\]", lambda m: "[" + ", ".join(re.split(r",\s*", m.group(1))) + "]",
                  text) + "\n"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("exports", help="the directory test_ilp --export wrote")
    ap.add_argument("out", nargs="?", default="tests/fixtures/ilp")
    ap.add_argument("--time-limit", type=float, default=60.0, help="seconds per solve")
    ap.add_argument("--only", help="one graph")
    ap.add_argument("--reupload-inputs", action="store_true",
                    help="let the ILP upload an input again instead of keeping it (free under remat's cost model; "
                         "no remat plan does it)")
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    names = sorted(f[:-5] for f in os.listdir(a.exports) if f.endswith(".json"))
    for name in names:
        if a.only and name != a.only:
            continue
        t0 = time.monotonic()
        fx = fixture(os.path.join(a.exports, name + ".json"), a.time_limit, a.reupload_inputs)
        with open(os.path.join(a.out, name + ".json"), "w") as f:
            f.write(dumps(fx))
        print(f"{name}: {fx['ilp_size']}, {time.monotonic() - t0:.1f} s", flush=True)


if __name__ == "__main__":
    main()
