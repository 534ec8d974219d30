#!/usr/bin/python3
"""remat against PyTorch, side by side in one run.

    /usr/bin/python3 bench/torch/compare.py [--remat build/remat] [--threads 2] [--compile] [--precision bf16]
        [--rows cnn,resnet50,densenet-bc,gpt2-small] [--rounds 2] [--json FILE]
    python3 bench/torch/compare.py --device cuda --remat build-cuda/remat [--tf32]
        [--rows resnet50,densenet-bc,gpt2-small,siamese-resnet50] [--rounds 2]
        [--steps 10] [--warmup 3] [--python PATH] [--timeout S] [--json FILE]

For each row (model and batch of the issue's table) it runs, alternating
the two frameworks round by round so that both see the same machine load:

  remat `all`                      remat bench --strategies all
  PyTorch without checkpointing    bench/torch/bench_torch.py
  PyTorch with checkpointing       ... --checkpoint (torch.utils.checkpoint,
                                   use_reentrant=False, every block)
  remat `optimal` at PyTorch's checkpointed peak
                                   remat bench --budget <that peak>

and prints the step times (median of the rounds' medians), the peaks and
the ratios remat/PyTorch: step time and peak without checkpointing, and
step time at PyTorch's checkpointed peak memory. Both frameworks get the
same thread count, SGD with momentum, synthetic data of the same shape,
and are started from the same weights: remat writes its initial weights
(`remat bench --save-init`) and PyTorch loads them by state_dict name.

--compile adds PyTorch compiled (bench_torch.py --compile: torch.compile,
Inductor's default mode, without checkpointing, autocast with bf16) to
every round, and the table's columns `compiled s`, `MiB` and `remat/compiled`
(remat `all`'s step over the compiled one's): what a user who wants speed
would pick instead. Each such run compiles anew (a minute or more for
resnet50 on two cores).

--precision bf16 compares remat's bf16 (`remat bench --precision bf16`)
against PyTorch under torch.autocast(dtype=torch.bfloat16) (bench_torch.py
--autocast, checkpointed or not), and adds remat fp32's step in the same
rounds: the table's last column is remat bf16 / remat fp32.

Rows, CPU (--device cpu, the default; 1 warm-up step, per-row steps):
  cnn 128, resnet50 16 (3x224x224), densenet-bc 64 (3x32x32),
  gpt2-small 4 x context 256
Rows, GPU (--device cuda; --warmup 3 --steps 10 by default; both sides
get --device cuda, and --tf32 if given, else TF32 is off on both):
  resnet50 64 (3x224x224), densenet-bc 256 (3x32x32),
  gpt2-small 8 x context 1024, siamese-resnet50 32 (2 views of 3x224x224)
On the GPU the peaks are device bytes: PyTorch's is
torch.cuda.max_memory_allocated() over its timed steps (its batch
included), remat's its JSON field held_bytes (its arena and its parameter,
gradient and optimizer-state blocks: what its budget bounds; else
measured_peak_bytes). A second table sets remat's device_used_bytes (the
drop in cudaMemGetInfo's free bytes over its run) beside PyTorch's
max_memory_reserved() and its own drop in free bytes. A field a program
did not report prints as "-". A row whose runs fail (or take over
--timeout seconds) is reported and skipped (exit status 1); --json is
rewritten after every row.
"""
import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile

ROWS = {
    "cnn": dict(model="cnn", batch=128, steps=5, remat=[], torch=[]),
    "resnet18": dict(model="resnet18", batch=16, steps=3, remat=[], torch=[]),
    "resnet50": dict(model="resnet50", batch=16, steps=3, remat=[], torch=[]),
    "densenet-bc": dict(model="densenet-bc", batch=64, steps=3, remat=[], torch=[]),
    # gpt2-small's sizes (the `gpt2` defaults) at context 256
    "gpt2-small": dict(model="gpt2", batch=4, steps=3, remat=["--context", "256"], torch=["--context", "256"]),
}

