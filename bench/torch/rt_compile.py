"""rt.compile (torch.compile with remat's plan as the partitioner) at byte
budgets, against torch.compile's own activation_memory_budget.

    python -m remat.torch run bench/torch/rt_compile.py [--rows gpt2,resnet50] [--budgets 4]
        [--fractions 1.0,0.5,0.2,0.0] [--search 0] [--equal-peak 0] [--rounds 5] [--steps 3]
        [--threads 2] [--device cpu] [--json FILE]

Each row (GPT-2: 4 layers, 256 wide, context 256, GPT-2's vocabulary,
batch 2; ResNet-50: batch 8 at 128x128; SGD with momentum) runs, in this
one process, one after another:

  torch.compile      activation_memory_budget at each --fractions value
                     (1.0: its runtime-optimized min cut)
  torch.compile + checkpoint
                     torch.utils.checkpoint (non-reentrant) around every
                     block (GPT-2's Block, ResNet-50's Bottleneck), compiled
                     at fraction 1.0: what a user writes by hand
  rt.compile         at --budgets budgets spread evenly from the planner's
                     floor to its store-all prediction (the last is
                     store-all's own), then at each torch.compile row's
                     measured peak (the same peak, side by side); where
                     the trial step at rt.compile measures the planner's
                     floor plan over its budget, the floor it names
  remat eager        remat's eager plan (rt.plan, plan.apply()) at each
                     torch.compile row's measured peak: the same budget
                     without compiling
  rt.compile at equal peak
                     with --equal-peak N: for each torch.compile fraction
                     row, rt.compile at the largest byte budget whose
                     MEASURED peak is at most that row's measured peak,
                     found by N steps of bisection over budgets from that
                     peak to what store-all's trial step held (each budget
                     compiled, its trial step run, measured), so that the
                     two are compared at equal real memory; then, with
                     --rounds R, the fraction, rt.compile at that budget
                     and remat's eager plan at the fraction's peak are
                     compiled (planned) again and timed alternately, R
                     rounds of one forward and backward each after a
                     warm-up round: step seconds side by side under the
                     same load, and the median per round of each over the
                     fraction's
  torch.compile search
                     with --search N: for each rt.compile spread row, the
                     fraction whose measured peak fits that row's measured
                     peak, found by N steps of bisection over [0, 1] (a
                     compile each; the peak is assumed to grow with the
                     fraction): the knapsack a user would have to search
                     for to get the same memory

and prints per configuration the measured peak (the heap counter, as
rt.measure counts it, or with --device cuda torch.cuda's peak: parameters, gradients, optimizer state and the batch
plus what a step allocates), rt.compile's prediction and the ratio
measured / predicted, the median step seconds of --steps steps after the
first (which compiles the backward), and the compile seconds (Dynamo,
AOTAutograd, the partition and Inductor's forward: for torch.compile the
first call, one forward included; for rt.compile the backend's seconds,
every plan's compile, and the planning seconds inside them). Inductor's and AOTAutograd's caches of
compiled code are off (TORCHINDUCTOR_FX_GRAPH_CACHE=0 and
TORCHINDUCTOR_AUTOGRAD_CACHE=0, set before torch is imported), so every
compile is a cold one. The same model and weights on every row;
the budget in bytes is what rt.compile promises: measured <= budget.
"""
import argparse
import json
import os
import statistics
import sys
import time

os.environ.setdefault("TORCHINDUCTOR_FX_GRAPH_CACHE", "0")
os.environ.setdefault("TORCHINDUCTOR_AUTOGRAD_CACHE", "0")
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import remat.torch as rt  # noqa: E402


def gpt2():
    from gpt2_model import GPT, GPTConfig
    cfg = GPTConfig(layers=4, embd=256, heads=4, context=256)
    g = torch.Generator().manual_seed(1)
    idx = torch.randint(0, cfg.vocab, (2, cfg.context), generator=g)
    y = torch.randint(0, cfg.vocab, (2, cfg.context), generator=g)
    return (lambda: GPT(cfg)), (idx, y), (lambda out, *_: out[1]), 2


