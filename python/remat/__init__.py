"""remat: plan which activations to keep and which to recompute so that a
training step fits a memory budget in bytes (libremat, through ctypes).

``remat.torch`` plans and runs your own PyTorch model; ``remat.plan_graph``
plans any framework's step written as a graph file (docs/graph-format.md).
"""

from ._lib import RematError, find_library, plan_graph

__all__ = ["RematError", "find_library", "plan_graph"]
__version__ = "1.0.0"
