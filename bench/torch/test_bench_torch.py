#!/usr/bin/python3
"""Checks bench_torch.py and compare.py without a GPU (and without remat).

    /usr/bin/python3 bench/torch/test_bench_torch.py

1. bench_torch.py --device cpu in a subprocess: the CPU row's fields.
2. bench_torch.main(["--device", "cuda", ...]) in this process with every
   torch.cuda call it makes replaced by a fake and Cuda.target set to "cpu":
   the whole CUDA path (flags, moves, synchronize around each timed step,
   peak reset after the warm-up, the row's fields) runs on the CPU, for
   cnn, gpt2 and densenet-bc, with and without --checkpoint.
3. compare.main(...) --device cuda and --device cpu on two tiny rows with a
   fake `remat` (a script printing rows with and without the CUDA fields)
   and, for cuda, bench_torch.py with the same fakes as --python: the
   commands, the budget, the table ("-" for missing fields), --tf32, rows
   that fail or go over --timeout, remat's row at the budget failing alone,
   and build-cuda/remat's own error rows where it is built and no GPU is.
About two minutes on two loaded cores; needs `cc` (memtrack.so).
"""
import contextlib
import io
import json
import os
import stat
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import bench_torch  # noqa: E402
import torch  # noqa: E402

SMALL_GPT = ["--layers", "2", "--embd", "32", "--heads", "2", "--context", "16", "--vocab", "64"]


class FakeCuda:
    """Stands in for the torch.cuda functions bench_torch.Cuda calls."""

    def __init__(self):
        self.calls = []
        self.free = 80 << 30

    def install(self):
        saved = {}
        for name in ("is_available", "synchronize", "reset_peak_memory_stats", "max_memory_allocated",
                     "max_memory_reserved", "mem_get_info", "get_device_name", "device_count",
                     "get_device_capability"):
            saved[name] = getattr(torch.cuda, name, None)
            setattr(torch.cuda, name, getattr(self, name))
        return saved

    def is_available(self):
        return True

    def synchronize(self):
        self.calls.append("sync")

    def reset_peak_memory_stats(self):
        self.calls.append("reset")

    def max_memory_allocated(self):
        self.calls.append("allocated")
        return 1000

    def max_memory_reserved(self):
        return 2000

    def mem_get_info(self):
        self.free -= 3000  # each call sees 3000 bytes fewer free
        return self.free, 80 << 30

    def get_device_name(self):
        return "Fake GPU"

    def device_count(self):  # cuDNN's version check asks for every device's capability
        return 1

    def get_device_capability(self, i=0):
        return (9, 0)


def run_fake_cuda(argv):
    fake = FakeCuda()
    saved = fake.install()
    target = bench_torch.Cuda.target
    bench_torch.Cuda.target = "cpu"
    out = io.StringIO()
    try:
        with contextlib.redirect_stdout(out):
            bench_torch.main(argv)
    finally:
        bench_torch.Cuda.target = target
        for k, v in saved.items():
            setattr(torch.cuda, k, v)
    return json.loads(out.getvalue()), fake.calls


