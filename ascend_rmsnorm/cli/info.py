"""``ascend-rmsnorm info``: what this host has and what ``auto`` would do with it.

Gathering never builds anything and never raises: each part that cannot be found says why.
"""

from __future__ import annotations

import dataclasses
import importlib
import importlib.metadata
import os
import platform
import sys
from pathlib import Path

import torch

from .. import _env
from .._version import __version__


def _dist_version(name: str) -> str | None:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def _first_line(err: BaseException) -> str:
    return str(err).splitlines()[0] if str(err) else type(err).__name__


def _npu_section() -> dict:
    from ..backends import npu
    from ..errors import AscendRMSNormError
    from ..jit import toolchain

    out: dict = {"present": npu.npu_present(), "soc": None, "arch": None, "vector_cores": None, "detected_by": None}
    if not out["present"]:
        out["note"] = "no NPU found (no /dev/davinci* device and torch_npu reports none)"
        if _env.read(toolchain.ENV_ARCH)[0] is None:
            return out
    try:
        cann = toolchain.find_cann()
        arch = toolchain.detect_arch(cann.root if cann else None)
        out.update(soc=arch.soc, arch=arch.arch, vector_cores=arch.vector_cores, detected_by=arch.source)
        toolchain.check_supported(arch.arch, arch.soc)
        out["supported"] = True
    except AscendRMSNormError as err:
        out["supported"] = False
        out["error"] = _first_line(err)
    return out


def _overflow_section(present: bool, import_torch_npu: bool) -> dict:
    """The float overflow mode of the current NPU and of every NPU already read (backends/overflow_mode.py).

    It can only be read where torch_npu runs the device (it sets the mode when it starts one): with
    ``import_torch_npu`` (the CLI) torch_npu is imported for it; the library's ``info()`` never imports it.
    """
    out: dict = {"devices": [], "note": None}
    if not present:
        out["note"] = "no NPU"
        return out
    if "torch_npu" not in sys.modules and import_torch_npu:
        try:
            importlib.import_module("torch_npu")
        except Exception as err:  # noqa: BLE001 - a broken install raises anything
            out["note"] = f"not read: torch_npu cannot be imported ({_first_line(err)})"
            return out
    if "torch_npu" not in sys.modules:
        out["note"] = "not read: torch_npu is not imported in this process (`ascend-rmsnorm info` imports it)"
        return out
    from ..backends import overflow_mode

    try:
        if torch.npu.is_available():
            overflow_mode.of_device(int(torch.npu.current_device()))
    except Exception as err:  # noqa: BLE001 - info never raises
        out["note"] = f"the current NPU could not be read: {_first_line(err)}"
    out["devices"] = [dataclasses.asdict(m) for m in overflow_mode.known()]
    return out


def _cann_section() -> dict:
    from ..errors import AscendRMSNormError
    from ..jit import toolchain

    cann = toolchain.find_cann()
    out: dict = {
        "root": str(cann.root) if cann else None,
        "version": cann.version if cann else None,
        "version_source": cann.version_source if cann else None,
        "bisheng": None,
        "bisheng_version": None,
        "generation": None,
    }
    if cann is None:
        out["searched"] = toolchain.cann_search_report()
    try:
        tc = toolchain.npu_toolchain()
        out.update(bisheng=tc.compiler, bisheng_version=tc.version_line, generation=tc.generation)
        if out["root"] is None:
            out.update(root=str(tc.cann_root), version=tc.cann_version, version_source=tc.cann_version_source)
    except AscendRMSNormError as err:
        out["error"] = str(err)
    return out


def _emu_section() -> dict:
    from ..errors import AscendRMSNormError
    from ..jit import toolchain

    try:
        tc = toolchain.emu_toolchain()
        return {"compiler": tc.compiler, "version": tc.version_line}
    except AscendRMSNormError as err:
        return {"compiler": None, "version": None, "error": _first_line(err)}


def _cache_section(npu: dict, cann: dict) -> dict:
    from ..errors import AscendRMSNormError
    from ..jit import cache, toolchain

    tiers = []
    for tier in cache.tiers():
        err = cache.writable_error(tier.path, create=False) if tier.kind != "prebuilt" else None  # looks, makes nothing
        shared = cache.prebuilt_problem(tier.path) if tier.kind == "prebuilt" else None
        tiers.append(
            {
                "kind": tier.kind,
                "path": str(tier.path),
                "exists": os.path.isdir(tier.path),  # False below a folder you may not search, never an error
                "writable": tier.kind != "prebuilt" and err is None,
                # why not, in `cache path`'s words (a file where the root should be is not "missing")
                "problem": cache.describe_os_error(err, tier.path) if err is not None else shared,
            }
        )
    out: dict = {"jit": cache.jit_mode(), "tiers": tiers, "npu_entry": None}
    if npu.get("supported") and cann.get("bisheng"):
        try:
            entry = cache.lookup(cache.build_spec(toolchain.npu_toolchain(), npu["arch"]))
            out["npu_entry"] = str(entry) if entry else None
        except AscendRMSNormError as err:
            out["npu_entry_error"] = _first_line(err)
    return out


