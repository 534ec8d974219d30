"""Writes the traced HuggingFace transformer graphs test_chain reads:
gpt2_tiny.json and llama_tiny.json beside this file, small causal language
models built from configs (no downloads), batch 8, sequence 64, traced by
remat.torch's capture with no transient meter (transients="none", so the
files are the same on every run and every machine) and FLOP costs.

    PYTHONPATH=python REMAT_LIB=build/libremat.so \
        ~/.cache/remat/venv-torch/bin/python tests/graphs/gen_transformers.py

They stand for what a user's HuggingFace model looks like to the planner:
every layer reads small shared tensors, so no node separates one layer
from the next: GPT-2 with eager attention and a padding mask reads the
causal mask made from it in every layer, Llama (SDPA, causal) the rotary
cos/sin tables."""
import json
import os

import torch
import transformers

from remat.torch.capture import capture

HERE = os.path.dirname(os.path.abspath(__file__))
LAYERS = 4
BATCH, SEQ, VOCAB = 8, 64, 128


class Masked(torch.nn.Module):
    """The model called with a padding mask (capture passes positional
    arguments; HuggingFace takes the mask by keyword)."""

    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, ids, mask):
        return self.model(input_ids=ids, attention_mask=mask)


def models():
    gpt2 = transformers.GPT2Config(n_layer=LAYERS, n_embd=64, n_head=4, n_positions=64, vocab_size=VOCAB,
                                   resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, bos_token_id=0,
                                   eos_token_id=0, attn_implementation="eager")
    yield "gpt2_tiny", Masked(transformers.GPT2LMHeadModel(gpt2)), True
    llama = transformers.LlamaConfig(num_hidden_layers=LAYERS, hidden_size=64, intermediate_size=128,
                                     num_attention_heads=4, num_key_value_heads=2, vocab_size=VOCAB,
                                     max_position_embeddings=64, bos_token_id=0, eos_token_id=0)
    yield "llama_tiny", transformers.LlamaForCausalLM(llama), False


def main():
    torch.manual_seed(0)
    ids = torch.randint(0, VOCAB, (BATCH, SEQ))
    pad = torch.ones(BATCH, SEQ, dtype=torch.long)
    pad[1, SEQ - 8:] = 0  # the second sequence is padded

    def loss(out):
        return torch.nn.functional.cross_entropy(out.logits.reshape(-1, VOCAB), ids.reshape(-1))

    for name, model, masked in models():
        model.train()
        t = capture(model, (ids, pad) if masked else (ids,), loss, transients="none")
        g = t.graph("flops")
        g["source"] = "%s: transformers %s, %d layers, batch %d, sequence %d (tests/graphs/gen_transformers.py)" % (
            name, transformers.__version__, LAYERS, BATCH, SEQ)
        path = os.path.join(HERE, name + ".json")
        with open(path, "w") as f:
            json.dump(g, f, separators=(",", ":"))
            f.write("\n")
        print(path, len(g["ops"]), "ops", len(g["values"]), "values", os.path.getsize(path), "bytes")


if __name__ == "__main__":
    main()
