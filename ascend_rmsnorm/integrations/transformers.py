"""``patch_transformers()``: swap Hugging Face RMSNorm layers for this package's ``RMSNorm``.

Candidates are found by what their forward computes, not by their name: any module class whose
``forward`` (or ``_norm``) takes a mean of squares and an inverse square root and calls no submodule
(T5's ``T5LayerNorm`` is an RMSNorm), plus classes named RMSNorm and ``nn.RMSNorm`` subclasses.
Each candidate is classified from its own source: the ``forward`` (and ``_norm``, when it
has one) is parsed, names are canonicalised (arguments and locals become a0, a1, ...; the eps
attribute becomes ``self.EPS``; ``.float()`` is ``.to(torch.float32)``; ``.square()`` is
``.pow(2)``) and the result is compared with the canonical forms of the known formulas below. So a
class is patched only when its forward is one of those formulas, whatever the model is called;
anything else RMSNorm-like (gated norms, group norms, a ``(1 + w)`` added in the weight's dtype,
...) and every other norm-like class (a LayerNorm that centres the row) is reported in
``PatchReport.unclassified`` with the reason, and left alone; so is an instance whose weight is not a
``Parameter`` (a buffer, a parametrization), that holds other parameters, buffers or submodules, or
whose ``forward`` was replaced on the instance (accelerate's device hooks: patch before dispatching).

| formula in the HF source                                          | casting_mode | offset |
|-------------------------------------------------------------------|--------------|--------|
| ``weight * x_normed.to(input_dtype)`` (Llama, Mistral, Qwen2/3, ...) | "llama"      | 0      |
| ``(weight * x_normed).to(input_dtype)`` (Olmo2, DeepSeek-V4, ...)  | "fp32"       | 0      |
| ``(x_normed * (1.0 + weight.float())).type_as(x)`` (Gemma 1/2/3)    | "gemma"      | 1      |
| ``(x_normed * weight.float()).type_as(x)``, no weight (Gemma3n, ...) | "fp32"       | 0      |
| ``weight * x_normed.to(weight.dtype)`` when half (T5, MT5, UMT5, ...) | "llama"      | 0      |

(T5's cast goes to the weight's dtype, not x's: where the two differ its patched module runs HF's own
forward, with one warning, since no mode here computes that.)

``casting_mode=`` forces one formula on every class ("fp32": one rounding, what vLLM-Ascend's
``npu_rms_norm`` computes under ``batch_invariant_mode``; "llama": the normalised row rounded first),
each class keeping the offset its weights need (1 for Gemma's ``1 + w``).

Two ways to use it, as Liger-Kernel offers (``transformers/monkey_patch.py``):

- ``patch_transformers(model)``: every RMSNorm-like submodule of an instantiated model is replaced
  by an ``RMSNorm`` that holds the *same* weight ``Parameter`` (so devices, dtypes, tied weights and
  optimizer references are kept) and the same hooks (the original's hook dicts themselves: a handle
  taken before patching still removes its hook, and hooks added to either module show on both, but
  for a full backward hook added to the replaced original after patching, which never fires: whether
  a module's backward hooks are full ones is a flag of the module, copied when it is patched).
  A norm registered under several names (in one parent or several) becomes one patched norm.
  Its class is a subclass of the HF class too, so a model's own ``isinstance`` tests (its weight
  initialisation's, which zeroes a ``1 + w`` weight) still know it; but not marked for the hub's
  kernels, so ``kernels.kernelize`` and ``from_pretrained(..., use_kernels=True)`` leave it alone.
- ``patch_transformers()``: before instantiation. The RMSNorm classes in the modeling modules of
  the families this package knows (imported now) and of every modeling module already imported
  are replaced by subclasses of ``RMSNorm`` that take the HF constructor's arguments; modeling
  modules imported later (``AutoModel.from_pretrained`` imports them lazily) are patched as they
  are imported. ``PatchReport.undo()`` restores everything.

``torch.nn.RMSNorm`` submodules are swapped too (mode "fp32", as their own formula).
"""

from __future__ import annotations

import ast
import importlib
import importlib.abc
import importlib.util
import inspect
import re
import sys
import textwrap
import threading
import warnings
import weakref
from collections.abc import Sequence
from dataclasses import dataclass, field

import torch
from torch import nn

from .._forksafe import renew_in_child
from ..functional import rms_norm
from ..modules import RMSNorm

