"""``batch_invariant_mode()``: unmodified model code gets this package's batch-invariant RMSNorm.

Inside the mode:

- ``aten::rms_norm`` — what ``torch.nn.functional.rms_norm``, ``torch.rms_norm`` and
  ``torch.nn.RMSNorm`` call — runs ``ascend_rmsnorm.rms_norm`` with the "fp32" casting mode (the
  order of ``F.rms_norm``) on every device (CPU, CUDA, the NPU's PrivateUse1, ...). The override is
  registered as the op's ``CompositeImplicitAutograd`` kernel, the one torch itself provides (and
  as its ``FuncTorchBatchedDecomposition`` kernel, vmap's), so it is used the same way with and
  without autograd, in ``inference_mode``, under fake tensors (what ``torch.compile`` and
  ``torch.export`` trace with), under ``torch.vmap`` and ``torch.func.grad``. Inputs the package
  does not take (float64, complex) go to torch's own composite, as before; an eps it refuses
  (negative, subnormal in float32, a tensor) raises its error, where torch would compute. Hugging Face's RMSNorm
  classes do not call ``F.rms_norm``: use ``patch_transformers`` for them. Autocast casts the inputs
  as it does outside the mode (``compile_isolation._AUTOCAST_FP32``).
- when ``torch_npu`` is imported, ``torch_npu.npu_rms_norm(x, gamma, epsilon=1e-6) -> (y, rstd)``,
  ``torch_npu.npu_add_rms_norm(x1, x2, gamma, epsilon=1e-6) -> (y, rstd, x1 + x2)`` and
  ``torch_npu.npu_gemma_rms_norm(x, gamma, epsilon=1e-6) -> (y, rstd)`` are served by this package
  with torch_npu's return conventions (rstd float32 of shape ``x.shape[:-gamma.dim()] + (1,) *
  gamma.dim()``; gamma of one or more trailing dims). Both the module attributes and, where torch_npu
  registered them, the ``torch.ops.npu`` operators are replaced, so ``from torch_npu import
  npu_rms_norm`` done earlier is covered too.

On exit everything is exactly as before. Modes nest (the innermost backend wins while it is active).
The mode is process-wide, not per thread: it is a dispatcher registration, which every thread sees.
``enable()``/``disable()`` are the same without a ``with`` block (each ``enable`` needs one ``disable``).
Threads that enter and leave it at overlapping times each leave their own entry: a ``disable()``
ends the innermost ``enable()`` of its own thread (any one's, where its thread made none, with a
warning: the entering thread's cache key tag stays, and only that thread can put it back), so one
thread's exit never takes another's backend, and puts back its own thread's cache key tag.

torch.compile: what is compiled inside the mode is never served outside it, nor the other way round,
in this process or another, whichever thread compiles (``compile_isolation``): a compiled frame that
calls ``F.rms_norm``, ``torch.rms_norm`` or ``nn.RMSNorm`` is recompiled once per mode state, and
the graph the on-disk compile caches are keyed by holds this package's op inside the mode. The aten
op called directly, compiled where the mode does not key the caches, is an error
(``_dispatched_aten_rms_norm``). Not covered (README): the aten op compiled in the entering thread,
or before the mode and called inside it (Dynamo's in-process cache), or after it in an asyncio task
made inside it (the task keeps the mode's tag); torch's precompile cache, ``aot_compile`` and unsafe
guard filters. An AOTInductor package holds the norm of the mode it was compiled in. ``torch.rms_norm``
still hands tensor subclasses and torch-function modes their turn first, as the builtin does;
``torch.export`` inside the mode records this package's op for ``F.rms_norm``, ``torch.rms_norm`` and
``nn.RMSNorm``, and ``aten.rms_norm`` for the aten op called directly (no hook runs there: what the
program computes then depends on the mode where it runs, as the README says).
"""

from __future__ import annotations

import contextlib
import math
import sys
import threading
import warnings
from collections.abc import Iterator
from contextvars import ContextVar

import torch

from .._forksafe import renew_in_child
from ..backends.choice import requested_name
from ..contract import SUPPORTED_DTYPES, same_shape
from . import compile_isolation

_lock = threading.RLock()
renew_in_child(globals(), _lock=threading.RLock)  # a forked child's first call must not hang
_backends: list[tuple[_Entry, str | None]] = []  # (token, backend) per active enable(); the last one is used
#: The tokens of the enable() calls this thread (context) made that are still active, innermost last.
_entered: ContextVar[tuple[_Entry, ...]] = ContextVar("ascend_rmsnorm_batch_invariant_mode", default=())
_installed: dict = {}  # what _install changed: Library objects and replaced torch_npu attributes

