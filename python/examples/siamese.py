"""The siamese report, planned by remat: a torchvision ResNet-50 applied to
both views of a batch that does not require grad, a linear head, SGD; the
step fits a budget in bytes, and every parameter still gets its gradient.

    PYTHONPATH=python python python/examples/siamese.py [--size 64] [--batch 4] [--budget 235MiB]
"""
import argparse

import torch
import torch.nn as nn
import torchvision

import remat.torch as rt

ap = argparse.ArgumentParser()
ap.add_argument("--size", type=int, default=64)
ap.add_argument("--batch", type=int, default=4)
ap.add_argument("--budget", default="235MiB")
ap.add_argument("--steps", type=int, default=3)
a = ap.parse_args()

torch.manual_seed(0)
resnet = torchvision.models.resnet50()
head = nn.Linear(1000, 1000)
model = nn.ModuleDict({"resnet": resnet, "head": head})


def forward(x):  # x: (B, 2, 3, S, S), requires_grad False
    return head(resnet(x[:, 0])), resnet(x[:, 1])


class Siamese(nn.Module):
    def __init__(self):
        super().__init__()
        self.m = model

    def forward(self, x):
        return forward(x)


net = Siamese()
opt = torch.optim.SGD(net.parameters(), lr=0.001)
loss_fn = lambda o: torch.mean((o[0] - o[1]) ** 2)
x = torch.randn(a.batch, 2, 3, a.size, a.size)

plan = rt.plan(net, (x,), loss_fn, budget=a.budget, optimizer=opt)
print(plan)
if not plan.feasible:
    raise SystemExit("pass --budget %d or more" % plan.floor)
for step in range(a.steps):
    with plan.apply():
        loss = loss_fn(net(x))
        loss.backward()
    assert all(p.grad is not None for p in net.parameters())
    opt.step()
    opt.zero_grad()
    print("step %d loss %.6f" % (step, loss.item()))
