#!/usr/bin/python3
"""Generate the PyTorch reference fixtures for remat's C tests.

Run with Debian's python (torch + numpy):

    /usr/bin/python3 scripts/gen_fixtures.py            # writes tests/fixtures/
    /usr/bin/python3 scripts/gen_fixtures.py --out DIR  # writes elsewhere
    /usr/bin/python3 scripts/gen_fixtures.py --fp32-check
        # writes nothing; reruns everything in float32 PyTorch and reports how
        # far that lands from the float64 references under the tolerance rule

The output is deterministic: the same bytes on every run (one CPU thread,
float64, fixed ordering).  It writes tests/fixtures/{mlp,cnn,bnnet}.safetensors.

Deterministic data (identical in C and Python, so neither inputs nor initial
weights are stored)
--------------------------------------------------------------------------
All arithmetic on h is uint32 and wraps.

    name_seed(name) = 32-bit FNV-1a of the UTF-8 bytes of name
                      (h = 2166136261; for each byte: h ^= byte; h *= 16777619)
    hash(seed, i)   : h = uint32(i) + 0x9E3779B9 * uint32(seed + 1)
                      h ^= h >> 16; h *= 0x85EBCA6B
                      h ^= h >> 13; h *= 0xC2B2AE35
                      h ^= h >> 16
    fill(seed, n, bound)[i], in float32 arithmetic:
                      u = (float)(hash(seed, i) >> 8) * (1.0f / 16777216.0f)
                      value = (2.0f * u - 1.0f) * (float)bound

- A trainable parameter `name` of shape (d0, ...) (Linear / Conv2d weight)
  is fill(name_seed(name), numel, 1/sqrt(fan_in)) with fan_in = numel / d0,
  and the bound is computed in double and converted once to float:
  bound = (float)(1.0 / sqrt((double)fan_in)).
- `<layer>.bias` of a Linear / Conv2d is fill(name_seed("<layer>.bias"),
  numel, bound of "<layer>.weight").
- BatchNorm2d: weight = 1, bias = 0, running_mean = 0, running_var = 1.
- Input x (B, C, H, W) = fill(name_seed("input"), numel, 1.0), row-major.
- Labels y[i] = hash(name_seed("target"), i) % classes, i in 0..B-1.

Models (B = 8; state_dict names are PyTorch's)
----------------------------------------------
mlp   x (8,1,28,28): fc1 Linear(784,256) relu fc2 Linear(256,128) relu
      fc3 Linear(128,10) on flatten(x).
cnn   x (8,3,32,32): features = [0 Conv(3,32,3,p1), 1 ReLU,
      2 Conv(32,64,3,p1), 3 ReLU, 4 MaxPool(2), 5 Dropout,
      6 Conv(64,64,3,p1), 7 ReLU, 8 Conv(64,64,3,p1), 9 ReLU, 10 MaxPool(2),
      11 Dropout]; classifier = [0 Linear(4096,512), 1 ReLU, 2 Dropout,
      3 Linear(512,10)] on flatten(features(x)).  Dropout p = 0.
bnnet x (8,3,16,16): features = [0 Conv(3,8,3,p1,no bias), 1 BatchNorm2d(8),
      2 ReLU, 3 MaxPool(2), 4 Conv(8,16,3,p1,no bias), 5 BatchNorm2d(16),
      6 ReLU], global average pool, flatten, fc Linear(16,10).
      BatchNorm in training mode (batch statistics, biased variance for the
      normalization, unbiased for running_var), eps 1e-5, momentum 0.1.
Loss: mean cross-entropy (F.cross_entropy) of the logits against y.

Everything is computed in float64 (model.double(), inputs converted from the
float32 fill values) and stored rounded to float32, except `.stats` (F64).

File format
-----------
Standard safetensors: an 8-byte little-endian uint64 N, then N bytes of JSON
header (padded with spaces to a multiple of 8), then the data section.  The
header maps each key to {"dtype": "F32"|"F64"|"I32", "shape": [...],
"data_offsets": [begin, end]} (byte offsets into the data section, which is
entirely covered, no gaps; all data little-endian, row-major).  Tensors are
laid out by decreasing element size, then by key, so each one is naturally
aligned.  "__metadata__" is {"fixture": <JSON string>} describing the model,
the init rules, the optimizers and the tolerance rule.

Keys (<name> ranges over the model's trainable parameters unless said)
    input                (B,C,H,W) F32   the input (also derivable by fill)
    target               (B) I32         the labels (also derivable by hash)
    loss                 (1) F32         loss at the initial weights
    grad.<name>          gradients of that loss at the initial weights
    sgd.losses           (3) F32         loss before each of 3 SGD steps
    sgd.step3.<entry>    every state_dict entry except num_batches_tracked
                         (parameters and BatchNorm running_mean/running_var)
                         after 3 steps of
                         torch.optim.SGD(lr=0.05, momentum=0.9,
                         weight_decay=1e-4), each step being zero_grad,
                         train-mode forward, backward, step, on the same
                         batch from the initial weights.  The running stats
                         are therefore the result of exactly 3 train-mode
                         forwards from the defaults.
    mlp only:
    sgdn.losses, sgdn.step3.<entry>    the same with nesterov=True
    adamw.losses, adamw.step3.<entry>  torch.optim.AdamW(lr=1e-3,
                         betas=(0.9, 0.999), eps=1e-8, weight_decay=1e-2)
Weight decay applies to every trainable parameter (BatchNorm's included).

Large tensors (more than 65536 elements) are stored sampled instead of whole:
    <key>.idx    (4096) I32  distinct indices into the flattened tensor,
                             numpy default_rng(name_seed(key)).choice(numel,
                             4096, replace=False), sorted ascending
    <key>.val    (4096) F32  the tensor's values at those indices
    <key>.stats  (4)    F64  over the WHOLE tensor, from the float64 result:
                             [sum x, sum |x|, sum x^2, max |x|]
The shape of a sampled tensor is that of the parameter of the same name.

Tolerance rule (remat computes in float32; the references are float64): see
TOLERANCE below (also written into every file's metadata) and check_against(),
which applies it the way a C test should.  In short, per tensor, with
S = max|r| over the whole tensor: loss 1e-5 relative; grad.* max|c - r| <=
1e-4 * S; *.step3.* max|c - r| <= 2e-6 * S + 1e-4 * D with D the largest
update max|r - init|; adamw.step3.* may have a few outliers (AdamW is
ill-conditioned where |grad| ~ eps) within 0.1 * D; sampled tensors also
compare the whole-tensor stats.
"""