#: The families the tests build tiny models of, whose modeling modules are imported (and patched) eagerly.
KNOWN_FAMILIES = (
    "llama", "mistral", "mixtral", "qwen2", "qwen2_moe", "qwen3", "qwen3_moe",
    "gemma", "gemma2", "gemma3", "phi3", "deepseek_v3",
)  # fmt: skip
_RMSNORM_NAME = re.compile(r"rms_?norm", re.IGNORECASE)
#: What an RMS-like forward has, in canonical source: a square, a mean, an inverse square root.
_SQUARE = re.compile(r"\.pow\(2\)|\*\* ?2\b")
_INV_SQRT = re.compile(r"rsqrt|sqrt|-0\.5")
#: A call of a submodule (``self.proj(x)``): a norm's forward calls none but its own ``_norm``.
_SUBMODULE_CALL = re.compile(r"self\.(?!_norm\()\w+\(")
#: Formulas callers may force with ``casting_mode=`` (the offset stays each class's).
FORCEABLE_MODES = ("fp32", "llama")
_MODELING = re.compile(r"^transformers\.models\.[A-Za-z0-9_]+\.modeling_[A-Za-z0-9_]+$")


@dataclass(frozen=True)
class NormSpec:
    """How one HF class computes its norm, in this package's terms."""

    casting_mode: str
    offset: float
    weight: str  # "yes", "no" (weightless), or "with_scale" (only when module.with_scale)
    eps_attr: str
    cast_to_weight: bool = False  # T5's form: the normalised row goes to the weight's dtype, not x's

    def forced(self, casting_mode: str | None) -> NormSpec:
        """This class's spec with ``casting_mode`` as its formula (None: its own), keeping its offset."""
        if casting_mode is None:
            return self
        mode = "gemma" if casting_mode == "fp32" and self.offset == 1.0 else casting_mode
        return NormSpec(mode, self.offset, self.weight, self.eps_attr, False)


# ---- classification from source ---------------------------------------------------------------------

_EPS_ATTRS = ("variance_epsilon", "eps", "epsilon")


class _Canonical(ast.NodeTransformer):
    """Rename a function's arguments and locals to a0, a1, ...; normalise a few spellings."""

    def __init__(self) -> None:
        self.names: dict[str, str] = {}
        self.eps_attrs: set[str] = set()

    def _name(self, name: str) -> str:
        if name not in self.names:
            self.names[name] = f"a{len(self.names)}"
        return self.names[name]

    def visit_FunctionDef(self, node: ast.FunctionDef) -> ast.AST:
        node.decorator_list, node.returns, node.type_comment = [], None, None
        for a in node.args.args[1:] + node.args.kwonlyargs:
            a.arg, a.annotation = self._name(a.arg), None
        if node.args.args:  # a nested function may have none
            node.args.args[0].annotation = None
        body = node.body
        if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
            body = body[1:]  # the docstring
        node.body = [self.visit(s) for s in body] or [ast.Pass()]
        return node

    def visit_Name(self, node: ast.Name) -> ast.AST:
        if isinstance(node.ctx, ast.Store) or node.id in self.names:
            node.id = self._name(node.id)
        return node

    def visit_AnnAssign(self, node: ast.AnnAssign) -> ast.AST:
        return self.visit(ast.Assign(targets=[node.target], value=node.value, lineno=0)) if node.value else node

    def visit_Attribute(self, node: ast.Attribute) -> ast.AST:
        self.generic_visit(node)
        if isinstance(node.value, ast.Name) and node.value.id == "self" and node.attr in _EPS_ATTRS:
            self.eps_attrs.add(node.attr)
            node.attr = "EPS"
        return node

    def visit_Call(self, node: ast.Call) -> ast.AST:
        self.generic_visit(node)
        f = node.func
        if isinstance(f, ast.Attribute) and not node.args and not node.keywords:
            if f.attr == "float":  # x.float() -> x.to(torch.float32)
                f.attr = "to"
                node.args = [ast.Attribute(value=ast.Name(id="torch", ctx=ast.Load()), attr="float32", ctx=ast.Load())]
            elif f.attr == "square":  # x.square() -> x.pow(2)
                f.attr = "pow"
                node.args = [ast.Constant(2)]
        return node


def _canonical_source(fn) -> tuple[str, set[str]] | None:
    try:
        src = textwrap.dedent(inspect.getsource(inspect.unwrap(fn)))
        tree = ast.parse(src).body[0]
    except (OSError, TypeError, SyntaxError, IndexError):
        return None
    if not isinstance(tree, ast.FunctionDef):
        return None
    canon = _Canonical()
    tree = canon.visit(tree)
    ast.fix_missing_locations(tree)
    return ast.unparse(tree), canon.eps_attrs