_INDUCTOR_DIR_UTILS = "torch._inductor.runtime.cache_dir_utils"


def _inductor_default_dir() -> str | None:
    """torch's ``default_cache_dir()`` (``<tmp>/torchinductor_<user>``), or None where this torch has none.
    Importing ``torch._inductor`` runs torch._dynamo's import, which makes that directory (torch 2.13:
    ``torch/_dynamo/package.py``), so the module is run from its file, which needs nothing of inductor,
    unless it is imported already."""
    module = sys.modules.get(_INDUCTOR_DIR_UTILS)
    try:
        if module is None:
            import importlib.util

            source = Path(torch.__file__).parent / "_inductor" / "runtime" / "cache_dir_utils.py"
            spec = importlib.util.spec_from_file_location("_ascend_rmsnorm_inductor_dir", source)
            if spec is None or spec.loader is None:
                return None
            module = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(module)
        return str(module.default_cache_dir())
    except Exception:  # noqa: BLE001 - a torch laid out otherwise: nothing to say, never an error
        return None


def _compile_cache_section() -> dict:
    """Where torch.compile keeps what it makes on disk (Inductor's cache dir: its FX graph and AOTAutograd
    caches), and why that place could hand the user someone else's code. The batch-invariant mode keeps
    its graphs apart from the others by key, not by place; a place another account owns or can add
    names to (a world-writable one, or a ``torchinductor_<user>`` not made yet in a shared /tmp, which
    anyone may make first) serves whatever that account puts there, and torch does not check. Looked at
    as it is: nothing here makes it (``_inductor_default_dir``)."""
    from ..jit import trust

    path = os.environ.get("TORCHINDUCTOR_CACHE_DIR") or _inductor_default_dir()
    if not path:
        return {"path": None, "exists": False, "problem": None}
    path = os.path.abspath(path)
    if os.path.isdir(path):
        return {"path": path, "exists": True, "problem": trust.unsafe_reason(path, searched=True)}
    # torch makes every missing directory down to it: the nearest one there is is where names are added
    above = path
    while not os.path.isdir(above):
        if os.path.lexists(above):
            return {"path": path, "exists": False, "problem": f"{above} is not a directory: torch cannot make it"}
        above = os.path.dirname(above)
    problem = trust.unsafe_reason(above, searched=True)
    if problem is not None:
        problem = f"not made yet, and another account could make it first: {problem}"
    return {"path": path, "exists": False, "problem": problem}


def _backend_section(npu: dict, cann: dict, cache_info: dict) -> dict:
    from ..backends import choice

    requested, problem = _env.read(choice.ENV_BACKEND)
    if not npu["present"]:
        npu_choice, why = "torch", "no NPU found: every tensor runs the torch path (same numerics)"
    elif not npu.get("supported"):
        npu_choice, why = "torch", f"NPU kernels unavailable: {npu.get('error')}"
    elif not cann.get("bisheng") and not cache_info.get("npu_entry"):
        npu_choice, why = "torch", f"NPU kernels unavailable: {cann.get('error', 'no bisheng').splitlines()[0]}"
    elif cache_info.get("npu_entry"):
        npu_choice, why = "npu", f"kernel library for {npu['arch']} is cached at {cache_info['npu_entry']}"
    elif cache_info["jit"] == "off":
        npu_choice, why = "torch", "ASCEND_RMSNORM_JIT=off and no cached library: run `ascend-rmsnorm warm`"
    else:
        npu_choice, why = "npu", f"kernel library for {npu['arch']} is not cached yet; it is built on first use"
    if npu_choice == "torch" and npu["present"] and choice.strict():
        npu_choice = "error"
    return {
        "requested": requested if problem is None else f"{requested} ({choice.ENV_BACKEND} ignored: {problem})",
        "strict": choice.strict(),
        "auto_for_npu_tensors": npu_choice,
        "auto_for_other_tensors": "torch",
        "why": why,
    }