def resnet50():
    import torchvision
    g = torch.Generator().manual_seed(1)
    x = torch.randn(8, 3, 128, 128, generator=g)
    y = torch.randint(0, 1000, (8,), generator=g)
    return (lambda: torchvision.models.resnet50()), (x, y), F.cross_entropy, 1


ROWS = {"gpt2": gpt2, "resnet50": resnet50}


def run_steps(step, model, opt, args, steps):
    r = rt.measure(_Step(step, model), args, lambda loss: loss, optimizer=opt, steps=steps + 1)
    times = [s["seconds"] for s in r["steps"][1:]]
    return r["peak_bytes"], statistics.median(times)


class _Step:
    """A compiled callable with the model's parameters, for rt.measure."""

    def __init__(self, fn, model):
        self.fn, self.model = fn, model

    def __call__(self, *args):
        return self.fn(*args)

    def __getattr__(self, name):
        return getattr(self.model, name)


BLOCKS = {"gpt2": lambda m: [(m.transformer.h, i) for i in range(len(m.transformer.h))],
          "resnet50": lambda m: [(layer, i) for layer in (m.layer1, m.layer2, m.layer3, m.layer4)
                                 for i in range(len(layer))]}


def compiled_at(fresh, step_fn, batch, args, frac, wrap=None):
    """torch.compile of the step at activation_memory_budget frac (the
    model's blocks checkpointed first with wrap): (measured peak, step
    seconds, compile seconds)."""
    m, opt = fresh()
    net = wrap(m) if wrap else m
    torch._dynamo.reset()
    with torch._functorch.config.patch(activation_memory_budget=frac):
        fn = torch.compile(step_fn(net))
        t0 = time.perf_counter()
        with torch.enable_grad():
            fn(*batch)  # compiles the forward (and partitions)
        ct = time.perf_counter() - t0
        m.zero_grad(set_to_none=True)
        opt = torch.optim.SGD(net.parameters(), lr=1e-3, momentum=0.9)
        peak, sec = run_steps(fn, net, opt, batch, args.steps)
    return peak, sec, ct


def search_fraction(fresh, step_fn, batch, args, target, known):
    """A fraction whose compiled step measured at most target bytes, as a
    user would search for one, and its row: of the fractions measured so
    far (known, {frac: (peak, s, compile s)}; 0 and 1 are measured first)
    the largest that fits, then --search bisection steps between it and
    the next measured fraction above it, which does not fit. The peak need
    not grow with the fraction (it did not on ResNet-50: 0.0 held more
    than 1.0), so this is a search, not a guarantee of the largest. None
    when no fraction measured fits."""
    for f in (0.0, 1.0):
        if f not in known:
            known[f] = compiled_at(fresh, step_fn, batch, args, f)
    fits = [f for f, r in known.items() if r[0] <= target]
    if not fits:
        return None, None
    lo = max(fits)
    above = [f for f in known if f > lo]
    if not above:
        return lo, known[lo]
    hi = min(above)
    for _ in range(args.search):
        mid = round((lo + hi) / 2, 4)
        if mid not in known:
            known[mid] = compiled_at(fresh, step_fn, batch, args, mid)
        lo, hi = (mid, hi) if known[mid][0] <= target else (lo, mid)
    return lo, known[lo]


