"""Keep what torch.compile makes inside ``batch_invariant_mode`` apart from what it makes outside it.

The mode changes what ``aten::rms_norm`` computes, and torch.compile bakes that into its products.
Two caches could hand a product of one side to the other:

- **Dynamo's in-process cache** of compiled frames, whose guards know nothing of dispatcher
  registrations. Dynamo does guard on the identity of ``torch.rms_norm`` (what ``F.rms_norm`` and
  ``nn.RMSNorm`` call): while the mode is on, ``torch.rms_norm`` is a thin wrapper with a code
  object of its own per mode state (the innermost backend), so a frame compiled in one state fails
  its guards in every other state and is recompiled there; returning to a state finds that state's
  frames again, with no recompile.
- **The on-disk caches** (AOTAutograd's, whose key is made from its first trace of the graph;
  Inductor's FX graph cache; autotuning and PGO). The wrapper calls the mode's ``rms_norm`` itself,
  not ``aten::rms_norm``, so that trace holds this package's op with its backend: the key differs
  from the outside one in whatever thread compiles. ``torch.compiler.config.cache_key_tag``, which
  every one of those caches puts in its key, also gets this package's version and the mode's backend
  appended while the mode is on: the second line of defence, for code that calls ``aten::rms_norm``
  itself. Every torch this package supports (2.8 on) has the tag and keys those caches by it.

From 2.12 torch keeps config values in ``contextvars`` (one value per thread, and per asyncio task):
only the threads that entered the mode see its tag, so what this module changes there is recorded in
a ``ContextVar`` of its own beside them: each thread puts back its own tag when it leaves the mode,
whichever thread leaves last (``unkey``), and a tag copied into another thread or task is not mistaken
for one the mode set there (``keyed_here``). torch 2.8 to 2.11 keep one value for the process: there
the tag follows the mode's current state in every thread, set by whichever thread enters or changes
the state and put back only when the last mode ends (a thread that left first must not take it from
the others, nor leave its own behind to key compiles outside the mode as inside).
"""

from __future__ import annotations

import sys
from contextvars import ContextVar

import torch
from torch.overrides import handle_torch_function, has_torch_function_variadic

from .._version import __version__

_state: dict = {}  # while the mode is on: "state", the mode state torch.rms_norm serves now


def _per_thread_config() -> bool:
    """Whether torch keeps a config value per thread (2.12 on) rather than one per process (2.8 to
    2.11), read from torch's private config entries: from 2.12 each holds a ContextVar."""
    entry = getattr(torch.compiler.config, "_config", {}).get("cache_key_tag")
    return isinstance(getattr(entry, "user_override", None), ContextVar)


class _ProcessRecord:
    """``_keyed`` where torch's config is one per process: one record for every thread."""

    def __init__(self) -> None:
        self.value: tuple[str, str] | None = None

    def get(self) -> tuple[str, str] | None:
        return self.value

    def set(self, value: tuple[str, str] | None) -> None:
        self.value = value


PER_THREAD_CONFIG = _per_thread_config()
#: Where the mode keyed the compile caches: (the tag before, the tag set), else None; per thread
#: (context) or for the process, as torch keeps the tag.
_keyed: ContextVar[tuple[str, str] | None] | _ProcessRecord = (
    ContextVar("ascend_rmsnorm_compile_isolation", default=None) if PER_THREAD_CONFIG else _ProcessRecord()
)
#: Whether this thread (context) is in the mode it keyed the caches for: what ``keyed_here`` asks
#: where the tag is one per process and so no answer to it.
_here: ContextVar[bool] = ContextVar("ascend_rmsnorm_compile_isolation_here", default=False)
_wrappers: dict[str, object] = {}  # mode state -> its torch.rms_norm wrapper (kept: Dynamo guards on its code)
_TAG_SEP = "|"


def _template(input, normalized_shape, weight=None, eps=None):
    if has_torch_function_variadic(input, weight):  # as the builtin: subclasses, modes, fx tracing
        return handle_torch_function(torch.rms_norm, (input, weight), input, normalized_shape, weight, eps)
    if input.device.type in _AUTOCAST_FP32 and torch.is_autocast_enabled(input.device.type):
        input, weight = _autocast_fp32(input), _autocast_fp32(weight)
    return _IMPL(input, normalized_shape, weight, eps)


def _autocast_fp32(t):
    """What autocast's fp32 policy makes of an argument: a 16-bit float tensor of the autocast device as float32."""
    return t.float() if t is not None and t.dtype in (torch.float16, torch.bfloat16) else t


#: The device types whose autocast has a kernel for ``aten::rms_norm``: torch's lists put it under the
#: fp32 policy (CUDA and XPU), which the wrapper applies itself, since it calls the mode's rms_norm
#: rather than the dispatcher; without it a 16-bit F.rms_norm under autocast returned 16 bits inside
#: the mode and float32 outside. Found when the mode is entered (``enter``).
_AUTOCAST_FP32: frozenset[str] = frozenset()