# The GPU rows: each model at its own default input (remat's and
# cnn_models.DEFAULTS'), gpt2 with GPT-2 small's sizes at context 1024.
GPU_ROWS = {
    "resnet50": dict(model="resnet50", batch=64, steps=10, input="3x224x224", remat=[], torch=[]),
    "densenet-bc": dict(model="densenet-bc", batch=256, steps=10, input="3x32x32", remat=[], torch=[]),
    "gpt2-small": dict(model="gpt2", batch=8, steps=10, input="ctx 1024", remat=["--context", "1024"],
                       torch=["--context", "1024"]),
    "siamese-resnet50": dict(model="siamese-resnet50", batch=32, steps=10, input="2x3x224x224", remat=[], torch=[]),
}

HERE = os.path.dirname(os.path.abspath(__file__))


class RunFailed(Exception):
    pass


def run_proc(cmd, timeout=None):
    """(exit status, stdout, stderr) of cmd. With a timeout it runs in its
    own session, so that going over it kills it and every process it made
    (remat bench forks one per row) with SIGKILL."""
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         start_new_session=timeout is not None)
    try:
        out, err = p.communicate(timeout=timeout)
    except BaseException:  # subprocess.TimeoutExpired, or ^C
        try:
            if timeout is not None:
                os.killpg(p.pid, signal.SIGKILL)
            else:
                p.kill()
        except ProcessLookupError:
            pass
        p.communicate()
        raise
    return p.returncode, out, err


def run_json(cmd, may_fail=False, timeout=None):
    try:
        code, out, err = run_proc(cmd, timeout)
    except subprocess.TimeoutExpired:
        if may_fail:
            print(f"  ({' '.join(cmd[1:4])}...: over {timeout} s)", file=sys.stderr)
            return []
        raise RunFailed(f"over {timeout} s: {' '.join(cmd)}") from None
    rows = []
    for line in out.splitlines():
        if line.startswith("{"):
            try:
                rows.append(json.loads(line))
            except ValueError:
                pass
    # remat bench --json prints a failed row's message in its "error" field
    why = "; ".join(f"{o.get('strategy', '?')}: {o['error']}" for o in rows if "error" in o)
    if code != 0 and may_fail:
        last = err.strip().splitlines()[-1] if err.strip() else code
        print(f"  ({' '.join(cmd[1:4])}...: {why or last})", file=sys.stderr)
        return []
    if code != 0:
        raise RunFailed(f"failed ({code}): {' '.join(cmd)}\n{why + chr(10) if why else ''}{err[-2000:]}")
    if not rows:
        raise RunFailed(f"no JSON row from: {' '.join(cmd)}\n{err[-2000:]}")
    return rows


def ok(o):
    """A row that ran (not a failed row's {..., "error"})."""
    return "error" not in o and o.get("median_step_seconds") is not None


def mib(b):
    return f"{b / 1048576:.1f}"


def fmt(v, spec, width):
    """v formatted, or "-" when it is missing."""
    return f"{'-':>{width}}" if v is None else f"{v:{width}{spec}}"


def fmib(b, width):
    return f"{'-':>{width}}" if b is None else f"{mib(b):>{width}}"


def ratio(a, b):
    return a / b if a is not None and b else None


def median_of(rows, key="median_step_seconds"):
    vals = [o[key] for o in rows if o.get(key) is not None]
    return statistics.median(vals) if vals else None


def first(rows, *keys):
    """The first of keys that rows[0] has, or None."""
    for k in keys:
        if rows and rows[0].get(k) is not None:
            return rows[0][k]
    return None


