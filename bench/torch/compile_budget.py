#!/usr/bin/python3
"""remat's `optimal` against torch.compile's activation memory budget.

    /usr/bin/python3 bench/torch/compile_budget.py [--python /work/venv-torch/bin/python]
        [--remat build/remat] [--threads 2] [--rows cnn,gpt2] [--budgets 1.0,0.5,0]
        [--rounds 2] [--steps N] [--warmup N] [--timeout S] [--json FILE]

PyTorch 2.x's partitioner (AOTAutograd's min-cut partitioner, which
torch.compile uses to split the joint forward-backward graph) can trade
recomputation for memory: torch._functorch.config.activation_memory_budget
= 1.0 saves what its runtime-optimized min cut saves, 0.0 saves only the
compiled region's inputs (recomputing the whole forward in backward), and a
value between asks for the fastest cut that saves at most that fraction of
the way from 0.0's activations to 1.0's. For each row this script runs,
on the CPU, with --threads threads on both sides:

  PyTorch eager                  reference, no compile (as bench_torch.py)
  PyTorch torch.compile at each --budgets value
                                 the budget set before compiling; each in a
                                 fresh process with its own Inductor cache
                                 directory (kept across rounds: round 1
                                 compiles cold, later rounds hit the cache)
  remat `all` and `optimal` at each PyTorch peak
                                 remat bench --strategies all --budget <peak>
                                 ... (one run, its rows interleaved step by
                                 step; the peaks are round 1's)

round by round (the PyTorch runs, then remat's), so that both frameworks
see the same machine load over --rounds rounds, and prints one table:
each PyTorch configuration's peak, step time and compile time beside
remat's `optimal` at that peak (its measured peak and step time) and the
ratio of the step times remat/PyTorch.

Both sides: the same model and batch (remat's options and bench_torch.py's
are the same), SGD (lr 1e-3, momentum 0.9), zero_grad(set_to_none=False),
one synthetic batch of the same shape, dropout as the model has it, and
the same initial weights (remat writes them with --save-init; PyTorch loads
them by state_dict name). The compiled region is the loss: forward and loss
in one graph (Dynamo's graph breaks are counted and reported); backward
through AOTAutograd's compiled backward; the optimizer step stays eager.

Peaks (as compare.py on the CPU): PyTorch's is bench_torch.py's peak_bytes,
parameters + gradients + optimizer state + the peak of the heap bytes a
step holds on top of what was live before it (src/memtrack/memtrack.c,
preloaded: every block of 64 KiB or more, i.e. every tensor; Inductor's CPU
buffers come from the same allocator), over one more untimed step; the
batch is left out. remat's is its measured_peak_bytes: its arena's peak
plus its parameter, gradient and optimizer-state blocks (what --budget
bounds), the batch left out too. So remat's `optimal` is asked to fit in
exactly what PyTorch held. Also reported: fwd_held_bytes, what PyTorch
holds when the forward has returned the loss, over what was live before
the step (the saved activations, the loss, the logits where they are
kept), and the partitioner's own estimate of the activations it saved
(saved values not aliasing an input of the compiled graph, from its
choose_saved_values_set; absent when AOTAutograd's cache was hit).

Step times are medians over --steps timed steps after --warmup untimed
ones (the first warm-up step compiles: its excess over the median is
reported as compile seconds), then the median over the rounds.

Rows (the model options are passed to both sides alike):
  cnn   remat's default cnn (1x28x28, 10 classes), batch 128 (compare.py's row)
  gpt2  gpt2 --layers 4 --embd 256 --heads 4 --context 256 --vocab 4096, batch 8
"""
import argparse
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))

GPT2_SMALL = ["--layers", "4", "--embd", "256", "--heads", "4", "--context", "256", "--vocab", "4096"]
ROWS = {
    "cnn": dict(model="cnn", batch=128, steps=5, opts=[]),
    "gpt2": dict(model="gpt2", batch=8, steps=3, opts=GPT2_SMALL),
}
DEFAULT_PYTHON = "/work/venv-torch/bin/python"


# ---------------------------------------------------------------- worker
# `compile_budget.py --worker [--compile --memory-budget B] <bench_torch.py
# options>`, run by --python: one PyTorch configuration, one JSON line.