import argparse
import json
import math
import os
import struct
import sys

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

BATCH = 8
SAMPLE_THRESHOLD = 65536  # tensors with more elements are sampled
SAMPLE_COUNT = 4096
STEPS = 3

SGD = dict(lr=0.05, momentum=0.9, dampening=0.0, weight_decay=1e-4,
           nesterov=False)
SGDN = dict(SGD, nesterov=True)
ADAMW = dict(lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=1e-2)

TOLERANCE = {
    "rule": (
        "remat (float32) value c against stored reference r (float64 result "
        "rounded to float32), per tensor. Compared elements: the whole "
        "tensor, or the .idx elements of a sampled one (r = .val). "
        "S = max|r| over the whole tensor (.stats[3] when sampled). "
        "loss and *.losses: |c - r| <= loss_rtol * |r| per value. "
        "grad.*: |c - r| <= grad_rtol * S for every compared element. "
        "*.step3.*: D = max|r - init| over the compared elements, init being "
        "the initial value (fill / BatchNorm defaults); every compared "
        "element must satisfy |c - r| <= step3_rtol * S + update_rtol * D, "
        "except for adamw.step3.*, where up to max(adamw_outliers_min, "
        "ceil(adamw_outliers_frac * n)) of the n compared elements may "
        "exceed that bound (AdamW is ill-conditioned where |grad| is near "
        "eps) but all must satisfy |c - r| <= adamw_outlier_dfrac * D. "
        "Sampled tensors, with s the whole-tensor stats of c (in double) "
        "and t = .stats, rtol being grad_rtol for grad.* and "
        "step3_rtol + update_rtol otherwise: |s0 - t0| <= rtol * t1, "
        "|s1 - t1| <= rtol * t1, |s2 - t2| <= 2 * rtol * t2, "
        "|s3 - t3| <= rtol * t3."),
    "loss_rtol": 1e-5,
    "grad_rtol": 1e-4,
    "step3_rtol": 2e-6,
    "update_rtol": 1e-4,
    "adamw_outliers_min": 4,
    "adamw_outliers_frac": 1e-3,
    "adamw_outlier_dfrac": 0.1,
    "note": ("calibrated against float32 PyTorch and a sequential float32 "
             "reduction (both within about a tenth of these bounds; "
             "scripts/gen_fixtures.py --fp32-check reruns the PyTorch one)"),
}