def measure(name, row, args, tmp):
    """Runs one row's rounds; returns its result dict (raises RunFailed)."""
    cuda = args.device == "cuda"
    steps = str(args.steps or row["steps"])
    common = ["--model", row["model"], "--batch", str(row["batch"]), "--threads", str(args.threads),
              "--steps", steps, "--warmup", str(args.warmup)]
    dev = (["--device", "cuda"] + (["--tf32"] if args.tf32 else [])) if cuda else []
    bf16 = args.precision == "bf16"
    weights = os.path.join(tmp, f"{name}.safetensors")
    remat_f32 = [args.remat, "bench", *common, *dev, *row["remat"], "--strategies", "all", "--json"]
    remat_cmd = remat_f32 + (["--precision", "bf16"] if bf16 else [])
    torch_cmd = [args.python, os.path.join(HERE, "bench_torch.py"), *common, *dev, *row["torch"],
                 "--init-from", weights, "--json"] + (["--autocast"] if bf16 else [])
    t_all, t_ck, r_all, r_opt, r_f32, t_cc = [], [], [], [], [], []
    budget = None
    for r in range(args.rounds):
        print(f"[{name}] round {r + 1}/{args.rounds}", file=sys.stderr, flush=True)
        # remat first in round 1: it writes the initial weights PyTorch loads.
        r_all += [o for o in run_json(remat_cmd + (["--save-init", weights] if r == 0 else []), timeout=args.timeout)
                  if ok(o)]
        t_all += run_json(torch_cmd, timeout=args.timeout)
        t_ck += run_json(torch_cmd + ["--checkpoint"], timeout=args.timeout)
        if args.compile:
            t_cc += run_json(torch_cmd + ["--compile"], timeout=args.timeout)
        if budget is None:
            budget = t_ck[0]["peak_bytes"]
        opt = run_json(remat_cmd + ["--budget", str(budget)], may_fail=True, timeout=args.timeout)
        r_opt += [o for o in opt if o.get("budget_bytes") and ok(o)]
        if bf16:
            r_f32 += [o for o in run_json(remat_f32, timeout=args.timeout) if ok(o)]
    if not r_all:
        raise RunFailed(f"remat bench gave no `all` row: {' '.join(remat_cmd)}")
    # remat's peak: on the GPU what its budget bounds (held_bytes)
    peak_keys = ("held_bytes", "measured_peak_bytes") if cuda else ("measured_peak_bytes",)
    res = dict(row=name, model=row["model"], batch=row["batch"], threads=args.threads,
               torch_all_s=median_of(t_all), torch_ckpt_s=median_of(t_ck), remat_all_s=median_of(r_all),
               remat_opt_s=median_of(r_opt) if r_opt else None,
               torch_all_peak=t_all[0]["peak_bytes"], torch_ckpt_peak=t_ck[0]["peak_bytes"],
               remat_all_peak=first(r_all, *peak_keys),
               remat_opt_peak=first(r_opt, *peak_keys),
               torch_all_rss=t_all[0].get("process_peak_rss_bytes"),
               remat_all_rss=r_all[0].get("process_peak_rss_bytes"))
    if cuda:
        res.update(device="cuda", input=row.get("input"), tf32=args.tf32, budget_bytes=budget,
                   gpu_name=t_all[0].get("gpu_name"), torch_version=t_all[0].get("torch_version"),
                   torch_batch_bytes=t_all[0].get("batch_bytes"), torch_state_bytes=t_all[0].get("state_bytes"),
                   torch_all_reserved=t_all[0].get("reserved_peak_bytes"),
                   torch_ckpt_reserved=t_ck[0].get("reserved_peak_bytes"),
                   torch_all_device_used=t_all[0].get("device_used_bytes"),
                   torch_ckpt_device_used=t_ck[0].get("device_used_bytes"),
                   remat_all_held=first(r_all, "held_bytes"), remat_opt_held=first(r_opt, "held_bytes"),
                   remat_all_arena=first(r_all, "arena_bytes"), remat_opt_arena=first(r_opt, "arena_bytes"),
                   remat_all_measured=first(r_all, "measured_peak_bytes"),
                   remat_opt_measured=first(r_opt, "measured_peak_bytes"),
                   remat_device_used=first(r_all, "device_used_bytes"),
                   remat_opt_device_used=first(r_opt, "device_used_bytes"))
    res["time_ratio_all"] = ratio(res["remat_all_s"], res["torch_all_s"])
    res["peak_ratio_all"] = ratio(res["remat_all_peak"], res["torch_all_peak"])
    res["time_ratio_ckpt"] = ratio(res["remat_opt_s"], res["torch_ckpt_s"])
    res["precision"] = args.precision
    if args.compile:
        res["torch_compiled_s"] = median_of(t_cc)
        res["torch_compiled_peak"] = t_cc[0]["peak_bytes"]
        res["time_ratio_compiled"] = ratio(res["remat_all_s"], res["torch_compiled_s"])
    if bf16:
        res["remat_fp32_s"] = median_of(r_f32)
        res["remat_fp32_peak"] = first(r_f32, *peak_keys)
        res["bf16_over_fp32"] = ratio(res["remat_all_s"], res["remat_fp32_s"])
    return res