def probe_partitioner(log):
    """Wraps the min-cut partitioner's choice of saved values (a private
    function; nothing is recorded if it is not there) to log what it saved
    per joint graph. The result is returned unchanged."""
    try:
        import torch._functorch.partitioners as P
    except ImportError:
        return
    orig = getattr(P, "choose_saved_values_set", None)
    if orig is None:
        return
    try:
        from torch._inductor.fx_utils import get_node_storage
    except ImportError:
        get_node_storage = None

    def wrapped(joint_graph, node_info, *a, **kw):
        saved = orig(joint_graph, node_info, *a, **kw)
        try:
            inputs = list(node_info.inputs)
            input_bytes = sum(P._size_of(n) for n in inputs)
            in_storage = set()
            if get_node_storage is not None:
                in_storage = {get_node_storage(n) for n in inputs} - {None}
            own = [n for n in saved if n not in set(inputs)
                   and (get_node_storage is None or get_node_storage(n) not in in_storage)]
            log.append(dict(memory_budget=kw.get("memory_budget", a[0] if a else None),
                            saved_values=len(saved), saved_activations=len(own),
                            saved_activation_bytes=sum(P._size_of(n) for n in own),
                            graph_input_bytes=input_bytes))
        except Exception as e:  # the probe must never break compilation
            log.append(dict(error=repr(e)))
        return saved

    P.choose_saved_values_set = wrapped