# The known formulas, written out once here and canonicalised like the HF sources (so names,
# annotations, comments and docstrings do not matter). Each: (casting_mode, offset, weight, source).
_LLAMA_BODY = """
def forward(self, h):
    input_dtype = h.dtype
    h = h.to(torch.float32)
    variance = h.pow(2).mean(-1, keepdim=True)
    h = h * torch.rsqrt(variance + self.eps)
    return {ret}
"""
_NORM_RSQRT = """
def _norm(self, x):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)
"""
_NORM_POW = """
def _norm(self, x):
    ms = x.pow(2).mean(-1, keepdim=True) + self.eps
    return x * torch.pow(ms, -0.5)
"""
_TEMPLATES = (
    ("llama", 0.0, "yes", _LLAMA_BODY.format(ret="self.weight * h.to(input_dtype)")),
    ("fp32", 0.0, "yes", _LLAMA_BODY.format(ret="(self.weight * h).to(input_dtype)")),
    ("fp32", 0.0, "yes", _LLAMA_BODY.format(ret="(self.weight.to(torch.float32) * h).to(input_dtype)")),
    ("fp32", 0.0, "yes", _LLAMA_BODY.format(ret="(h * self.weight).to(input_dtype)")),
    ("gemma", 1.0, "yes", _NORM_RSQRT + """
def forward(self, x):
    out = self._norm(x.float())
    out = out * (1.0 + self.weight.float())
    return out.type_as(x)
"""),
    ("fp32", 0.0, "yes", _NORM_RSQRT + """
def forward(self, x):
    out = self._norm(x.float())
    out = out * self.weight.float()
    return out.type_as(x)
"""),
    ("llama", 0.0, "yes", _NORM_RSQRT + """
def forward(self, x):
    out = self._norm(x.float()).type_as(x)
    return out * self.weight
"""),
    ("fp32", 0.0, "no", _NORM_RSQRT + """
def forward(self, x):
    return self._norm(x.float()).type_as(x)
"""),
    ("fp32", 0.0, "with_scale", _NORM_POW + """
def forward(self, x):
    out = self._norm(x.float())
    if self.with_scale:
        out = out * self.weight.float()
    return out.type_as(x)
"""),
    ("fp32", 0.0, "no", """
def forward(self, h):
    input_dtype = h.dtype
    h = h.float()
    h = h * torch.rsqrt(h.square().mean(-1, keepdim=True) + self.eps)
    return h.to(input_dtype)
"""),
    ("llama", 0.0, "yes-cast-to-weight", """
def forward(self, h):
    variance = h.to(torch.float32).pow(2).mean(-1, keepdim=True)
    h = h * torch.rsqrt(variance + self.eps)
    if self.weight.dtype in [torch.float16, torch.bfloat16]:
        h = h.to(self.weight.dtype)
    return self.weight * h
"""),
)  # fmt: skip


def _canonical_class_source(cls: type) -> tuple[str | None, set[str], str]:
    """(canonical source of _norm + forward, eps attributes they read, why not when None)."""
    forward = getattr(cls, "forward", None)
    if forward is None or forward is nn.Module.forward:
        return None, set(), "it has no forward of its own"
    parts, eps = [], set()
    for name in ("_norm", "forward"):
        fn = getattr(cls, name, None)
        if fn is None:
            continue
        got = _canonical_source(fn)
        if got is None:
            return None, set(), f"the source of {name} cannot be read"
        parts.append(got[0])
        eps |= got[1]
    return "\n".join(parts), eps, ""


def _template_table() -> dict[str, tuple[str, float, str]]:
    table = {}
    for mode, offset, weight, src in _TEMPLATES:
        canon = []
        for chunk in re.split(r"\n(?=def )", textwrap.dedent(src).strip()):
            canon.append(_canonical_source_text(chunk))
        table["\n".join(canon)] = (mode, offset, weight)
    return table


def _canonical_source_text(src: str) -> str:
    tree = ast.parse(src).body[0]
    tree = _Canonical().visit(tree)
    ast.fix_missing_locations(tree)
    return ast.unparse(tree)


_TABLE: dict[str, tuple[str, float, str]] = {}  # built on first use (parsing costs ~10 ms at import)
_spec_cache: dict[type, NormSpec | str] = {}
_cache_lock = threading.Lock()
renew_in_child(globals(), _cache_lock=threading.Lock)  # a forked child's first call must not hang