def print_cpu(results, failed, args):
    bf16 = args.precision == "bf16"
    print(f"remat vs PyTorch, {args.threads} threads, median step times over {args.rounds} rounds "
          "(ratios remat/PyTorch; lower is better)" +
          ("; bf16: remat --precision bf16 against PyTorch's autocast, and remat bf16 / remat fp32" if bf16 else ""))
    print(f"{'model':12} {'batch':>5} | {'torch s':>8} {'remat s':>8} {'time':>6} | {'torch MiB':>9} {'remat MiB':>9} "
          f"{'peak':>6} | {'ckpt MiB':>8} {'torch ck s':>10} {'remat s':>8} {'time':>6}" +
          (f" | {'fp32 s':>8} {'bf16/fp32':>9}" if bf16 else "") +
          (f" | {'compiled s':>10} {'MiB':>8} {'remat/compiled':>14}" if args.compile else ""))
    for r in results:
        ck = f"{r['remat_opt_s']:8.3f} {r['time_ratio_ckpt']:6.2f}" if r["remat_opt_s"] else f"{'(no fit)':>8} {'-':>6}"
        tail = f" | {fmt(r['remat_fp32_s'], '.3f', 8)} {fmt(r['bf16_over_fp32'], '.2f', 9)}" if bf16 else ""
        if args.compile:
            tail += (f" | {fmt(r['torch_compiled_s'], '.3f', 10)} {fmib(r['torch_compiled_peak'], 8)} "
                     f"{fmt(r['time_ratio_compiled'], '.2f', 14)}")
        print(f"{r['row']:12} {r['batch']:5d} | {fmt(r['torch_all_s'], '.3f', 8)} {fmt(r['remat_all_s'], '.3f', 8)} "
              f"{fmt(r['time_ratio_all'], '.2f', 6)} | {fmib(r['torch_all_peak'], 9)} {fmib(r['remat_all_peak'], 9)} "
              f"{fmt(r['peak_ratio_all'], '.2f', 6)} | {fmib(r['torch_ckpt_peak'], 8)} "
              f"{fmt(r['torch_ckpt_s'], '.3f', 10)} {ck}{tail}")
    for name in failed:
        print(f"{name:12} (failed: see above)")


