"""GPT-2 in PyTorch, laid out as nanoGPT and as remat's `gpt2` model.

The state_dict names are remat's parameter names:

    transformer.wte.weight (vocab, embd)   transformer.wpe.weight (context, embd)
    transformer.h.<i>.ln_1.{weight,bias}   transformer.h.<i>.attn.c_attn.{weight,bias} (3C, C)
    transformer.h.<i>.attn.c_proj.*        transformer.h.<i>.ln_2.*
    transformer.h.<i>.mlp.c_fc.* (4C, C)   transformer.h.<i>.mlp.c_proj.* (C, 4C)
    transformer.ln_f.{weight,bias}

The output head is tied to wte (no lm_head entry). GELU is the tanh
approximation; dropout (p) follows the embeddings and each residual branch,
and there is none on the attention probabilities (remat's attention op has
none either). `use_checkpoint` wraps every block in
torch.utils.checkpoint.checkpoint(..., use_reentrant=False).

A benchmark driver builds GPT(GPTConfig(...)), moves it to a device and
dtype, calls load_weights(model, {name: tensor}) and then
model(idx, targets) -> (logits, loss); idx is (B, T) int64 with
T = context and targets (B*T) or (B, T).
"""
import math
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.utils.checkpoint


@dataclass
class GPTConfig:
    layers: int = 12
    embd: int = 768
    heads: int = 12
    context: int = 1024
    vocab: int = 50257
    dropout: float = 0.1
    use_checkpoint: bool = False


class CausalSelfAttention(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        assert cfg.embd % cfg.heads == 0
        self.heads = cfg.heads
        self.c_attn = nn.Linear(cfg.embd, 3 * cfg.embd)
        self.c_proj = nn.Linear(cfg.embd, cfg.embd)
        self.resid_dropout = nn.Dropout(cfg.dropout)
        mask = torch.tril(torch.ones(cfg.context, cfg.context, dtype=torch.bool))
        self.register_buffer("mask", mask.view(1, 1, cfg.context, cfg.context), persistent=False)

    def forward(self, x):
        B, T, C = x.shape
        H = self.heads
        q, k, v = self.c_attn(x).split(C, dim=2)
        q = q.view(B, T, H, C // H).transpose(1, 2)  # (B, H, T, D)
        k = k.view(B, T, H, C // H).transpose(1, 2)
        v = v.view(B, T, H, C // H).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
        att = att.masked_fill(~self.mask[:, :, :T, :T], float("-inf"))
        att = F.softmax(att, dim=-1)
        y = (att @ v).transpose(1, 2).contiguous().view(B, T, C)
        return self.resid_dropout(self.c_proj(y))


class MLP(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.c_fc = nn.Linear(cfg.embd, 4 * cfg.embd)
        self.c_proj = nn.Linear(4 * cfg.embd, cfg.embd)
        self.dropout = nn.Dropout(cfg.dropout)

    def forward(self, x):
        return self.dropout(self.c_proj(F.gelu(self.c_fc(x), approximate="tanh")))


class Block(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.ln_1 = nn.LayerNorm(cfg.embd)
        self.attn = CausalSelfAttention(cfg)
        self.ln_2 = nn.LayerNorm(cfg.embd)
        self.mlp = MLP(cfg)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        self.transformer = nn.ModuleDict(dict(
            wte=nn.Embedding(cfg.vocab, cfg.embd),
            wpe=nn.Embedding(cfg.context, cfg.embd),
            drop=nn.Dropout(cfg.dropout),
            h=nn.ModuleList([Block(cfg) for _ in range(cfg.layers)]),
            ln_f=nn.LayerNorm(cfg.embd),
        ))
        self.apply(self._init)
        for name, p in self.named_parameters():
            if name.endswith("c_proj.weight"):
                nn.init.normal_(p, mean=0.0, std=0.02 / math.sqrt(2 * cfg.layers))

    @staticmethod
    def _init(m):
        if isinstance(m, nn.Linear):
            nn.init.normal_(m.weight, mean=0.0, std=0.02)
            nn.init.zeros_(m.bias)
        elif isinstance(m, nn.Embedding):
            nn.init.normal_(m.weight, mean=0.0, std=0.02)

    def forward(self, idx, targets=None):
        B, T = idx.shape
        assert T <= self.cfg.context
        tr = self.transformer
        pos = torch.arange(T, device=idx.device)
        x = tr.drop(tr.wte(idx) + tr.wpe(pos))
        for block in tr.h:
            if self.cfg.use_checkpoint and torch.is_grad_enabled():
                x = torch.utils.checkpoint.checkpoint(block, x, use_reentrant=False)
            else:
                x = block(x)
        logits = F.linear(tr.ln_f(x), tr.wte.weight)  # the head tied to wte
        loss = None
        if targets is not None:
            loss = F.cross_entropy(logits.reshape(B * T, -1), targets.reshape(B * T).long())
        return logits, loss


def load_weights(model, weights):
    """Copies {state_dict name: tensor} into the model; every parameter must
    be given, with its shape (converted to the model's dtype and device)."""
    params = dict(model.named_parameters())
    missing = sorted(set(params) - set(weights))
    extra = sorted(set(weights) - set(params))
    if missing or extra:
        raise KeyError(f"weights: missing {missing}, unexpected {extra}")
    with torch.no_grad():
        for name, p in params.items():
            w = weights[name]
            if tuple(w.shape) != tuple(p.shape):
                raise ValueError(f"{name}: shape {tuple(w.shape)}, expected {tuple(p.shape)}")
            p.copy_(w.to(dtype=p.dtype, device=p.device))