def _autocast_types() -> frozenset[str]:
    keys = {"cpu": "AutocastCPU", "cuda": "AutocastCUDA", "xpu": "AutocastXPU", "mps": "AutocastMPS"}
    keys[torch._C._get_privateuse1_backend_name()] = "AutocastPrivateUse1"
    found = set()
    for device_type, key in keys.items():
        try:
            if torch._C._dispatch_has_kernel_for_dispatch_key("aten::rms_norm", key):
                found.add(device_type)
        except (RuntimeError, AttributeError):  # a torch without aten::rms_norm or without that key
            continue
    return frozenset(found) if hasattr(torch, "is_autocast_enabled") else frozenset()


_ORIGINAL_RMS_NORM = torch.rms_norm
_IMPL = _ORIGINAL_RMS_NORM  # the mode's own rms_norm while it is on (enter)


def _wrapper(state: str):
    """``torch.rms_norm`` for one mode state: the mode's rms_norm, behind a code object of this state's own."""
    fn = _wrappers.get(state)
    if fn is None:
        code = _template.__code__.replace(co_name=f"rms_norm_in_batch_invariant_mode_{len(_wrappers)}")
        fn = type(_template)(code, _template.__globals__, "rms_norm", _template.__defaults__)
        fn.__doc__ = f"torch.rms_norm inside ascend_rmsnorm.batch_invariant_mode ({state})"
        fn.__module__ = __name__
        _wrappers[state] = fn
    return fn


def tag_for(state: str) -> str:
    """What the mode appends to ``torch.compiler.config.cache_key_tag`` in this state."""
    return f"ascend_rmsnorm-{__version__}.batch_invariant_mode({state})"


def enter(state: str, impl, *, key_here: bool = True) -> None:
    """Make ``state`` the mode's current state (on entry, and when a nested mode changes the backend);
    ``impl`` is the mode's rms_norm, which ``torch.rms_norm`` then calls directly. ``key_here``: also
    key this thread's compile caches by it (the thread is in the mode); the others keep theirs. Where
    torch's config is one per process, the caches are keyed by the current state whatever the thread."""
    global _ORIGINAL_RMS_NORM, _IMPL, _AUTOCAST_FP32
    if torch.rms_norm not in _wrappers.values():  # entering from outside: what to call and put back
        _ORIGINAL_RMS_NORM = torch.rms_norm
        _AUTOCAST_FP32 = _autocast_types()
    _IMPL = impl
    torch.rms_norm = _wrapper(state)
    _state["state"] = state
    if key_here:
        _here.set(True)
    if key_here or not PER_THREAD_CONFIG:
        _key(state)


def _key(state: str) -> None:
    """Append ``state``'s tag to this thread's ``cache_key_tag``, recording what was there before."""
    config = torch.compiler.config
    record = _keyed.get()
    current = config.cache_key_tag
    # first entry here, or someone else set the tag meanwhile: keep theirs as the base
    base = record[0] if record is not None and current == record[1] else current
    tag = f"{base}{_TAG_SEP}{tag_for(state)}" if base else tag_for(state)
    config.cache_key_tag = tag
    _keyed.set((base, tag))


def unkey() -> None:
    """Put back this thread's ``cache_key_tag`` as before it was keyed; nothing if it was not, nor,
    where torch's config is one per process, while another thread's mode is still on."""
    _here.set(False)
    record = _keyed.get()
    if record is None or (not PER_THREAD_CONFIG and "state" in _state):
        return
    _keyed.set(None)
    config = torch.compiler.config
    if config.cache_key_tag == record[1]:  # a tag the user set meanwhile stays
        config.cache_key_tag = record[0]


def keyed_here() -> bool:
    """Whether what this thread compiles now is keyed by the mode's current state: the mode keyed
    this thread itself and its ``cache_key_tag`` still carries the state's tag."""
    record = _keyed.get()
    if "state" not in _state or record is None or torch.compiler.config.cache_key_tag != record[1]:
        return False
    return (PER_THREAD_CONFIG or _here.get()) and record[1].endswith(tag_for(_state["state"]))


def leave() -> None:
    """Put back ``torch.rms_norm`` as it was before the mode, and this thread's cache configuration."""
    global _IMPL
    torch.rms_norm = _IMPL = _ORIGINAL_RMS_NORM  # a wrapper someone kept calls torch's own again
    _state.pop("state", None)
    unkey()
    _forget_dynamo_rules_made_inside()


def _forget_dynamo_rules_made_inside() -> None:
    """Dynamo maps torch's functions to its rules once per process, by name (``torch.rms_norm`` among them),
    when it first traces. Made while the mode held that name, the map has the mode's wrapper and not torch's
    builtin, and every later compile of ``F.rms_norm`` outside the mode fails ("marked as skipped"). Such a
    map is dropped on leaving, and Dynamo makes it again, with torch's own function, when next it traces.
    Private to Dynamo (``torch._dynamo.trace_rules``), and only looked at where Dynamo is loaded."""
    rules = sys.modules.get("torch._dynamo.trace_rules")
    make = getattr(rules, "get_torch_obj_rule_map", None)
    if make is None or not hasattr(make, "cache_info") or make.cache_info().currsize == 0:
        return
    if any(w in make() for w in _wrappers.values()):
        make.cache_clear()
