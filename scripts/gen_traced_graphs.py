#!/usr/bin/env python3
"""Traced PyTorch training steps for tests/test_ilp.c: small real models
captured by remat.torch, written as graph files (docs/graph-format.md)
into tests/graphs/ilp/<name>.json.

    PYTHONPATH=python REMAT_LIB=build/libremat.so \\
        ~/.cache/remat/venv-torch/bin/python scripts/gen_traced_graphs.py

test_ilp reads these files (no Python at test time), exports their
training steps' DAGs beside its random graphs (test_ilp --export), and
scripts/gen_ilp_fixtures.py solves the rematerialization ILP on them, so
that remat's `optimal` is measured against the true optimum on what a
PyTorch model looks like to the planner, not only on graphs remat built.

Each model is small enough for the ILP (at most about 60 traced ops, so
at most about 120 operations in the step): an MLP with BatchNorm, a CNN
with BatchNorm and pooling, a stack of two residual blocks, and one-layer
GPT-2 and Llama models from HuggingFace configs (no downloads). Captured
with no transient meter (transients="none") and FLOP costs, so that the
files are the same on every run and every machine. No op writes in place
(the residual blocks add and apply ReLU out of place): a value
overwritten in place is charged by remat's simulator in a way the ILP's
memory model does not describe, and the script refuses such a file.
"""
import json
import os

import torch
import torch.nn as nn
import torch.nn.functional as F

from remat.torch.capture import capture

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "graphs", "ilp")
MAX_OPS = 64


class MlpBn(nn.Module):
    def __init__(self):
        super().__init__()
        self.l1, self.b1 = nn.Linear(32, 64), nn.BatchNorm1d(64)
        self.l2, self.b2 = nn.Linear(64, 64), nn.BatchNorm1d(64)
        self.l3 = nn.Linear(64, 10)

    def forward(self, x):
        x = F.relu(self.b1(self.l1(x)))
        x = F.gelu(self.b2(self.l2(x)))
        return self.l3(x)


class CnnBn(nn.Module):
    def __init__(self):
        super().__init__()
        self.c1, self.b1 = nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8)
        self.c2, self.b2 = nn.Conv2d(8, 16, 3, padding=1), nn.BatchNorm2d(16)
        self.fc = nn.Linear(16 * 4 * 4, 10)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.b1(self.c1(x))), 2)
        x = F.max_pool2d(F.relu(self.b2(self.c2(x))), 2)
        return self.fc(x.flatten(1))


class Block(nn.Module):
    """A ResNet basic block with its ReLUs and its addition out of place."""

    def __init__(self, c):
        super().__init__()
        self.c1, self.b1 = nn.Conv2d(c, c, 3, padding=1, bias=False), nn.BatchNorm2d(c)
        self.c2, self.b2 = nn.Conv2d(c, c, 3, padding=1, bias=False), nn.BatchNorm2d(c)

    def forward(self, x):
        y = F.relu(self.b1(self.c1(x)))
        return F.relu(self.b2(self.c2(y)) + x)


class ResNetTiny(nn.Module):
    def __init__(self, c=8, blocks=2):
        super().__init__()
        self.stem, self.bn = nn.Conv2d(3, c, 3, padding=1, bias=False), nn.BatchNorm2d(c)
        self.blocks = nn.Sequential(*[Block(c) for _ in range(blocks)])
        self.fc = nn.Linear(c, 10)

    def forward(self, x):
        x = self.blocks(F.relu(self.bn(self.stem(x))))
        return self.fc(F.adaptive_avg_pool2d(x, 1).flatten(1))


class Logits(nn.Module):
    """A HuggingFace causal LM's logits, flattened for the loss."""

    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, ids):
        return self.model(input_ids=ids).logits.flatten(0, 1)


def transformers_models(vocab, seq):
    import transformers
    gpt2 = transformers.GPT2Config(n_layer=1, n_embd=32, n_head=2, n_positions=seq, vocab_size=vocab,
                                   resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, bos_token_id=0,
                                   eos_token_id=0, attn_implementation="eager")
    yield "gpt2_1l", Logits(transformers.GPT2LMHeadModel(gpt2))
    llama = transformers.LlamaConfig(num_hidden_layers=1, hidden_size=32, intermediate_size=64,
                                     num_attention_heads=2, num_key_value_heads=1, vocab_size=vocab,
                                     max_position_embeddings=seq, bos_token_id=0, eos_token_id=0)
    yield "llama_1l", Logits(transformers.LlamaForCausalLM(llama))


def cases():
    """(name, model, inputs, targets) per graph."""
    yield "mlp_bn", MlpBn(), torch.randn(16, 32), torch.randint(0, 10, (16,))
    yield "cnn_bn", CnnBn(), torch.randn(4, 3, 16, 16), torch.randint(0, 10, (4,))
    yield "resnet_tiny", ResNetTiny(), torch.randn(4, 3, 8, 8), torch.randint(0, 10, (4,))
    vocab, seq = 64, 16
    ids = torch.randint(0, vocab, (2, seq))
    for name, model in transformers_models(vocab, seq):
        yield name, model, ids, ids.flatten()


def main():
    os.makedirs(OUT, exist_ok=True)
    torch.manual_seed(0)
    for name, model, x, y in cases():
        model.train()
        t = capture(model, x, lambda out, y=y: F.cross_entropy(out, y), transients="none")
        g = t.graph("flops")
        g["source"] = "%s: torch %s (scripts/gen_traced_graphs.py)" % (name, torch.__version__.split("+")[0])
        if len(g["ops"]) > MAX_OPS:
            raise SystemExit("%s: %d ops, more than the ILP's %d" % (name, len(g["ops"]), MAX_OPS))
        if any("overwritten_by" in v for v in g["values"]):
            raise SystemExit("%s: a value is overwritten in place, which the ILP's memory model does not describe"
                             % name)
        path = os.path.join(OUT, name + ".json")
        with open(path, "w") as f:
            json.dump(g, f, separators=(",", ":"))
            f.write("\n")
        print("%s: %d ops, %d values, %d bytes" % (path, len(g["ops"]), len(g["values"]), os.path.getsize(path)))


if __name__ == "__main__":
    main()