def print_gpu(results, failed, args):
    gpu = next((r["gpu_name"] for r in results if r.get("gpu_name")), "the GPU")
    tv = next((r["torch_version"] for r in results if r.get("torch_version")), "?")
    print(f"remat vs PyTorch {tv} on {gpu}, TF32 {'on' if args.tf32 else 'off'}, median step times over "
          f"{args.rounds} rounds of {args.warmup} + {args.steps or 10} steps (ratios remat/PyTorch; lower is better)")
    print("peaks: PyTorch max_memory_allocated (batch included), remat held_bytes (arena + parameters, gradients, "
          "optimizer state)")
    print(f"{'model':16} {'batch':>5} {'input':>11} | {'torch s':>8} {'remat s':>8} {'time':>6} | {'torch MiB':>9} "
          f"{'remat MiB':>9} {'peak':>6} | {'ckpt MiB':>8} {'torch ck s':>10} {'remat s':>8} {'time':>6}")
    for r in results:
        ck = (f"{fmt(r['remat_opt_s'], '.4f', 8)} {fmt(r['time_ratio_ckpt'], '.2f', 6)}" if r["remat_opt_s"]
              else f"{'(no row)':>8} {'-':>6}")
        print(f"{r['row']:16} {r['batch']:5d} {r.get('input') or '-':>11} | {fmt(r['torch_all_s'], '.4f', 8)} "
              f"{fmt(r['remat_all_s'], '.4f', 8)} {fmt(r['time_ratio_all'], '.2f', 6)} | "
              f"{fmib(r['torch_all_peak'], 9)} {fmib(r['remat_all_peak'], 9)} {fmt(r['peak_ratio_all'], '.2f', 6)} | "
              f"{fmib(r['torch_ckpt_peak'], 8)} {fmt(r['torch_ckpt_s'], '.4f', 10)} {ck}")
    for name in failed:
        print(f"{name:16} (failed: see above)")
    if any(not r["remat_opt_s"] for r in results):
        print("(no row): remat at that budget gave no row (it did not fit, failed or ran out of time: see above)")
    print()
    print("device memory, MiB. remat: its drop in cudaMemGetInfo's free bytes, its arena (`all` / at the budget) "
          "and what it held at the budget;")
    print("PyTorch: max_memory_reserved and its own drop in free bytes (without / with checkpointing), its batch")
    print(f"{'model':16} | {'remat used':>10} {'at budget':>9} {'arena':>9} {'at budget':>9} {'held':>9} | "
          f"{'torch rsvd':>10} {'ckpt rsvd':>9} {'torch used':>10} {'ckpt used':>9} {'batch':>7}")
    for r in results:
        print(f"{r['row']:16} | {fmib(r.get('remat_device_used'), 10)} {fmib(r.get('remat_opt_device_used'), 9)} "
              f"{fmib(r.get('remat_all_arena'), 9)} {fmib(r.get('remat_opt_arena'), 9)} "
              f"{fmib(r.get('remat_opt_held'), 9)} | "
              f"{fmib(r.get('torch_all_reserved'), 10)} {fmib(r.get('torch_ckpt_reserved'), 9)} "
              f"{fmib(r.get('torch_all_device_used'), 10)} {fmib(r.get('torch_ckpt_device_used'), 9)} "
              f"{fmib(r.get('torch_batch_bytes'), 7)}")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    ap.add_argument("--remat", default=None, help="remat's binary (default build/remat; cuda: build-cuda/remat)")
    ap.add_argument("--python", default=sys.executable,
                    help="the Python with PyTorch that runs bench_torch.py (default: this one, %(default)s)")
    ap.add_argument("--tf32", action="store_true", help="cuda: TF32 on both sides (default off on both)")
    ap.add_argument("--precision", choices=("fp32", "bf16"), default="fp32",
                    help="bf16: remat --precision bf16 against PyTorch's autocast")
    ap.add_argument("--compile", action="store_true",
                    help="also PyTorch compiled (torch.compile, Inductor) in every round, and its columns (cpu)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rows", help="comma-separated rows (default: all of the device's)")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--steps", type=int, help="timed steps per run (default: per row on cpu, 10 on cuda)")
    ap.add_argument("--warmup", type=int, help="untimed steps per run first (default 1 on cpu, 3 on cuda)")
    ap.add_argument("--json", help="also write all measurements to this file")
    ap.add_argument("--timeout", type=float, help="seconds one run may take before its row is given up")
    args = ap.parse_args(argv)
    cuda = args.device == "cuda"
    if args.tf32 and not cuda:
        ap.error("--tf32 is for --device cuda")
    if args.compile and cuda:
        ap.error("--compile is for the CPU table (the GPU's has no column for it yet)")
    table = GPU_ROWS if cuda else ROWS
    if args.remat is None:
        args.remat = "build-cuda/remat" if cuda else "build/remat"
    if args.warmup is None:
        args.warmup = 3 if cuda else 1
    names = args.rows.split(",") if args.rows else list(table)
    unknown = [n for n in names if n not in table]
    if unknown:
        ap.error(f"unknown rows {','.join(unknown)} for --device {args.device} (known: {','.join(table)})")
    results, failed = [], []
    tmp = tempfile.mkdtemp(prefix="remat-compare-")
    for name in names:
        try:
            res = measure(name, table[name], args, tmp)
        except RunFailed as e:
            print(f"[{name}] {e}", file=sys.stderr, flush=True)
            failed.append(name)
            continue
        results.append(res)
        print(json.dumps(res), file=sys.stderr, flush=True)
        if args.json:
            with open(args.json, "w") as f:
                json.dump(results, f, indent=1)
    (print_gpu if cuda else print_cpu)(results, failed, args)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
