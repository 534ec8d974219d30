#!/usr/bin/python3
"""remat against PyTorch, side by side in one run.

    /usr/bin/python3 bench/torch/compare.py [--remat build/remat] [--threads 2]
        [--rows cnn,resnet50,densenet-bc,gpt2-small] [--rounds 2] [--json FILE]

For each row (model and batch of the issue's table) it runs, alternating
the two frameworks round by round so that both see the same machine load:

  PyTorch without checkpointing    bench/torch/bench_torch.py
  PyTorch with checkpointing       ... --checkpoint (torch.utils.checkpoint,
                                   use_reentrant=False, every block)
  remat `all`                      remat bench --strategies all
  remat `optimal` at PyTorch's checkpointed peak
                                   remat bench --budget <that peak>

and prints the step times (median of the rounds' medians), the peaks and
the ratios remat/PyTorch: step time and peak without checkpointing, and
step time at PyTorch's checkpointed peak memory. Both frameworks get the
same thread count, SGD with momentum, synthetic data of the same shape,
and are started from the same weights: remat writes its initial weights
(`remat bench --save-init`) and PyTorch loads them by state_dict name.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

ROWS = {
    "cnn": dict(model="cnn", batch=128, steps=5, remat=[], torch=[]),
    "resnet50": dict(model="resnet50", batch=16, steps=3, remat=[], torch=[]),
    "densenet-bc": dict(model="densenet-bc", batch=64, steps=3, remat=[], torch=[]),
    # gpt2-small's sizes (the `gpt2` defaults) at context 256
    "gpt2-small": dict(model="gpt2", batch=4, steps=3, remat=["--context", "256"], torch=["--context", "256"]),
}

HERE = os.path.dirname(os.path.abspath(__file__))


def run_json(cmd, may_fail=False):
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if p.returncode != 0 and may_fail:
        print(f"  ({' '.join(cmd[1:4])}...: {p.stderr.strip().splitlines()[-1] if p.stderr.strip() else p.returncode})",
              file=sys.stderr)
        return []
    if p.returncode != 0:
        sys.exit(f"failed ({p.returncode}): {' '.join(cmd)}\n{p.stderr[-2000:]}")
    return [json.loads(line) for line in p.stdout.splitlines() if line.startswith("{")]


def mib(b):
    return f"{b / 1048576:.1f}"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--remat", default="build/remat")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rows", default=",".join(ROWS))
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--steps", type=int, help="timed steps per run (default: per row)")
    ap.add_argument("--json", help="also write all measurements to this file")
    args = ap.parse_args()
    results = []
    tmp = tempfile.mkdtemp(prefix="remat-compare-")
    for name in args.rows.split(","):
        row = ROWS[name]
        steps = str(args.steps or row["steps"])
        common = ["--model", row["model"], "--batch", str(row["batch"]), "--threads", str(args.threads),
                  "--steps", steps, "--warmup", "1"]
        weights = os.path.join(tmp, f"{name}.safetensors")
        t_all, t_ck, r_all, r_opt = [], [], [], []
        budget = None
        for r in range(args.rounds):
            print(f"[{name}] round {r + 1}/{args.rounds}", file=sys.stderr, flush=True)
            if r == 0:
                # remat first: it writes the initial weights PyTorch loads.
                r_all += run_json([args.remat, "bench", *common, *row["remat"], "--strategies", "all", "--json",
                                   "--save-init", weights])
            else:
                r_all += run_json([args.remat, "bench", *common, *row["remat"], "--strategies", "all", "--json"])
            torch_cmd = ["/usr/bin/python3", os.path.join(HERE, "bench_torch.py"), *common, *row["torch"],
                         "--init-from", weights, "--json"]
            t_all += run_json(torch_cmd)
            t_ck += run_json(torch_cmd + ["--checkpoint"])
            if budget is None:
                budget = t_ck[0]["peak_bytes"]
            opt = run_json([args.remat, "bench", *common, *row["remat"], "--strategies", "all",
                            "--budget", str(budget), "--json"], may_fail=True)
            r_opt += [o for o in opt if o.get("budget_bytes")]
        med = lambda rows: statistics.median(o["median_step_seconds"] for o in rows)
        res = dict(row=name, model=row["model"], batch=row["batch"], threads=args.threads,
                   torch_all_s=med(t_all), torch_ckpt_s=med(t_ck), remat_all_s=med(r_all),
                   remat_opt_s=med(r_opt) if r_opt else None,
                   torch_all_peak=t_all[0]["peak_bytes"], torch_ckpt_peak=t_ck[0]["peak_bytes"],
                   remat_all_peak=r_all[0]["measured_peak_bytes"],
                   remat_opt_peak=r_opt[0]["measured_peak_bytes"] if r_opt else None,
                   torch_all_rss=t_all[0]["process_peak_rss_bytes"], remat_all_rss=r_all[0].get("process_peak_rss_bytes"))
        res["time_ratio_all"] = res["remat_all_s"] / res["torch_all_s"]
        res["peak_ratio_all"] = res["remat_all_peak"] / res["torch_all_peak"]
        res["time_ratio_ckpt"] = res["remat_opt_s"] / res["torch_ckpt_s"] if r_opt else None
        results.append(res)
        print(json.dumps(res), file=sys.stderr, flush=True)
    print(f"remat vs PyTorch, {args.threads} threads, median step times over {args.rounds} rounds "
          "(ratios remat/PyTorch; lower is better)")
    print(f"{'model':12} {'batch':>5} | {'torch s':>8} {'remat s':>8} {'time':>6} | {'torch MiB':>9} {'remat MiB':>9} "
          f"{'peak':>6} | {'ckpt MiB':>8} {'torch ck s':>10} {'remat s':>8} {'time':>6}")
    for r in results:
        ck = f"{r['remat_opt_s']:8.3f} {r['time_ratio_ckpt']:6.2f}" if r["remat_opt_s"] else f"{'(no fit)':>8} {'-':>6}"
        print(f"{r['row']:12} {r['batch']:5d} | {r['torch_all_s']:8.3f} {r['remat_all_s']:8.3f} "
              f"{r['time_ratio_all']:6.2f} | {mib(r['torch_all_peak']):>9} {mib(r['remat_all_peak']):>9} "
              f"{r['peak_ratio_all']:6.2f} | {mib(r['torch_ckpt_peak']):>8} {r['torch_ckpt_s']:10.3f} {ck}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