def worker(argv):
    wp = argparse.ArgumentParser(prog="compile_budget.py --worker")
    wp.add_argument("--compile", action="store_true")
    wp.add_argument("--memory-budget", type=float, default=None)
    wargs, rest = wp.parse_known_args(argv)
    sys.path.insert(0, HERE)
    import bench_torch
    args = bench_torch.parse(rest)
    if args.device != "cpu":
        sys.exit("compile_budget.py --worker: cpu only")
    dev = bench_torch.Host(args)  # re-executes this process under memtrack.so first
    mt = dev.mt
    import torch
    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    model, (x, y), loss_fn = bench_torch.build(args)
    if args.init_from:
        import st
        missing, unexpected = model.load_state_dict(st.load(args.init_from), strict=False)
        missing = [k for k in missing if not k.endswith("num_batches_tracked") and k != "lm_head.weight"]
        if missing or unexpected:
            sys.exit(f"{args.init_from}: missing {missing[:5]}, unexpected {unexpected[:5]}")
    model.train()
    opt = torch.optim.SGD(model.parameters(), lr=1e-3, momentum=0.9)

    partitions = []
    if wargs.compile:
        import torch._functorch.config as fconfig
        if wargs.memory_budget is not None:
            fconfig.activation_memory_budget = wargs.memory_budget
        probe_partitioner(partitions)
        f = torch.compile(lambda a, b: loss_fn(model, a, b))
    else:
        def f(a, b):
            return loss_fn(model, a, b)

    def step(after_forward=None):
        opt.zero_grad(set_to_none=False)
        loss = f(x, y)
        if after_forward:
            after_forward()
        loss.backward()
        opt.step()
        return loss.item()

    warm, losses = [], []
    for _ in range(args.warmup):
        t0 = time.perf_counter()
        losses.append(step())
        warm.append(time.perf_counter() - t0)
    times = []
    for _ in range(args.steps):
        t0 = time.perf_counter()
        losses.append(step())
        times.append(time.perf_counter() - t0)
    params = {id(p): p for p in model.parameters()}.values()
    state = sum(p.numel() * p.element_size() for p in params)
    state += sum(p.grad.numel() * p.grad.element_size() for p in params if p.grad is not None)
    for s in opt.state.values():
        state += sum(t.numel() * t.element_size() for t in s.values() if torch.is_tensor(t))
    # one more, untimed step: the peak over what was live before it (as
    # bench_torch.Host.peaks), and what is held when the forward returned
    before = mt.memtrack_live()
    mt.memtrack_reset_peak()
    fwd = []
    step(lambda: fwd.append(mt.memtrack_live() - before))
    peak = state + mt.memtrack_peak() - before
    med = statistics.median(times)
    row = {
        "framework": "pytorch",
        "torch": torch.__version__,
        "model": args.model,
        "batch": args.batch,
        "threads": args.threads,
        "compile": wargs.compile,
        "memory_budget": wargs.memory_budget if wargs.compile else None,
        "median_step_seconds": med,
        "step_seconds": times,
        "warmup_step_seconds": warm,
        "compile_seconds": (warm[0] - med) if (wargs.compile and warm) else None,
        "peak_bytes": peak,
        "state_bytes": state,
        "fwd_held_bytes": fwd[0] if fwd else None,
        "first_loss": losses[0] if losses else None,
        "partitioner": partitions,
    }
    if wargs.compile:
        try:
            from torch._dynamo.utils import counters
            row["graph_breaks"] = sum(counters["graph_break"].values())
            row["unique_graphs"] = counters["stats"].get("unique_graphs")
        except Exception:
            pass
    import resource
    row["process_peak_rss_bytes"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    print(json.dumps(row), flush=True)


# ---------------------------------------------------------------- driver

class RunFailed(Exception):
    pass


def run_proc(cmd, timeout=None, env=None):
    """(exit status, stdout, stderr); over the timeout the process and all
    it started (remat bench's rows, Inductor's compile workers) are killed."""
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                         start_new_session=True)
    try:
        out, err = p.communicate(timeout=timeout)
    except BaseException:  # TimeoutExpired, or ^C
        try:
            os.killpg(p.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        p.communicate()
        raise
    return p.returncode, out, err


def json_rows(out):
    rows = []
    for line in out.splitlines():
        if line.startswith("{"):
            try:
                rows.append(json.loads(line))
            except ValueError:
                pass
    return rows


def run_json(cmd, timeout, env=None, partial=False):
    """The JSON rows cmd prints. partial: remat bench exits 1 when one of
    its rows failed (e.g. a budget that cannot fit); its other rows stand."""
    try:
        code, out, err = run_proc(cmd, timeout, env)
    except subprocess.TimeoutExpired:
        raise RunFailed(f"over {timeout} s: {' '.join(cmd)}") from None
    rows = json_rows(out)
    if (code != 0 and not (partial and rows)) or not rows:
        raise RunFailed(f"failed ({code}): {' '.join(cmd)}\n{err[-3000:]}")
    return rows


def ok(o):
    return "error" not in o and o.get("median_step_seconds") is not None


def med(vals):
    vals = [v for v in vals if v is not None]
    return statistics.median(vals) if vals else None


def mib(b, width=8):
    return f"{'-':>{width}}" if b is None else f"{b / 1048576:{width}.1f}"


def fmt(v, spec, width):
    return f"{'-':>{width}}" if v is None else f"{v:{width}{spec}}"


def label(budget):
    if budget is None:
        return "eager"
    return f"{budget:.1f}" if round(budget, 1) == budget else f"{budget:g}"


def measure(name, row, args, tmp):
    steps = str(args.steps or row["steps"])
    warmup = str(args.warmup)
    model = ["--model", row["model"], "--batch", str(row["batch"]), "--threads", str(args.threads), *row["opts"]]
    common = model + ["--steps", steps, "--warmup", warmup]
    weights = os.path.join(tmp, f"{name}.safetensors")
    remat_cmd = [args.remat, "bench", *common, "--json"]
    configs = [None] + args.budgets  # None: eager
    torch_runs = {label(b): [] for b in configs}
    cache = {label(b): os.path.join(tmp, f"inductor-{name}-{label(b)}") for b in configs}
    r_all, r_opt, r_fail = [], {}, {}
    peaks = None
    for r in range(args.rounds):
        print(f"[{name}] round {r + 1}/{args.rounds}", file=sys.stderr, flush=True)
        if r == 0:  # the initial weights PyTorch loads (remat's, from --seed); one step, not timed here
            run_json([args.remat, "bench", *model, "--steps", "1", "--warmup", "0", "--strategies", "all",
                      "--save-init", weights, "--json"], args.timeout)
        for b in configs:
            lab = label(b)
            env = dict(os.environ, OMP_NUM_THREADS=str(args.threads), TORCHINDUCTOR_CACHE_DIR=cache[lab])
            cmd = [args.python, os.path.abspath(__file__), "--worker", *common, "--init-from", weights]
            if b is not None:
                cmd += ["--compile", "--memory-budget", repr(b)]
            t0 = time.perf_counter()
            o = run_json(cmd, args.timeout, env)[0]
            o["process_seconds"] = time.perf_counter() - t0
            o["round"] = r + 1
            torch_runs[lab].append(o)
            print(f"  torch {lab:>5}: {o['median_step_seconds']:.3f} s/step, peak {o['peak_bytes'] / 1048576:.1f} MiB"
                  + (f", compile {o['compile_seconds']:.1f} s" if o.get("compile_seconds") is not None else ""),
                  file=sys.stderr, flush=True)
        if peaks is None:  # the budgets for remat: round 1's PyTorch peaks
            peaks = {lab: runs[0]["peak_bytes"] for lab, runs in torch_runs.items()}
        budgets = sorted(set(peaks.values()), reverse=True)
        # remat: `all` and `optimal` at each of PyTorch's peaks in one run,
        # their rows interleaved step by step
        cmd = remat_cmd + ["--strategies", "all"]
        for b in budgets:
            cmd += ["--budget", str(b)]
        for o in run_json(cmd, args.timeout, partial=True):
            bb = o.get("budget_bytes")
            if bb is None:
                if ok(o):
                    r_all.append(o)
            elif ok(o):
                r_opt.setdefault(bb, []).append(o)
            else:
                r_fail[bb] = o.get("error")
    res = dict(row=name, model=row["model"], batch=row["batch"], opts=row["opts"], threads=args.threads,
               rounds=args.rounds, steps=int(steps), warmup=int(warmup),
               torch_version=next(iter(torch_runs.values()))[0].get("torch"),
               remat_all_s=med([o["median_step_seconds"] for o in r_all]),
               remat_all_peak=r_all[0]["measured_peak_bytes"] if r_all else None,
               remat_all_held=r_all[0].get("held_bytes") if r_all else None,
               configs=[])
    for b in configs:
        lab = label(b)
        runs = torch_runs[lab]
        budget = peaks[lab]
        opt = r_opt.get(budget, [])
        c = dict(torch_budget=lab, memory_budget=b,
                 torch_s=med([o["median_step_seconds"] for o in runs]),
                 torch_peak=budget, torch_state=runs[0]["state_bytes"],
                 torch_peaks=[o["peak_bytes"] for o in runs],
                 torch_fwd_held=runs[0].get("fwd_held_bytes"),
                 compile_s=runs[0].get("compile_seconds"),
                 compile_s_rounds=[o.get("compile_seconds") for o in runs],
                 first_loss=runs[0].get("first_loss"),
                 graph_breaks=runs[0].get("graph_breaks"), unique_graphs=runs[0].get("unique_graphs"),
                 partitioner=next((o["partitioner"] for o in runs if o.get("partitioner")), []),
                 remat_s=med([o["median_step_seconds"] for o in opt]),
                 remat_peak=opt[0]["measured_peak_bytes"] if opt else None,
                 remat_held=opt[0].get("held_bytes") if opt else None,
                 remat_recomputations=opt[0].get("recomputations") if opt else None,
                 remat_error=None if opt else r_fail.get(budget),
                 torch_runs=runs)
        c["time_ratio"] = c["remat_s"] / c["torch_s"] if c["remat_s"] and c["torch_s"] else None
        c["peak_ratio"] = c["remat_peak"] / c["torch_peak"] if c["remat_peak"] and c["torch_peak"] else None
        c["partitioner_saved_bytes"] = (sum(p.get("saved_activation_bytes", 0) for p in c["partitioner"])
                                        if c["partitioner"] else None)
        res["configs"].append(c)
    return res


def print_table(results, failed, args):
    tv = next((r["torch_version"] for r in results if r.get("torch_version")), "?")
    print(f"torch.compile's activation_memory_budget (PyTorch {tv}) against remat `optimal` at the same peak, CPU, "
          f"{args.threads} threads; median step times over {args.rounds} round(s); ratio = remat s / torch s")
    print("peaks MiB: torch = params + grads + momentum + step peak over what was live (memtrack); "
          "remat = measured_peak_bytes (what --budget bounds)")
    print(f"{'row':5} {'batch':>5} {'torch budget':>12} | {'torch MiB':>9} {'torch s':>8} {'compile s':>9} "
          f"{'saved MiB':>9} {'fwd MiB':>8} | {'remat MiB':>9} {'recomp':>6} {'remat s':>8} {'ratio':>6}")
    for r in results:
        print(f"{r['row']:5} {r['batch']:5d} {'remat all':>12} | {'':>9} {'':>8} {'':>9} {'':>9} {'':>8} | "
              f"{mib(r['remat_all_peak'], 9)} {0:6d} {fmt(r['remat_all_s'], '.3f', 8)} {'':>6}")
        for c in r["configs"]:
            if c["remat_s"] is not None:
                rm = (f"{mib(c['remat_peak'], 9)} {fmt(c['remat_recomputations'], 'd', 6)} "
                      f"{fmt(c['remat_s'], '.3f', 8)} {fmt(c['time_ratio'], '.2f', 6)}")
            else:
                rm = f"{'(no fit)':>9} {'-':>6} {'-':>8} {'-':>6}"
            print(f"{r['row']:5} {r['batch']:5d} {c['torch_budget']:>12} | {mib(c['torch_peak'], 9)} "
                  f"{fmt(c['torch_s'], '.3f', 8)} {fmt(c['compile_s'], '.1f', 9)} "
                  f"{mib(c['partitioner_saved_bytes'], 9)} {mib(c['torch_fwd_held'], 8)} | {rm}")
    for name in failed:
        print(f"{name:5} (failed: see above)")
    print("compile s: first warm-up step minus the median step, round 1 (cold Inductor cache); saved MiB: the "
          "partitioner's saved activations (its estimate); fwd MiB: held when the forward returned;")
    print("remat: `all`, and `optimal` at the torch peak of its line; recomp: its recomputations per step")
    notes = []
    for r in results:
        for c in r["configs"]:
            if c["remat_s"] is None and c.get("remat_error"):
                notes.append(f"{r['row']} {c['torch_budget']}: remat: {c['remat_error']}")
            if c.get("graph_breaks"):
                notes.append(f"{r['row']} {c['torch_budget']}: {c['graph_breaks']} graph break(s)")
        comp = [c for c in r["configs"] if c["memory_budget"] is not None]
        for a, b in zip(comp, comp[1:]):
            if a["torch_peak"] == b["torch_peak"]:
                notes.append(f"{r['row']}: budgets {a['torch_budget']} and {b['torch_budget']} reach the same peak, "
                             f"{mib(a['torch_peak'], 0)} MiB "
                             f"(the partitioner saved {mib(a['partitioner_saved_bytes'], 0)}"
                             f" and {mib(b['partitioner_saved_bytes'], 0)} MiB)")
        top = next((c for c in comp if c["memory_budget"] == 1.0), None)
        for c in comp:
            if top and c is not top and c["torch_peak"] > top["torch_peak"]:
                notes.append(f"{r['row']}: budget {c['torch_budget']} holds {mib(c['torch_fwd_held'], 0)} MiB after "
                             f"the forward against {mib(top['torch_fwd_held'], 0)} at budget 1, but peaks higher: "
                             f"{mib(c['torch_peak'], 0)} against {mib(top['torch_peak'], 0)} MiB")
    for n in notes:
        print(n)


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--worker"]:
        return worker(argv[1:])
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--python", default=DEFAULT_PYTHON,
                    help="the Python with PyTorch 2.x (torch.compile) that runs the PyTorch side (default %(default)s)")
    ap.add_argument("--remat", default="build/remat", help="remat's binary (default %(default)s)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rows", help=f"comma-separated rows (default: {','.join(ROWS)})")
    ap.add_argument("--budgets", default="1.0,0.5,0",
                    help="torch.compile activation_memory_budget values, 0..1 (default %(default)s)")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--steps", type=int, help="timed steps per run (default: per row, cnn 5, gpt2 3)")
    ap.add_argument("--warmup", type=int, default=2,
                    help="untimed steps first; the first compiles (default %(default)s)")
    ap.add_argument("--timeout", type=float, default=1800, help="seconds one run may take (default %(default)s)")
    ap.add_argument("--json", help="also write all measurements to this file")
    ap.add_argument("--keep-tmp", action="store_true",
                    help="keep the temporary folder (initial weights, Inductor caches) and print its path")
    args = ap.parse_args(argv)
    try:
        args.budgets = [float(b) for b in args.budgets.split(",")]
    except ValueError:
        ap.error("--budgets: comma-separated numbers")
    if any(not 0 <= b <= 1 for b in args.budgets):
        ap.error("--budgets: each between 0 and 1")
    if args.warmup < 1 or args.rounds < 1 or (args.steps is not None and args.steps < 1):
        ap.error("--warmup, --rounds and --steps must be at least 1 (the first warm-up step compiles)")
    names = args.rows.split(",") if args.rows else list(ROWS)
    unknown = [n for n in names if n not in ROWS]
    if unknown:
        ap.error(f"unknown rows {','.join(unknown)} (known: {','.join(ROWS)})")
    if not os.access(args.remat, os.X_OK):
        ap.error(f"--remat {args.remat}: not an executable (build it: cmake --build build)")
    results, failed = [], []
    tmp = tempfile.mkdtemp(prefix="remat-compile-budget-")
    try:
        for name in names:
            try:
                res = measure(name, ROWS[name], args, tmp)
            except RunFailed as e:
                print(f"[{name}] {e}", file=sys.stderr, flush=True)
                failed.append(name)
                continue
            results.append(res)
            if args.json:
                with open(args.json, "w") as f:
                    json.dump(results, f, indent=1)
    finally:
        if args.keep_tmp:
            print(f"(kept {tmp})", file=sys.stderr)
        else:
            shutil.rmtree(tmp, ignore_errors=True)
    print_table(results, failed, args)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
