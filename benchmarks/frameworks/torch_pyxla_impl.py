"""torch.compile with backend="pyxla" (pyxla.torch): the torch workloads compiled by pyxla."""
from .torch_impl import make_builders, version  # noqa: F401

NAME = "torch_pyxla"
BUILDERS = make_builders(compiled="pyxla")
