"""Shared test helpers: raw-bit comparison and deterministic inputs."""

from __future__ import annotations

from contextlib import contextmanager
from pathlib import Path

import torch

#: The integer view of a float of each size (bits are compared and printed as these).
_INT_VIEW = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}
DTYPES = (torch.float32, torch.bfloat16, torch.float16)


def pyproject() -> dict:
    """This checkout's pyproject.toml, parsed: tomllib from Python 3.11, the test extras' tomli on 3.10."""
    try:
        import tomllib
    except ModuleNotFoundError:
        import tomli as tomllib

    return tomllib.loads((Path(__file__).resolve().parents[2] / "pyproject.toml").read_text())


def load_script(relpath: str, name: str):
    """A script of this checkout that is not a package module (``benchmarks/...``, ``tools/...``), loaded
    as the module ``name``, so a test can call its functions and read its tables."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(name, Path(__file__).resolve().parents[2] / relpath)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def bits(t: torch.Tensor) -> torch.Tensor:
    """The raw bits of a float tensor as an integer tensor (so -0.0 != 0.0 and NaN == NaN)."""
    return t.contiguous().view(_INT_VIEW[t.element_size()])


def same_bits(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.dtype == b.dtype and a.shape == b.shape and torch.equal(bits(a), bits(b))


def assert_same_bits(a: torch.Tensor | None, b: torch.Tensor | None, what: str = "") -> None:
    """Bit for bit equal, or both None (an output a call did not make); the message names the first
    element that differs, with both values and their bits."""
    if a is None or b is None:
        assert a is None and b is None, f"{what}: {'missing' if a is None else 'unexpected'} output"
        return
    assert a.dtype == b.dtype, f"{what}: dtype {a.dtype} != {b.dtype}"
    assert a.shape == b.shape, f"{what}: shape {tuple(a.shape)} != {tuple(b.shape)}"
    ba, bb = bits(a), bits(b)
    if not torch.equal(ba, bb):
        diff = (ba != bb).nonzero()
        first = tuple(diff[0].tolist())
        mask = (1 << 8 * a.element_size()) - 1
        raise AssertionError(
            f"{what}: {diff.shape[0]} of {ba.numel()} elements differ in their bits; first at {first}: "
            f"{a[first].item()!r} ({int(ba[first]) & mask:#x}) vs {b[first].item()!r} ({int(bb[first]) & mask:#x})"
        )


_KERNEL_DTYPE = {torch.float32: "f32", torch.bfloat16: "bf16", torch.float16: "f16"}


def emu_kernel(direction: str, dtype: torch.dtype) -> str:
    """The emu library's name of the ``direction`` ("fwd", "bwd") kernel whose x, weight and output all
    have ``dtype`` (no weight: the weight's type is x's)."""
    d = _KERNEL_DTYPE[dtype]
    return f"rmsnorm_{direction}_{d}_{d}_{d}"


@contextmanager
def kernels_run_on(backend: str, *kernels: str):
    """On the emu backend, assert that each emu kernel named (``emu_kernel``) launched inside the block:
    the torch path gives the same bits by design, so a comparison with it cannot tell whether the
    emulated kernel ran at all. On any other backend, nothing."""
    if backend != "emu":
        yield
        return
    from ascend_rmsnorm.backends import emu

    emu.reset_stats()
    yield
    missing = [k for k in kernels if emu.peak_ub(k) == 0]
    assert not missing, f"the emu kernels {missing} did not run"


def in_a_thread(fn):
    """``fn()`` run in a new thread (torch.compiler.config is per thread): its result, or its exception
    raised here."""
    import threading

    out = {}

    def run():
        try:
            out["y"] = fn()
        except BaseException as err:  # noqa: BLE001 - re-raised in the caller
            out["err"] = err

    worker = threading.Thread(target=run)
    worker.start()
    worker.join()
    if "err" in out:
        raise out["err"]
    return out["y"]


def make_input(rows: int, hidden: int, dtype: torch.dtype, seed: int = 0, scale_rows: bool = True) -> torch.Tensor:
    """Random rows with per-row scales from 1e-3 to 1e3, so the tree sees very different magnitudes."""
    g = torch.Generator().manual_seed(seed * 1_000_003 + hidden * 7 + rows)
    x = torch.randn(rows, hidden, generator=g, dtype=torch.float32)
    if scale_rows and rows > 1:
        x *= torch.logspace(-3, 3, rows, dtype=torch.float32).roll(seed % rows).unsqueeze(-1)
    return x.to(dtype)


def make_weight(hidden: int, dtype: torch.dtype, seed: int = 1) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed * 7919 + hidden)
    return (1.0 + 0.25 * torch.randn(hidden, generator=g)).to(dtype)