def classify(cls: type) -> NormSpec | str:
    """The ``NormSpec`` of an RMSNorm class from its source, or a string saying why it has none."""
    with _cache_lock:
        hit = _spec_cache.get(cls)
    if hit is not None:
        return hit
    if cls is nn.RMSNorm or (
        isinstance(cls, type) and issubclass(cls, nn.RMSNorm) and cls.forward is nn.RMSNorm.forward
    ):
        result: NormSpec | str = NormSpec("fp32", 0.0, "yes", "eps")
    else:
        if not _TABLE:
            _TABLE.update(_template_table())
        canon, eps, why = _canonical_class_source(cls)
        if canon is None:
            result = why
        elif canon not in _TABLE:
            centred = canon.count("mean(") > 1 or re.search(r"-\s*\w*\.?mean\(", canon)
            extra = _extra_forward_arguments(cls)
            if centred:
                result = "it centres the row (a LayerNorm, not an RMSNorm)"
            elif extra:
                result = (
                    f"its forward takes more than the input ({', '.join(extra)}): a gated or conditioned norm, "
                    "which none of the RMSNorm formulas this package implements computes"
                )
            else:
                result = "its forward is none of the RMSNorm formulas this package implements (see the module docs)"
        elif len(eps) != 1:
            result = f"its forward reads {len(eps)} eps attributes"
        else:
            mode, offset, weight = _TABLE[canon]
            cast_to_weight = weight == "yes-cast-to-weight"
            result = NormSpec(mode, offset, "yes" if cast_to_weight else weight, next(iter(eps)), cast_to_weight)
    with _cache_lock:
        _spec_cache[cls] = result
    return result


def _extra_forward_arguments(cls: type) -> list[str]:
    """The names of forward's parameters after the input (a gated norm's ``gate``), [] if none or unknown."""
    try:
        params = list(inspect.signature(cls.forward).parameters.values())[2:]
    except (TypeError, ValueError):
        return []
    return [("*" if p.kind is p.VAR_POSITIONAL else "**" if p.kind is p.VAR_KEYWORD else "") + p.name for p in params]


_candidate_cache: dict[type, bool] = {}


def _names_say_rms(cls: type) -> bool:
    """A cheap first look (no source read): the names and constants forward and _norm's code use
    include a mean and an inverse square root."""
    names: set = set()
    for attr in ("forward", "_norm"):
        code = getattr(inspect.unwrap(getattr(cls, attr, None) or (lambda: None)), "__code__", None)
        if code is not None:
            names.update(code.co_names)
            names.update(c for c in code.co_consts if isinstance(c, float))
    return "mean" in names and bool(names & {"rsqrt", "sqrt", "pow", -0.5})


def is_rmsnorm_like(cls: type) -> bool:
    """Classes this patcher looks at: ``nn.RMSNorm`` and its subclasses, classes named RMSNorm, and every
    module class whose forward computes like a norm over the mean of squares (a square, a mean, an
    inverse square root) and calls no submodule, whatever its name (T5LayerNorm)."""
    if not isinstance(cls, type) or not issubclass(cls, nn.Module):
        return False
    hit = _candidate_cache.get(cls)
    if hit is None:
        hit = issubclass(cls, nn.RMSNorm) or bool(_RMSNORM_NAME.search(cls.__name__))
        if not hit and getattr(cls, "forward", None) is not nn.Module.forward and _names_say_rms(cls):
            canon = _canonical_class_source(cls)[0] or ""
            hit = bool(
                _SQUARE.search(canon) and "mean(" in canon and _INV_SQRT.search(canon)
            ) and not _SUBMODULE_CALL.search(canon)
        _candidate_cache[cls] = hit
    return hit


# ---- the replacement modules ------------------------------------------------------------------------


