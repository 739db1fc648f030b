"""Which programs discovery may run: PATH is searched in its absolute entries only, and each candidate
passes the ownership test of ``trust.py``, with the directories it runs other programs from judged as
searched ones (``program_problem``: someone else's compiler, or a linker someone added beside yours,
runs as you, and what it builds is cached and loaded). ``toolchain.py`` applies it to bisheng, the emu
C++ compiler, CANN roots and npu-smi: a place a variable names is refused (``refusal``), a place found
by searching is skipped and listed."""

from __future__ import annotations

import os
from pathlib import Path

from .. import _env
from ..errors import ToolchainNotFoundError
from . import trust

#: How a place that fails the ownership test (``trust.unsafe_reason``) shows in a "searched" line.
NOT_USED = "not used: "
OPT_OUT = f"if you trust everyone who can write there, set {_env.SKIP_PERMISSION_CHECK}=1"


def executable(path: Path) -> bool:
    """Whether ``path`` is an executable regular file. A place that cannot be looked into (EACCES: a
    directory another account made mode 700 on your PATH; a name too long) is not one, as for
    ``shutil.which``: pathlib's ``is_file`` raises for every error but "no such file" there."""
    return os.path.isfile(path) and os.access(path, os.X_OK)


def on_path(name: str):
    """Each executable ``name`` in PATH's absolute entries, in order; a name with a directory is itself.

    An empty or relative entry names the current directory (or one below it), which is wherever the
    process happens to run (a shared /tmp, someone's checkout), so it is never searched."""
    if os.path.dirname(name):
        if executable(Path(name)):
            yield name
        return
    seen = set()
    for entry in os.environ.get("PATH", os.defpath).split(os.pathsep):
        candidate = os.path.join(entry, name)
        if os.path.isabs(entry) and candidate not in seen and executable(Path(candidate)):
            seen.add(candidate)
            yield candidate


def which(name: str) -> str | None:
    """Like ``shutil.which``, but over PATH's absolute entries only (see ``on_path``)."""
    return next(on_path(name), None)


def program_problem(path: str | Path) -> str | None:
    """Why running the program ``path`` could run someone else's code (None if it cannot, or when the
    check is off): the program fails the ownership test, or a directory it runs other programs from is
    one that others may add names to (``trust.unsafe_reason(searched=True)``, as PATH's entries).

    A clang-based compiler (bisheng is one) looks for its linker and assembler in the directory it was
    started from before PATH (clang's InstalledDir: the named path's directory, links kept) and in the
    one its binary lies in, and takes the GCC installation it links with (crtbeginS.o, libstdc++ and its
    headers) from the prefix above the former (``<InstalledDir>/../lib/gcc/<triple>/<version>``, the
    highest version found, before the system's); gcc takes ``cc1plus``, ``as`` and its crt files from
    ``<prefix>/lib/gcc`` and ``<prefix>/libexec/gcc`` above the directory its binary lies in. A sticky
    directory anyone may write, such as /tmp, keeps the compiler itself yours, but anyone can add an
    ``ld`` beside it or a ``lib/gcc`` above it, whose code then runs as you or is linked into the library
    that is cached and loaded. So both directories and the prefixes above them count."""
    problem = trust.unsafe_reason(path)
    if problem is not None:
        return problem
    dirs = (os.path.dirname(os.path.abspath(path)), os.path.dirname(os.path.realpath(path)))
    for directory in dict.fromkeys(d for pair in ((d, os.path.dirname(d)) for d in dirs) for d in pair):
        problem = trust.unsafe_reason(directory, searched=True)
        if problem is not None:
            return problem
    return None


def first_trusted(candidates, suffix: str = "", check=program_problem) -> tuple[str | None, list[str]]:
    """(the first candidate that passes ``check``, ``program_problem`` by default, each one before it with
    why it was skipped)."""
    skipped = []
    for candidate in candidates:
        problem = check(candidate)
        if problem is None:
            return candidate, skipped
        skipped.append(f"{candidate}{suffix} ({NOT_USED}{problem})")
    return None, skipped


def warn_skipped(skipped: list[str]) -> None:
    """Say once per place that an unsafe one was passed over (a later one, or nothing, was used instead)."""
    if skipped:
        import logging

        from .._log import log_once

        for line in skipped:
            log_once(f"untrusted {line}", logging.WARNING, "skipped %s; %s", line, OPT_OUT)


def refusal(what: str, path: object, how: str, problem: str) -> ToolchainNotFoundError:
    """The error for an explicitly chosen compiler or CANN root that fails the ownership test."""
    return ToolchainNotFoundError(
        f"refusing to use {what} {path} ({how}): {problem}. Whoever can write there could put their own "
        "program or libraries in its place: they would run as you, and what they build is cached and "
        f"loaded by this package. Choose a copy nobody else can write, or, {OPT_OUT}"
    )


def searched_tail(lines: list[str]) -> list[str]:
    """The opt-out, for a not-found error whose searched lines skipped a place as unsafe."""
    if not any(NOT_USED in line for line in lines):
        return []
    return [f"places marked '{NOT_USED.strip()}' fail the ownership test; {OPT_OUT}"]