def row(name, args):
    make, batch, loss, inputs = ROWS[name]()
    batch = tuple(t.to(args.device) for t in batch)
    torch.manual_seed(0)
    state = make().state_dict()
    out = []

    def fresh():
        m = make()
        m.load_state_dict(state)
        m.to(args.device)
        return m, torch.optim.SGD(m.parameters(), lr=1e-3, momentum=0.9)

    def step_fn(m):
        return lambda *a: loss(m(*a[:inputs]), *a[inputs:])

    known = {}
    for frac in args.fractions:
        peak, sec, ct = known[frac] = compiled_at(fresh, step_fn, batch, args, frac)
        out.append({"row": name, "config": "torch.compile %.2f" % frac, "measured": peak, "seconds": sec,
                    "compile_seconds": ct})
        print(_line(out[-1]), flush=True)
    from alternatives import wrap_blocks
    peak, sec, ct = compiled_at(fresh, step_fn, batch, args, 1.0,
                                wrap=lambda m: wrap_blocks(m, BLOCKS[name](m)))
    out.append({"row": name, "config": "torch.compile + checkpoint", "measured": peak, "seconds": sec,
                "compile_seconds": ct})
    print(_line(out[-1]), flush=True)
    compiled_rows = [r for r in out if r["config"].startswith("torch.compile")]
    m, opt = fresh()
    try:
        rt.compile(m, batch, budget=1 << 10, optimizer=opt, loss=loss, inputs=inputs)
        raise SystemExit("a 1 KiB budget fitted")
    except rt.RematError as e:
        floor = e.floor  # the planner's: a trial step may name a higher one (below)
    m, opt = fresh()
    full = rt.compile(m, batch, budget=None, optimizer=opt, loss=loss, inputs=inputs).plan
    top = rt.budget_for(full.peak_bytes)
    # store-all's trial step: every budget from it up compiles store-all, which holds this
    top_measured = full.measured or top
    n = max(args.budgets, 2)
    budgets = [("spread", floor + (top - floor) * i // (n - 1)) for i in range(n)]
    budgets += [("at " + r["config"], r["measured"]) for r in compiled_rows if r["measured"] >= floor]
    for kind, budget in budgets:
        r = rt_compiled_at(fresh, batch, loss, inputs, budget, args, name, kind)
        out.append(r)
        print(_line(out[-1]), flush=True)
        peak = r["measured"]
        if kind == "spread" and args.search:
            frac, found = search_fraction(fresh, step_fn, batch, args, peak, known)
            if found is None:
                print("%-9s torch.compile search: no fraction fits %.1f MiB" % (name, peak / 2 ** 20), flush=True)
            else:
                out.append({"row": name, "config": "torch.compile %.4f (search)" % frac, "target": peak,
                            "measured": found[0], "seconds": found[1], "compile_seconds": found[2]})
                print(_line(out[-1]), flush=True)
    if args.equal_peak:
        for r in [r for r in compiled_rows if r["config"] != "torch.compile + checkpoint"]:
            at = next((x for x in out if x["config"] == "rt.compile at " + r["config"]), None)
            found = equal_peak(fresh, batch, loss, inputs, args, name, r, at, floor, (top, top_measured))
            if found is None:
                print("%-9s rt.compile at equal measured peak to %s: no budget tried held it" % (name, r["config"]),
                      flush=True)
                continue
            out.append(found)
            print(_line(out[-1]), flush=True)
            if args.rounds:
                out += alternate(fresh, step_fn, batch, loss, inputs, args, name, r, found)
    for r in compiled_rows:  # remat's eager plan at each compiled row's peak
        m, opt = fresh()
        p = rt.plan(m, batch[:inputs], lambda o: loss(o, *batch[inputs:]), budget=r["measured"], optimizer=opt)
        if not p.feasible:
            print("%-9s remat eager at %s: refused, floor %.1f MiB" % (name, r["config"], (p.floor or 0) / 2 ** 20),
                  flush=True)
            continue
        res = rt.measure(m, batch[:inputs], lambda o: loss(o, *batch[inputs:]), plan=p, optimizer=opt,
                         steps=args.steps + 1)
        out.append({"row": name, "config": "remat eager at " + r["config"], "budget": r["measured"],
                    "replans": 0, "predicted": p.peak_bytes, "measured": res["peak_bytes"],
                    "seconds": statistics.median(s["seconds"] for s in res["steps"][1:]), "compile_seconds": 0.0,
                    "plan_seconds": 0.0, "recomputed": len(p.recompute_ops),
                    "extra_flops": p.extra_flops / p.flops if p.flops else 0.0})
        print(_line(out[-1]), flush=True)
    return out


def rt_compiled_at(fresh, batch, loss, inputs, budget, args, name, kind, floor_on_failure=True):
    """rt.compile of a fresh model at budget, measured: its row. Where the
    trial step measures the floor plan over the budget, the floor it names
    is compiled instead (floor_on_failure), else None."""
    m, opt = fresh()
    torch._dynamo.reset()
    try:
        step = rt.compile(m, batch, budget=budget, optimizer=opt, loss=loss, inputs=inputs)
    except rt.RematError as e:
        if "trial step" not in str(e) and (floor_on_failure or "each of" not in str(e)):
            raise
        print("%-9s rt.compile %-20s %s" % (name, kind, e), flush=True)
        if not floor_on_failure or getattr(e, "floor", None) is None:
            return None
        m, opt = fresh()
        budget = e.floor
        step = rt.compile(m, batch, budget=budget, optimizer=opt, loss=loss, inputs=inputs)
    ct = step.compile_seconds
    peak, sec = run_steps(step, m, opt, batch, args.steps)
    p = step.plan
    return {"row": name, "config": "rt.compile " + kind, "budget": budget,
            "replans": len(step.rejected), "trials": 1 + len(step.rejected) + len(step.superseded),
            "predicted": p.peak_bytes,
            "measured": peak, "seconds": sec, "compile_seconds": ct, "plan_seconds": p.seconds,
            "recomputed": len(p.recompute_ops), "extra_flops": p.extra_flops / p.flops if p.flops else 0.0}


def equal_peak(fresh, batch, loss, inputs, args, name, target_row, at, floor, top):
    """rt.compile at the largest byte budget (of --equal-peak bisection
    steps) whose measured peak is at most target_row's measured peak: a
    budget above that peak may find a plan that Inductor holds within it,
    since remat's model of the compiled step is not Inductor's. top:
    (store-all's budget, what its trial step held). Store-all (at the
    larger of the two) is compiled first: where it holds no more than the
    peak, its row. Else the search runs over [the peak (or rt.compile's
    floor, where the peak is below it), that budget]: the peak fits
    (rt.compile holds its budget: the row at, rt.compile at the peak), the
    floor is compiled to see; each budget tried is compiled (with its
    trial step and re-plans) and measured, and one whose row holds more
    than the peak is an upper bound. Measured peaks need not grow with the
    budget, so this is a search, not a guarantee of the largest. None when
    nothing tried holds the peak."""
    target = target_row["measured"]
    kind = "(equal-peak search)"
    hi = max(top)  # a budget that compiles store-all
    r = rt_compiled_at(fresh, batch, loss, inputs, hi, args, name, kind, floor_on_failure=False)
    tried = [(hi, r["measured"] if r else None)]
    print("%-9s   budget %.1f MiB (store-all): %s" % (name, hi / 2 ** 20, "measured %.1f MiB" % (
        r["measured"] / 2 ** 20) if r else "no plan held it"), flush=True)
    if r is not None and r["measured"] <= target:  # store-all holds no more than the peak
        return dict(r, config="rt.compile at equal peak to " + target_row["config"], target=target, tried=tried)
    if at is not None:
        best = at if at["measured"] <= target else None
        lo = target
    else:
        r = rt_compiled_at(fresh, batch, loss, inputs, floor, args, name, kind)
        best = r if r["measured"] <= target else None
        lo, hi = (r["budget"], hi) if best else (target, target)
    for _ in range(args.equal_peak):
        if hi - lo < 1 << 18:  # a quarter MiB: plans do not differ by less
            break
        mid = (lo + hi) // 2
        r = rt_compiled_at(fresh, batch, loss, inputs, mid, args, name, kind, floor_on_failure=False)
        tried.append((mid, r["measured"] if r else None))
        if r is not None and r["measured"] <= target:
            lo = mid
            if best is None or r["budget"] >= best["budget"]:
                best = r
        else:
            hi = mid
        print("%-9s   budget %.1f MiB: %s" % (name, mid / 2 ** 20, "measured %.1f MiB" % (r["measured"] / 2 ** 20)
                                             if r else "no plan held it"), flush=True)
    if best is None:
        return None
    return dict(best, config="rt.compile at equal peak to " + target_row["config"], target=target, tried=tried)


def alternate(fresh, step_fn, batch, loss, inputs, args, name, frac_row, rt_row):
    """Step seconds at one measured peak, alternating: torch.compile at
    frac_row's fraction, rt.compile at rt_row's budget (the equal-peak
    search's) and remat's eager plan at frac_row's peak, each compiled (or
    planned) anew and kept, then --rounds rounds of one forward and
    backward of each in turn (a warm-up round first), so that the machine's
    load moves all three alike: the median and least seconds per
    configuration, and the median over rounds of each one's step over the
    fraction's step of the same round."""
    frac = float(frac_row["config"].split()[-1])
    torch._dynamo.reset()
    steps = {}
    m, _ = fresh()
    with torch._functorch.config.patch(activation_memory_budget=frac):
        fn = torch.compile(step_fn(m))
        with torch.enable_grad():
            fn(*batch)
    steps["torch.compile %.2f" % frac] = (m, lambda m=m, fn=fn: fn(*batch).backward())
    m, opt = fresh()
    step = rt.compile(m, batch, budget=rt_row["budget"], optimizer=opt, loss=loss, inputs=inputs)
    steps["rt.compile at equal peak"] = (m, lambda step=step: step(*batch).backward())
    m, opt = fresh()
    p = rt.plan(m, batch[:inputs], lambda o: loss(o, *batch[inputs:]), budget=frac_row["measured"], optimizer=opt)
    if p.feasible:
        def eager(m=m, p=p):
            with p.apply(m):
                loss(m(*batch[:inputs]), *batch[inputs:]).backward()
        steps["remat eager"] = (m, eager)
    times = {k: [] for k in steps}
    sync = torch.cuda.synchronize if args.device == "cuda" else (lambda: None)
    for rnd in range(args.rounds + 1):
        for k, (m, one) in steps.items():
            for q in m.parameters():
                q.grad = None
            sync()
            t0 = time.perf_counter()
            with torch.enable_grad():
                one()
            sync()
            if rnd:
                times[k].append(time.perf_counter() - t0)
    base = times["torch.compile %.2f" % frac]
    rows = []
    for k, t in times.items():
        # per round, over the fraction's step of the same round: a burst of
        # load from other jobs moves one round, and the median leaves it out
        ratio = statistics.median(a / b for a, b in zip(t, base))
        rows.append({"row": name, "config": "alternating at %s's peak: %s" % (frac_row["config"], k),
                     "seconds": statistics.median(t), "min_seconds": min(t), "over_fraction": ratio, "times": t})
        print("%-9s %-60s step %.3f s (median of %d, least %.3f s)  %.3fx the fraction's (median per round)" % (
            name, rows[-1]["config"], rows[-1]["seconds"], len(t), min(t), ratio), flush=True)
    return rows


def _line(r):
    s = "%-9s %-32s measured %7.1f MiB" % (r["row"], r["config"], r["measured"] / 2 ** 20)
    if "budget" in r:
        s += "  budget %7.1f MiB  predicted %7.1f MiB  measured/predicted %.3f  measured/budget %.3f" % (
            r["budget"] / 2 ** 20, r["predicted"] / 2 ** 20, r["measured"] / r["predicted"],
            r["measured"] / r["budget"])
        s += "  recomputes %d ops (+%.1f%% FLOPs), planned in %.2f s, %d re-plans" % (
            r["recomputed"], 100 * r["extra_flops"], r["plan_seconds"], r["replans"])
        if "trials" in r:
            s += " (%d trial steps)" % r["trials"]
    s += "  step %.3f s  compile %.1f s" % (r["seconds"], r["compile_seconds"])
    return s


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rows", default="gpt2,resnet50")
    ap.add_argument("--budgets", type=int, default=4)
    ap.add_argument("--fractions", default="1.0,0.5,0.2,0.0")
    ap.add_argument("--search", type=int, default=0,
                    help="bisection steps of the fraction search per rt.compile spread row (0: no search)")
    ap.add_argument("--equal-peak", type=int, default=0,
                    help="bisection steps of the search for rt.compile's largest budget whose measured peak is at "
                         "most each torch.compile fraction's (0: no search)")
    ap.add_argument("--rounds", type=int, default=5,
                    help="with --equal-peak: rounds of alternating steps timing the fraction, rt.compile at equal "
                         "peak and remat's eager plan side by side (0: none)")
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--device", default="cpu", help="cpu, or cuda (the measured peak: torch.cuda's)")
    ap.add_argument("--json")
    args = ap.parse_args()
    args.fractions = [float(f) for f in args.fractions.split(",") if f]
    torch.set_num_threads(args.threads)
    out = []
    for name in args.rows.split(","):
        out += row(name, args)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
