"""torch.compile (inductor) on the CPU."""
from .torch_impl import make_builders, version  # noqa: F401

NAME = "torch_compile"
BUILDERS = make_builders(compiled=True)