class PatchedRMSNorm(RMSNorm):
    """This package's RMSNorm standing in for a Hugging Face RMSNorm (``hf_class``).

    It holds the original module's weight ``Parameter`` itself, its eps, the HF attribute names
    (``variance_epsilon``/``eps``, ``with_scale``, ...) and, for weightless HF norms that never
    knew their size, normalises over whatever the last dimension is."""

    hf_class: type | None = None
    spec: NormSpec | None = None

    def __init__(self, *args, **kwargs) -> None:
        """Take the HF class's own constructor arguments (for patching before instantiation)."""
        hf_class, spec = type(self).hf_class, type(self).spec
        if hf_class is None or spec is None:
            raise TypeError("PatchedRMSNorm is made by patch_transformers; use ascend_rmsnorm.RMSNorm directly")
        self._adopt(hf_class(*args, **kwargs), spec)

    @classmethod
    def from_module(cls, module: nn.Module, spec: NormSpec) -> PatchedRMSNorm:
        obj = cls.__new__(cls)
        obj._adopt(module, spec)
        return obj

    def _adopt(self, module: nn.Module, spec: NormSpec) -> None:
        nn.Module.__init__(self)
        weight = getattr(module, "weight", None) if spec.weight != "no" else None
        if spec.weight == "with_scale" and not getattr(module, "with_scale", True):
            weight = None
        if isinstance(module, nn.RMSNorm):  # torch's, or one patched before (a weightless one has None)
            shape, eps = module.normalized_shape, module.eps
            shape = None if shape is None else tuple(shape)
        else:
            shape = tuple(weight.shape) if weight is not None else None
            eps = getattr(module, spec.eps_attr)
        self.normalized_shape = shape
        self.eps = eps
        self.casting_mode, self.offset = spec.casting_mode, spec.offset
        self.elementwise_affine = weight is not None
        self.backend = None
        self.hf_class_name = getattr(module, "hf_class_name", None) or _qualname(type(module))
        if weight is not None:
            self.weight = weight  # the same Parameter object
        else:
            self.register_parameter("weight", None)
        for name, value in vars(module).items():  # HF's own plain attributes (with_scale, group sizes, ...)
            if (
                not name.startswith("_")
                and name not in ("training", "eps")
                and isinstance(value, (bool, int, float, str))
            ):
                if not hasattr(type(self), name) and name not in self.__dict__:
                    self.__dict__[name] = value
        # The hook dicts themselves, not copies: a RemovableHandle taken on the original removes its hook
        # from the dicts it holds weak references to. A full backward hook fires only with its flag.
        for hooks in ("_forward_hooks", "_forward_pre_hooks", "_forward_hooks_with_kwargs",
                      "_forward_hooks_always_called", "_forward_pre_hooks_with_kwargs",
                      "_backward_hooks", "_backward_pre_hooks"):  # fmt: skip
            if getattr(module, hooks, None) is not None:
                self.__dict__[hooks] = getattr(module, hooks)
        self._is_full_backward_hook = getattr(module, "_is_full_backward_hook", None)
        self.train(module.training)

    def forward(self, x: torch.Tensor, residual: torch.Tensor | None = None):
        if self.normalized_shape is None and residual is None:  # a weightless norm over the last dim
            return rms_norm(x, None, self._eps(), casting_mode=self.casting_mode, offset=self.offset)
        spec = type(self).spec
        if spec is not None and spec.cast_to_weight and residual is None and self.weight is not None:
            w = self.weight.dtype
            if x.dtype != w and not (x.dtype == torch.float32 and w == torch.float32):
                return self._hf_forward(x)
        return super().forward(x, residual)

    def _hf_forward(self, x: torch.Tensor) -> torch.Tensor:
        """HF's own forward, for a T5-style norm whose weight has another dtype than x: it casts the
        normalised row to the weight's dtype, which no mode here computes (so not batch-invariant)."""
        hf = type(self).hf_class
        if hf not in _warned_cast_to_weight:
            _warned_cast_to_weight.add(hf)
            warnings.warn(
                f"ascend_rmsnorm.patch_transformers: {_qualname(hf)} got {x.dtype} input with a "
                f"{self.weight.dtype} weight; its formula casts to the weight's dtype, which this package "
                "does not compute, so it runs Hugging Face's own forward (not batch-invariant). Give x and "
                "the weight one dtype (model.to(dtype)) for this package's norm.",
                RuntimeWarning,
                stacklevel=3,
            )
        return hf.forward(self, x)

    def extra_repr(self) -> str:
        return super().extra_repr() + f", replaces={self.hf_class_name}"

    def __reduce_ex__(self, protocol):
        """Pickle (``torch.save(model)``) by the HF class's import path: the subclass itself is made
        at run time and has no importable name."""
        hf = type(self).hf_class
        return (_restore, (hf.__module__, hf.__qualname__, type(self).spec), self.__dict__.copy())


def _restore(module_name: str, qualname: str, spec: NormSpec) -> PatchedRMSNorm:
    obj = importlib.import_module(module_name)
    for part in qualname.split("."):
        obj = getattr(obj, part)
    if isinstance(obj, type) and issubclass(obj, PatchedRMSNorm):  # the module's name is patched now
        obj = obj.hf_class
    cls = _patched_class(obj, spec)
    return cls.__new__(cls)