#: torch_npu's functions this mode serves.
NPU_FUNCTIONS = ("npu_rms_norm", "npu_add_rms_norm", "npu_gemma_rms_norm")
#: Dispatch keys of the torch.ops.npu overrides: the NPU's, and the CPU's (harmless: torch_npu's ops
#: do not run on CPU tensors), which is what lets the tests check them with a stand-in op.
_NPU_KEYS = ("PrivateUse1", "AutogradPrivateUse1", "CPU", "AutogradCPU")


def _backend() -> str | None:
    return _backends[-1][1] if _backends else None


def _fused_rms_norm():
    """torch's ``aten::_fused_rms_norm`` where aten::rms_norm's own composite calls it on every device
    (its schema takes the normalized shape; torch 2.8's takes a dim count, has MPS kernels only and is
    not what 2.8's rms_norm calls), else None."""
    fused = getattr(torch.ops.aten, "_fused_rms_norm", None)
    if fused is None or str(fused.default._schema.arguments[1].type) == "int":
        return None
    return fused


def _torch_own_rms_norm(input, normalized_shape, weight, eps):
    """torch's own composite (what aten::rms_norm does without this mode), for inputs we do not take."""
    fused = _fused_rms_norm()
    if fused is not None:
        return fused(input, list(normalized_shape), weight, eps)[0]
    # torch 2.8's composite, op for op
    opmath = torch.float32 if input.dtype in (torch.float16, torch.bfloat16) else input.dtype
    x = input.to(opmath)
    dims = tuple(range(-len(normalized_shape), 0))
    e = torch.finfo(opmath).eps if eps is None else eps
    y = x * torch.rsqrt(x.pow(2).mean(dims, keepdim=True) + e)
    if weight is not None:
        y = y * weight
    return y.type_as(input)


def _ours_takes(input: torch.Tensor, weight: torch.Tensor | None) -> bool:
    if input.dtype not in SUPPORTED_DTYPES or input.is_nested or input.layout != torch.strided:
        return False
    return weight is None or (weight.is_floating_point() and not weight.is_complex() and not weight.is_nested)


def _aten_rms_norm(input, normalized_shape, weight=None, eps=None, *, dispatched=False):
    """The mode's ``aten::rms_norm``: torch's argument rules, this package's numerics. ``dispatched``:
    called by the dispatcher (``_dispatched_aten_rms_norm``), not by the mode's ``torch.rms_norm``."""
    from ..functional import rms_norm

    shape = tuple(normalized_shape)
    k = len(shape)
    if k == 0:  # torch refuses it; its private _fused_rms_norm would return a value (the last dim normalised)
        raise RuntimeError(
            "Expected normalized_shape to be at least 1-dimensional, i.e., containing at least one element, "
            "but got normalized_shape = []"
        )
    if input.dim() < k or tuple(input.shape[input.dim() - k :]) != shape:
        raise RuntimeError(
            f"Given normalized_shape={list(shape)}, expected input with shape [*, "
            f"{', '.join(map(str, shape))}], but got input of size{list(input.shape)}"
        )
    if weight is not None and tuple(weight.shape) != shape:
        raise RuntimeError(f"Expected weight to be of same shape as normalized_shape, but got weight of shape "
                           f"{list(weight.shape)} and normalized_shape = {list(shape)}")  # fmt: skip
    hidden = math.prod(shape)
    if hidden == 0 or not _ours_takes(input, weight):  # nothing to normalise, or not ours to take
        return _torch_own_rms_norm(input, shape, weight, eps)
    x = input.reshape(*input.shape[: input.dim() - k], hidden) if k != 1 else input
    w = weight.reshape(hidden) if weight is not None and k != 1 else weight
    # eps=None: the epsilon of torch's computation type, float32 for fp32/bf16/fp16 (layer_norm.cpp)
    e = torch.finfo(torch.float32).eps if eps is None else eps
    if dispatched and torch._C._are_functorch_transforms_active():
        # Reached through the dispatcher inside a torch.func transform, this kernel runs below
        # functorch's own dispatch layer, where the Python entry's autograd.Function cannot be applied:
        # call the registered op itself (its vmap rule and its Autograd kernel, which applies
        # functorch's rule per level, serve it; one transform level at a time, as the raw op). The
        # mode's torch.rms_norm (F.rms_norm, nn.RMSNorm) calls in at the Python level, above every
        # transform: the function there, which serves every composition (vmap(grad), hessian, ...).
        from .. import ops

        y = ops.rms_norm_op(x, w, float(e), "fp32", 0.0, requested_name(_backend()))[0]
    else:
        y = rms_norm(x, w, e, casting_mode="fp32", backend=_backend())
    return y.reshape(input.shape) if k != 1 else y


