#!/usr/bin/env python3
"""remat against PyTorch DDP: writes the fixture that tests/test_dist_ddp.c
checks remat's data-parallel training against.

    /work/venv-torch/bin/python bench/torch/ddp_fixture.py \
        [--out tests/fixtures/ddp_cnn.safetensors]

Two processes (torch.multiprocessing), the gloo backend, DistributedDataParallel
around remat's cnn (bench_torch.CNN's layers and state_dict names) on 1x4x4
images, 10 classes, dropout off: three SGD steps (lr 0.05, momentum 0.9,
weight decay 1e-4) on three global batches of 64, each rank taking its 32
rows (rank r rows 32r..32r+31: remat's micro-batch r of 32). DDP averages
the ranks' gradients (each the mean over its 32 rows): the gradient of the
mean loss over the 64.

Initial weights and batches are those of scripts/gen_fixtures.py's rules,
which the C test recomputes: weight = fill(name_seed(name), numel,
1/sqrt(fan_in)), a bias the bound of its layer's weight; the input of step
s is fill(name_seed("input.s"), 64*16, 1) and its labels
hash(name_seed("target.s"), i) % 10. The fixture holds the batches (so
that a reader need not recompute them), the global mean loss of each step
("losses", averaged over the ranks), and the weights after the third step
("step3.<name>"), float32. The check (test_dist_ddp.c): every weight
within 1e-5 of its tensor's largest magnitude, the losses within 1e-5
relative. Run with 2 processes on the CPU, one thread each.
"""
import argparse
import math
import os
import socket
import sys

import numpy as np
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn as nn
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import st  # noqa: E402  (bench/torch/st.py: safetensors without the package)

sys.path.insert(0, os.path.join(HERE, "..", "..", "scripts"))
from gen_fixtures import fill, hash_u32, name_seed  # noqa: E402,F401  (the fixtures' initial values)

BATCH, RANKS, STEPS, SIZE, CLASSES = 64, 2, 3, 4, 10
SGD = dict(lr=0.05, momentum=0.9, weight_decay=1e-4)


class CNN(nn.Module):
    """remat's cnn (src/models/models.c) with its state_dict names, dropout off."""

    def __init__(self):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(1, 32, 3, padding=1), nn.ReLU(),
            nn.Conv2d(32, 64, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2), nn.Dropout(0.0),
            nn.Conv2d(64, 64, 3, padding=1), nn.ReLU(),
            nn.Conv2d(64, 64, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2), nn.Dropout(0.0))
        self.classifier = nn.Sequential(nn.Linear(64 * (SIZE // 4) ** 2, 512), nn.ReLU(), nn.Dropout(0.0),
                                        nn.Linear(512, CLASSES))

    def forward(self, x):
        return self.classifier(torch.flatten(self.features(x), 1))


def init_model(model):
    shapes = {n: p.shape for n, p in model.named_parameters()}
    with torch.no_grad():
        for name, p in model.named_parameters():
            layer, _, leaf = name.rpartition(".")
            w = shapes[layer + ".weight"]
            bound = 1.0 / math.sqrt(int(np.prod(w)) // w[0])
            p.copy_(torch.from_numpy(fill(name_seed(name), p.numel(), bound)).view(p.shape))


def batches():
    xs, ys = [], []
    for s in range(STEPS):
        xs.append(fill(name_seed(f"input.{s}"), BATCH * SIZE * SIZE, 1.0).reshape(BATCH, 1, SIZE, SIZE))
        ys.append((hash_u32(name_seed(f"target.{s}"), BATCH) % CLASSES).astype(np.int32))
    return np.stack(xs), np.stack(ys)


def worker(rank, port, out):
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=RANKS)
    model = CNN()
    init_model(model)
    ddp = nn.parallel.DistributedDataParallel(model)
    opt = torch.optim.SGD(ddp.parameters(), **SGD)
    xs, ys = batches()
    rows = slice(rank * BATCH // RANKS, (rank + 1) * BATCH // RANKS)
    losses = []
    for s in range(STEPS):
        opt.zero_grad()
        loss = F.cross_entropy(ddp(torch.from_numpy(xs[s][rows])), torch.from_numpy(ys[s][rows]).long())
        loss.backward()
        opt.step()
        mean = loss.detach().clone()
        dist.all_reduce(mean)
        losses.append(float(mean) / RANKS)
    if rank == 0:
        tensors = {"input": xs, "target": ys, "losses": np.array(losses, dtype=np.float32)}
        for name, p in model.state_dict().items():
            tensors["step3." + name] = p.detach().numpy().astype(np.float32)
        meta = {"fixture": "remat cnn 1x4x4, dropout off, against torch.nn.parallel.DistributedDataParallel "
                           f"(gloo, {RANKS} processes, torch {torch.__version__}); batch {BATCH} global, "
                           f"{BATCH // RANKS} per rank; {STEPS} SGD steps {SGD}; generator "
                           "bench/torch/ddp_fixture.py"}
        st.save(out, tensors, meta)
        print(f"{out}: losses {losses}")
    dist.destroy_process_group()


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=os.path.join(HERE, "..", "..", "tests", "fixtures", "ddp_cnn.safetensors"))
    args = ap.parse_args()
    with socket.socket() as s:  # a free port for the rendezvous
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    mp.spawn(worker, args=(port, os.path.abspath(args.out)), nprocs=RANKS, join=True)


if __name__ == "__main__":
    main()
