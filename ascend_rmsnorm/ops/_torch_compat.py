"""Every private torch internal the ops rely on, in one place, each with why.

The ops' eager fast path asks the dispatcher's state directly (a public equivalent costs microseconds
per call, as much as the torch path's work on a small batch), the DTensor rule must be constant to
dynamo without importing ``torch._dynamo`` at package import, and DTensor's sharding cache must be told
which arguments its answers depend on (``key_sharding_on_scalars``). These names are not public API: a torch
release may rename or drop any of them. ``tests/ops/test_ops.py`` checks each one exists and behaves on
``CHECKED_ON`` and names the torch version when one is missing, so an upgrade fails there, clearly,
instead of somewhere deep in a call.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

#: The torch release these probes were last checked on (the test says so when one breaks elsewhere).
CHECKED_ON = "2.13"


def _private(name: str):
    """``torch._C.<name>`` (a dotted name walks submodules), or an error that names it, this torch and the
    one it was checked on."""
    try:
        found = torch._C
        for part in name.split("."):
            found = getattr(found, part)
        return found
    except AttributeError:
        raise ImportError(
            f"ascend_rmsnorm needs torch._C.{name}, which torch {torch.__version__} does not have (checked on torch "
            f"{CHECKED_ON}); ascend_rmsnorm/ops/_torch_compat.py is the one place to adapt"
        ) from None


#: Whether any tensor requires grad (what autograd's own entry asks, without building a list).
any_requires_grad = _private("_any_requires_grad")
#: Whether forward-mode AD is on (``torch.autograd.forward_ad`` has no public getter).
fwd_grad_enabled = _private("_is_fwd_grad_enabled")
#: The dispatch keys below Autograd, for an Autograd kernel's redispatch.
AFTER_AUTOGRAD = _private("_after_autograd_keyset")
#: Whether a torch.func transform (grad, vjp, jvp, vmap) is active.
functorch_transforms_active = _private("_are_functorch_transforms_active")
#: How many TorchDispatchModes are pushed (0: none can see the call).
torch_dispatch_stack_len = _private("_len_torch_dispatch_stack")
#: Whether a TorchFunctionMode is active.
torch_function_mode_enabled = _private("_is_torch_function_mode_enabled")
#: The TorchScript tracer's state (None when ``torch.jit.trace`` is not running): a ctypes launch is
#: invisible to it, so a traced call must go through the op.
jit_tracing_state = _private("_get_tracing_state")
#: The torch.func transforms' interpreters, outermost first (None when none is active).
_interpreter_stack = _private("_functorch.get_interpreter_stack")
_FUNCTIONALIZE = _private("_functorch.TransformType.Functionalize")


def functionalizing() -> bool:
    """Whether ``torch.func.functionalize`` is one of the active transforms: torch has no functionalize
    rule for an ``autograd.Function`` ("NYI: Functionalize rule for custom_function_call"), so the
    entries then call the op, whose Autograd kernel serves the transforms around it."""
    stack = _interpreter_stack()
    return stack is not None and any(i.key() == _FUNCTIONALIZE for i in stack)


#: What ``torch.compiler.assume_constant_result`` sets on a function, read by dynamo.
DYNAMO_CONSTANT_ATTR = "_dynamo_marked_constant"


def mark_constant(fn: Callable) -> Callable:
    """``torch.compiler.assume_constant_result(fn)`` without importing torch._dynamo (about a second)."""
    setattr(fn, DYNAMO_CONSTANT_ATTR, True)
    return fn


def key_sharding_on_scalars(op) -> None:
    """Make DTensor's sharding cache key on every argument of ``op`` from its first non-tensor one on.

    DTensor reuses a rule's answer, output shapes included, for inputs of the same specs and, of the other
    arguments, those from ``RuntimeSchemaInfo.static_argnum`` on; ``register_sharding`` guesses that index
    as the first int argument, and the ops have none. So a backward that needs dw after one with a frozen
    weight was handed the first one's empty dw ("returned an invalid gradient ... got [0]"): need_dx and
    need_dw change the outputs' shapes. The registry is the sharding propagator's private
    ``op_to_schema_info``, which ``register_sharding`` itself fills."""
    from torch.distributed.tensor import DTensor
    from torch.distributed.tensor._op_schema import RuntimeSchemaInfo

    def is_tensor(t) -> bool:
        return isinstance(t, torch.TensorType) or (
            isinstance(t, torch.OptionalType) and isinstance(t.getElementType(), torch.TensorType)
        )

    first = next(i for i, arg in enumerate(op._schema.arguments) if not is_tensor(arg.type))
    DTensor._op_dispatcher.sharding_propagator.op_to_schema_info[op] = RuntimeSchemaInfo(first, needs_pytree=True)
