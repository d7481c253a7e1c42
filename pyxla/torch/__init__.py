"""A PyTorch front end: `torch.compile(model, backend="pyxla")` and `pyxla.torch.export`.

Needs torch (`pip install 'pyxla[torch]'`). The backend is registered with Dynamo under the
name "pyxla" through the `torch_dynamo_backends` entry point, so user code need not import
pyxla. See docs/torch.md.
"""
from .dynamo import CompiledGraph, PyxlaFallbackWarning, compile_graph, pyxla_backend
from .export import export
from .ops.registry import LOWERINGS

backend = pyxla_backend

__all__ = ["LOWERINGS", "CompiledGraph", "PyxlaFallbackWarning", "backend", "compile_graph", "export",
           "pyxla_backend"]
