"""PyTorch references of remat's CNN models, with matching state_dict names.

    import cnn_models
    m = cnn_models.build("densenet-bc", base_channels=12, depth=100, classes=10, checkpoint=True)
    loss = cnn_models.loss(m, "densenet-bc", x, y)

Models (remat's names, src/models/resnet.c and densenet.c):
  resnet18, resnet50   torchvision's ResNet (v1.5) at stage widths b, 2b, 4b,
                       8b; b = base_channels (64 gives torchvision.models.
                       resnet18/50(weights=None) itself).
  densenet-bc          DenseNet-BC for CIFAR: depth D = 6n + 4, growth k =
                       base_channels, compression 0.5, bottleneck 4k; each
                       dense layer's input is one torch.cat of the block's
                       input and every earlier layer's output. Names follow
                       torchvision's DenseNet (features.conv0,
                       features.denseblock1.denselayer1.norm1, ...,
                       features.transition1.norm/conv, features.norm5,
                       classifier).
  siamese-resnet50     Siamese(backbone=resnet50, head=nn.Linear(classes,
                       classes)): loss = mse(head(backbone(x1)),
                       backbone(x2)), gradients through both branches.

checkpoint=True wraps every block (a residual block; a dense layer or a
transition) in torch.utils.checkpoint.checkpoint(..., use_reentrant=False),
the same blocks remat marks with remat__model_block_end; the wrapping
replaces each block's forward, so state_dict names do not change. Losses
and gradients are those of the plain model, but PyTorch's recomputation
runs each checkpointed BatchNorm's training-mode forward a second time, so
its running statistics move twice per step (num_batches_tracked 2), unlike
remat, which updates them once whatever it recomputes.
"""
from collections import OrderedDict

import torch
import torch.nn as nn
import torch.nn.functional as F
import torchvision
from torch.utils.checkpoint import checkpoint as _checkpoint
from torchvision.models.resnet import BasicBlock, Bottleneck, ResNet

NAMES = ("resnet18", "resnet50", "densenet-bc", "siamese-resnet50")

# name -> (channels, height, width, classes): remat_model_opts_for's defaults
DEFAULTS = {
    "resnet18": (3, 224, 224, 1000),
    "resnet50": (3, 224, 224, 1000),
    "siamese-resnet50": (3, 224, 224, 1000),
    "densenet-bc": (3, 32, 32, 10),
}


def _checkpointed(module):
    """Makes module's forward run under non-reentrant checkpointing."""
    inner = module.forward

    def forward(*args):
        return _checkpoint(inner, *args, use_reentrant=False)

    module.forward = forward
    return module


# ------------------------------------------------------------------- resnet

class _NarrowResNet(ResNet):
    """torchvision's ResNet with stage widths base, 2 base, 4 base, 8 base."""

    def __init__(self, block, layers, base, num_classes):
        nn.Module.__init__(self)
        self._norm_layer = nn.BatchNorm2d
        self.inplanes, self.dilation, self.groups, self.base_width = base, 1, 1, 64
        self.conv1 = nn.Conv2d(3, base, kernel_size=7, stride=2, padding=3, bias=False)
        self.bn1 = nn.BatchNorm2d(base)
        self.relu = nn.ReLU(inplace=True)
        self.maxpool = nn.MaxPool2d(kernel_size=3, stride=2, padding=1)
        self.layer1 = self._make_layer(block, base, layers[0])
        self.layer2 = self._make_layer(block, 2 * base, layers[1], stride=2)
        self.layer3 = self._make_layer(block, 4 * base, layers[2], stride=2)
        self.layer4 = self._make_layer(block, 8 * base, layers[3], stride=2)
        self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
        self.fc = nn.Linear(8 * base * block.expansion, num_classes)
        for m in self.modules():  # torchvision's initialization
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
            elif isinstance(m, nn.BatchNorm2d):
                nn.init.constant_(m.weight, 1)
                nn.init.constant_(m.bias, 0)


def resnet(name, base=64, classes=1000, checkpoint=False):
    deep = name == "resnet50"
    if base == 64:
        ctor = torchvision.models.resnet50 if deep else torchvision.models.resnet18
        m = ctor(weights=None, num_classes=classes)
    else:
        block, layers = (Bottleneck, [3, 4, 6, 3]) if deep else (BasicBlock, [2, 2, 2, 2])
        m = _NarrowResNet(block, layers, base, classes)
    if checkpoint:
        for layer in (m.layer1, m.layer2, m.layer3, m.layer4):
            for blk in layer:
                _checkpointed(blk)
    return m