M32 = 0xFFFFFFFF


# ------------------------------------------------------------ deterministic data

def name_seed(name):
    """32-bit FNV-1a of the UTF-8 bytes of name."""
    h = 2166136261
    for b in name.encode("utf-8"):
        h ^= b
        h = (h * 16777619) & M32
    return h


def hash_u32(seed, n):
    """hash(seed, i) for i in 0..n-1 as a uint32 array (uint64 math, masked)."""
    h = np.arange(n, dtype=np.uint64)
    h = (h + np.uint64((0x9E3779B9 * ((seed + 1) & M32)) & M32)) & np.uint64(M32)
    h ^= h >> np.uint64(16)
    h = (h * np.uint64(0x85EBCA6B)) & np.uint64(M32)
    h ^= h >> np.uint64(13)
    h = (h * np.uint64(0xC2B2AE35)) & np.uint64(M32)
    h ^= h >> np.uint64(16)
    return h.astype(np.uint32)


def fill(seed, n, bound):
    """float32 values in [-bound, bound), computed in float32 arithmetic."""
    h = hash_u32(seed, n)
    u = (h >> np.uint32(8)).astype(np.float32) * np.float32(1.0 / 16777216.0)
    v = (np.float32(2.0) * u - np.float32(1.0)) * np.float32(bound)
    assert v.dtype == np.float32
    return v


def fan_in_bound(weight_shape):
    numel = int(np.prod(weight_shape))
    fan_in = numel // weight_shape[0]
    return 1.0 / math.sqrt(fan_in)  # converted to float32 once, in fill()


# ------------------------------------------------------------------- models

class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(784, 256)
        self.fc2 = nn.Linear(256, 128)
        self.fc3 = nn.Linear(128, 10)

    def forward(self, x):
        x = torch.flatten(x, 1)
        return self.fc3(F.relu(self.fc2(F.relu(self.fc1(x)))))


class CNN(nn.Module):
    def __init__(self, p=0.0):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(3, 32, 3, padding=1), nn.ReLU(),
            nn.Conv2d(32, 64, 3, padding=1), nn.ReLU(),
            nn.MaxPool2d(2), nn.Dropout(p),
            nn.Conv2d(64, 64, 3, padding=1), nn.ReLU(),
            nn.Conv2d(64, 64, 3, padding=1), nn.ReLU(),
            nn.MaxPool2d(2), nn.Dropout(p))
        self.classifier = nn.Sequential(
            nn.Linear(64 * 8 * 8, 512), nn.ReLU(), nn.Dropout(p),
            nn.Linear(512, 10))

    def forward(self, x):
        return self.classifier(torch.flatten(self.features(x), 1))


class BNNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(3, 8, 3, padding=1, bias=False),
            nn.BatchNorm2d(8, eps=1e-5, momentum=0.1), nn.ReLU(),
            nn.MaxPool2d(2),
            nn.Conv2d(8, 16, 3, padding=1, bias=False),
            nn.BatchNorm2d(16, eps=1e-5, momentum=0.1), nn.ReLU())
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(16, 10)

    def forward(self, x):
        return self.fc(torch.flatten(self.pool(self.features(x)), 1))


MODELS = [
    # name, constructor, input shape, classes, optimizer runs, description
    ("mlp", MLP, (BATCH, 1, 28, 28), 10,
     [("sgd", "sgd", SGD), ("sgdn", "sgd", SGDN), ("adamw", "adamw", ADAMW)],
     "fc3(relu(fc2(relu(fc1(flatten(x)))))); fc1 Linear(784,256), "
     "fc2 Linear(256,128), fc3 Linear(128,10)"),
    ("cnn", CNN, (BATCH, 3, 32, 32), 10, [("sgd", "sgd", SGD)],
     "classifier(flatten(features(x))); features = [Conv2d(3,32,3,p1), ReLU, "
     "Conv2d(32,64,3,p1), ReLU, MaxPool2d(2), Dropout(0), Conv2d(64,64,3,p1), "
     "ReLU, Conv2d(64,64,3,p1), ReLU, MaxPool2d(2), Dropout(0)]; classifier "
     "= [Linear(4096,512), ReLU, Dropout(0), Linear(512,10)]"),
    ("bnnet", BNNet, (BATCH, 3, 16, 16), 10, [("sgd", "sgd", SGD)],
     "fc(flatten(adaptive_avg_pool(features(x), 1))); features = "
     "[Conv2d(3,8,3,p1,bias=False), BatchNorm2d(8), ReLU, MaxPool2d(2), "
     "Conv2d(8,16,3,p1,bias=False), BatchNorm2d(16), ReLU]; fc Linear(16,10); "
     "BatchNorm training mode, eps 1e-5, momentum 0.1"),
]


