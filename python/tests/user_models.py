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
        x = self.drop(self.wte(idx) + self.wpe(torch.arange(T, device=idx.device)))
        for b in self.h:
            x = b(x)
        return F.linear(self.ln_f(x), self.wte.weight)


def gpt2_loss(targets):
    return lambda logits: F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))


class UNet(nn.Module):
    """A small U-Net: convolutions with BatchNorm, max-pooling down, transposed
    convolutions up, skip connections by concatenation, dropout at the bottom."""

    def __init__(self, ch=16, out=4, dropout=0.1):
        super().__init__()

        def block(i, o):
            return nn.Sequential(nn.Conv2d(i, o, 3, padding=1), nn.BatchNorm2d(o), nn.ReLU(inplace=True),
                                 nn.Conv2d(o, o, 3, padding=1), nn.BatchNorm2d(o), nn.ReLU(inplace=True))
        self.d1, self.d2, self.d3 = block(3, ch), block(ch, 2 * ch), block(2 * ch, 4 * ch)
        self.drop = nn.Dropout2d(dropout)
        self.u2, self.c2 = nn.ConvTranspose2d(4 * ch, 2 * ch, 2, stride=2), block(4 * ch, 2 * ch)
        self.u1, self.c1 = nn.ConvTranspose2d(2 * ch, ch, 2, stride=2), block(2 * ch, ch)
        self.head = nn.Conv2d(ch, out, 1)

    def forward(self, x):
        a = self.d1(x)
        b = self.d2(F.max_pool2d(a, 2))
        c = self.drop(self.d3(F.max_pool2d(b, 2)))
        b = self.c2(torch.cat([self.u2(c), b], 1))
        a = self.c1(torch.cat([self.u1(b), a], 1))
        return self.head(a)


def _rms_norm(dim):
    if hasattr(nn, "RMSNorm"):  # PyTorch 2.4+
        return nn.RMSNorm(dim, eps=1e-6)
    return _RMSNorm(dim)


class _RMSNorm(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        return self.weight * x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6)


class LlamaBlock(nn.Module):
    def __init__(self, dim, heads, hidden):
        super().__init__()
        self.heads = heads
        self.norm1, self.norm2 = _rms_norm(dim), _rms_norm(dim)
        self.wqkv, self.wo = nn.Linear(dim, 3 * dim, bias=False), nn.Linear(dim, dim, bias=False)
        self.w1, self.w3 = nn.Linear(dim, hidden, bias=False), nn.Linear(dim, hidden, bias=False)
        self.w2 = nn.Linear(hidden, dim, bias=False)

    def forward(self, x, cos, sin):
        B, T, C = x.shape
        q, k, v = self.wqkv(self.norm1(x)).split(C, dim=2)
        q, k, v = (t.view(B, T, self.heads, C // self.heads).transpose(1, 2) for t in (q, k, v))
        q, k = _rotate(q, cos, sin), _rotate(k, cos, sin)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.wo(y.transpose(1, 2).reshape(B, T, C))
        h = self.norm2(x)
        return x + self.w2(F.silu(self.w1(h)) * self.w3(h))


def _rotate(x, cos, sin):
    a, b = x.chunk(2, dim=-1)
    return torch.cat([a * cos - b * sin, a * sin + b * cos], dim=-1)


class Llama(nn.Module):
    """A Llama-style decoder: RMSNorm, rotary positions (a table shared by
    every layer), SwiGLU, SDPA, untied head."""

    def __init__(self, layers=4, dim=256, heads=4, vocab=8192, context=256):
        super().__init__()
        self.emb = nn.Embedding(vocab, dim)
        self.layers = nn.ModuleList([LlamaBlock(dim, heads, 4 * dim) for _ in range(layers)])
        self.norm, self.head = _rms_norm(dim), nn.Linear(dim, vocab, bias=False)
        half = dim // heads // 2
        freq = 1.0 / (10000 ** (torch.arange(half).float() / half))
        ang = torch.outer(torch.arange(context).float(), freq)
        self.register_buffer("cos", ang.cos(), persistent=False)
        self.register_buffer("sin", ang.sin(), persistent=False)

    def forward(self, idx):
        T = idx.shape[1]
        x, cos, sin = self.emb(idx), self.cos[:T], self.sin[:T]
        for b in self.layers:
            x = b(x, cos, sin)
        return self.head(self.norm(x))
