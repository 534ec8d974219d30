"""Library models from small configs, each as a user's training step: the
model (from torchvision or transformers, built from a config, no weights
downloaded), one batch and the loss. test_library_sweep.py runs each under
remat's plan and without it; bench/torch/sweep.py prints the table.

Sizes are tiny (batch 2 to 8 at 32-64 px, 2-layer transformers 64 wide)
so that the whole list runs in about half a minute on 2 cores. Dropout (and stochastic depth)
is on in many of them: a plan replays it bitwise.

REFUSED names the models remat refuses when it plans them, with the part
of the message that names the op and says why."""
import contextlib
import functools

import loops
import torch
import torch.nn as nn
import torch.nn.functional as F
from loops import same

import remat.torch as rt


class Case:
    """One model's step: model(*inputs) -> output, loss_fn(output) -> loss.
    deterministic: the model is run (captured, planned, trained) under
    torch.use_deterministic_algorithms, without which PyTorch's own
    kernels give it different bits from run to run."""

    def __init__(self, model, inputs, loss_fn, deterministic=False):
        self.model, self.inputs, self.loss_fn = model, tuple(inputs), loss_fn
        self.deterministic = deterministic


@contextlib.contextmanager
def settings(case):
    """The global settings case runs under (see Case.deterministic)."""
    old = torch.are_deterministic_algorithms_enabled()
    torch.use_deterministic_algorithms(case.deterministic)
    try:
        yield
    finally:
        torch.use_deterministic_algorithms(old)


def _images(model, size, classes=10, batch=2):
    g = torch.Generator().manual_seed(1)
    x = torch.randn(batch, 3, size, size, generator=g)
    y = torch.randint(0, classes, (batch,), generator=g)
    return Case(model, (x,), lambda out: F.cross_entropy(out, y))


# ------------------------------------------------------------- torchvision
def _tv():
    import torchvision
    return torchvision.models


def resnet18():
    return _images(_tv().resnet18(num_classes=10), 64, batch=8)


def resnext_small():
    m = _tv()
    return _images(m.resnet.ResNet(m.resnet.Bottleneck, [1, 1, 1, 1], groups=8, width_per_group=8, num_classes=10), 32)


def vgg11_bn():
    """torchvision's VGG with vgg11_bn's features; its classifier (25088 x
    4096, 400 MB) replaced by a small one with VGG's ReLU and dropout."""
    vgg = _tv().vgg
    m = vgg.VGG(nn.Identity(), num_classes=10, init_weights=False)  # VGG's forward and layers, its sizes below
    m.features = vgg.make_layers(vgg.cfgs["A"], batch_norm=True)
    m.avgpool = nn.AdaptiveAvgPool2d((1, 1))
    m.classifier = nn.Sequential(nn.Linear(512, 64), nn.ReLU(True), nn.Dropout(0.5), nn.Linear(64, 10))
    return _images(m, 32)


def densenet121():
    return _images(_tv().densenet121(num_classes=10), 64, batch=4)


def mobilenet_v2():
    return _images(_tv().mobilenet_v2(num_classes=10, dropout=0.2), 32)


def mobilenet_v3_small():
    return _images(_tv().mobilenet_v3_small(num_classes=10, dropout=0.2), 32)


def efficientnet_b0():
    return _images(_tv().efficientnet_b0(num_classes=10, dropout=0.2, stochastic_depth_prob=0.2), 32)


def regnet_x_400mf():
    return _images(_tv().regnet_x_400mf(num_classes=10), 64)


def shufflenet_v2_x0_5():
    return _images(_tv().shufflenet_v2_x0_5(num_classes=10), 32)


def squeezenet1_0():
    return _images(_tv().squeezenet1_0(num_classes=10), 64)


def mnasnet0_5():
    return _images(_tv().mnasnet0_5(num_classes=10, dropout=0.2), 32)


