"""Find the compilers: CANN (root, version, bisheng, generation), the NPU's SoC and arch, the host C++ compiler.

Everything here is lazy (nothing runs at import) and memoised per process; ``reset()`` forgets it all.
Search orders: docs/design.md §5. Nothing falls back silently to a
default arch: when the arch cannot be found we raise and say how to set it.

What is run or loaded from here (a compiler, whose output is cached and loaded; a CANN root, whose
headers and ``lib64`` go into every build; ``libascendcl.so``; ``npu-smi``) passes the ownership test
of ``trust.py`` first, and PATH is searched in its absolute entries only (``toolpath.on_path``).
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import platform
import re
import subprocess
import sys
import threading
from dataclasses import dataclass, field
from pathlib import Path

from .. import _env
from .._forksafe import renew_in_child
from ..errors import ToolchainNotFoundError, UnsupportedArchError
from . import toolpath, trust

ENV_HOME = _env.HOME_PATH
ENV_TOOLKIT_HOME = _env.TOOLKIT_HOME
ENV_BISHENG = _env.BISHENG
ENV_CXX = _env.CXX
ENV_ARCH = _env.ARCH

#: Where CANN installs itself when no env var says otherwise, in search order. ``~`` is expanded at
#: search time (so HOME is honoured); tests replace this tuple to keep the host's real installs out.
DEFAULT_CANN_ROOTS: tuple[str, ...] = (
    "/usr/local/Ascend/cann",
    "/usr/local/Ascend/ascend-toolkit/latest",
    "~/Ascend/cann",
    "~/Ascend/ascend-toolkit/latest",
)

#: bisheng's places under a CANN root (9.x bin/, 7.0-9.x compiler/, the real 8.5+ place, older, post-9.1).
BISHENG_SUBDIRS: tuple[str, ...] = (
    "bin",
    "compiler/ccec_compiler/bin",
    "{host}-linux/ccec_compiler/bin",
    "tools/ccec_compiler/bin",
    "tools/bisheng_compiler/bin",
)

#: The archs our kernels are written for (the UB budget, the vector ISA); anything else is refused.
SUPPORTED_ARCHES: tuple[str, ...] = ("dav-2201",)
#: The arch the CPU emulation (``kernels/emu``) models.
EMU_ARCH = "dav-2201"

GENERATION_ASC = "asc"  # CANN >= 8.5: one-step ``bisheng -x asc --npu-arch=...``
GENERATION_CCE = "cce"  # CANN 8.0-8.3: one-step ``bisheng -xcce --cce-aicore-arch=...`` with tikcfw includes
GENERATION_EMU = "emu"  # the host C++ compiler against kernels/emu

_VERSION_TIMEOUT_S = 60


def host_arch() -> str:
    """The machine name CANN uses in ``<root>/<host>-linux`` (``x86_64`` or ``aarch64``)."""
    return platform.machine() or "x86_64"


# --------------------------------------------------------------------------------------------------- CANN root


@dataclass(frozen=True)
class CannInstall:
    """A CANN install: its resolved root, release version and where that version was read from."""

    root: Path
    version: str
    version_source: str
    host_arch: str
    found_by: str


def _normalise_root(raw: str) -> Path:
    path = Path(os.path.expanduser(raw))
    if path.name == "toolkit":  # some set_env.sh flavours point at <root>/toolkit
        path = path.parent
    return path


def _candidate_roots() -> list[tuple[str, str]]:
    """(how it was found, raw path) in search order."""
    out = []
    for name in (ENV_HOME, ENV_TOOLKIT_HOME):
        value = _env.raw(name)  # a wrong one is reported in the search list, and the defaults are tried
        if value and _env.read(name)[1] is None:  # a relative one: _ignored_root_vars (one warning)
            out.append((f"${name}", value.strip()))
    return out + [("default location", raw) for raw in DEFAULT_CANN_ROOTS]


def _ignored_root_vars() -> list[str]:
    """The search-list lines of a CANN root variable that is not a path every process reads alike (a
    relative one would name another directory in each working directory): ignored, as ``_envvars._path``
    rules, with one warning each (``info`` marks them IGNORED)."""
    out = []
    for name in (ENV_HOME, ENV_TOOLKIT_HOME):
        value = _env.raw(name)
        problem = _env.read(name)[1] if value else None
        if problem is not None:
            _env.warn(name, problem)
            out.append(f"{value.strip()} (${name}: {problem.split(',')[0]}, ignored)")
    return out


#: What of a CANN root goes into a build besides its compiler: ``jit/build.py`` passes ``include`` to
#: ``-I`` and ``lib64`` to ``-L`` and to the library's run path (what the loaded library pulls in).
ROOT_SUBDIRS_USED: tuple[str, ...] = ("include", "lib64")


#: How far below each of ROOT_SUBDIRS_USED ``root_problem`` looks: the whole header tree (headers include
#: each other by relative names), a library dir's own entries (the loader looks no deeper).
ROOT_SUBDIR_DEPTH: dict[str, int | None] = {"include": None, "lib64": 1}


def root_problem(path: Path) -> str | None:
    """Why the CANN root ``path`` (links kept, so they are checked too), or what the build takes from it,
    could be someone else's (``trust.unsafe_reason``, as searched directories: the compiler and the
    loader look names up in them; ``trust.tree_problem`` below ``include`` and ``lib64``), or None. The
    rest of the tree is not walked (a CANN tree holds tens of thousands of files); the compiler is
    checked on its own."""
    problem = trust.unsafe_reason(path, searched=True)  # bisheng finds its own dirs below it by name
    for sub in ROOT_SUBDIRS_USED if problem is None else ():
        if os.path.lexists(Path(path) / sub):
            problem = trust.tree_problem([Path(path) / sub], depth=ROOT_SUBDIR_DEPTH[sub])
            if problem is not None:
                break
    return problem


def _search_cann() -> tuple[CannInstall | None, list[str], ToolchainNotFoundError | None]:
    """(the install, the places passed over with why, the refusal of an unsafe root set by a variable)."""
    searched = _ignored_root_vars()
    for how, raw in _candidate_roots():
        path = _normalise_root(raw)
        if not path.is_absolute():  # "~/..." with no home (no HOME, no passwd entry): never below the cwd
            searched.append(f"{raw} ({how}: no home directory to expand ~ to)")
            continue
        real = Path(os.path.realpath(path))
        shown = str(path) if str(path) == str(real) else f"{path} -> {real}"
        if not os.path.isdir(real):  # False, never an error, where it cannot be looked into (toolpath.executable)
            searched.append(f"{shown} ({how}: not a directory)")
            continue
        version, source = cann_version(real)
        if version is None:
            searched.append(f"{shown} ({how}: no version file, not a CANN install)")
            continue
        problem = root_problem(path)
        if problem is not None:
            searched.append(f"{shown} ({how}: {toolpath.NOT_USED}{problem})")
            if how.startswith("$"):  # a root the user chose: refused, never swapped for a default one
                return None, searched, toolpath.refusal("the CANN root", shown, how, problem)
            continue
        return CannInstall(real, version, source, host_arch(), how), searched, None
    return None, searched, None


_memo: dict[object, object] = {}
_memo_lock = threading.RLock()
renew_in_child(globals(), _memo_lock=threading.RLock)  # a forked child's first call must not hang


def _memoised(key: object, compute):
    with _memo_lock:
        if key in _memo:
            return _memo[key]
        value = _memo[key] = compute()
        return value


def find_cann() -> CannInstall | None:
    """The CANN install to use, or None (also when the one a variable names is unsafe: ``cann_refusal``).
    Symlinks such as ``latest`` and ``cann`` are resolved."""
    key = ("cann", tuple(_candidate_roots()), DEFAULT_CANN_ROOTS, os.path.expanduser("~"), trust.policy())
    with _memo_lock:
        if key in _memo:
            return _memo[key]
    found = _search_cann()[0]
    if found is not None:  # a miss is not remembered: CANN may be installed or sourced later
        with _memo_lock:
            _memo[key] = found
    return found


def cann_search_report() -> list[str]:
    """What ``find_cann`` looked at and why each place was passed over (for error messages)."""
    return _search_cann()[1]


def cann_refusal() -> ToolchainNotFoundError | None:
    """The error for a CANN root named by ``ASCEND_HOME_PATH``/``ASCEND_TOOLKIT_HOME`` that fails the
    ownership test, or None."""
    return _search_cann()[2]


# --------------------------------------------------------------------------------------------------- versions


#: Version and platform files are a few KiB; more than this is not one.
_SMALL_FILE_LIMIT = 1 << 20


def read_small_text(path: Path) -> str:
    """The text of the regular file ``path`` (OSError otherwise): discovery reads these before it has checked
    who owns the tree, and a FIFO planted as a version file must not hang it (``trust.read_regular``)."""
    return trust.read_regular(path, _SMALL_FILE_LIMIT).decode(errors="replace")


def _read_key_values(path: Path) -> dict[str, str]:
    values: dict[str, str] = {}
    try:
        text = read_small_text(path)
    except OSError:
        return values
    for line in text.splitlines():
        if "=" in line and not line.lstrip().startswith("#"):
            k, _, v = line.partition("=")
            values.setdefault(k.strip(), v.strip())
    return values


_RUNNING_VERSION = re.compile(r"^\s*(\w+)_running_version\s*=\s*\[([^:\]]*):([^\]]+)\]", re.M)
_DIR_VERSION = re.compile(r"^(?:cann-|ascend-toolkit-)?(\d+\.\d+(?:[.\-][0-9A-Za-z.\-]+)?)$")


def cann_version(root: Path) -> tuple[str | None, str]:
    """(release, source) from ``<host>-linux/ascend_toolkit_install.info``, then ``version.cfg``, then the dir name."""
    root = Path(root)
    infos = [root / f"{host_arch()}-linux" / "ascend_toolkit_install.info"]
    infos += sorted(p for p in root.glob("*-linux/ascend_toolkit_install.info") if p not in infos)
    for info in infos:
        version = _read_key_values(info).get("version")
        if version:
            return version, str(info)
    cfg = root / "version.cfg"
    try:
        text = read_small_text(cfg)
    except OSError:
        text = ""
    found = {m.group(1): m.group(3).strip() for m in _RUNNING_VERSION.finditer(text)}
    for component in ("toolkit", "compiler", "runtime"):
        if found.get(component):
            return found[component], str(cfg)
    if found:
        return next(iter(found.values())), str(cfg)
    m = _DIR_VERSION.match(root.name)
    if m:
        return m.group(1), f"directory name {root.name}"
    return None, ""


def parse_version(version: str) -> tuple[int, int]:
    """(major, minor) of a CANN release string: ``8.3.RC2`` -> (8, 3), ``9.2.0-beta.2`` -> (9, 2)."""
    m = re.match(r"\s*(\d+)\.(\d+)", version)
    if not m:
        raise ValueError(f"cannot read a CANN version from {version!r}")
    return int(m.group(1)), int(m.group(2))


def generation(version: str) -> str:
    """The bisheng command-line family for a CANN release; CANN older than 8.0 is refused."""
    try:
        major_minor = parse_version(version)
    except ValueError as err:
        raise ToolchainNotFoundError(
            f"CANN version {version!r} is not one this package can read; "
            "set ASCEND_HOME_PATH to a CANN 8.0 or newer install"
        ) from err
    if major_minor >= (8, 5):
        return GENERATION_ASC
    if major_minor >= (8, 0):
        return GENERATION_CCE
    raise ToolchainNotFoundError(
        f"CANN {version} is too old: ascend-rmsnorm needs CANN 8.0 or newer (8.5+ recommended); "
        "install a newer toolkit and `source /usr/local/Ascend/cann/set_env.sh`"
    )


def compiler_info_version(root: Path | None) -> str | None:
    """The ``Version=`` line of ``<root>/compiler/version.info`` (the compiler's internal build number)."""
    if root is None:
        return None
    return _read_key_values(Path(root) / "compiler" / "version.info").get("Version")


def _run_version(path: str) -> str:
    try:
        done = subprocess.run(
            [path, "--version"],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            timeout=_VERSION_TIMEOUT_S,
            check=False,
            # as the build runs it (toolpath.compiler_env), in the same words whatever the user's locale
            # (the text is in the key)
            env={**toolpath.compiler_env(path, warn=False), "LC_ALL": "C"},
        )
    except (OSError, subprocess.SubprocessError) as err:
        raise ToolchainNotFoundError(f"{path} --version failed to run: {err}") from err
    text = done.stdout.decode(errors="replace").strip()
    if done.returncode != 0:
        raise ToolchainNotFoundError(f"{path} --version exited with status {done.returncode}: {text[-500:]}")
    return text


def _binary_identity(path: str) -> tuple[str, int, int]:
    """(real path, size, mtime_ns) of the program ``path``: what a memo of its answers is keyed by, so a
    replaced binary is asked again. OSError where it cannot be read."""
    real = os.path.realpath(path)
    st = os.stat(real)
    return real, st.st_size, st.st_mtime_ns


def compiler_version(path: str) -> str:
    """``<path> --version`` output, memoised per ``_binary_identity``."""
    try:
        identity = _binary_identity(path)
    except OSError as err:
        raise ToolchainNotFoundError(f"compiler {path} is not readable: {err}") from err
    return _memoised(("version", *identity), lambda: _run_version(path))


#: The lines of a compiler's ``-E -v`` (gcc's and clang's, bisheng's among them) that open a list of its
#: default search dirs (one per line, indented), the line that closes it, and those naming a listed dir
#: that is not there.
_SEARCH_OPENS = ('#include "..." search starts here:', "#include <...> search starts here:")
_SEARCH_ENDS = "End of search list."
_NONEXISTENT = re.compile(r'ignoring nonexistent directory "(.+)"')
#: gcc's lines naming where it runs ``as``, ``ld`` and ``collect2`` from, and the dirs it links from.
_GCC_PATHS = ("COMPILER_PATH=", "LIBRARY_PATH=")


def parse_search_dirs(text: str) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(the directories a compiler's ``-x c++ -E -v`` output ``text`` lists as searched by default, those
    of them it says it ignores as not there): its ``#include "..."`` and ``#include <...>`` search lists
    (gcc's and clang's form; macOS's ``(framework directory)`` suffix cut) and gcc's ``COMPILER_PATH=`` and
    ``LIBRARY_PATH=`` entries (one that is not a directory counts as missing). Absolute paths only, each
    once, in order; both empty for text that lists none."""
    found: list[str] = []
    missing: list[str] = []
    listing = False
    for line in text.splitlines():
        line = line.rstrip()
        if line.startswith(_SEARCH_OPENS):
            listing = True
        elif line.startswith(_SEARCH_ENDS):
            listing = False
        elif listing and line[:1] in (" ", "\t"):
            found.append(line.strip().removesuffix(" (framework directory)"))
        elif m := _NONEXISTENT.fullmatch(line):
            missing.append(m.group(1))
        elif line.startswith(_GCC_PATHS):
            for entry in line.split("=", 1)[1].split(os.pathsep):
                if entry:
                    (found if os.path.isdir(entry) else missing).append(entry)
    found = [d for d in found if os.path.isabs(d)]
    missing = [d for d in missing if os.path.isabs(d) and d not in found]
    return tuple(dict.fromkeys(found)), tuple(dict.fromkeys(missing))


def _run_search_dirs(path: str) -> tuple[tuple[str, ...], tuple[str, ...]]:
    try:
        done = subprocess.run(
            [path, "-x", "c++", "-E", "-v", os.devnull],
            cwd="/",  # it writes nothing; a wrapper that would, leaves nothing in the user's working directory
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            timeout=_VERSION_TIMEOUT_S,
            check=False,
            # as the build runs it, and in English whatever the user's locale (the lines parsed are gcc's text)
            env={**toolpath.compiler_env(path, warn=False), "LC_ALL": "C"},
        )
    except (OSError, subprocess.SubprocessError):
        return (), ()  # as one that lists none: the build would fail the same way, and say why
    return parse_search_dirs(done.stderr.decode(errors="replace"))


def compiler_search_dirs(path: str) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """``parse_search_dirs`` of ``<path> -x c++ -E -v /dev/null`` (run from ``/``, in ``compiler_env``,
    bounded by the ``--version`` timeout): the directories the compiler ``path`` takes headers, programs and
    libraries from by default, which no command line names, and those of them it says are not there. Both
    empty for a compiler that does not say (a wrapper that cannot preprocess, one that fails or hangs).
    Memoised as ``compiler_version``: one more short run (some 10-40 ms) per compiler per process."""
    try:
        identity = _binary_identity(path)
    except OSError:
        return (), ()
    return _memoised(("search-dirs", *identity), lambda: _run_search_dirs(path))


def _judged_dirs(directory: str) -> tuple[list[str], bool]:
    """(the paths ``compiler_problem`` judges for a listed ``directory``: as written, ``..`` taken as
    written, and where it really leads, those that exist; whether they are the nearest dir above it, where
    it would be made, as it is not there)."""
    made = not os.path.isdir(directory)
    where = os.path.abspath(directory)
    while made and not os.path.lexists(where) and os.path.dirname(where) != where:
        where = os.path.dirname(where)
    real = os.path.realpath(directory if not made else where)
    return [d for d in dict.fromkeys((where, real)) if os.path.lexists(d)], made


def compiler_problem(path: str | Path) -> str | None:
    """Why running the compiler ``path`` (the host C++ compiler or bisheng) could build someone else's
    code into a library that is cached and loaded (None if it cannot, or when the check is off):
    ``toolpath.program_problem``, or a directory it takes headers, programs or libraries from by default
    (``compiler_search_dirs``), which no command line names, that others may add names to
    (``trust.unsafe_reason(searched=True)``, as PATH's entries): a group-writable /usr/local/include
    (Debian's ``staff``, mode 2775) is anyone's ``<math.h>``, searched before the C library's. Each
    listed dir is judged as listed and where it leads; one that is not there by the nearest dir above it,
    where it would be made. A compiler that lists none is judged by ``program_problem`` alone."""
    path = str(path)
    problem = toolpath.program_problem(path)
    if problem is not None or not trust.checking():
        return problem
    found, missing = compiler_search_dirs(path)
    for directory in (*found, *missing):
        judged, made = _judged_dirs(directory)
        for where in judged:
            problem = trust.unsafe_reason(where, searched=True)
            if problem is None:
                continue
            above = f", above {directory}, which it would search once made" if made else ""
            fix = problem.split("; fix:", 1)[1].strip() if "; fix:" in problem else "make it writable by root only"
            return (
                f"{trust.without_fix(problem)} (a directory {path} takes headers, programs or libraries from "
                f"by default{above}: `{path} -x c++ -E -v {os.devnull}` lists them); fix: {fix}; or use "
                "another compiler"
            )
    return None


# --------------------------------------------------------------------------------------------------- compilers


def find_bisheng(root: Path | None) -> tuple[str | None, list[str]]:
    """(bisheng path or None, places searched): ``ASCEND_RMSNORM_BISHENG``, PATH, then CANN's own places.

    A bisheng that fails the ownership test, or searches by default a directory others may write
    (``compiler_problem``), is someone else's program run as you, or their headers built in, and what
    it builds is cached and loaded: an explicit one raises ``ToolchainNotFoundError``, a found one is
    skipped."""
    searched = []
    explicit = (_env.raw(ENV_BISHENG) or "").strip()
    if explicit:
        candidate = Path(os.path.expanduser(explicit))
        if not candidate.is_absolute():
            which = toolpath.which(str(candidate))
            candidate = Path(which) if which else candidate
        if toolpath.executable(candidate):
            problem = compiler_problem(candidate)
            if problem is not None:
                raise toolpath.refusal("the compiler", candidate.absolute(), f"${ENV_BISHENG}", problem)
            return str(candidate.absolute()), searched
        searched.append(f"${ENV_BISHENG}={explicit} (not an executable file)")
        return None, searched  # an explicit choice that is wrong must not be papered over
    on_path, skipped = toolpath.first_trusted(toolpath.on_path("bisheng"), " on PATH", check=compiler_problem)
    searched += skipped
    if on_path:
        toolpath.warn_skipped(skipped)
        return str(Path(on_path).absolute()), searched
    searched.append("bisheng on PATH")
    if root is not None:
        for sub in BISHENG_SUBDIRS:
            candidate = Path(root) / sub.format(host=host_arch()) / "bisheng"
            if not toolpath.executable(candidate):
                searched.append(str(candidate))
                continue
            problem = compiler_problem(candidate)
            if problem is None:
                toolpath.warn_skipped([line for line in searched if toolpath.NOT_USED in line])
                return str(candidate), searched
            searched.append(f"{candidate} ({toolpath.NOT_USED}{problem})")
    return None, searched


#: Where CANN 8.0-8.3 keep the Ascend C headers the ``-xcce`` build includes, in the order looked at.
#: CANN 8.1's packages (``compiler/script/filelist.csv``, ``toolkit/script/filelist.csv``) install the
#: headers once, in ``<host>-linux/ascendc/include/basic_api/``, and lay out the same ``tikcfw`` (a
#: directory of relative links to them) at each of these places; CANN 8.1's own cmake
#: (``tikcpp/ascendc_kernel_cmake/function.cmake``) includes ``compiler/tikcpp/tikcfw``.
TIKCFW_SUBDIRS: tuple[str, ...] = ("compiler/tikcpp/tikcfw", "tools/tikcpp/tikcfw", "{host}-linux/tikcpp/tikcfw")
#: What a usable tikcfw holds: ``kernel_operator.h`` includes headers from ``impl/`` and ``interface/``
#: by bare name (CANN 8.1 ``basic_api/kernel_operator.h``), so both go on the include path too.
TIKCFW_CONTENTS: tuple[str, ...] = ("kernel_operator.h", "impl", "interface")
#: Entries of CANN 8.1's tikcfw that its headers reach by name through the tikcfw dir (links to
#: ``<host>-linux/ascendc/include/highlevel_api/``: ``interface/kernel_operator_intf.h`` includes
#: ``"lib/kernel_api.h"``, whose headers include ``"kernel_tiling/kernel_tiling.h"``); checked as the
#: build's -I dirs are where they exist.
TIKCFW_REACHED: tuple[str, ...] = ("lib", "kernel_tiling")


def _tikcfw_problem(path: Path) -> str | None:
    """None when ``path`` is a complete tikcfw (links followed), else what is missing there."""
    if not path.is_dir():
        return "no such directory"
    missing = [name for name in TIKCFW_CONTENTS if not (path / name).exists()]
    return f"no {', no '.join(missing)}" if missing else None


def find_tikcfw(root: Path) -> tuple[Path | None, list[str]]:
    """(the first complete tikcfw under CANN ``root`` or None, each place looked at with what it lacks)."""
    searched = []
    for sub in TIKCFW_SUBDIRS:
        path = Path(root) / sub.format(host=host_arch())
        problem = _tikcfw_problem(path)
        if problem is None:
            return path, searched
        searched.append(f"{path} ({problem})")
    return None, searched


def _legacy_headers(root: Path, version: str) -> Path:
    """The tikcfw the CANN 8.0-8.3 build includes; ToolchainNotFoundError naming every place looked at."""
    tikcfw, searched = find_tikcfw(root)
    include = Path(root) / "include"
    if tikcfw is not None and include.is_dir():
        # the build's -I dirs (jit/build.py): the tikcfw and what its impl and interface links lead to,
        # and the dir its kernel_operator.h lies in (a quoted include looks there first), which CANN 8.1
        # keeps elsewhere in the tree (<host>-linux/ascendc/include/basic_api)
        header_dir = Path(os.path.realpath(tikcfw / "kernel_operator.h")).parent
        # and the dirs its lib and kernel_tiling links lead to (CANN 8.1: highlevel_api/), where the headers
        # look names up through the tikcfw dir (interface/kernel_operator_intf.h includes "lib/kernel_api.h")
        reached = [tikcfw / name for name in TIKCFW_REACHED if os.path.lexists(tikcfw / name)]
        # and the whole dir those links lead into: the headers there include "../../impl/..." (CANN 8.1
        # highlevel_api/lib/activation/silu.h), which the kernel resolves from where the link leads, so into
        # highlevel_api/impl, which no -I dir and no link names
        above = {Path(os.path.realpath(path)).parent for path in reached}
        # each whole tree: the headers include each other by relative names, down into its folders
        problem = trust.tree_problem(
            [tikcfw, tikcfw / "impl", tikcfw / "interface", header_dir, *reached, *sorted(above)]
        )
        if problem is not None:
            raise toolpath.refusal("the Ascend C headers", tikcfw, f"CANN {version} at {root}", problem)
        return tikcfw
    lines = [f"CANN {version} at {root} has bisheng but not the headers its -xcce build of the kernels includes:"]
    if tikcfw is None:
        lines.append(f"  looked for the Ascend C headers ({', '.join(TIKCFW_CONTENTS)}) in:")
        lines += [f"    {s}" for s in searched]
    if not include.is_dir():
        lines.append(f"  looked for the CANN runtime headers in {include} (no such directory)")
    lines.append(
        "fix: install the complete CANN toolkit package (Ascend-cann-toolkit) or repair this one, then "
        "`source /usr/local/Ascend/ascend-toolkit/set_env.sh`; or set ASCEND_HOME_PATH to a complete install"
    )
    raise ToolchainNotFoundError("\n".join(lines))


#: The Ascend C header dirs the CANN 8.5 ``-x asc`` build puts on the include path. bisheng takes them from
#: its asc plugin (asc-devkit v8.5.0 tools/ascc/asc_plugin, installed as
#: ``<host>-linux/lib64/plugin/asc/libasc_plugin.so``: scripts/package/asc-devkit/asc-devkit.xml:153-154):
#: ``PluginGetPreCompileOpts`` (src/asc_interface.cpp:169-186) passes ``-I`` for each of these, below
#: ``<root>/<host>-linux`` (include/internal/asc_info_manager.h:33-72), where ``<root>`` is what is left of
#: the plugin's real path less ``/<host>-linux/lib64/plugin/asc/libasc_plugin.so`` (asc_interface.cpp:34-74).
#: The same list goes to its own parse of the source (asc_ast_device_analyzer.cpp:103-106,
#: asc_auto_identify_ktype.cpp:182-185), with the compiler's clang headers (ASC_CLANG_INCLUDE).
ASC_INCLUDE_SUBDIRS: tuple[str, ...] = (
    "include",
    "include/ascendc/host_api",
    "ascendc/include/highlevel_api",
    "tikcpp/tikcfw",
    "tikcpp/tikcfw/lib",
    "tikcpp/tikcfw/lib/matmul",
    "tikcpp/tikcfw/impl",
    "tikcpp/tikcfw/interface",
    "asc/impl/adv_api",
    "asc/impl/basic_api",
    "asc/impl/utils",
    "asc/include",
    "asc/include/adv_api",
    "asc/include/adv_api/matmul",
    "asc/include/aicpu_api",
    "asc/include/basic_api",
    "asc/include/interface",
    "asc/include/tiling",
    "asc/include/utils",
)
#: The whole dir asc/include and asc/impl lie in: the headers include "../../../impl/..." (v8.5.0
#: include/adv_api/activation/logsoftmax.h:20, installed as asc/include/adv_api/...), so into asc/impl/*
#: dirs the list above does not name (each relative include of v8.5.0's include/ and impl/ stays in asc/).
ASC_HEADER_TREES: tuple[str, ...] = ("asc",)
#: The clang headers the plugin adds to its own parse (asc_info_manager.h:78).
ASC_CLANG_INCLUDE = "ccec_compiler/lib/clang/15.0.5/include"
#: Where the plugin itself lies (it refuses to run from anywhere else, asc_interface.cpp:34-48): code bisheng
#: loads, checked as a library dir (its entries).
ASC_PLUGIN_DIR = "lib64/plugin/asc"
#: The plugin's name for the dir below the root, by ``uname -m`` ("compiler" for any other machine).
_ASC_PLUGIN_PREFIX = {
    "x86_64": "x86_64-linux",
    "aarch64": "aarch64-linux",
    "arm64": "aarch64-linux",
    "arm": "aarch64-linux",
}


def asc_host_dir(root: Path) -> Path:
    """``<root>/<host>-linux`` as the CANN 8.5 asc plugin names it (asc_info_manager.h:33-47)."""
    return Path(root) / _ASC_PLUGIN_PREFIX.get(platform.machine(), "compiler")


def _asc_headers_problem(root: Path) -> str | None:
    """Why what the CANN 8.5+ ``-x asc`` build includes, or the plugin that names it, could be someone
    else's, or None: each whole tree of ASC_INCLUDE_SUBDIRS, ASC_HEADER_TREES and ASC_CLANG_INCLUDE where
    it exists (links followed), and ASC_PLUGIN_DIR's entries."""
    base = asc_host_dir(root)
    tops = [base / sub for sub in (*ASC_HEADER_TREES, *ASC_INCLUDE_SUBDIRS, ASC_CLANG_INCLUDE)]
    problem = trust.tree_problem([top for top in tops if os.path.lexists(top)])
    if problem is None and os.path.lexists(base / ASC_PLUGIN_DIR):
        problem = trust.tree_problem([base / ASC_PLUGIN_DIR], depth=1)
    return problem


def _asc_headers(root: Path, version: str) -> None:
    """ToolchainNotFoundError when ``_asc_headers_problem`` finds one."""
    problem = _asc_headers_problem(root)
    if problem is not None:
        raise toolpath.refusal("the Ascend C headers", asc_host_dir(root), f"CANN {version} at {root}", problem)


def _root_from_compiler(path: str) -> Path | None:
    """A CANN root above a bisheng found without one (ASCEND_RMSNORM_BISHENG or PATH)."""
    for parent in list(Path(os.path.realpath(path)).parents)[:5]:
        if cann_version(parent)[0] is not None and parent.name not in ("bin", "ccec_compiler"):
            return parent
    return None


#: Names the cache layout gives its own directories next to the ``<cann-version>`` ones.
RESERVED_DIRNAMES = frozenset({"emu", "tmp", "failed", "quarantine", "trash"})


def safe_dirname(text: str) -> str:
    """``text`` as one safe path component: itself when it is a plain name (letters, digits, ``._-``, not
    starting with a dot, at most 64 characters, not a reserved cache name), else ``cann-<safe>-<hash>``."""
    if re.fullmatch(r"[0-9A-Za-z][0-9A-Za-z._-]{0,63}", text) and text.lower() not in RESERVED_DIRNAMES:
        return text
    safe = re.sub(r"[^0-9A-Za-z._-]", "_", text).strip("._")[:48] or "x"
    digest = hashlib.sha256(text.encode("utf-8", "surrogateescape")).hexdigest()[:8]
    return f"cann-{safe}-{digest}"


@dataclass(frozen=True)
class Toolchain:
    """A compiler ready to build our kernels. ``kind`` is ``npu`` (bisheng) or ``emu`` (host C++)."""

    kind: str
    compiler: str  # the path we run (absolute, symlinks kept so wrappers such as ccache still work)
    compiler_real: str  # its realpath, for the fingerprint (never key on an alias)
    compiler_version: str  # full ``--version`` output
    generation: str  # asc | cce | emu
    cann_root: Path | None = None
    cann_version: str | None = None
    cann_version_source: str | None = None
    host_arch: str | None = None
    compiler_info: str | None = field(default=None)  # <root>/compiler/version.info Version=
    tikcfw: Path | None = None  # CANN 8.0-8.3: the Ascend C header dir the -xcce build includes

    @property
    def version_line(self) -> str:
        return self.compiler_version.splitlines()[0] if self.compiler_version else ""

    @property
    def cache_dirname(self) -> str:
        """The ``<cann-version>`` level of the cache path (``emu`` for the host compiler).

        A version string is only text read from the CANN tree: one that is not a plain name (``..``,
        ``.``, a path separator, NUL, a name the cache uses itself such as ``tmp``) becomes
        ``cann-<safe text>-<hash>``, never a path component that means something else."""
        if self.kind == "emu" or not self.cann_version:
            return "emu"
        return safe_dirname(self.cann_version)

    def fingerprint(self) -> dict[str, object]:
        """What identifies the compiler in the cache key: its real path, ``--version``, CANN release."""
        return {
            "kind": self.kind,
            "compiler": self.compiler_real,
            "compiler_version": self.compiler_version,
            "generation": self.generation,
            "cann_version": self.cann_version,
            "cann_compiler_version_info": self.compiler_info,
        }

    def describe(self) -> str:
        if self.kind == "emu":
            return f"{self.compiler} ({self.version_line})"
        return f"{self.compiler} (CANN {self.cann_version})"


_SET_ENV_HINT = (
    "fix: `source /usr/local/Ascend/cann/set_env.sh` (CANN 8.5+) or "
    "`source /usr/local/Ascend/ascend-toolkit/set_env.sh` (older), or set ASCEND_HOME_PATH to the CANN root, "
    f"or point {ENV_BISHENG} at the bisheng binary"
)


def _build_npu_toolchain() -> Toolchain:
    cann = find_cann()
    refused = cann_refusal() if cann is None else None
    if refused is not None:
        raise refused
    bisheng, searched_bisheng = find_bisheng(cann.root if cann else None)
    if bisheng is None:
        lines = ["no CANN bisheng compiler found for the npu backend. Searched:"]
        if not _env.raw(ENV_BISHENG):
            lines += [f"  CANN root: {s}" for s in (cann_search_report() if cann is None else [])]
            if cann is not None:
                lines.append(f"  CANN root: {cann.root} (CANN {cann.version}, found by {cann.found_by})")
        lines += [f"  bisheng: {s}" for s in searched_bisheng]
        lines += toolpath.searched_tail(lines)
        lines.append(_SET_ENV_HINT)
        raise ToolchainNotFoundError("\n".join(lines))
    if cann is None:
        root = _root_from_compiler(bisheng)
        if root is None:
            searched = cann_search_report()
            raise ToolchainNotFoundError(
                f"found bisheng at {bisheng} but no CANN install to read its version from. Searched:\n"
                + "\n".join([f"  CANN root: {s}" for s in searched] + toolpath.searched_tail(searched))
                + f"\n{_SET_ENV_HINT}"
            )
        problem = root_problem(root)
        if problem is not None:
            raise toolpath.refusal("the CANN root", root, f"above {bisheng}", problem)
        version, source = cann_version(root)
        cann = CannInstall(root, version or "", source, host_arch(), f"above {bisheng}")
    gen = generation(cann.version)
    tikcfw = _legacy_headers(cann.root, cann.version) if gen == GENERATION_CCE else None
    if gen == GENERATION_ASC:
        _asc_headers(cann.root, cann.version)
    return Toolchain(
        kind="npu",
        compiler=bisheng,
        compiler_real=os.path.realpath(bisheng),
        compiler_version=compiler_version(bisheng),
        generation=gen,
        cann_root=cann.root,
        cann_version=cann.version,
        cann_version_source=cann.version_source,
        host_arch=cann.host_arch,
        compiler_info=compiler_info_version(cann.root),
        tikcfw=tikcfw,
    )


def _build_emu_toolchain() -> Toolchain:
    wanted = str(_env.get(ENV_CXX) or "c++")
    candidates = toolpath.on_path(os.path.expanduser(wanted))
    if _env.raw(ENV_CXX):  # the first one the variable names is the one meant: refused if unsafe, never swapped
        found = next(candidates, None)
        problem = compiler_problem(found) if found else None
        if problem is not None:
            raise toolpath.refusal("the compiler", Path(found).absolute(), f"${ENV_CXX}={wanted}", problem)
        skipped = []
    else:
        found, skipped = toolpath.first_trusted(candidates, check=compiler_problem)
    if not found:
        looked = "".join(f"; skipped {line}" for line in skipped)
        # a name with a slash is taken as a path (toolpath.on_path), not looked up on PATH
        where = "no executable file there" if os.path.dirname(os.path.expanduser(wanted)) else "looked it up on PATH"
        raise ToolchainNotFoundError(
            f"no host C++ compiler {wanted!r} for the emu backend ({where}{looked}); "
            f"install g++ or clang++, or set {ENV_CXX} to a C++17 compiler"
            + "".join(f"; {tail}" for tail in toolpath.searched_tail(skipped))
        )
    toolpath.warn_skipped(skipped)
    path = str(Path(found).absolute())
    return Toolchain(
        kind="emu",
        compiler=path,
        compiler_real=os.path.realpath(path),
        compiler_version=compiler_version(path),
        generation=GENERATION_EMU,
    )


def _toolchain_env_key(kind: str) -> tuple:
    names = (ENV_BISHENG, ENV_HOME, ENV_TOOLKIT_HOME, "PATH") if kind == "npu" else (ENV_CXX, "PATH")
    # found under one ownership test is not found under another (trust.policy, as find_cann's key)
    env = tuple(os.environ.get(n) for n in names)
    return ("toolchain", kind, DEFAULT_CANN_ROOTS, os.path.expanduser("~"), trust.policy()) + env


def get_toolchain(kind: str = "npu") -> Toolchain:
    """The ``npu`` (CANN bisheng) or ``emu`` (host C++) toolchain; raises ``ToolchainNotFoundError``."""
    if kind not in ("npu", "emu"):
        raise ValueError(f"unknown toolchain {kind!r}; choose npu or emu")
    build = _build_npu_toolchain if kind == "npu" else _build_emu_toolchain
    key = _toolchain_env_key(kind)
    with _memo_lock:
        if key in _memo:
            return _memo[key]
    toolchain = build()  # errors are not memoised: the user may fix the environment and retry
    with _memo_lock:
        return _memo.setdefault(key, toolchain)


def npu_toolchain() -> Toolchain:
    return get_toolchain("npu")


def emu_toolchain() -> Toolchain:
    return get_toolchain("emu")


# --------------------------------------------------------------------------------------------------- SoC and arch


@dataclass(frozen=True)
class ArchInfo:
    """The device's SoC name, its arch (``dav-2201``), vector core count if known, and how they were found."""

    soc: str | None
    arch: str
    vector_cores: int | None
    source: str


def _soc_from_torch() -> str | None:
    """The SoC name torch_npu reports, asked for NPU 0 by index.

    Without an index torch_npu asks ``current_device()``, which initialises it; torch_npu before 7.2
    (CANN 8.1, 8.2) then makes device 0 current. This runs when ``import ascend_rmsnorm`` follows
    ``import torch_npu`` (``ASCEND_RMSNORM_JIT=import``), before each rank's own ``set_device``: every
    rank would hold a context on NPU 0. With an index torch_npu 7.0+ only asks ACL
    (``torch_npu._C._npu_getDeviceName``: ``aclrtGetSocName``), and every NPU of a host is the same SoC.
    torch_npu 6.0.x (CANN 8.0) has no such function: its ``get_device_name(index)`` initialises torch_npu,
    which makes device 0 current (v6.0.0 ``torch_npu/npu/utils.py``, ``npu_sys_ctrl.cpp``), so it is asked
    only once torch_npu is initialised; before that ``detect_soc`` asks ACL itself."""
    torch_npu = sys.modules.get("torch_npu")
    if torch_npu is None:
        return None  # importing torch_npu just to ask would cost seconds and may initialise the device
    torch = sys.modules.get("torch")
    npu = getattr(torch, "npu", None)
    try:
        if npu is not None and npu.is_available():
            asks_acl_only = hasattr(getattr(torch_npu, "_C", None), "_npu_getDeviceName")
            if not asks_acl_only and not npu.is_initialized():
                return None
            name = npu.get_device_name(0)
            return str(name) if name else None
    except Exception:  # noqa: BLE001 - detection must never raise
        return None
    return None


ACL_NAME = "libascendcl.so"


def loaded_acl() -> ctypes.CDLL | None:
    """The ``libascendcl.so`` this process has already loaded (torch_npu loads it), found by name without
    loading anything (``RTLD_NOLOAD``), or None."""
    noload = getattr(os, "RTLD_NOLOAD", 0)
    if not noload:
        return None
    try:
        return ctypes.CDLL(ACL_NAME, mode=noload | os.RTLD_NOW)
    except OSError:
        return None


def acl_library(cann_root: Path | None = None) -> ctypes.CDLL | None:
    """``libascendcl.so``, or None when it cannot be loaded (or only from an unsafe place).

    1. The copy already in the process (torch_npu loads it), found by name without loading anything
       (``RTLD_NOLOAD``): it runs already, and a second copy from another path would hold other device
       state.
    2. With a CANN root, ``<root>/lib64/libascendcl.so`` only, after the ownership test of that path
       (``trust.unsafe_reason``); never the loader's search, which could find a copy elsewhere.
    3. With no root, the bare name through the dynamic loader's own search (``LD_LIBRARY_PATH``, the
       loader cache, the system dirs): the same search that loads torch_npu's libascendcl and every
       other library of this process, which this package does not police; but not when the root that
       a variable names was refused (``cann_refusal``), as ``set_env.sh`` puts that root's ``lib64``
       first in that search."""
    loaded = loaded_acl()
    if loaded is not None:
        return loaded
    if cann_root is not None:
        name = str(Path(cann_root) / "lib64" / ACL_NAME)
        if not os.path.exists(name) or trust.unsafe_reason(name) is not None:
            return None
    elif cann_refusal() is not None:
        return None
    else:
        name = ACL_NAME
    try:
        return ctypes.CDLL(name)
    except OSError:
        return None


def _soc_from_acl(cann_root: Path | None) -> str | None:
    lib = acl_library(cann_root)
    fn = getattr(lib, "aclrtGetSocName", None) if lib is not None else None
    if fn is None:
        return None
    fn.restype, fn.argtypes = ctypes.c_char_p, []
    try:
        raw = fn()
    except Exception:  # noqa: BLE001
        raw = None
    return (raw.decode(errors="replace").strip() or None) if raw else None


def _run_npu_smi(*args: str) -> str | None:
    """``npu-smi ARGS`` output, or None: not found, failed, or only in places that fail the ownership
    test (skipped with a warning; ``detect_soc`` then has nothing from npu-smi)."""
    exe, skipped = toolpath.first_trusted(toolpath.on_path("npu-smi"))
    toolpath.warn_skipped(skipped)
    if not exe:
        return None
    try:
        done = subprocess.run([exe, *args], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, timeout=30, check=False,
                              env=toolpath.compiler_env(exe, warn=False))  # fmt: skip
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout.decode(errors="replace") if done.returncode == 0 else None


_SMI_ROW = re.compile(r"^\|\s*(\d+)\s+([A-Za-z0-9_\-]+)\s*\|")


def parse_npu_smi_info(text: str) -> tuple[str | None, str | None]:
    """(first NPU id, its Name column) from ``npu-smi info``'s table, e.g. ('0', '910B3')."""
    seen_header_rule = False
    for line in text.splitlines():
        if line.startswith("+=") or line.startswith("|="):
            seen_header_rule = True
            continue
        if seen_header_rule:
            m = _SMI_ROW.match(line)
            if m and not m.group(2).isdigit():
                return m.group(1), m.group(2)
    return None, None


def _board_field(text: str, name: str) -> str | None:
    m = re.search(rf"^\s*{re.escape(name)}\s*:\s*(\S+)\s*$", text, re.M)
    return m.group(1) if m else None


def _soc_from_npu_smi() -> str | None:
    text = _run_npu_smi("info")
    if not text:
        return None
    npu_id, name = parse_npu_smi_info(text)
    if not name:
        return None
    soc = name if name.startswith("Ascend") else f"Ascend{name}"
    if soc in ("Ascend910", "Ascend950") or soc.endswith("_"):
        # A3 and 950 print only the family in the table; the board view has the chip's full name.
        board = _run_npu_smi("info", "-t", "board", "-i", npu_id or "0", "-c", "0") or ""
        chip, npu_name = _board_field(board, "Chip Name"), _board_field(board, "NPU Name")
        if chip and npu_name:
            soc = f"{chip if chip.startswith('Ascend') else 'Ascend' + chip}_{npu_name}"
    return soc


def detect_soc(cann_root: Path | None = None) -> tuple[str | None, str]:
    """(SoC name, how) from torch_npu if loaded, else ``aclrtGetSocName``, else ``npu-smi info``."""

    def compute() -> tuple[str | None, str]:
        for how, probe in (
            ("torch.npu.get_device_name", _soc_from_torch),
            ("aclrtGetSocName", lambda: _soc_from_acl(cann_root)),
            ("npu-smi info", _soc_from_npu_smi),
        ):
            soc = probe()
            if soc:
                return soc, how
        return None, "none of torch_npu, aclrtGetSocName (libascendcl.so), npu-smi found an NPU"

    # torch_npu may be imported after a first miss, so a miss is not memoised.
    key = ("soc", str(cann_root), os.environ.get("PATH"), trust.policy())
    with _memo_lock:
        if key in _memo:
            return _memo[key]
    found = compute()
    if found[0] is not None:
        with _memo_lock:
            _memo[key] = found
    return found


def read_platform_ini(cann_root: Path | None, soc: str) -> dict[str, dict[str, str]] | None:
    """The sections of ``<SoC>.ini`` under the CANN root (8.5+ place first, then the older one)."""
    if cann_root is None or not re.fullmatch(r"[A-Za-z0-9_.\-]+", soc):
        return None
    for sub in (f"{host_arch()}-linux/data/platform_config", "compiler/data/platform_config"):
        path = Path(cann_root) / sub / f"{soc}.ini"
        try:
            text = read_small_text(path)
        except OSError:
            continue
        sections: dict[str, dict[str, str]] = {}
        current = sections.setdefault("", {})
        for line in text.splitlines():
            line = line.strip()
            if line.startswith("[") and line.endswith("]"):
                current = sections.setdefault(line[1:-1].strip(), {})
            elif "=" in line and not line.startswith(("#", ";")):
                k, _, v = line.partition("=")
                current[k.strip()] = v.strip()
        return sections
    return None


#: SoC name patterns -> arch when no platform ini is at hand (reference §3.2). Order matters.
_SOC_TABLE: tuple[tuple[str, str], ...] = (
    (r"Ascend910B(1|2|2C|3|4|4-1)", "dav-2201"),  # Atlas A2
    (r"Ascend910_93\d\d", "dav-2201"),  # Atlas A3
    (r"Ascend910(B|A|ProA|PremiumA|ProB)?", "dav-1001"),  # the old 910; bare "Ascend910B" is one of them
    (r"Ascend310P.*", "dav-2002"),
    (r"Ascend310B.*", "dav-3002"),
    (r"Ascend950.*", "dav-3510"),
)
#: Vector cores per SoC when neither the device nor a platform ini says (CANN 8.1's
#: ``data/platform_config/<SoC>.ini`` ``vector_core_cnt``): 910B3/B4 and the A3 parts 9362/9372 have 40.
_CORE_TABLE: tuple[tuple[str, int], ...] = (
    (r"Ascend910B(1|2|2C)", 48),
    (r"Ascend910B(3|4|4-1)", 40),
    (r"Ascend910_93(62|72)", 40),
    (r"Ascend910_93(81|82|91|92)", 48),
)


def arch_from_table(soc: str) -> str | None:
    """The arch of a SoC name by the built-in table (``Ascend910B3`` -> ``dav-2201``), or None."""
    for pattern, arch in _SOC_TABLE:
        if re.fullmatch(pattern, soc.strip()):
            return arch
    return None


#: The vector core's compiler target in a platform ini without ``NpuArch=`` (CANN 8.1's) -> arch.
_AIV_ARCH = {"dav-c220-vec": "dav-2201", "dav-m200-vec": "dav-2002", "dav-c310-vec": "dav-3510"}


def soc_arch(soc: str, cann_root: Path | None = None) -> ArchInfo:
    """SoC -> arch and vector cores from the SoC's platform ini where there is one (the arch from
    ``NpuArch=``, else from ``CCEC_AIV_version=``; the cores from ``vector_core_cnt=``), the built-in
    table for what it does not say."""
    ini = read_platform_ini(cann_root, soc) or {}
    version, cores_raw = ini.get("version", {}), ini.get("SoCInfo", {}).get("vector_core_cnt", "")
    npu_arch = version.get("NpuArch", "")
    ini_arch = f"dav-{npu_arch}" if npu_arch.isdigit() else _AIV_ARCH.get(version.get("CCEC_AIV_version", ""))
    ini_cores = int(cores_raw) if cores_raw.isdigit() and int(cores_raw) > 0 else None
    if ini_arch is not None:
        return ArchInfo(soc, ini_arch, ini_cores, "platform ini")
    arch = arch_from_table(soc)
    aiv = version.get("CCEC_AIV_version", "")
    if arch is None and aiv:  # an arch this package does not know (CANN 8.1's Ascend910_95: dav-c310)
        raise UnsupportedArchError(
            f"ascend-rmsnorm has no kernels for NPU SoC {soc!r}: its platform ini names the vector core's "
            f"target {aiv!r}, which is none of the arches it knows; {_SUPPORTED_TEXT}"
        )
    if arch is None:
        ini_says = "its platform ini names no arch" if ini else "no platform ini for it under the CANN root"
        raise UnsupportedArchError(
            f"unknown NPU SoC {soc!r}: {ini_says} and it is not in the built-in table; "
            f"set {ENV_ARCH} (e.g. dav-2201) if you know its arch"
        )
    if ini_cores:
        return ArchInfo(soc, arch, ini_cores, "built-in table (cores: platform ini)")
    cores = next((n for pattern, n in _CORE_TABLE if re.fullmatch(pattern, soc)), None)
    return ArchInfo(soc, arch, cores, "built-in table")


def normalise_arch(arch: str) -> str:
    """``2201`` / ``DAV-2201`` / ``dav-2201`` -> ``dav-2201``."""
    text = arch.strip().lower()
    return f"dav-{text}" if text.isdigit() else text


def detect_arch(cann_root: Path | None = None) -> ArchInfo:
    """The arch to build for: ``ASCEND_RMSNORM_ARCH``, else the detected SoC mapped to its arch."""
    override = _env.get(ENV_ARCH)  # a malformed value warns once and the NPU is asked instead
    if override:
        return ArchInfo(None, override, None, f"${ENV_ARCH}")
    if cann_root is None:
        cann = find_cann()
        cann_root = cann.root if cann else None
    soc, how = detect_soc(cann_root)
    if soc is None:
        raise UnsupportedArchError(
            f"cannot tell which NPU arch to build for: {how}. Pass --arch dav-2201 (A2/A3) or set {ENV_ARCH}"
        )
    info = soc_arch(soc, cann_root)
    return ArchInfo(info.soc, info.arch, info.vector_cores, f"{how} + {info.source}")


_SUPPORTED_TEXT = f"supported: {', '.join(SUPPORTED_ARCHES)} (Atlas A2 Ascend910B1-B4 and A3 Ascend910_93xx)"


def check_supported(arch: str, soc: str | None = None) -> str:
    """Return ``arch`` if our kernels support it, else raise ``UnsupportedArchError`` saying what is."""
    arch = normalise_arch(arch)
    if arch not in SUPPORTED_ARCHES:
        what = f"SoC {soc} (arch {arch})" if soc else f"arch {arch}"
        raise UnsupportedArchError(f"ascend-rmsnorm has no kernels for {what}; {_SUPPORTED_TEXT}")
    return arch


def reset() -> None:
    """Forget every memoised discovery result (tests, or after changing the environment)."""
    with _memo_lock:
        _memo.clear()
