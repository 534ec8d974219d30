"""The public API is typed: every function remat and remat.torch export,
and every public method of the classes they export, annotates each of its
parameters and its return (mypy, run by scripts/test.sh, checks that the
annotations agree with the code)."""
import inspect

import remat
import remat.torch as rt


def _callables():
    for mod in (remat, rt):
        for name in mod.__all__:
            obj = getattr(mod, name)
            if inspect.isfunction(obj):
                yield "%s.%s" % (mod.__name__, name), obj
            elif inspect.isclass(obj) and obj.__module__.startswith("remat"):
                for attr, member in vars(obj).items():
                    if attr.startswith("_") and attr not in ("__init__", "__call__", "__len__", "__repr__"):
                        continue
                    fn = member.fget if isinstance(member, property) else member
                    if inspect.isfunction(fn):
                        yield "%s.%s.%s" % (mod.__name__, name, attr), fn


def _missing(fn):
    sig = inspect.signature(fn)
    out = [p.name for i, p in enumerate(sig.parameters.values())
           if p.annotation is inspect.Parameter.empty and not (i == 0 and p.name in ("self", "cls"))
           and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]
    if sig.return_annotation is inspect.Signature.empty:
        out.append("return")
    return out


def test_public_api_is_annotated():
    found = dict(_callables())
    assert "remat.torch.plan" in found and "remat.torch.Plan.apply" in found and "remat.torch.compile" in found
    untyped = {name: m for name, fn in found.items() for m in [_missing(fn)] if m}
    assert not untyped, "public functions without annotations: %s" % untyped
