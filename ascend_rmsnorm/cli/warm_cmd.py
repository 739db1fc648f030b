"""``ascend-rmsnorm warm``: build the kernel libraries the cache lacks, one line per target.

It imports no torch (``jit`` does not), so it runs on a build node or login node as it is.
"""

from __future__ import annotations

import argparse

from .. import _env
from ..errors import AscendRMSNormError, UnsupportedArchError
from .output import out

#: What ``warm`` prints in place of the arch when there is none to build for.
NO_ARCH = "(no-arch)"
NO_ARCH_HINT = (
    "pass --arch dav-2201 to build the Atlas A2/A3 kernels on a host without an NPU (with CANN's bisheng; "
    "or set ASCEND_RMSNORM_ARCH), or --toolchain emu to build the CPU emulation's library"
)


def run(args: argparse.Namespace) -> int:
    """Build or find each target; 0 when every one is in the cache it was asked to fill."""
    from ..jit import cache, toolchain

    kind = args.toolchain
    try:
        tc = toolchain.get_toolchain(kind)
    except AscendRMSNormError as err:
        tc, tc_error = None, err
    else:
        tc_error = None
    arches = args.arch
    if not arches and kind == "emu":  # the emulation's arch, unless ASCEND_RMSNORM_ARCH names another
        arches = [_env.get(toolchain.ENV_ARCH) or toolchain.EMU_ARCH]
    elif not arches:  # the arch of this host's NPU; on a host without one, say what to pass instead
        try:
            arches = [toolchain.detect_arch(tc.cann_root if tc else None).arch]
        except AscendRMSNormError as err:
            why = str(err).splitlines()[0].split(". Pass --arch")[0]  # the hint below says what to pass
            out(f"failed {kind} {NO_ARCH} {why}")
            out(f"  {NO_ARCH_HINT}")
            if tc_error is not None:
                out(f"also: {tc_error}")
            return 1
    if tc_error is not None:  # an arch no toolchain could build for says so first: no CANN to install for it
        for arch in arches:
            try:
                toolchain.check_supported(arch)
                why = tc_error
            except UnsupportedArchError as err:
                why = err
            out(f"failed {kind} {toolchain.normalise_arch(arch)} {why}")
        return 1
    failures = 0
    for arch in (toolchain.normalise_arch(a) for a in arches):
        try:  # private_ok=False: a build into a temp dir that vanishes at exit would warm nothing
            status, entry = cache.ensure_built(
                tc, arch, cache_dir=args.cache_dir, private_ok=False, target_only=bool(args.cache_dir)
            )
            problem = _entry_problem(entry, args.cache_dir, cache.build_spec(tc, arch))
            if problem is not None:
                raise cache.CacheWriteError(problem)
        except AscendRMSNormError as err:
            failures += 1
            first, _, rest = str(err).partition("\n")
            out(f"failed {kind} {arch} {first}")
            if rest:
                out(rest)
            continue
        out(f"{status} {kind} {arch} {entry}")
    return 1 if failures else 0


def _entry_problem(entry, cache_dir: str | None, spec) -> str | None:
    """Why ``entry`` does not count as warmed (None if it does): warm succeeds only when the entry is valid
    and is ``spec``'s entry in the cache it was asked to fill (without --cache-dir: in a tier every later run
    reads, never in this process's private temp dir, which vanishes at exit, nor the build's own copy that
    the publish keeps in ``tmp/`` when something at the key's path cannot be replaced)."""
    from pathlib import Path

    from ..jit import cache

    entry = Path(entry)
    target = cache.cache_root(cache_dir)[0]
    allowed = [target] if cache_dir else [t.path for t in cache.tiers(cache_dir) if t.kind != "private"]
    if not any(entry.is_relative_to(root) for root in allowed):
        return f"the library ended up at {entry}, outside the cache {target} that was to be filled"
    if entry not in [cache.entry_dir(root, spec) for root in allowed]:
        return (
            f"the library was built but not published at {cache.entry_dir(target, spec)}: what is there could "
            f"not be replaced (an invalid entry that could not be moved aside, or someone else's; the warning "
            f"before this line says which), so it stays this process's own copy at {entry}, which no later run finds"
        )
    problem = cache.entry_problem(entry, spec.key)
    if problem is not None:
        return f"the entry {entry} is not valid after building it: {problem}"
    return None


def register_warm(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "warm",
        help="build the kernel libraries that are missing from the cache",
        description="Build what is missing (safe to run from many processes and nodes at once). "
        "Prints one line per target: hit|built|failed <toolchain> <arch> <entry or error>.",
    )
    p.add_argument(
        "--arch",
        action="append",
        help="target arch, e.g. dav-2201 (repeatable; default: ASCEND_RMSNORM_ARCH, else this NPU's, or "
        "dav-2201 with --toolchain emu)",
    )
    p.add_argument(
        "--toolchain", choices=("npu", "emu"), default="npu", help="bisheng (npu, the default) or host C++ (emu)"
    )
    p.add_argument("--cache-dir", help="writable cache root (default: ASCEND_RMSNORM_CACHE_DIR or the user cache)")
    p.set_defaults(func=run)