def init_model(model):
    """Deterministic weights (see the module docstring), in place."""
    bn_names = set()
    for mname, mod in model.named_modules():
        if isinstance(mod, nn.modules.batchnorm._BatchNorm):
            bn_names.add(mname)
    state = dict(model.named_parameters())
    with torch.no_grad():
        for name, p in model.named_parameters():
            layer, _, leaf = name.rpartition(".")
            if layer in bn_names:
                nn.init.ones_(p) if leaf == "weight" else nn.init.zeros_(p)
                continue
            if leaf == "weight":
                assert p.dim() >= 2, name
                bound = fan_in_bound(tuple(p.shape))
            elif leaf == "bias":
                bound = fan_in_bound(tuple(state[layer + ".weight"].shape))
            else:
                raise ValueError("no init rule for " + name)
            v = fill(name_seed(name), p.numel(), bound)
            p.copy_(torch.from_numpy(v.astype(np.float64)).view(p.shape))
        for mname in bn_names:
            mod = model.get_submodule(mname)
            mod.reset_running_stats()


def make_batch(shape, classes):
    n = int(np.prod(shape))
    x32 = fill(name_seed("input"), n, 1.0).reshape(shape)
    y = (hash_u32(name_seed("target"), shape[0]) % np.uint32(classes))
    return x32, y.astype(np.int32)


def build(ctor, dtype):
    torch.manual_seed(0)  # irrelevant (everything is overwritten), but fixed
    model = ctor().to(dtype)
    init_model(model)
    model.train()
    return model


def run_reference(ctor, shape, classes, opt_runs, dtype=torch.float64):
    """Returns (x32, y, results) with results an ordered list of
    (key, float64 array or int array)."""
    x32, y = make_batch(shape, classes)
    x = torch.from_numpy(x32.astype(np.float64)).to(dtype)
    yt = torch.from_numpy(y.astype(np.int64))
    out = []

    model = build(ctor, dtype)
    loss = F.cross_entropy(model(x), yt)
    loss.backward()
    out.append(("loss", np.array([loss.item()], dtype=np.float64)))
    for name, p in model.named_parameters():
        out.append(("grad." + name, p.grad.detach().double().numpy().copy()))

    for prefix, kind, cfg in opt_runs:
        model = build(ctor, dtype)
        if kind == "sgd":
            opt = torch.optim.SGD(model.parameters(), **cfg)
        else:
            opt = torch.optim.AdamW(model.parameters(), **cfg)
        losses = []
        for _ in range(STEPS):
            opt.zero_grad()
            loss = F.cross_entropy(model(x), yt)
            losses.append(loss.item())
            loss.backward()
            opt.step()
        out.append((prefix + ".losses", np.array(losses, dtype=np.float64)))
        for name, t in model.state_dict().items():
            if name.endswith("num_batches_tracked"):
                continue
            out.append((prefix + ".step3." + name,
                        t.detach().double().numpy().copy()))
    return x32, y, out


# -------------------------------------------------------------- safetensors

DTYPES = {"F32": np.dtype("<f4"), "F64": np.dtype("<f8"), "I32": np.dtype("<i4")}


def sample_indices(key, numel):
    rng = np.random.default_rng(name_seed(key))
    idx = rng.choice(numel, SAMPLE_COUNT, replace=False)
    return np.sort(idx).astype(np.int32)


def add_tensor(tensors, key, arr, dtype="F32"):
    """Adds arr (float64 result) under key, sampled if it is large."""
    arr = np.asarray(arr)
    if arr.size > SAMPLE_THRESHOLD:
        flat = arr.reshape(-1).astype(np.float64)
        idx = sample_indices(key, flat.size)
        assert len(np.unique(idx)) == SAMPLE_COUNT
        stats = np.array([flat.sum(), np.abs(flat).sum(),
                          (flat * flat).sum(), np.abs(flat).max()],
                         dtype=np.float64)
        tensors.append((key + ".idx", "I32", idx))
        tensors.append((key + ".val", "F32", flat[idx]))
        tensors.append((key + ".stats", "F64", stats))
    else:
        tensors.append((key, dtype, arr))


