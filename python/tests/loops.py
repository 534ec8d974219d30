"""A user's training loop, shared by the tests that compare steps under a
plan with steps without one."""
import torch


def run(model, inputs_fn, loss_fn, opt_fn, plan, steps):
    """steps of the user's loop; returns losses, last gradients, weights, buffers."""
    torch.manual_seed(1234)
    opt = opt_fn(model)
    losses = []
    grads = None
    for i in range(steps):
        opt.zero_grad()
        inputs = inputs_fn(i)
        if plan is None:
            loss = loss_fn(model(*inputs))
            loss.backward()
        else:
            with plan.apply():
                loss = loss_fn(model(*inputs))
                loss.backward()
        losses.append(loss.detach().clone())
        grads = [None if p.grad is None else p.grad.clone() for p in model.parameters()]
        opt.step()
    return losses, grads, [p.detach().clone() for p in model.parameters()], \
        [b.detach().clone() for b in model.buffers()]


def bits(x):
    """x's bytes: a comparison of them is bitwise (NaN equals the same NaN,
    -0.0 differs from 0.0), where torch.equal says NaN differs from itself."""
    return x.detach().contiguous().reshape(-1).view(torch.uint8)


def same(a, b):
    """Two lists of tensors (or None) equal bit for bit."""
    return len(a) == len(b) and all(
        (x is None and y is None) or (x is not None and y is not None and x.dtype == y.dtype and
                                      x.shape == y.shape and torch.equal(bits(x), bits(y)))
        for x, y in zip(a, b))
