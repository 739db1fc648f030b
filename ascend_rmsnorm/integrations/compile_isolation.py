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
  appended while the mode is on, but a config value is per thread in torch (the one that entered the
  mode sees it), so it is the second line of defence, for code that calls ``aten::rms_norm`` itself.
  A torch without ``cache_key_tag`` gets the FX graph and AOTAutograd caches turned off inside the
  mode instead (per thread too).
"""

from __future__ import annotations

import torch
from torch.overrides import handle_torch_function, has_torch_function_variadic

from .._version import __version__

_state: dict = {}  # while the mode is on: original rms_norm, the tag we set and the one before it
_wrappers: dict[str, object] = {}  # mode state -> its torch.rms_norm wrapper (kept: Dynamo guards on its code)
_TAG_SEP = "|"


def _template(input, normalized_shape, weight=None, eps=None):
    if has_torch_function_variadic(input, weight):  # as the builtin: subclasses, modes, fx tracing
        return handle_torch_function(torch.rms_norm, (input, weight), input, normalized_shape, weight, eps)
    return _IMPL(input, normalized_shape, weight, eps)


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


def _compiler_config():
    config = getattr(torch.compiler, "config", None)
    return config if config is not None and hasattr(config, "cache_key_tag") else None


def _set_caches_enabled(enabled: bool) -> None:
    """The fallback for a torch without ``cache_key_tag``: no cache to read from or write to."""
    import torch._functorch.config as aot_config
    import torch._inductor.config as inductor_config

    if enabled:
        inductor_config.fx_graph_cache, aot_config.enable_autograd_cache = _state.pop("caches")
    else:
        _state.setdefault("caches", (inductor_config.fx_graph_cache, aot_config.enable_autograd_cache))
        inductor_config.fx_graph_cache = aot_config.enable_autograd_cache = False


def enter(state: str, impl) -> None:
    """Make ``state`` the mode's current state (on entry, and when a nested mode changes the backend);
    ``impl`` is the mode's rms_norm, which ``torch.rms_norm`` then calls directly."""
    global _ORIGINAL_RMS_NORM, _IMPL
    if torch.rms_norm not in _wrappers.values():  # entering from outside: what to call and put back
        _ORIGINAL_RMS_NORM = torch.rms_norm
    _IMPL = impl
    torch.rms_norm = _wrapper(state)
    config = _compiler_config()
    if config is None:
        if "caches" not in _state:
            _set_caches_enabled(False)
        return
    current = config.cache_key_tag
    if current != _state.get("tag"):  # first entry, or someone else set the tag meanwhile: keep theirs
        _state["base"] = current
    base = _state["base"]
    tag = f"{base}{_TAG_SEP}{tag_for(state)}" if base else tag_for(state)
    config.cache_key_tag = tag
    _state["tag"] = tag
    _state["state"] = state


def keyed_here() -> bool:
    """Whether what this thread compiles now is keyed by the mode's current state: its own
    ``cache_key_tag`` (a per-thread value) carries the state's tag. True where torch has no tag."""
    config = _compiler_config()
    if config is None or "state" not in _state:
        return config is None
    return tag_for(_state["state"]) in (config.cache_key_tag or "")


def leave() -> None:
    """Put back ``torch.rms_norm`` and the cache configuration as they were before the mode."""
    global _IMPL
    torch.rms_norm = _IMPL = _ORIGINAL_RMS_NORM  # a wrapper someone kept calls torch's own again
    config = _compiler_config()
    if config is None:
        if "caches" in _state:
            _set_caches_enabled(True)
    elif "tag" in _state:
        if config.cache_key_tag == _state["tag"]:
            config.cache_key_tag = _state["base"]
        del _state["tag"], _state["base"], _state["state"]