# ----------------------------------------------------------------- densenet

class DenseLayer(nn.Module):
    """BN-ReLU-conv1x1(4k)-BN-ReLU-conv3x3(k) on the concat of its inputs."""

    def __init__(self, cin, k):
        super().__init__()
        self.norm1 = nn.BatchNorm2d(cin)
        self.relu1 = nn.ReLU()
        self.conv1 = nn.Conv2d(cin, 4 * k, 1, bias=False)
        self.norm2 = nn.BatchNorm2d(4 * k)
        self.relu2 = nn.ReLU()
        self.conv2 = nn.Conv2d(4 * k, k, 3, padding=1, bias=False)

    def forward(self, *prev):
        x = torch.cat(prev, 1) if len(prev) > 1 else prev[0]
        x = self.conv1(self.relu1(self.norm1(x)))
        return self.conv2(self.relu2(self.norm2(x)))


class DenseBlock(nn.ModuleDict):
    def __init__(self, n, cin, k):
        super().__init__()
        for i in range(n):
            self[f"denselayer{i + 1}"] = DenseLayer(cin + i * k, k)

    def forward(self, x):
        feats = [x]
        for layer in self.values():
            feats.append(layer(*feats))
        return torch.cat(feats, 1)


class Transition(nn.Sequential):
    def __init__(self, cin, cout):
        super().__init__(OrderedDict([
            ("norm", nn.BatchNorm2d(cin)), ("relu", nn.ReLU()),
            ("conv", nn.Conv2d(cin, cout, 1, bias=False)), ("pool", nn.AvgPool2d(2, 2))]))


class DenseNetBC(nn.Module):
    def __init__(self, depth=100, k=12, classes=10, checkpoint=False):
        super().__init__()
        if depth < 10 or (depth - 4) % 6:
            raise ValueError(f"depth {depth} is not 6n + 4")
        n, c = (depth - 4) // 6, 2 * k
        feats = [("conv0", nn.Conv2d(3, c, 3, padding=1, bias=False))]
        for b in range(1, 4):
            feats.append((f"denseblock{b}", DenseBlock(n, c, k)))
            c += n * k
            if b < 3:
                feats.append((f"transition{b}", Transition(c, c // 2)))
                c //= 2
        feats.append(("norm5", nn.BatchNorm2d(c)))
        self.features = nn.Sequential(OrderedDict(feats))
        self.classifier = nn.Linear(c, classes)
        for m in self.modules():  # torchvision's DenseNet initialization
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight)
            elif isinstance(m, nn.BatchNorm2d):
                nn.init.constant_(m.weight, 1)
                nn.init.constant_(m.bias, 0)
            elif isinstance(m, nn.Linear):
                nn.init.constant_(m.bias, 0)
        if checkpoint:
            for m in self.modules():
                if isinstance(m, (DenseLayer, Transition)):
                    _checkpointed(m)

    def forward(self, x):
        x = F.relu(self.features(x))
        return self.classifier(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))


# ------------------------------------------------------------------ siamese

class Siamese(nn.Module):
    """One backbone on two views; MSE of head(view 1) against view 2."""

    def __init__(self, backbone, head):
        super().__init__()
        self.backbone, self.head = backbone, head

    def forward(self, x1, x2):
        return F.mse_loss(self.head(self.backbone(x1)), self.backbone(x2))


# ------------------------------------------------------------------ entry

def build(name, base_channels=0, depth=0, classes=None, checkpoint=False):
    """The model `name` as remat builds it from remat_model_opts (0 = default)."""
    if classes is None:
        classes = DEFAULTS[name][3]
    if name in ("resnet18", "resnet50"):
        return resnet(name, base_channels or 64, classes, checkpoint)
    if name == "densenet-bc":
        return DenseNetBC(depth or 100, base_channels or 12, classes, checkpoint)
    if name == "siamese-resnet50":
        return Siamese(resnet("resnet50", base_channels or 64, classes, checkpoint), nn.Linear(classes, classes))
    raise KeyError(f"unknown model {name!r} (known: {', '.join(NAMES)})")


def loss(model, name, x, target):
    """The training loss: cross-entropy on labels, or the siamese MSE
    (target = view 2, a float batch shaped like x)."""
    if name == "siamese-resnet50":
        return model(x, target)
    return F.cross_entropy(model(x), target)