def convnext_small_config():
    c = _tv().convnext
    blocks = [c.CNBlockConfig(32, 64, 1), c.CNBlockConfig(64, None, 1)]
    return _images(c.ConvNeXt(blocks, stochastic_depth_prob=0.1, num_classes=10), 32)


def vit_small():
    m = _tv().VisionTransformer(image_size=32, patch_size=8, num_layers=2, num_heads=2, hidden_dim=64, mlp_dim=128,
                                dropout=0.1, attention_dropout=0.1, num_classes=10)
    return _images(m, 32)


def swin_small_config():
    m = _tv().swin_transformer.SwinTransformer(patch_size=[4, 4], embed_dim=32, depths=[2, 2], num_heads=[2, 4],
                                               window_size=[4, 4], dropout=0.1, stochastic_depth_prob=0.1,
                                               num_classes=10)
    return _images(m, 32)


def googlenet():
    return _images(_tv().googlenet(num_classes=10, aux_logits=False, init_weights=True, dropout=0.2), 32)


# ------------------------------------------------------------- transformers
class _Labels(nn.Module):
    """A transformers model whose forward takes keywords, called with
    positional tensors: its own loss from (input_ids, labels)."""

    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, input_ids, labels):
        return self.model(input_ids=input_ids, labels=labels).loss


class _Logits(nn.Module):
    """A causal LM's logits from input_ids (the loss is the user's)."""

    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, input_ids):
        return self.model(input_ids=input_ids, use_cache=False).logits


def _tokens(*shape, vocab=512):
    return torch.randint(0, vocab, shape, generator=torch.Generator().manual_seed(2))


def _causal(model):
    ids = _tokens(2, 32)

    def loss(logits):
        return F.cross_entropy(logits[:, :-1].reshape(-1, logits.shape[-1]), ids[:, 1:].reshape(-1))
    return Case(_Logits(model), (ids,), loss)


_SMALL = dict(vocab_size=512, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
              max_position_embeddings=128)


def bert():
    import transformers as tf
    cfg = tf.BertConfig(**_SMALL, hidden_dropout_prob=0.1, attention_probs_dropout_prob=0.1)
    ids = _tokens(2, 32)
    labels = ids.clone()
    labels[:, ::3] = -100  # positions without a label (the usual MLM mask)
    return Case(_Labels(tf.BertForMaskedLM(cfg)), (ids, labels), lambda loss: loss)


def gpt2():
    import transformers as tf
    cfg = tf.GPT2Config(vocab_size=512, n_embd=64, n_layer=2, n_head=4, n_positions=128, resid_pdrop=0.1,
                        embd_pdrop=0.1, attn_pdrop=0.1)
    return _causal(tf.GPT2LMHeadModel(cfg))


def llama():
    import transformers as tf
    cfg = tf.LlamaConfig(**_SMALL, num_key_value_heads=2, attention_dropout=0.1)
    return _causal(tf.LlamaForCausalLM(cfg))


def t5():
    """The issue's model: encoder-decoder, labels shifted right into the
    decoder's input (an in-place write into a slice of a new tensor)."""
    import transformers as tf
    cfg = tf.T5Config(vocab_size=512, d_model=64, d_kv=16, d_ff=128, num_layers=2, num_decoder_layers=2, num_heads=4,
                      dropout_rate=0.1, decoder_start_token_id=0, pad_token_id=0)
    g = torch.Generator().manual_seed(2)
    x, y = torch.randint(0, 512, (4, 64), generator=g), torch.randint(0, 512, (4, 32), generator=g)
    return Case(_Labels(tf.T5ForConditionalGeneration(cfg)), (x, y), lambda loss: loss)


