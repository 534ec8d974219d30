"""What a library model's step does that a capture must see rightly."""
import pytest
import torch
import torch.nn as nn

import remat.torch as rt


class _Positions(nn.Module):
    """What transformers' masks do in training (find_packed_sequence_indices):
    position ids from an arange, checked with .all() in Python."""

    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(8, 8)

    def forward(self, x):
        pos = torch.arange(x.shape[1]).unsqueeze(0).expand(x.shape[0], -1)
        if (torch.diff(pos, dim=-1) == 1).all():  # made from shapes alone: the same every step
            x = x * 2
        return self.lin(x).sum()


class _Branch(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(8, 8)

    def forward(self, x):
        if (self.lin(x) > 0).all():  # reads the data
            x = x * 2
        return self.lin(x).sum()


class _Filled(nn.Module):
    """A value made from shapes, then written with data in place (the write
    folded into the op that made it): data."""

    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(8, 8)

    def forward(self, x):
        s = self.lin(x).sum((0, 2)).detach()
        m = torch.zeros(x.shape[1])
        m.add_(s)
        if (m > 0).all():
            x = x * 2
        return self.lin(x).sum()


def test_values_made_from_shapes_are_not_data():
    x = torch.randn(2, 8, 8)
    t = rt.capture(_Positions(), (x,), lambda o: o)
    assert any(c.name == "aten._local_scalar_dense.default" for c in t.calls)
    with pytest.raises(rt.CaptureError, match="depend on the data: _local_scalar_dense"):
        rt.capture(_Branch(), (x,), lambda o: o)
    with pytest.raises(rt.CaptureError, match="depend on the data: _local_scalar_dense"):
        rt.capture(_Filled(), (x,), lambda o: o)