def _dispatched_aten_rms_norm(input, normalized_shape, weight=None, eps=None):
    """The dispatcher's ``aten::rms_norm`` inside the mode. ``torch.rms_norm`` (so ``F.rms_norm`` and
    ``nn.RMSNorm``) calls ``_aten_rms_norm`` directly; this is reached by code that calls the aten op
    itself, or by a graph Dynamo captured before the mode was turned on. Traced by torch.compile in a
    thread whose compiles are not keyed by the mode (``compile_isolation``), what it makes would be
    cached under torch's own key and served outside the mode: a clear error instead."""
    from torch._subclasses.fake_tensor import is_fake

    if is_fake(input) and not compile_isolation.keyed_here() and not torch.compiler.is_exporting():
        raise RuntimeError(
            "ascend_rmsnorm.batch_invariant_mode: torch.compile reached aten::rms_norm in a thread whose "
            "compile caches are not keyed by the mode (it was entered in another thread, or switched while "
            "this graph was being compiled), so what it compiles would be cached as torch's own norm. "
            "Call F.rms_norm, torch.rms_norm or nn.RMSNorm (keyed in every thread), compile in the thread that "
            "entered the mode, or compile again now that the mode is settled."
        )
    return _aten_rms_norm(input, normalized_shape, weight, eps, dispatched=True)


def _flatten_gamma(x: torch.Tensor, gamma: torch.Tensor, fn: str):
    """torch_npu normalises over gamma's dims: x as [..., H] and gamma as [H], and rstd's shape."""
    k = gamma.dim()
    if k == 0 or x.dim() < k or tuple(x.shape[x.dim() - k :]) != tuple(gamma.shape):
        raise RuntimeError(
            f"{fn}: gamma of shape {tuple(gamma.shape)} does not match the last dims of x {tuple(x.shape)}"
        )
    lead = tuple(x.shape[: x.dim() - k])
    hidden = math.prod(gamma.shape)
    return x.reshape(*lead, hidden), gamma.reshape(hidden), lead + (1,) * k


def _npu_rms_norm(self, gamma, epsilon=1e-6):
    """torch_npu.npu_rms_norm(self, gamma, epsilon=1e-06) -> (y, rstd) with this package's numerics."""
    return _npu_norm(self, gamma, epsilon, "fp32", "npu_rms_norm")


def _npu_gemma_rms_norm(self, gamma, epsilon=1e-6):
    """torch_npu.npu_gemma_rms_norm(self, gamma, epsilon=1e-06) -> (y, rstd): y = norm(x) * (1 + gamma)."""
    return _npu_norm(self, gamma, epsilon, "gemma", "npu_gemma_rms_norm")


def _npu_norm(x, gamma, epsilon, mode, fn):
    from ..functional import rms_norm

    x2, g, rstd_shape = _flatten_gamma(x, gamma, fn)
    y, rstd = rms_norm(x2, g, epsilon, casting_mode=mode, backend=_backend(), return_rstd=True)
    return y.reshape(x.shape), rstd.reshape(rstd_shape)


def _npu_add_rms_norm(x1, x2, gamma, epsilon=1e-6):
    """torch_npu.npu_add_rms_norm(x1, x2, gamma, epsilon=1e-06) -> (y, rstd, x1 + x2)."""
    from ..functional import add_rms_norm

    if not same_shape(x2, x1):  # reshaping it to x1's would add a same-sized one in memory order: wrong values
        raise RuntimeError(f"npu_add_rms_norm: x2 of shape {tuple(x2.shape)} must have x1's shape {tuple(x1.shape)}")
    a, g, rstd_shape = _flatten_gamma(x1, gamma, "npu_add_rms_norm")
    b = x2.reshape(a.shape)
    y, r_out, rstd = add_rms_norm(a, b, g, epsilon, casting_mode="fp32", backend=_backend(), return_rstd=True)
    return y.reshape(x1.shape), rstd.reshape(rstd_shape), r_out.reshape(x1.shape)


#: torch 2.8 and 2.9's vmap runs its C++ decomposition of aten::rms_norm and never the Python kernel
#: registered for FuncTorchBatchedDecomposition; the batched key itself reaches ours there.
_VMAP_PASSES_OVER_PYTHON_DECOMPOSITIONS = torch.torch_version.TorchVersion(torch.__version__) < "2.10"

_NPU_IMPLS = {
    "npu_rms_norm": _npu_rms_norm,
    "npu_add_rms_norm": _npu_add_rms_norm,
    "npu_gemma_rms_norm": _npu_gemma_rms_norm,
}


def _npu_op_exists(name: str) -> bool:
    """Whether torch_npu registered ``npu::<name>`` with the dispatcher."""
    try:
        getattr(torch.ops.npu, name)
    except (AttributeError, RuntimeError):
        return False
    return True


