"""Front ends that turn Python into HLO: tracing, pytrees and jit."""
from .jit import Compiled, Jitted, Lowered, default_backend, jit, set_default_backend  # noqa: F401
from .pytree import register_pytree_node, tree_flatten, tree_leaves, tree_map, tree_unflatten  # noqa: F401
from .tracing import Tracer, bind  # noqa: F401