#: Variables through which gcc, clang (bisheng) or the linker take programs, headers, libraries, options
#: or a run path from places the command line does not name (and the cache key does not cover), or load
#: code into the compiler: the compiler never sees them.
COMPILER_ENV_DROPPED = (
    "CCC_OVERRIDE_OPTIONS",
    "LD_RUN_PATH",
    "LD_PRELOAD",
    "LD_AUDIT",
    "GCONV_PATH",  # glibc's iconv loads its conversion modules (shared objects) from there
    "GCC_EXEC_PREFIX",
    "COMPILER_PATH",
    "LIBRARY_PATH",
    "CPATH",
    "C_INCLUDE_PATH",
    "CPLUS_INCLUDE_PATH",
    "OBJC_INCLUDE_PATH",
    "OBJCPLUS_INCLUDE_PATH",
    "DEPENDENCIES_OUTPUT",
    "SUNPRO_DEPENDENCIES",
    "GCC_COMPARE_DEBUG",  # gcc compiles twice, the second time with this value's options (-fplugin=...)
    # files clang's driver appends to, following a link there: its cc1 lines, the headers read, its
    # diagnostics, its statistics (each on when the variable without _FILE is set)
    "CC_PRINT_OPTIONS_FILE",
    "CC_PRINT_HEADERS_FILE",
    "CC_LOG_DIAGNOSTICS_FILE",
    "CC_PRINT_PROC_STAT_FILE",
    "CC_PRINT_INTERNAL_STAT_FILE",
    "CC_PRINT_OPTIONS",
    "CC_PRINT_HEADERS",
    "CC_LOG_DIAGNOSTICS",
    "CC_PRINT_PROC_STAT",
    "CC_PRINT_INTERNAL_STAT",
    "CLANG_CRASH_DIAGNOSTICS_DIR",  # where a crashing clang writes its reproducer (the sources, a script)
    "LLVM_PROFILE_FILE",  # where a profile-instrumented clang writes its counts on exit
)
#: Search paths the compiler needs (gcc finds ``as`` and ``ld`` on PATH; bisheng's libraries may need
#: LD_LIBRARY_PATH): kept, but only their absolute entries that pass the ownership test as searched
#: directories (``trust.unsafe_reason(searched=True)``: not a shared sticky one such as /tmp, where anyone
#: may add an ``as``).
COMPILER_ENV_FILTERED = ("PATH", "LD_LIBRARY_PATH")


def compiler_env(
    program: str, tmpdir: str | Path | None = None, environ: dict | None = None, *, warn: bool = True
) -> dict[str, str]:
    """The environment a compiler (or any tool discovery runs: ``--version``, npu-smi) gets: the user's,
    minus ``COMPILER_ENV_DROPPED``, ccache disabled and without settings, with PATH and LD_LIBRARY_PATH
    cut to places nobody else can write or add names to, in the user's order (the program's own directory
    added last where it is absolute, missing and passes the same test), and with ``tmpdir`` its temp files
    in the build's private directory. The program and the directories it is named in and lies in are checked where it is
    found (``program_problem``); the programs it runs from PATH (the assembler, the linker) and the
    intermediate files it writes are not checked one by one, and they go into a library that is cached
    and loaded by everyone who uses the cache. An entry left out is said once, as a warning where a
    build runs (``warn``: one that then cannot find its assembler should not leave anyone guessing),
    at debug level for discovery's runs, which every process makes."""
    env = dict(os.environ if environ is None else environ)
    for name in COMPILER_ENV_DROPPED:
        env.pop(name, None)
    for name in COMPILER_ENV_FILTERED:
        entries = env.get(name, "").split(os.pathsep) if env.get(name) else []
        if name == "PATH" and os.path.isabs(program):
            entries.append(os.path.dirname(program))
        kept: list[str] = []
        for entry in entries:
            if not os.path.isabs(entry) or entry in kept:
                continue
            problem = trust.unsafe_reason(entry, searched=True)
            if problem is None:
                kept.append(entry)
            elif os.path.isdir(entry):
                _say_left_out(f"{name} entry {entry}", problem, warn)
        if kept:
            env[name] = os.pathsep.join(kept)
        else:
            env.pop(name, None)
    if tmpdir is not None:
        env["TMPDIR"] = str(tmpdir)
    # a `c++` that is ccache would answer from its cache dir, which others may share and write (a team's
    # CCACHE_DIR): objects this package never checked. The JIT cache is the only cache a build goes through.
    # Disabled, ccache still runs the compiler its settings name: its CCACHE_* variables (CCACHE_PATH, where
    # it finds the real compiler, past the PATH filter; CCACHE_COMPILER, CCACHE_PREFIX) and every ccache.conf
    # it reads (in CCACHE_DIR, which a team may share, or in HOME). So it gets none of them: only the real
    # compiler on the filtered PATH is left for it to run.
    for name in [n for n in env if n.startswith("CCACHE_")]:
        del env[name]
    env["CCACHE_DISABLE"] = "1"
    env["CCACHE_CONFIGPATH"] = env["CCACHE_CONFIGPATH2"] = os.devnull
    return env


def _say_left_out(what: str, problem: str, warn: bool) -> None:
    import logging

    from .._log import log_once

    level = logging.WARNING if warn else logging.DEBUG
    log_once(f"left out {what} {level}", level, "%s left out of the compiler's environment (take it out of %s to "
             "silence this): %s; %s", what, what.split()[0], trust.without_fix(problem), OPT_OUT)  # fmt: skip