def _install() -> None:
    libs = []
    with warnings.catch_warnings():
        # torch says once that it overrides a registered kernel: that is the point here
        warnings.filterwarnings("ignore", message="(?s).*previously registered kernel")
        aten = torch.library.Library("aten", "IMPL")
        aten.impl("rms_norm", _dispatched_aten_rms_norm, "CompositeImplicitAutograd")
        # torch.func.vmap decomposes aten::rms_norm with its own kernel on this key: ours there too
        aten.impl("rms_norm", _dispatched_aten_rms_norm, "FuncTorchBatchedDecomposition")
        if _VMAP_PASSES_OVER_PYTHON_DECOMPOSITIONS:
            aten.impl("rms_norm", _dispatched_aten_rms_norm, "FuncTorchBatched")
        libs.append(aten)
        npu_module = sys.modules.get("torch_npu")
        attrs = {}
        if npu_module is not None:
            npu_lib = None
            for name in NPU_FUNCTIONS:
                if _npu_op_exists(name):
                    npu_lib = npu_lib or torch.library.Library("npu", "IMPL")
                    for key in _NPU_KEYS:
                        npu_lib.impl(name, _NPU_IMPLS[name], key)
                if hasattr(npu_module, name):
                    attrs[name] = getattr(npu_module, name)
                    setattr(npu_module, name, _NPU_IMPLS[name])
            if npu_lib is not None:
                libs.append(npu_lib)
    _installed.update(libs=libs, npu_module=npu_module, attrs=attrs)


def _uninstall() -> None:
    for lib in _installed.get("libs", ()):
        lib._destroy()
    npu_module = _installed.get("npu_module")
    for name, original in _installed.get("attrs", {}).items():
        setattr(npu_module, name, original)
    _installed.clear()


def enable(*, backend: str | None = None) -> None:
    """Enter the batch-invariant mode (see the module docstring); pair each call with ``disable()``.

    ``backend`` is passed to every call the mode serves (None: ``auto``, or ``ASCEND_RMSNORM_BACKEND``).
    """
    _enable(backend, "enable")


class _Entry:
    """One active enable(): the token ``_backends`` and ``_entered`` hold, and the thread that made it."""

    __slots__ = ("thread",)

    def __init__(self) -> None:
        self.thread = threading.current_thread()


def _enable(backend: str | None, caller: str) -> None:
    try:
        state = requested_name(backend)  # a clear error now rather than at the first norm
    except (TypeError, ValueError) as err:  # named with the entry that got it, as rms_norm's is
        raise type(err)(f"{caller}: {err}") from None
    token = _Entry()
    with _lock:
        if not _backends:
            _install()
        _backends.append((token, backend))
        _entered.set(_entered.get() + (token,))
        compile_isolation.enter(state, _aten_rms_norm)


def _own_entry() -> int:
    """Index in ``_backends`` of this thread's innermost active enable(), else of the innermost one."""
    active = [token for token, _ in _backends]
    for token in reversed(_entered.get()):
        if token in active:
            return active.index(token)
    return len(_backends) - 1


#: disable() in a thread (or task) that entered no mode: the entering one's cache key tag is a per-thread
#: config value (torch 2.12 on) no other thread can put back.
_ENDED_ELSEWHERE = (
    "ascend_rmsnorm: disable() ended a batch_invariant_mode entered in another thread (or asyncio task); "
    "that thread's torch.compile caches stay keyed by the mode (torch.compiler.config.cache_key_tag is per "
    "thread), so what it compiles from now on is cached as if inside the mode, until it enters and leaves a "
    "mode itself. Leave the mode in the thread that entered it."
)


def disable() -> None:
    """Leave this thread's innermost ``enable()`` (see the module docstring); the last one restores
    everything as it was."""
    with _lock:
        if not _backends:
            raise RuntimeError("ascend_rmsnorm: disable() without a matching enable()")
        token, _ = _backends.pop(_own_entry())
        if token not in _entered.get() and token.thread.is_alive() and compile_isolation.PER_THREAD_CONFIG:
            warnings.warn(_ENDED_ELSEWHERE, RuntimeWarning, stacklevel=2)
        active = {t for t, _ in _backends}
        mine = tuple(t for t in _entered.get() if t is not token and t in active)
        _entered.set(mine)
        if not _backends:
            compile_isolation.leave()
            _uninstall()
            return
        compile_isolation.enter(requested_name(_backends[-1][1]), _aten_rms_norm, key_here=bool(mine))
        if not mine:  # this thread is out of every mode it entered: its own cache key tag back
            compile_isolation.unkey()


def is_enabled() -> bool:
    return bool(_backends)


@contextlib.contextmanager
def batch_invariant_mode(*, backend: str | None = None) -> Iterator[None]:
    """``with batch_invariant_mode():`` — F.rms_norm, nn.RMSNorm and torch_npu's RMSNorm ops run this
    package's batch-invariant RMSNorm inside the block (see the module docstring)."""
    _enable(backend, "batch_invariant_mode")
    try:
        yield
    finally:
        disable()