_subclasses: dict[tuple[type, NormSpec], type] = {}
_warned_cast_to_weight: set[type] = set()

#: What an HF class carries for the hub's kernels (``@use_kernel_forward_from_hub``): ``kernels.kernelize``
#: (and ``from_pretrained(..., use_kernels=True)``) swaps the forward of every module whose class has it.
_HUB_KERNEL_ATTRS = ("kernel_layer_name",)


class _NotInherited:
    """A class attribute that reads as missing (``hasattr`` is False), hiding the HF class's own."""

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    def __get__(self, obj: object, owner: type | None = None):
        raise AttributeError(self.name)


def _patched_class(hf_class: type, spec: NormSpec) -> type:
    """One subclass of PatchedRMSNorm per HF class and spec, named after the class (so "RMSNorm" stays
    in the name HF's generic weight initialisation looks for), and a subclass of the HF class too (after
    PatchedRMSNorm, whose forward and constructor it takes): a model's own ``_init_weights`` asks
    ``isinstance(module, Qwen3NextRMSNorm)`` to zero a ``1 + w`` weight, and a patched norm that failed it
    got the generic ones, a scale of 2, from ``init_weights()`` after patching. Not its hub-kernel mark
    (``_HUB_KERNEL_ATTRS``): a hub kernel would put a norm that is not batch-invariant in its place."""
    sub = _subclasses.get((hf_class, spec))
    if sub is None:
        doc = f"ascend_rmsnorm's RMSNorm in place of {hf_class.__qualname__}."
        attrs = {"hf_class": hf_class, "spec": spec, "__module__": __name__, "__doc__": doc}
        attrs.update({name: _NotInherited() for name in _HUB_KERNEL_ATTRS if hasattr(hf_class, name)})
        bases = (PatchedRMSNorm,) if issubclass(PatchedRMSNorm, hf_class) else (PatchedRMSNorm, hf_class)
        sub = type(f"Ascend{hf_class.__name__}", bases, attrs)
        _subclasses[(hf_class, spec)] = sub
    return sub


# ---- the patcher ------------------------------------------------------------------------------------


@dataclass
class PatchReport:
    """What ``patch_transformers`` did.

    ``patched``: qualified HF class name -> (casting_mode, offset). ``modules``: how many submodules
    of the model were replaced (0 without a model). ``unclassified``: RMSNorm-like classes left alone,
    with the reason. ``undo()`` puts back what this call changed (module attributes and submodules):
    what it replaced, or, while a later call on the same class or submodule is still active, leaves
    that call's norm in place and makes it put back what this one replaced (so calls undone in any
    order end with the originals).
    """

    patched: dict[str, tuple[str, float]] = field(default_factory=dict)
    modules: int = 0
    unclassified: dict[str, str] = field(default_factory=dict)
    _undo: list = field(default_factory=list, repr=False)

    def undo(self) -> None:
        while self._undo:
            self._undo.pop()()


#: target (a modeling module or a parent nn.Module) -> attribute name -> the replacements made there
#: that are not undone yet, oldest first, each ``[what it replaced, what it put]``. A call undone
#: while a later one on the same attribute is still active hands what it replaced to that later one,
#: so reports undone in any order end with the original in place, never an earlier call's norm.
_layers: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
_layers_lock = threading.Lock()
renew_in_child(globals(), _layers_lock=threading.Lock)


def _replace(report: PatchReport, target: object, name: str, new: object) -> None:
    """``setattr(target, name, new)``, undone by ``report.undo()`` (see ``_layers``)."""
    layer = [getattr(target, name), new]
    with _layers_lock:
        _layers.setdefault(target, {}).setdefault(name, []).append(layer)
    setattr(target, name, new)
    report._undo.append(lambda: _unreplace(target, name, layer))


def _unreplace(target: object, name: str, layer: list) -> None:
    with _layers_lock:
        stack = _layers.get(target, {}).get(name, [])
        i = next((i for i, other in enumerate(stack) if other is layer), None)
        if i is None:
            return
        del stack[i]
        if i < len(stack):  # a later call's replacement is active: it now puts back what this one replaced
            stack[i][0] = layer[0]
            return
    setattr(target, name, layer[0])


def _qualname(cls: type) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"


def _report_unclassified(report: PatchReport, cls: type, why: str) -> None:
    name = _qualname(cls)
    if name not in report.unclassified:
        report.unclassified[name] = why
        warnings.warn(f"ascend_rmsnorm.patch_transformers: {name} left as is: {why}", RuntimeWarning, stacklevel=3)