def gather(import_torch_npu: bool = False) -> dict:
    """Everything ``info`` reports, as plain data (the ``--json`` schema). ``import_torch_npu`` (the CLI):
    on an NPU host, import torch_npu to read the device's overflow mode; the library never does."""
    npu = _npu_section()
    npu["overflow_mode"] = _overflow_section(npu["present"], import_torch_npu)
    cann = _cann_section()
    cache_info = _cache_section(npu, cann)
    cache_info["torch_compile"] = _compile_cache_section()
    return {
        "package": {"name": "ascend-rmsnorm", "version": __version__, "path": str(Path(__file__).resolve().parents[1])},
        "python": platform.python_version(),
        "platform": f"{platform.system()} {platform.machine()}",
        "torch": torch.__version__,
        "torch_npu": _dist_version("torch_npu") or _dist_version("torch-npu"),
        "torch_npu_imported": "torch_npu" in sys.modules,
        "npu": npu,
        "cann": cann,
        "emu": _emu_section(),
        "cache": cache_info,
        "backend": _backend_section(npu, cann, cache_info),
        "environment": _env.report(),
    }


def _overflow_line(m: dict) -> str:
    from ..backends import overflow_mode

    return overflow_mode.OverflowMode(**m).describe()


def format_report(data: dict) -> str:
    def val(v) -> str:
        return "-" if v is None else str(v)

    npu, cann, emu, cache, be = data["npu"], data["cann"], data["emu"], data["cache"], data["backend"]
    lines = [
        f"ascend-rmsnorm {data['package']['version']} ({data['package']['path']})",
        f"python {data['python']} on {data['platform']}, torch {data['torch']}, "
        f"torch_npu {val(data['torch_npu'])}{' (imported)' if data['torch_npu_imported'] else ''}",
        "",
        "NPU",
        f"  present       {'yes' if npu['present'] else 'no NPU found'}",
    ]
    if npu.get("soc") or npu.get("arch"):
        lines += [
            f"  SoC           {val(npu.get('soc'))}",
            f"  arch          {val(npu.get('arch'))}  ({val(npu.get('detected_by'))})",
            f"  vector cores  {val(npu.get('vector_cores'))}",
        ]
    if npu.get("error"):
        lines.append(f"  problem       {npu['error']}")
    if npu["present"]:
        overflow = npu.get("overflow_mode") or {}
        for m in overflow.get("devices", []):
            lines.append(f"  float mode    npu:{m['device']} {_overflow_line(m)}")
        if overflow.get("note"):
            lines.append(f"  float mode    {overflow['note']}")
    lines += [
        "CANN",
        f"  root          {val(cann['root'])}",
        f"  version       {val(cann['version'])}  ({val(cann['version_source'])})",
        f"  bisheng       {val(cann['bisheng'])}  {val(cann['bisheng_version'])}",
    ]
    if cann.get("error"):
        first, *rest = cann["error"].splitlines()
        lines.append(f"  problem       {first}")
        lines += [f"                {line.strip()}" for line in rest]
    lines += ["emu (host C++)", f"  compiler      {val(emu['compiler'])}  {val(emu['version'])}"]
    if emu.get("error"):
        lines.append(f"  problem       {emu['error']}")
    lines += ["cache", f"  JIT mode      {cache['jit']}"]
    for t in cache["tiers"]:
        if t["writable"]:
            state = "writable" if t["exists"] else "writable, made by the first build"
        elif t.get("problem"):
            state = f"{'passed over' if t['kind'] == 'prebuilt' else 'NOT writable'}: {t['problem']}"
        else:
            state = "read-only" if t["exists"] else "missing"
        lines.append(f"  {t['kind']:<12}  {t['path']}  ({state})")
    if cache.get("npu_entry"):
        lines.append(f"  npu library   {cache['npu_entry']}")
    compiled = cache.get("torch_compile") or {}
    if compiled.get("path"):
        state = "yours" if compiled["exists"] else "not made yet"
        if compiled.get("problem"):
            state = f"NOT SAFE: {compiled['problem']}; set TORCHINDUCTOR_CACHE_DIR to a directory of yours"
        lines.append(f"  torch.compile {compiled['path']}  ({state})")
    lines += [
        "backend",
        f"  requested     {be['requested']}{'  (strict)' if be['strict'] else ''}",
        f"  auto on NPU   {be['auto_for_npu_tensors']}: {be['why']}",
        f"  auto on CPU/CUDA tensors: {be['auto_for_other_tensors']}",
    ]
    env = data.get("environment") or []
    lines.append("environment")
    if not env:
        lines.append("  (no ASCEND_RMSNORM_* or CANN variables set)")
    width = max((len(row["name"]) for row in env), default=0)
    for row in env:
        shown = f"  {row['name']:<{width}}  {row['value']!r}"
        if row["status"] == "ignored":
            shown += f"  IGNORED: {row['problem']}; using {row['using']}"
        elif row["status"] == "error":
            shown += f"  INVALID: {row['problem']}"
        elif row["status"] == "unknown":
            shown += "  UNKNOWN: no such ascend-rmsnorm variable (a typo?)"
        lines.append(shown)
    return "\n".join(lines)
