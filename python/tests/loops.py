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


def same(a, b):
    return len(a) == len(b) and all((x is None and y is None) or (x is not None and y is not None and torch.equal(x, y))
                                    for x, y in zip(a, b))