def _reforced(cls: type, casting_mode: str | None) -> NormSpec | None:
    """For a class an earlier call patched: its HF class's spec with ``casting_mode`` forced, when that
    differs from the spec it was patched with (so a later call's forced formula is not ignored), else None."""
    if casting_mode is None or not issubclass(cls, PatchedRMSNorm) or cls.hf_class is None:
        return None
    own = classify(cls.hf_class)
    spec = own.forced(casting_mode) if isinstance(own, NormSpec) else None
    return spec if spec is not None and spec != cls.spec else None


def _patch_model(model: nn.Module, report: PatchReport, casting_mode: str | None) -> None:
    # id(norm) -> (norm, its replacement): a norm under several names gets one replacement; the norm is held
    # here so that its id, once no parent holds it, cannot be some later module's
    made: dict[int, tuple[nn.Module, nn.Module]] = {}
    for _, parent in list(model.named_modules()):
        for child_name, child in list(parent._modules.items()):  # every name, a module under two included
            if child is None:
                continue
            if id(child) in made:
                _replace(report, parent, child_name, made[id(child)][1])
                continue
            cls = type(child)
            if isinstance(child, PatchedRMSNorm):  # patched before: again only for another forced formula
                spec = _reforced(cls, casting_mode)
                if spec is None:
                    continue
                cls = cls.hf_class
            elif isinstance(child, RMSNorm) or not is_rmsnorm_like(cls):  # ours (an nn.RMSNorm too): as is
                continue
            else:
                spec = classify(cls)
                if isinstance(spec, str):
                    _report_unclassified(report, cls, spec)
                    continue
                spec = spec.forced(casting_mode)
            weight = getattr(child, "weight", None)
            if spec.weight == "no" or (spec.weight == "with_scale" and not getattr(child, "with_scale", True)):
                weight = None  # the forward never reads it
            if weight is not None and not isinstance(weight, nn.Parameter):  # adopting it would drop its state
                _report_unclassified(
                    report,
                    cls,
                    "its weight is not a Parameter (a buffer, or parametrized with torch.nn.utils.parametrize)",
                )
                continue
            other_state = [n for n, _ in child.named_parameters(recurse=False) if n != "weight" or weight is None]
            other_state += [n for n, _ in child.named_buffers(recurse=False)] + list(child._modules)
            if other_state:  # the patched norm holds the weight only: the rest would leave the state dict
                _report_unclassified(
                    report, cls, f"it holds state the patched norm would drop ({', '.join(other_state)})"
                )
                continue
            if "forward" in vars(child):  # accelerate's device hooks (device_map, offload), a user's wrapper
                _report_unclassified(
                    report, cls, "its forward is replaced on the instance (accelerate's hooks?): patch before dispatch"
                )
                continue
            if weight is not None and weight.dim() != 1 and not isinstance(child, nn.RMSNorm):
                _report_unclassified(report, cls, f"its weight has shape {tuple(weight.shape)}")
                continue
            new = _patched_class(cls, spec).from_module(child, spec)
            made[id(child)] = (child, new)
            _replace(report, parent, child_name, new)
            report.patched[_qualname(cls)] = (spec.casting_mode, spec.offset)
            report.modules += 1


def _patch_module_namespace(module, report: PatchReport, casting_mode: str | None) -> None:
    """Replace the RMSNorm classes a modeling module defines (module-level names) by subclasses."""
    for name, obj in list(vars(module).items()):
        if isinstance(obj, type) and issubclass(obj, PatchedRMSNorm):  # patched before: another forced formula?
            spec = _reforced(obj, casting_mode)
            if spec is not None:
                _replace(report, module, name, _patched_class(obj.hf_class, spec))
                report.patched[_qualname(obj.hf_class)] = (spec.casting_mode, spec.offset)
            continue
        if not isinstance(obj, type) or issubclass(obj, RMSNorm):  # not a class, or ours already
            continue
        hf_or_torch = obj.__module__.startswith("transformers.") or issubclass(obj, nn.RMSNorm)
        if not hf_or_torch or not is_rmsnorm_like(obj):  # defined here or imported from another model
            continue
        spec = classify(obj)
        if isinstance(spec, str):
            _report_unclassified(report, obj, spec)
            continue
        spec = spec.forced(casting_mode)
        _replace(report, module, name, _patched_class(obj, spec))
        report.patched[_qualname(obj)] = (spec.casting_mode, spec.offset)


