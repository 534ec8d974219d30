"""The models of the reports that started remat, written as PyTorch users
wrote them, and a GPT-2 with F.scaled_dot_product_attention: the package's
tests and bench/torch/remat_truth.py use them."""

import math

import torch
import torch.nn as nn
import torch.nn.functional as F


class Siamese(nn.Module):
    """A ResNet-50 applied to both views of x (B, 2, 3, S, S), a linear head on the first."""

    def __init__(self):
        super().__init__()
        import torchvision
        self.resnet = torchvision.models.resnet50()
        self.head = nn.Linear(1000, 1000)

    def forward(self, x):
        o1 = self.resnet(x[:, 0])
        o2 = self.resnet(x[:, 1])
        return self.head(o1), o2


def siamese_loss(o):
    o1, o2 = o
    return torch.mean((o1 - o2) ** 2)


class CifarCNN(nn.Module):
    """The CIFAR-10 CNN with dropout of the report."""

    def __init__(self):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(3, 32, 3, padding=1), nn.ReLU(), nn.Conv2d(32, 64, 3, padding=1), nn.ReLU(),
            nn.MaxPool2d(2), nn.Dropout(0.25),
            nn.Conv2d(64, 64, 3, padding=1), nn.ReLU(), nn.Conv2d(64, 64, 3, padding=1), nn.ReLU(),
            nn.MaxPool2d(2), nn.Dropout(0.25))
        self.classifier = nn.Sequential(nn.Flatten(), nn.Linear(4096, 512), nn.ReLU(), nn.Dropout(0.5),
                                        nn.Linear(512, 10))

    def forward(self, x):
        return self.classifier(self.features(x))


class HeavyModel(nn.Module):
    """One scalar parameter added outer x inner times to a scalar."""

    def __init__(self, outer=1000, inner=100):
        super().__init__()
        self.a = nn.Parameter(torch.tensor(1.0))
        self.outer, self.inner = outer, inner

    def forward(self, x):
        for _ in range(self.outer):
            for _ in range(self.inner):
                x = x + self.a
        return x


class BNNet(nn.Module):
    """A small BatchNorm net (running statistics must update once per step)."""

    def __init__(self):
        super().__init__()
        self.body = nn.Sequential(nn.Conv2d(3, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(inplace=True),
                                  nn.Conv2d(16, 32, 3, padding=1, stride=2), nn.BatchNorm2d(32), nn.ReLU(inplace=True),
                                  nn.Conv2d(32, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(inplace=True),
                                  nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(32, 10))

    def forward(self, x):
        return self.body(x)


class SelfAttention(nn.Module):
    def __init__(self, embd, heads, dropout):
        super().__init__()
        self.heads = heads
        self.c_attn = nn.Linear(embd, 3 * embd)
        self.c_proj = nn.Linear(embd, embd)
        self.drop = nn.Dropout(dropout)

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.c_attn(x).split(C, dim=2)
        q, k, v = (t.view(B, T, self.heads, C // self.heads).transpose(1, 2) for t in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.drop(self.c_proj(y.transpose(1, 2).contiguous().view(B, T, C)))


class Block(nn.Module):
    def __init__(self, embd, heads, dropout):
        super().__init__()
        self.ln_1, self.ln_2 = nn.LayerNorm(embd), nn.LayerNorm(embd)
        self.attn = SelfAttention(embd, heads, dropout)
        self.mlp = nn.Sequential(nn.Linear(embd, 4 * embd), nn.GELU(approximate="tanh"), nn.Linear(4 * embd, embd),
                                 nn.Dropout(dropout))

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT2(nn.Module):
    """GPT-2 (tied head) with F.scaled_dot_product_attention."""

    def __init__(self, layers=12, embd=768, heads=12, context=1024, vocab=50257, dropout=0.1):
        super().__init__()
        self.wte, self.wpe = nn.Embedding(vocab, embd), nn.Embedding(context, embd)
        self.drop = nn.Dropout(dropout)
        self.h = nn.ModuleList([Block(embd, heads, dropout) for _ in range(layers)])
        self.ln_f = nn.LayerNorm(embd)
        for n, p in self.named_parameters():
            if p.dim() >= 2:
                nn.init.normal_(p, std=0.02 / (math.sqrt(2 * layers) if n.endswith("mlp.2.weight") else 1))

    def forward(self, idx):
        T = idx.shape[1]
        x = self.drop(self.wte(idx) + self.wpe(torch.arange(T)))
        for b in self.h:
            x = b(x)
        return F.linear(self.ln_f(x), self.wte.weight)


def gpt2_loss(targets):
    return lambda logits: F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))