def write_safetensors(path, tensors, metadata):
    """tensors: list of (key, dtype, array). Deterministic layout."""
    keys = [k for k, _, _ in tensors]
    assert len(set(keys)) == len(keys), "duplicate keys"
    order = sorted(tensors, key=lambda t: (-DTYPES[t[1]].itemsize, t[0]))
    header = {"__metadata__": metadata}
    blobs = []
    offset = 0
    for key, dtype, arr in order:
        data = np.ascontiguousarray(np.asarray(arr).astype(DTYPES[dtype]))
        b = data.tobytes()
        shape = list(np.asarray(arr).shape)
        header[key] = {"dtype": dtype, "shape": shape,
                       "data_offsets": [offset, offset + len(b)]}
        blobs.append(b)
        offset += len(b)
    hjson = json.dumps(header, sort_keys=True, separators=(",", ":"))
    hbytes = hjson.encode("utf-8")
    hbytes += b" " * ((-len(hbytes)) % 8)
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(struct.pack("<Q", len(hbytes)))
        f.write(hbytes)
        for b in blobs:
            f.write(b)
    os.replace(tmp, path)
    return 8 + len(hbytes) + offset


def describe(name, ctor, shape, classes, opt_runs, desc):
    model = ctor()
    state = [{"name": k, "shape": list(v.shape),
              "trainable": k in dict(model.named_parameters())}
             for k, v in model.state_dict().items()
             if not k.endswith("num_batches_tracked")]
    opts = []
    for prefix, kind, cfg in opt_runs:
        c = dict(cfg)
        if "betas" in c:
            c["betas"] = list(c["betas"])
        opts.append({"prefix": prefix,
                     "optimizer": "torch.optim.SGD" if kind == "sgd"
                     else "torch.optim.AdamW",
                     "settings": c, "steps": STEPS})
    return {
        "model": name,
        "architecture": desc,
        "input_shape": list(shape),
        "classes": classes,
        "batch": shape[0],
        "loss": "mean cross-entropy (F.cross_entropy)",
        "state_dict": state,
        "init": ("weight: fill(name_seed(name), numel, 1/sqrt(numel/d0)); "
                 "bias: bound of <layer>.weight; BatchNorm weight 1, bias 0, "
                 "running_mean 0, running_var 1; input: "
                 "fill(name_seed('input'), numel, 1); labels: "
                 "hash(name_seed('target'), i) % classes"),
        "optimizers": opts,
        "step": "zero_grad, train-mode forward, backward, step; same batch",
        "sampling": {"threshold": SAMPLE_THRESHOLD, "count": SAMPLE_COUNT,
                     "indices": "numpy default_rng(name_seed(key)).choice("
                                "numel, count, replace=False), sorted",
                     "stats": ["sum", "sum_abs", "sum_sq", "max_abs"]},
        "compute": "float64 (torch %s), stored as float32" %
                   torch.__version__.split("+")[0],
        "tolerance": TOLERANCE,
        "generator": "/usr/bin/python3 scripts/gen_fixtures.py",
    }


# --------------------------------------------------------------- fp32 check

def initial_values(ctor):
    """name -> initial float64 value of every state_dict entry."""
    model = build(ctor, torch.float64)
    return {k: v.detach().numpy().copy() for k, v in model.state_dict().items()}