class _ModelingImportHook(importlib.abc.MetaPathFinder):
    """Patches HF modeling modules imported while it is installed (AutoModel imports them lazily)."""

    def __init__(self, report: PatchReport, casting_mode: str | None) -> None:
        self.report, self.casting_mode = report, casting_mode
        self._busy = threading.local()

    def find_spec(self, fullname, path, target=None):
        if not _MODELING.match(fullname) or getattr(self._busy, "on", False):
            return None
        self._busy.on = True
        try:
            spec = importlib.util.find_spec(fullname)
        finally:
            self._busy.on = False
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        loader, report, casting_mode = spec.loader, self.report, self.casting_mode

        class _Loader(importlib.abc.Loader):
            def create_module(self, s):
                return loader.create_module(s)

            def exec_module(self, module):
                loader.exec_module(module)
                _patch_module_namespace(module, report, casting_mode)

        spec.loader = _Loader()
        return spec


def _patch_classes(report: PatchReport, families, casting_mode: str | None) -> None:
    for family in families:
        try:
            importlib.import_module(f"transformers.models.{family}.modeling_{family}")
        except ImportError as err:  # a family this transformers does not have
            report.unclassified[f"transformers.models.{family}"] = f"not importable: {err}"
    for name, module in list(sys.modules.items()):
        if module is not None and _MODELING.match(name):
            _patch_module_namespace(module, report, casting_mode)
    hook = _ModelingImportHook(report, casting_mode)
    sys.meta_path.insert(0, hook)
    report._undo.insert(0, lambda: sys.meta_path.remove(hook) if hook in sys.meta_path else None)


def patch_transformers(
    model: nn.Module | None = None,
    *,
    casting_mode: str | None = None,
    families: Sequence[str] | None = None,
) -> PatchReport:
    """Swap Hugging Face RMSNorm layers for this package's batch-invariant ``RMSNorm``.

    With ``model``: its RMSNorm-like submodules are replaced in place (same weight Parameters, same
    devices and dtypes, same hooks); returns the report. Without: the RMSNorm classes of the
    ``families``' modeling modules, of every modeling module already imported and of those imported
    later are replaced, so models instantiated afterwards are built with this package's norms.
    Each class's casting mode and offset come from its own forward's source (module docstring);
    a class that cannot be classified, and every other norm-like class, is reported
    (``report.unclassified`` and a RuntimeWarning) and left alone. ``report.undo()`` reverts the call.

    ``casting_mode``: None keeps each class's own formula; ``"fp32"`` or ``"llama"`` forces that formula
    on every class, each keeping the offset its weights need (Gemma's 1). ``"fp32"`` is what a
    rollout engine calling torch_npu's norms under ``batch_invariant_mode`` computes (vLLM-Ascend).
    Norms and classes an earlier call patched are left as they are, except that a forced
    ``casting_mode`` other than theirs re-patches them (so it is never silently ignored).
    ``families``: the HF model families whose modeling modules are imported and patched eagerly
    (default ``KNOWN_FAMILIES``), without ``model`` only.
    """
    if casting_mode is not None and casting_mode not in FORCEABLE_MODES:
        hint = (
            " ('gemma' is 'fp32' with offset 1; the offset comes from each class, so pass 'fp32')"
            if casting_mode == "gemma"
            else ""
        )
        raise ValueError(
            f"patch_transformers: casting_mode must be None (each class's own formula) or one of "
            f"{', '.join(map(repr, FORCEABLE_MODES))}, got {casting_mode!r}{hint}"
        )
    if isinstance(families, (str, bytes)):  # iterated, a str is its letters: "llama" would mean l, a, m, a
        raise TypeError(
            f"patch_transformers: families must be a sequence of family names such as ['llama'], got {families!r}"
        )
    report = PatchReport()
    if model is not None:
        if not isinstance(model, nn.Module):
            raise TypeError(f"patch_transformers: model must be a torch.nn.Module, got {type(model).__name__}")
        if families is not None:
            raise TypeError(
                "patch_transformers: families= only applies without a model (it names the modeling modules "
                "whose classes are patched); with a model, every RMSNorm layer in it is patched"
            )
        _patch_model(model, report, casting_mode)
        return report
    try:
        import transformers  # noqa: F401
    except ImportError as err:
        raise ImportError("patch_transformers() needs the transformers package: pip install transformers") from err
    _patch_classes(report, KNOWN_FAMILIES if families is None else tuple(families), casting_mode)
    return report