def check_cpu():
    p = subprocess.run([sys.executable, os.path.join(HERE, "bench_torch.py"), "--model", "cnn", "--batch", "8",
                        "--steps", "1", "--warmup", "1", "--json"], stdout=subprocess.PIPE, text=True, check=True)
    row = json.loads(p.stdout)
    want = ["framework", "torch", "model", "batch", "checkpoint", "compile", "autocast", "threads",
            "median_step_seconds", "step_seconds", "peak_bytes", "state_bytes", "process_peak_rss_bytes"]
    assert list(row) == want, list(row)
    assert row["peak_bytes"] > row["state_bytes"] > 0, row
    # torch.compile: the warm-up step compiles, the timed one runs compiled; the same state
    p = subprocess.run([sys.executable, os.path.join(HERE, "bench_torch.py"), "--model", "cnn", "--batch", "8",
                        "--steps", "1", "--warmup", "1", "--json", "--compile"], stdout=subprocess.PIPE, text=True,
                       check=True)
    compiled = json.loads(p.stdout)
    assert compiled["compile"] and compiled["state_bytes"] == row["state_bytes"], compiled
    p = subprocess.run([sys.executable, os.path.join(HERE, "bench_torch.py"), "--compile", "--warmup", "0"],
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert p.returncode == 2 and "--compile needs --warmup 1" in p.stderr, p.stderr
    p = subprocess.run([sys.executable, os.path.join(HERE, "bench_torch.py"), "--tf32"], stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, text=True)
    assert p.returncode == 2 and "--tf32 is for --device cuda" in p.stderr, p.stderr
    print("cpu row ok:", row["peak_bytes"], row["state_bytes"])


def check_cuda_path():
    for model, extra in (("cnn", []), ("gpt2", SMALL_GPT), ("densenet-bc", [])):
        for ck in ([], ["--checkpoint"]):
            for tf32 in ([], ["--tf32"]) if model == "cnn" else ([],):
                batch = "2" if model == "densenet-bc" else "4"
                argv = ["--device", "cuda", "--model", model, "--batch", batch, "--steps", "3", "--warmup", "2",
                        "--json", *extra, *ck, *tf32]
                row, calls = run_fake_cuda(argv)
                # synchronize, reset after the warm-up; sync-step-sync per timed step; sync, then the peaks
                assert calls == ["sync", "reset"] + ["sync", "sync"] * 3 + ["sync", "allocated"], calls
                assert row["device"] == "cuda" and row["gpu_name"] == "Fake GPU", row
                assert row["peak_bytes"] == 1000 and row["reserved_peak_bytes"] == 2000, row
                assert row["device_used_bytes"] == 3000, row
                assert row["tf32"] == bool(tf32) and row["cudnn_benchmark"] is False, row
                assert row["checkpoint"] == bool(ck) and len(row["step_seconds"]) == 3, row
                assert row["torch_version"] == torch.__version__, row
                assert row["state_bytes"] > 0 and row["batch_bytes"] > 0, row
                assert torch.backends.cuda.matmul.allow_tf32 == bool(tf32)
                assert torch.backends.cudnn.allow_tf32 == bool(tf32)
                json.dumps(row)
                print(f"fake cuda ok: {model} checkpoint={bool(ck)} tf32={bool(tf32)}: state {row['state_bytes']}, "
                      f"batch {row['batch_bytes']}")
    # the batch bytes: cnn 4x1x28x28 floats + 4 int64 labels
    row, _ = run_fake_cuda(["--device", "cuda", "--model", "cnn", "--batch", "4", "--steps", "1", "--warmup", "0",
                            "--json"])
    assert row["batch_bytes"] == 4 * 28 * 28 * 4 + 4 * 8, row


FAKE_REMAT = r"""#!/usr/bin/env python3
import json, os, shutil, sys, time
a = sys.argv[1:]
assert a[0] == "bench", a
opt = lambda k: a[a.index(k) + 1] if k in a else None
full = "FULL" in __file__
if opt("--save-init"):
    shutil.copy(os.path.join(os.environ["FAKE_REMAT_WEIGHTS"], opt("--model") + ".safetensors"), opt("--save-init"))
rows = [dict(model=opt("--model"), batch=int(opt("--batch")), strategy="all", measured_peak_bytes=5 << 20,
             median_step_seconds=0.01)]
if opt("--budget") and "SLOW" in __file__:
    time.sleep(60)
if opt("--budget") and "NOFIT" in __file__:
    print(json.dumps(dict(model=opt("--model"), batch=int(opt("--batch")), strategy="all",
                          measured_peak_bytes=5 << 20, median_step_seconds=0.01)))
    print(json.dumps(dict(model=opt("--model"), batch=int(opt("--batch")), strategy="optimal",
                          budget_bytes=int(opt("--budget")), error="budget too small: needs 4 MiB")))
    sys.exit(1)
if opt("--budget"):
    rows.append(dict(model=opt("--model"), batch=int(opt("--batch")), strategy="optimal",
                     budget_bytes=int(opt("--budget")), measured_peak_bytes=3 << 20, median_step_seconds=0.02))
if opt("--device") == "cuda" and full:
    for r in rows:
        r.update(device="cuda", held_bytes=r["measured_peak_bytes"] + 1, arena_bytes=1 << 20,
                 device_used_bytes=9 << 20)
with open(__file__ + ".log", "a") as f:
    f.write(" ".join(a) + "\n")
for r in rows:
    print(json.dumps(r))
"""

def run_compare(argv):
    import compare
    rows = {"test-cnn": dict(model="cnn", batch=4, steps=2, input="1x28x28", remat=[], torch=[]),
            "test-gpt2": dict(model="gpt2", batch=2, steps=2, input="ctx 16", remat=SMALL_GPT, torch=SMALL_GPT)}
    compare.ROWS.update(rows)
    compare.GPU_ROWS.update(rows)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        rc = compare.main(argv)
    print(out.getvalue())
    return rc, out.getvalue()


def check_compare():
    import st
    tmp = tempfile.mkdtemp(prefix="remat-test-compare-")
    os.environ["FAKE_REMAT_WEIGHTS"] = tmp
    for model, extra in (("cnn", []), ("gpt2", SMALL_GPT)):
        m, _, _ = bench_torch.build(bench_torch.parse(["--model", model, *extra]))
        st.save(os.path.join(tmp, model + ".safetensors"), m.state_dict())
    # bench_torch.py with the CUDA calls faked, for compare.py to run as --python
    shim = os.path.join(tmp, "fakecuda_python")
    with open(shim + ".py", "w") as f:
        f.write("import sys\n"
                f"sys.path.insert(0, {HERE!r})\n"
                "import test_bench_torch as t\n"
                "t.FakeCuda().install()\n"
                "import bench_torch\n"
                "bench_torch.Cuda.target = 'cpu'\n"
                "sys.argv = sys.argv[1:]\n"
                "bench_torch.main()\n")
    with open(shim, "w") as f:
        f.write(f"#!/bin/sh\nexec {sys.executable} {shim}.py \"$@\"\n")
    os.chmod(shim, os.stat(shim).st_mode | stat.S_IEXEC)
    for name in ("remat_FULL", "remat_bare"):
        fake = os.path.join(tmp, name)
        with open(fake, "w") as f:
            f.write(FAKE_REMAT)
        os.chmod(fake, os.stat(fake).st_mode | stat.S_IEXEC)
        out = os.path.join(tmp, name + ".json")
        rc, text = run_compare(["--device", "cuda", "--remat", fake, "--python", shim, "--rows", "test-cnn,test-gpt2",
                                "--steps", "2", "--warmup", "1", "--rounds", "2", "--json", out])
        assert rc == 0, rc
        res = json.load(open(out))
        assert len(res) == 2 and res[0]["device"] == "cuda" and res[0]["budget_bytes"] == 1000, res
        assert res[0]["torch_all_peak"] == 1000 and res[0]["torch_all_reserved"] == 2000, res
        log = open(fake + ".log").read().splitlines()
        assert all("--device cuda" in line and "--warmup 1" in line for line in log), log
        assert sum("--save-init" in line for line in log) == 2, log
        assert sum(line.endswith("--budget 1000") for line in log) == 4, log
        if name == "remat_FULL":
            assert res[0]["remat_all_peak"] == (5 << 20) + 1 and res[0]["remat_device_used"] == 9 << 20, res
            assert res[0]["remat_opt_peak"] == (3 << 20) + 1, res
        else:
            assert res[0]["remat_all_peak"] == 5 << 20 and res[0]["remat_device_used"] is None, res
            assert res[0]["remat_opt_peak"] == 3 << 20, res
            assert " - " in text, text
    # --tf32 goes to both sides on cuda; a failing row is reported and skipped
    fake = os.path.join(tmp, "remat_FULL")
    rc, text = run_compare(["--device", "cuda", "--remat", fake, "--python", shim, "--rows", "test-cnn",
                            "--steps", "1", "--rounds", "1", "--tf32"])
    assert rc == 0, rc
    last = open(fake + ".log").read().splitlines()[-1]
    assert "--tf32" in last and "--warmup 3" in last, last
    rc, text = run_compare(["--device", "cuda", "--remat", "/bin/false", "--python", shim, "--rows",
                            "test-cnn,test-gpt2", "--steps", "1", "--rounds", "1"])
    assert rc == 1 and "test-cnn" in text and "failed" in text, text
    slow = os.path.join(tmp, "remat_slow")
    with open(slow, "w") as f:
        f.write("#!/bin/sh\nsleep 30\n")
    os.chmod(slow, os.stat(slow).st_mode | stat.S_IEXEC)
    rc, text = run_compare(["--device", "cuda", "--remat", slow, "--python", shim, "--rows", "test-cnn",
                            "--steps", "1", "--rounds", "1", "--timeout", "1"])
    assert rc == 1 and "failed" in text, text
    # the run at the budget going over --timeout: the row stands without it
    slow = os.path.join(tmp, "remat_SLOW")
    with open(slow, "w") as f:
        f.write(FAKE_REMAT)
    os.chmod(slow, os.stat(slow).st_mode | stat.S_IEXEC)
    rc, text = run_compare(["--device", "cuda", "--remat", slow, "--python", shim, "--rows", "test-cnn",
                            "--steps", "1", "--rounds", "1", "--timeout", "20"])
    assert rc == 0 and "(no row)" in text, text
    # remat's row at the budget failing with an "error" field: the row stands without it
    nofit = os.path.join(tmp, "remat_NOFIT")
    with open(nofit, "w") as f:
        f.write(FAKE_REMAT)
    os.chmod(nofit, os.stat(nofit).st_mode | stat.S_IEXEC)
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        rc, text = run_compare(["--device", "cuda", "--remat", nofit, "--python", shim, "--rows", "test-cnn",
                                "--steps", "1", "--rounds", "1"])
    assert rc == 0 and "(no row)" in text and "optimal: budget too small" in err.getvalue(), (text, err.getvalue())
    # remat's CUDA build where there is no GPU (this machine): its error rows make the row fail, with its message
    real = os.path.join(HERE, "..", "..", "build-cuda", "remat")
    if os.path.exists(real) and not torch.cuda.is_available():
        err = io.StringIO()
        with contextlib.redirect_stderr(err):
            rc, text = run_compare(["--device", "cuda", "--remat", real, "--python", shim, "--rows", "test-cnn",
                                    "--steps", "1", "--rounds", "1"])
        assert rc == 1 and "all: no CUDA device" in err.getvalue(), err.getvalue()
        print("build-cuda/remat without a GPU:", err.getvalue().strip().splitlines()[-2])
    p = subprocess.run([sys.executable, os.path.join(HERE, "compare.py"), "--tf32"], stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, text=True)
    assert p.returncode == 2 and "--tf32 is for --device cuda" in p.stderr, p.stderr
    # the CPU mode with the real bench_torch.py (memtrack) and the fake remat
    rc, text = run_compare(["--remat", os.path.join(tmp, "remat_bare"), "--rows", "test-cnn,test-gpt2",
                            "--rounds", "1", "--steps", "1"])
    assert rc == 0 and "test-gpt2" in text, text
    print("compare ok")


if __name__ == "__main__":
    check_cpu()
    check_cuda_path()
    check_compare()
    print("all ok")