def check_against(tensors, got, init):
    """Applies TOLERANCE as a C test would: tensors as written to the file,
    got = {key: whole float32/float64 result of the implementation under
    test}, init = initial_values().  Returns [(key, fraction of the bound)]
    (<= 1 passes) and a list of failure messages."""
    T = TOLERANCE
    st = {k: (d, a) for k, d, a in tensors}
    rows, fails = [], []
    for key, c in got.items():
        c = np.asarray(c, dtype=np.float64).reshape(-1)
        sampled = key not in st
        if sampled:
            idx = st[key + ".idx"][1].astype(np.int64)
            r = st[key + ".val"][1].astype(np.float32).astype(np.float64)
            t = st[key + ".stats"][1]
            S = t[3]
            cc = c[idx]
        else:
            r = np.asarray(st[key][1]).astype(np.float32).astype(np.float64)
            r = r.reshape(-1)
            S = np.abs(r).max() if r.size else 0.0
            cc = c
        err = np.abs(cc - r)
        if key == "loss" or key.endswith(".losses"):
            frac = np.max(err / (T["loss_rtol"] * np.abs(r)))
            rtol = None
        elif key.startswith("grad."):
            rtol = T["grad_rtol"]
            frac = (np.max(err) / (rtol * S) if S > 0
                    else (0.0 if np.max(err) == 0 else np.inf))
        else:
            rtol = T["step3_rtol"] + T["update_rtol"]
            name = key.split(".step3.", 1)[1]
            i0 = init[name].reshape(-1).astype(np.float64)
            if sampled:
                i0 = i0[idx]
            D = np.max(np.abs(r - i0))
            bound = T["step3_rtol"] * S + T["update_rtol"] * D
            over = err > bound
            if key.startswith("adamw."):
                allowed = max(T["adamw_outliers_min"],
                              math.ceil(T["adamw_outliers_frac"] * err.size))
                if over.sum() > allowed:
                    fails.append("%s: %d outliers > %d allowed" %
                                 (key, over.sum(), allowed))
                loose = T["adamw_outlier_dfrac"] * D
                if np.any(err > loose):
                    fails.append("%s: outlier beyond %.3g" % (key, loose))
                # inliers pass by definition: report the outlier budget
                frac = max(over.sum() / allowed, np.max(err) / loose)
            else:
                frac = np.max(err) / bound
        if not frac <= 1.0:
            fails.append("%s: %.3g of the bound" % (key, frac))
        if sampled and rtol is not None:
            s = np.array([c.sum(), np.abs(c).sum(), (c * c).sum(),
                          np.abs(c).max()])
            lim = np.array([rtol * t[1], rtol * t[1], 2 * rtol * t[2],
                            rtol * t[3]])
            sf = np.max(np.abs(s - t) / lim)
            if not sf <= 1.0:
                fails.append("%s: stats %.3g of the bound" % (key, sf))
            frac = max(frac, sf)
        rows.append((key, float(frac)))
    return rows, fails


def make_tensors(x32, y, results):
    tensors = []
    add_tensor(tensors, "input", x32, "F32")
    tensors.append(("target", "I32", y))
    for key, arr in results:
        add_tensor(tensors, key, arr, "F32")
    return tensors


def fp32_check():
    """Reruns every model in float32 PyTorch and applies the tolerance rule
    against the float64 references, printing the fraction of each bound."""
    ok = True
    for name, ctor, shape, classes, opt_runs, _ in MODELS:
        x32, y, ref = run_reference(ctor, shape, classes, opt_runs)
        _, _, got = run_reference(ctor, shape, classes, opt_runs,
                                  dtype=torch.float32)
        rows, fails = check_against(make_tensors(x32, y, ref), dict(got),
                                    initial_values(ctor))
        for key, frac in rows:
            print("  %-5s %-36s %.3f" % (name, key, frac))
        worst = max(rows, key=lambda r: r[1])
        print("%s: worst %.3f of the bound (%s)%s" %
              (name, worst[1], worst[0], "" if not fails else
               "; FAILS: " + "; ".join(fails)))
        ok = ok and not fails
    return 0 if ok else 1


# --------------------------------------------------------------------- main

def main():
    here = os.path.dirname(os.path.abspath(__file__))
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=os.path.join(here, "..", "tests",
                                                  "fixtures"))
    ap.add_argument("--fp32-check", action="store_true",
                    help="compare float32 PyTorch against the references; "
                         "writes nothing")
    args = ap.parse_args()

    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    if args.fp32_check:
        return fp32_check()

    out_dir = os.path.normpath(args.out)
    os.makedirs(out_dir, exist_ok=True)
    total = 0
    for name, ctor, shape, classes, opt_runs, desc in MODELS:
        x32, y, results = run_reference(ctor, shape, classes, opt_runs)
        tensors = make_tensors(x32, y, results)
        meta = {"fixture": json.dumps(describe(name, ctor, shape, classes,
                                               opt_runs, desc),
                                      sort_keys=True)}
        path = os.path.join(out_dir, name + ".safetensors")
        size = write_safetensors(path, tensors, meta)
        total += size
        print("wrote %s (%d bytes, %d tensors)" % (path, size, len(tensors)))
        for key, dtype, arr in tensors:
            print("  %-34s %s %s" % (key, dtype, list(np.asarray(arr).shape)))
    print("total %d bytes" % total)
    return 0


if __name__ == "__main__":
    sys.exit(main())