def _moe(kind, implementation):
    """A mixture of experts, 4 experts, 2 per token; implementation None is
    transformers' default for its experts (grouped_mm on this PyTorch)."""
    import transformers as tf
    if kind == "mixtral":
        cfg = tf.MixtralConfig(**_SMALL, num_key_value_heads=2, num_local_experts=4, num_experts_per_tok=2,
                               experts_implementation=implementation)
        case = _causal(tf.MixtralForCausalLM(cfg))
        # batched_mm's weight[expert_ids] has a backward, index_put_ with
        # accumulate, whose sums on 2 threads differ from run to run
        # (with or without remat) unless deterministic algorithms are on
        case.deterministic = implementation == "batched_mm"
        return case
    cfg = tf.Qwen2MoeConfig(**_SMALL, num_key_value_heads=2, num_experts=4, num_experts_per_tok=2,
                            moe_intermediate_size=64, shared_expert_intermediate_size=128,
                            experts_implementation=implementation)
    return _causal(tf.Qwen2MoeForCausalLM(cfg))


MODELS = {
    "resnet18": resnet18,
    "resnext_small": resnext_small,
    "vgg11_bn": vgg11_bn,
    "densenet121": densenet121,
    "mobilenet_v2": mobilenet_v2,
    "mobilenet_v3_small": mobilenet_v3_small,
    "efficientnet_b0": efficientnet_b0,
    "regnet_x_400mf": regnet_x_400mf,
    "shufflenet_v2_x0_5": shufflenet_v2_x0_5,
    "squeezenet1_0": squeezenet1_0,
    "mnasnet0_5": mnasnet0_5,
    "convnext_small_config": convnext_small_config,
    "vit_small": vit_small,
    "swin_small_config": swin_small_config,
    "googlenet": googlenet,
    "bert": bert,
    "gpt2": gpt2,
    "llama": llama,
    "t5": t5,
    "mixtral": functools.partial(_moe, "mixtral", None),
    "mixtral_batched_mm": functools.partial(_moe, "mixtral", "batched_mm"),
    "qwen2_moe": functools.partial(_moe, "qwen2_moe", None),
    "qwen2_moe_eager": functools.partial(_moe, "qwen2_moe", "eager"),
}

TRANSFORMERS = {"bert", "gpt2", "llama", "t5", "mixtral", "mixtral_batched_mm", "qwen2_moe", "qwen2_moe_eager"}

# model -> what remat says when it plans it (a regular expression)
REFUSED = {
    # transformers' "eager" experts loop over the experts the router chose
    # (expert_hit = ...nonzero(); for expert_idx in expert_hit:), so the
    # step's ops depend on the batch; the first read of data capture meets
    # is just before, one_hot's range check (an .item() inside one_hot).
    # The default experts ("grouped_mm": torch._grouped_mm with offsets
    # from histc) have no such loop and are planned: qwen2_moe, mixtral
    "qwen2_moe_eager": r"the step's ops depend on the data: _local_scalar_dense\.default reads a value computed in "
                       r"the step \(at .*modeling_qwen2_moe\.py:\d+ in forward\)",
}


def build(name):
    torch.manual_seed(0)
    case = MODELS[name]()
    case.model.train()
    return case


# ------------------------------------------------------------- the check
def optimizer(model):
    return torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)


def between(trace, opt, frac=0.5):
    """The budget frac of the way from the floor to store-all's."""
    top = rt.plan_trace(trace, None, opt, "all").peak_bytes
    floor = rt.plan_trace(trace, 1, opt).floor
    assert floor is not None and floor <= rt.budget_for(top)
    return int(floor + frac * (rt.budget_for(top) - floor)), floor, top


def run(model, case, plan, steps=3):
    """steps of the user's loop (same seed each run); losses, last
    gradients, weights and buffers."""
    return loops.run(model, lambda i: case.inputs, case.loss_fn, optimizer, plan, steps)


def differences(ref, got):
    """What differs between two runs (empty: bitwise equal)."""
    out = []
    for what, a, b in zip(("losses", "gradients", "weights", "buffers"), ref, got):
        if not same(a, b):
            out.append(what)
    if any(g is None for g in got[1]):
        out.append("a parameter got no gradient")
    return out
