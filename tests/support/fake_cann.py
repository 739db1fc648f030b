"""Fake CANN installs, a fake ``bisheng``, a counting host-compiler wrapper, ``npu-smi`` and ``libascendcl.so``.

Layouts (docs/design.md §5): CANN <= 8.3 lives in ``ascend-toolkit/<ver>`` behind a
``latest`` symlink, 8.5+ in ``cann-<ver>`` behind a ``cann`` symlink; version files are written in the
formats real CANN writes; the 8.0-8.3 trees lay out their Ascend C headers (``tikcfw`` link dirs) and
their ``include``/``lib64`` links as CANN 8.1's packages do. The fake compilers are Python scripts that
check the flag family of their generation (and, for 8.0-8.3, that each include dir the preprocessor
would need is given and exists), then build with the host C++ compiler against ``kernels/emu`` so the
library really loads.

Knobs (environment of the process that runs the compiler):
  FAKE_COMPILER_COUNTER  file that gets one line per real compile (pid, start time; not for ``--version``
                         or discovery's ``-x c++ -E -v /dev/null``, which the counting c++ passes to the real
                         one and the fake bisheng answers with FAKE_COMPILER_SEARCH_DIRS)
  FAKE_COMPILER_SEARCH_DIRS  the fake bisheng's default include dirs, os.pathsep-separated (none by default)
  FAKE_COMPILER_SLEEP    seconds to sleep after counting, before compiling (kill -9 tests)
  FAKE_COMPILER_FAIL     make the compile fail with 100 lines of errors on stderr
  FAKE_COMPILER_MEMO     directory memoising outputs by (host argv, source tree content)
  (--cce-auto-sync-log=F: the fake writes F with an entry before each of the source's first two
   PipeBarrier<PIPE_V>() lines and one in a CANN header, in the format asc-devkit documents)
  FAKE_COMPILER_COLD_SECONDS  extra seconds per memo miss, to measure the suite as if the kernel took that
                         long to compile (e.g. 30, as the real kernel will)
"""

from __future__ import annotations

import os
import platform
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

HOST = platform.machine() or "x86_64"
#: The -mllvm options the fake 8.0-8.3 bisheng insists on (CANN's cmake passes them for dav-c220-vec).
LEGACY_MLLVM = (
    "-cce-aicore-stack-size=0x8000",
    "-cce-aicore-function-stack-size=0x8000",
    "-cce-aicore-record-overflow=true",
    "-cce-aicore-addr-transform",
    "-cce-aicore-dcci-insert-for-scalar=false",
)
REAL_CXX = shutil.which("c++") or shutil.which("g++") or "c++"
#: A line for a shell fake compiler that takes any call but ``--version`` for a build: discovery's other run,
#: ``-x c++ -E -v /dev/null`` (the compiler's default search dirs, from / as root), is answered with none.
SH_NO_SEARCH_DIRS = 'case " $* " in *" -E "*) exit 0 ;; esac\n'

# The body shared by the fake bisheng and the counting c++ wrapper; constants are prepended per script.
_COMPILER_BODY = r"""
import hashlib, os, shutil, subprocess, sys, time

def fail(msg, rc=2):
    sys.stderr.write(f"{NAME}: error: {msg}\n")
    sys.exit(rc)

args = sys.argv[1:]
if args == ["--version"]:
    if MODE == "cxx":
        sys.exit(subprocess.call([REAL_CXX, "--version"]))
    print(VERSION_TEXT)
    sys.exit(0)
if "-E" in args and "-v" in args:  # discovery asks for the default search dirs: not a compile, not counted
    if MODE == "cxx":
        sys.exit(subprocess.call([REAL_CXX, *args]))
    # clang's form (bisheng is clang-based), listing FAKE_COMPILER_SEARCH_DIRS
    listed = [d for d in os.environ.get("FAKE_COMPILER_SEARCH_DIRS", "").split(os.pathsep) if d]
    lines = ['#include "..." search starts here:', "#include <...> search starts here:"]
    sys.stderr.write("\n".join([*lines, *(f" {d}" for d in listed), "End of search list.", ""]))
    sys.exit(0)

def pair(a, b):
    return any(args[i] == a and args[i + 1] == b for i in range(len(args) - 1))

def same_dir(path, want):
    # a directory the tools would use as this one: the same directory by another path (a link) is as good
    try:
        return os.path.samefile(path, want)
    except OSError:
        return False


def check_rpath():
    # -Wl,a,b splits at commas (a CANN root with a comma would become extra linker options): -Xlinker only.
    for a in args:
        if a.startswith("-Wl,"):
            fail(f"{a}: pass linker options with -Xlinker, not -Wl, (which splits them at commas)")
    want = os.path.join(CANN_ROOT, "lib64")
    if not any(args[i:i + 3] == ["-Xlinker", "-rpath", "-Xlinker"] and same_dir(args[i + 3], want)
               for i in range(len(args) - 3)):
        fail(f"missing -Xlinker -rpath -Xlinker {want} (the runtime libraries' run path)")

if "-o" not in args or args.index("-o") + 1 >= len(args):
    fail("no output file (-o)")
out = args[args.index("-o") + 1]
sources = [a for a in args if a.endswith(".asc")]
if len(sources) != 1:
    fail(f"expected exactly one .asc source, got {sources}")
source = sources[0]


def include_dirs():
    return [args[i + 1] for i in range(len(args) - 1) if args[i] == "-I"]


# As the real preprocessor would fail: kernel_operator.h from an -I dir, then what it includes by bare name
# from that dir's impl/ and interface/ (themselves -I dirs), and the runtime headers of <root>/include.
def check_cce_headers():
    includes = include_dirs()
    tikcfw = next((d for d in includes if os.path.isfile(os.path.join(d, "kernel_operator.h"))), None)
    if tikcfw is None:
        fail(f"{source}: fatal error: 'kernel_operator.h' file not found (searched -I {includes})")
    for sub, header in (("impl", "kernel_tpipe_impl.h"), ("interface", "kernel_operator_intf.h")):
        want = os.path.join(tikcfw, sub)
        if want not in includes or not os.path.isfile(os.path.join(want, header)):
            fail(f"{tikcfw}/kernel_operator.h: fatal error: '{header}' file not found (no -I {want})")
    # CANN 8.1 interface/kernel_operator_intf.h:53 includes "lib/kernel_api.h", found through -I <tikcfw>
    if not os.path.isfile(os.path.join(tikcfw, "lib", "kernel_api.h")):
        fail(f"{tikcfw}/interface/kernel_operator_intf.h: fatal error: 'lib/kernel_api.h' file not found")
    runtime = os.path.join(CANN_ROOT, "include")
    if not any(same_dir(d, runtime) and os.path.isfile(os.path.join(d, "acl", "acl_base.h")) for d in includes):
        fail(f"{source}: fatal error: 'acl/acl_base.h' file not found (no -I {runtime})")


def check_cce_libraries():
    lib64 = os.path.join(CANN_ROOT, "lib64")
    if not any(a.startswith("-L") and same_dir(a[2:], lib64) for a in args):
        fail(f"ld.lld: error: unable to find library -lascendcl (no -L{lib64})")
    for lib in ("ascendcl", "runtime"):
        if f"-l{lib}" not in args:
            fail(f"ld.lld: error: undefined symbol: the <<<>>> launches need lib{lib}.so (no -l{lib})")


if MODE == "bisheng":
    for flag in ("-fPIC", "-std=c++17", "-shared"):
        if flag not in args:
            fail(f"missing {flag}")
    if out.endswith(".o") or "-c" in args:
        fail("this bisheng is asked for the shared library in one step (-shared -o lib.so), not an object (-c)")
    if GEN == "asc":
        for a in args:
            if a == "-xcce" or (a.startswith("--cce-") and not a.startswith("--cce-auto-sync-log=")):
                fail(f"{a} belongs to the CANN 8.0-8.3 command line; CANN {CANN_VERSION} takes -x asc --npu-arch=")
        if not pair("-x", "asc"):
            fail("missing -x asc")
        arches = [a.split("=", 1)[1] for a in args if a.startswith("--npu-arch=")]
        if len(arches) != 1:
            fail(f"give --npu-arch exactly once, got {arches}")
        if arches[0] != "dav-2201":
            fail(f"unsupported --npu-arch={arches[0]} (this bisheng supports only dav-2201)")
        check_rpath()
    else:
        for a in args:
            if a.startswith("--npu-arch") or a == "asc":
                fail(f"{a} is the CANN 8.5+ command line; CANN {CANN_VERSION} bisheng does not know it")
        if "-xcce" not in args or args.index("-xcce") > args.index(source):
            fail("missing -xcce before the source (Ascend C needs the CCE heterogeneous language)")
        if "--cce-aicore-only" in args:
            fail("--cce-aicore-only compiles the device code alone: the <<<>>> launchers are host code")
        if "--cce-fatobj-link" in args:
            fail("--cce-fatobj-link links the objects of an earlier -c step; this build has none")
        levels = [a for a in args if a.startswith("-O")]
        if levels != ["-O2"] and levels != ["-O0"]:
            fail(f"CANN {CANN_VERSION} bisheng takes -O2 or -O0 only, got {levels}")
        arches = [a for a in args if a.startswith("--cce-aicore-arch")]
        if arches != ["--cce-aicore-arch=dav-c220-vec"]:
            fail(f"give --cce-aicore-arch=dav-c220-vec once (the vector cores of dav-2201), got {arches}")
        for option in LEGACY_MLLVM:
            if not pair("-mllvm", option):
                fail(f"missing -mllvm {option} (CANN's cmake passes it for dav-c220-vec)")
        check_cce_headers()
        check_cce_libraries()
        check_rpath()
    sync_logs = [a.split("=", 1)[1] for a in args if a.startswith("--cce-auto-sync-log=")]
    if sync_logs:  # as asc-devkit documents the log: one entry per inserted synchronisation
        if "-g" not in args:
            fail("--cce-auto-sync-log needs -g for the line numbers")
        with open(source, errors="replace") as f:
            hits = [i + 1 for i, text in enumerate(f) if "PipeBarrier<PIPE_V>()" in text][:2]
        with open(sync_logs[0], "w") as f:
            f.write("The BiSheng Auto Sync log of fake :\n")
            for n in hits:
                f.write(f"Position: {os.path.abspath(source)}:{n} : line before insert sync : PipeBarrier<PIPE_V>();\n")
            flag = "SetFlag<HardEvent::V_S>(EVENT_ID0);"
            f.write(f"Position: {CANN_ROOT}/include/fake_impl.h:7 : line before insert sync : {flag}\n")
    defines = [a for a in args if a.startswith("-DASCEND_RMSNORM_")]
    host_argv = [REAL_CXX, "-std=c++17", "-O2", "-fPIC", "-shared", "-x", "c++",
                 "-ffp-contract=off", "-DASCEND_RMSNORM_EMU=1", "-D__NPU_ARCH__=2201", *defines,
                 "-I", os.path.join(os.path.dirname(source), "emu"), source, "-o", out]
else:
    host_argv = [REAL_CXX] + args

counter = os.environ.get("FAKE_COMPILER_COUNTER")
if counter:  # one line per build
    with open(counter, "a", errors="surrogateescape") as f:
        f.write(f"{os.getpid()} {time.time():.3f} {NAME} {os.getcwd()}\n")
time.sleep(float(os.environ.get("FAKE_COMPILER_SLEEP") or 0))
if os.environ.get("FAKE_COMPILER_FAIL"):
    for i in range(1, 101):
        sys.stderr.write(f"{source}:{i}:5: error: fake failure number {i}\n")
    sys.exit(3)

memo = os.environ.get("FAKE_COMPILER_MEMO")
cached = None
if memo:
    h = hashlib.sha256()
    srcdir = os.path.dirname(os.path.abspath(source))
    names = {out: "$OUT", source: "$SRC/" + os.path.basename(source)}
    names[os.path.join(os.path.dirname(source), "emu")] = "$EMU"
    h.update(repr([names.get(a, a) for a in host_argv[1:]]).encode())
    for dirpath, dirnames, filenames in sorted(os.walk(srcdir)):
        dirnames.sort()
        for name in sorted(filenames):
            p = os.path.join(dirpath, name)
            h.update(os.path.relpath(p, srcdir).encode() + b"\0")
            with open(p, "rb") as f:
                h.update(f.read())
    cached = os.path.join(memo, h.hexdigest() + ".so")
    if os.path.exists(cached):
        shutil.copyfile(cached, out)
        sys.exit(0)
time.sleep(float(os.environ.get("FAKE_COMPILER_COLD_SECONDS") or 0))
rc = subprocess.call(host_argv)
if rc == 0 and cached:
    tmp = f"{cached}.{os.getpid()}.tmp"
    shutil.copyfile(out, tmp)
    os.replace(tmp, cached)
sys.exit(rc)
"""


def write_compiler(
    path: Path, *, mode: str, cann_version: str = "", gen: str = "", cann_root: str = "", version_text: str = ""
) -> Path:
    """Write a fake compiler script (``mode`` = ``bisheng`` or ``cxx``) at ``path``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    head = (
        f"#!{sys.executable} -S\n"
        f"NAME = {'bisheng' if mode == 'bisheng' else 'c++'!r}\n"
        f"MODE = {mode!r}\nGEN = {gen!r}\nCANN_VERSION = {cann_version!r}\nCANN_ROOT = {cann_root!r}\n"
        f"VERSION_TEXT = {version_text!r}\nREAL_CXX = {REAL_CXX!r}\nLEGACY_MLLVM = {LEGACY_MLLVM!r}\n"
    )
    path.write_text(head + _COMPILER_BODY)
    path.chmod(0o755)
    return path


def write_counting_cxx(directory: Path) -> Path:
    """A host C++ compiler wrapper for the emu toolchain that counts and memoises like the fake bisheng."""
    return write_compiler(Path(directory) / "counting-c++", mode="cxx")


def bisheng_version_text(cann_version: str, extra: str = "") -> str:
    return (
        f"BiSheng Compiler for CANN {cann_version} (clang version 15.0.5 fake-{cann_version}){extra}\n"
        f"Target: {HOST}-unknown-linux-gnu\nThread model: posix"
    )


# --------------------------------------------------------------------------------------------------- CANN trees

#: SoC -> (NpuArch, vector cores, CCEC_AIV_version) for the platform ini files of the fake installs; an
#: empty NpuArch: an ini without that key (as CANN 8.1's are), for a SoC the built-in core table lacks.
PLATFORM_SOCS = {
    "Ascend910B3": ("2201", 40, "dav-c220-vec"),
    "Ascend910_9392": ("2201", 48, "dav-c220-vec"),
    "Ascend310P3": ("2002", 8, "dav-m200-vec"),
    "Ascend950PR_9599": ("3510", 64, "dav-c310-vec"),
    "Ascend910_9351": ("", 36, "dav-c220-vec"),
}


def platform_ini(soc: str, npu_arch: str, vector_cores: int, aiv: str) -> str:
    short = {"dav-c220-vec": "Ascend910B", "dav-m200-vec": "Ascend310P", "dav-c310-vec": "Ascend950"}[aiv]
    aic = {"dav-c220-vec": "220", "dav-m200-vec": "200", "dav-c310-vec": "310"}[aiv]
    return (
        "[version]\n"
        f"SoC_version={soc}\nShort_SoC_version={short}\nAIC_version=AIC-C-{aic}\n"
        f"CCEC_AIC_version={aiv.replace('-vec', '-cube')}\nCCEC_AIV_version={aiv}\n"
        + (f"NpuArch={npu_arch}\n" if npu_arch else "")
        + "[SoCInfo]\n"
        f"ai_core_cnt={vector_cores // 2}\ncube_core_cnt={vector_cores // 2}\nvector_core_cnt={vector_cores}\n"
        "ai_cpu_cnt=6\nmemory_size=68719476736\nl2_size=201326592\ncore_type_list=CubeCore,VectorCore\n"
        "cube_vector_combine=split\n"
        "[AICoreSpec]\ncube_freq=1850\nl0_a_size=65536\nl0_b_size=65536\nl0_c_size=131072\nl1_size=524288\n"
        "ub_size=196608\n"
    )


def _is_new(version: str) -> bool:
    major, minor = (int(x) for x in version.split(".")[:2])
    return (major, minor) >= (8, 5)


def _inner_version(version: str) -> str:
    digits = "".join(c for c in version if c.isdigit())
    return f"7.{digits[:1]}.{digits[1:2] or '0'}.1.{len(digits)}20"


def _symlink(link: Path, target: Path) -> None:
    if link.is_symlink() or link.exists():
        link.unlink()
    link.symlink_to(target)


#: The Ascend C headers of CANN 8.1, as its packages install them (compiler/script/filelist.csv): the real
#: files under <host>-linux/ascendc/include/basic_api/, and a tikcfw dir of relative links to them at each
#: of these places (relative to the root; {host} is the machine).
TIKCFW_PLACES = ("compiler/tikcpp/tikcfw", "tools/tikcpp/tikcfw", "{host}-linux/tikcpp/tikcfw")
#: A header per linked entry, named as kernel_operator.h includes them (CANN 8.1 basic_api/).
TIKCFW_ENTRIES = {
    "kernel_operator.h": None,
    "impl": "kernel_tpipe_impl.h",
    "interface": "kernel_operator_intf.h",
    "inner_interface": "inner_kernel_operator_intf.h",
}
#: The entries each tikcfw also links to CANN 8.1's highlevel_api/ (its filelist.csv): basic_api's
#: interface/kernel_operator_intf.h includes "lib/kernel_api.h", whose headers include
#: "kernel_tiling/kernel_tiling.h", both found through the tikcfw -I dir.
TIKCFW_HIGHLEVEL_ENTRIES = {"lib": "kernel_api.h", "kernel_tiling": "kernel_tiling.h"}


def _lay_out_tikcfw(root: Path, places: tuple[str, ...]) -> None:
    include = root / f"{HOST}-linux" / "ascendc" / "include"
    basic_api, highlevel_api = include / "basic_api", include / "highlevel_api"
    sources = {entry: basic_api for entry in TIKCFW_ENTRIES}
    sources.update({entry: highlevel_api for entry in TIKCFW_HIGHLEVEL_ENTRIES})
    for entry, header in {**TIKCFW_ENTRIES, **TIKCFW_HIGHLEVEL_ENTRIES}.items():
        if header is None:
            basic_api.mkdir(parents=True, exist_ok=True)
            (basic_api / entry).write_text("/* fake */\n")
        else:
            (sources[entry] / entry).mkdir(parents=True, exist_ok=True)
            (sources[entry] / entry / header).write_text("/* fake */\n")
    for place in places:
        tikcfw = root / place.format(host=HOST)
        tikcfw.mkdir(parents=True, exist_ok=True)
        for entry, source in sources.items():
            _symlink(tikcfw / entry, Path(os.path.relpath(source / entry, tikcfw)))


#: CANN 8.5's Ascend C headers, as asc-devkit v8.5.0 installs them below <host>-linux
#: (scripts/package/asc-devkit/asc-devkit.xml): the real files under asc/include and asc/impl, the
#: compatibility dirs (ascendc/include/basic_api/impl, highlevel_api/kernel_tiling), links to them, and
#: the asc plugin bisheng's -x asc build asks for its -I dirs (lib64/plugin/asc/libasc_plugin.so, which
#: names them: tools/ascc/asc_plugin/include/internal/asc_info_manager.h). A file each (relative to
#: <host>-linux).
ASC_FILES = (
    "asc/include/kernel_operator.h",
    "asc/include/basic_api/kernel_operator_vec_binary_intf.h",
    "asc/include/interface/kernel_operator_intf.h",
    "asc/include/adv_api/activation/silu.h",
    "asc/include/adv_api/matmul/matmul_intf.h",
    "asc/include/aicpu_api/aicpu_api.h",
    "asc/include/tiling/tiling_api.h",
    "asc/include/utils/std/tuple.h",
    "asc/impl/adv_api/detail/activation/silu/silu_common_impl.h",
    "asc/impl/basic_api/dav_c220/kernel_operator_vec_binary_impl.h",
    "asc/impl/utils/debug/asc_dump.h",
    "asc/impl/c_api/c_api_impl.h",
    "asc/impl/simt_api/simt_api_impl.h",
    "ascendc/include/basic_api/impl/kernel_tpipe_impl.h",
    "ascendc/include/highlevel_api/kernel_tiling/kernel_tiling.h",
    "include/ascendc/asc_devkit_version.h",
    "ccec_compiler/lib/clang/15.0.5/include/stddef.h",
    "lib64/plugin/asc/libasc_plugin.so",
)
#: The links asc-devkit.xml lays out among them (link: target, relative to <host>-linux).
ASC_LINKS = {
    "tikcpp/tikcfw/kernel_operator.h": "asc/include/kernel_operator.h",
    "tikcpp/tikcfw/interface": "asc/include/interface",
    "tikcpp/tikcfw/lib": "asc/include/adv_api",
    "tikcpp/tikcfw/impl": "ascendc/include/basic_api/impl",
    "tikcpp/tikcfw/kernel_tiling": "ascendc/include/highlevel_api/kernel_tiling",
    "ascendc/include/highlevel_api/lib": "asc/include/adv_api",
    "ascendc/include/highlevel_api/impl": "asc/impl/adv_api/detail",
    "include/ascendc/host_api/tiling": "asc/include/tiling",
}


def _lay_out_asc(host_dir: Path) -> None:
    for name in ASC_FILES:
        (host_dir / name).parent.mkdir(parents=True, exist_ok=True)
        (host_dir / name).write_text("/* fake */\n")
    for name, target in ASC_LINKS.items():
        (host_dir / name).parent.mkdir(parents=True, exist_ok=True)
        _symlink(host_dir / name, Path(os.path.relpath(host_dir / target, (host_dir / name).parent)))


@dataclass
class FakeCann:
    base: Path  # the directory that plays /usr/local/Ascend
    alias: Path  # the path set_env.sh would export (ascend-toolkit/latest or cann)
    root: Path  # the real directory the alias points at
    version: str
    bisheng: Path  # where the binary itself lives (not a symlink)

    @property
    def generation(self) -> str:
        return "asc" if _is_new(self.version) else "cce"


def make_cann(
    base: Path,
    version: str,
    *,
    install_info: bool = True,
    version_cfg: bool | None = None,
    bisheng: bool = True,
    dir_name: str | None = None,
    extra_version_text: str = "",
    tikcfw: tuple[str, ...] = TIKCFW_PLACES,
) -> FakeCann:
    """Lay out a fake CANN ``version`` under ``base`` (which plays ``/usr/local/Ascend``); for CANN 8.0-8.3,
    ``tikcfw`` names which of the Ascend C header link dirs exist (CANN 8.1 has all three)."""
    base = Path(base)
    new = _is_new(version)
    if new:
        root = base / (dir_name or f"cann-{version}")
        alias = base / "cann"
    else:
        root = base / "ascend-toolkit" / (dir_name or version)
        alias = base / "ascend-toolkit" / "latest"
    host_dir = root / f"{HOST}-linux"
    (host_dir / "include" / "acl").mkdir(parents=True, exist_ok=True)
    (host_dir / "include" / "acl" / "acl_base.h").write_text("/* fake */\n")
    (root / "compiler").mkdir(parents=True, exist_ok=True)
    if new:
        for d in (root / "lib64", root / "include"):
            d.mkdir(parents=True, exist_ok=True)
        _lay_out_asc(host_dir)
    else:
        # CANN 8.1 (runtime/script/filelist.csv): <root>/include and <root>/lib64 are links to <host>-linux/
        (host_dir / "lib64").mkdir(parents=True, exist_ok=True)
        _symlink(root / "include", Path(host_dir.name) / "include")
        _symlink(root / "lib64", Path(host_dir.name) / "lib64")
        _lay_out_tikcfw(root, tikcfw)
    if install_info:
        (host_dir / "ascend_toolkit_install.info").write_text(
            "package_name=Ascend-cann-toolkit\n"
            f"version={version}\n"
            "innerversion=V100R001C23SPC002B210\n"
            "compatible_version=[V100R001C15],[V100R001C18],[V100R001C19],[V100R001C20],[V100R001C21],[V100R001C23]\n"
            f"arch={HOST}\nos=linux\npath={root}/{HOST}-linux\n"
        )
    if version_cfg if version_cfg is not None else not new:
        inner = _inner_version(version)
        (root / "version.cfg").write_text(
            "# version: 1.0\n"
            f"runtime_running_version=[{inner}:{version}]\n"
            f"compiler_running_version=[{inner}:{version}]\n"
            f"opp_running_version=[{inner}:{version}]\n"
            f"toolkit_running_version=[{inner}:{version}]\n"
            f"runtime_upgrade_version=[{inner}:{version}]\n"
        )
    (root / "compiler" / "version.info").write_text(
        f"Version={_inner_version(version)}\nversion_dir={version}\ntimestamp=20250101_000000000\n"
    )
    ini_dir = (host_dir if new or version.startswith("8.3") else root / "compiler") / "data" / "platform_config"
    ini_dir.mkdir(parents=True, exist_ok=True)
    for soc, (npu_arch, cores, aiv) in PLATFORM_SOCS.items():
        (ini_dir / f"{soc}.ini").write_text(platform_ini(soc, npu_arch, cores, aiv))
    if new:
        real_bisheng = host_dir / "ccec_compiler" / "bin" / "bisheng"
    else:
        real_bisheng = root / "compiler" / "ccec_compiler" / "bin" / "bisheng"
    if bisheng:
        write_compiler(
            real_bisheng,
            mode="bisheng",
            cann_version=version,
            gen="asc" if new else "cce",
            cann_root=str(root),
            version_text=bisheng_version_text(version, extra_version_text),
        )
        if new and version.startswith("8."):
            # 8.5 keeps compiler/ccec_compiler as a symlink to the real place
            _symlink(root / "compiler" / "ccec_compiler", Path("..") / f"{HOST}-linux" / "ccec_compiler")
        elif new:
            # 9.x adds <root>/bin with symlinks to the tools
            (root / "bin").mkdir(exist_ok=True)
            _symlink(root / "bin" / "bisheng", Path("..") / f"{HOST}-linux" / "ccec_compiler" / "bin" / "bisheng")
    _symlink(alias, Path(root.name))
    (alias.parent / "set_env.sh").write_text(f"export ASCEND_HOME_PATH={alias}\nexport ASCEND_TOOLKIT_HOME={alias}\n")
    return FakeCann(base, alias, root, version, real_bisheng)


# --------------------------------------------------------------------------------------------------- device probes

NPU_SMI_TABLE = """\
+------------------------------------------------------------------------------------------------+
| npu-smi 24.1.rc2                 Version: 24.1.rc2                                             |
+---------------------------+---------------+----------------------------------------------------+
| NPU   Name                | Health        | Power(W)    Temp(C)           Hugepages-Usage(page)|
| Chip                      | Bus-Id        | AICore(%)   Memory-Usage(MB)  HBM-Usage(MB)        |
+===========================+===============+====================================================+
| 0     {name:<20}| OK            | 93.3        38                0    / 0             |
| 0                         | 0000:C1:00.0  | 0           0    / 0          3161 / 65536         |
+===========================+===============+====================================================+
"""

NPU_SMI_BOARD = """\
        NPU ID                         : 0
        Chip ID                        : 0
        Chip Type                      : Ascend
        Chip Name                      : {chip}
        NPU Name                       : {npu}
"""


def write_npu_smi(bin_dir: Path, name: str, *, chip: str = "", npu_name: str = "") -> Path:
    """A fake ``npu-smi``: ``info`` prints the table with ``name``; ``info -t board`` prints chip/NPU names."""
    bin_dir.mkdir(parents=True, exist_ok=True)
    path = bin_dir / "npu-smi"
    table = NPU_SMI_TABLE.format(name=name)
    board = NPU_SMI_BOARD.format(chip=chip, npu=npu_name)
    path.write_text(
        f"#!{sys.executable} -S\nimport sys\n"
        f"if sys.argv[1:2] != ['info']: sys.exit(2)\n"
        f"print({board!r} if '-t' in sys.argv else {table!r})\n"
    )
    path.chmod(0o755)
    return path


ACL_SOURCE = r"""
#include <stdlib.h>
#include <string.h>
/* aclrtGetSocName returns the SoC name, or NULL on failure; this one reads it from FAKE_ACL_SOC. */
const char *aclrtGetSocName(void) { return getenv("FAKE_ACL_SOC"); }

/* aclError aclrtGetDeviceSatMode(aclrtFloatOverflowMode *mode) (CANN acl/acl_rt.h) reports the current
   device's mode: 0 saturation, 1 INF/NaN. This one reads FAKE_ACL_SAT_MODE, a comma-separated mode per
   device, at the index FAKE_ACL_DEVICE (the fake torch.npu.device guard sets it); unset or past the end:
   error 107002 (no context), as a thread without a device gets. */
int fake_acl_sat_mode_calls = 0;
/* A failed runtime call records its code as the thread's last error (aclrtPeekAtLastError returns it,
   aclrtGetLastError returns and clears it); FAKE_ACL_THREAD_ERROR, when set, is one an earlier call left. */
static __thread int thread_error = -1;
static int *last_error(void) {
    if (thread_error < 0) thread_error = getenv("FAKE_ACL_THREAD_ERROR") ? atoi(getenv("FAKE_ACL_THREAD_ERROR")) : 0;
    return &thread_error;
}
int aclrtPeekAtLastError(int level) { (void)level; return *last_error(); }
int aclrtGetLastError(int level) { (void)level; int e = *last_error(); thread_error = 0; return e; }
static int fail(int code) { *last_error() = code; return code; }
int aclrtGetDeviceSatMode(int *mode) {
    fake_acl_sat_mode_calls++;
    const char *modes = getenv("FAKE_ACL_SAT_MODE");
    const char *dev = getenv("FAKE_ACL_DEVICE");
    int index = dev ? atoi(dev) : 0;
    if (!modes || !mode) return fail(107002);
    for (; index > 0 && modes; index--) {
        modes = strchr(modes, ',');
        if (modes) modes++;
    }
    if (!modes || !*modes || *modes == ',') return fail(107002);
    *mode = atoi(modes);
    return 0;
}
"""


def build_fake_libascendcl(directory: Path) -> Path:
    """Compile a tiny ``libascendcl.so`` that exports ``aclrtGetSocName`` (answer: ``$FAKE_ACL_SOC``) and
    ``aclrtGetDeviceSatMode`` (answer: ``$FAKE_ACL_SAT_MODE``; calls counted in ``fake_acl_sat_mode_calls``; a
    failure is the thread's last error, which ``aclrtPeekAtLastError``/``aclrtGetLastError`` report)."""
    directory.mkdir(parents=True, exist_ok=True)
    src = directory / "acl.c"
    src.write_text(ACL_SOURCE)
    out = directory / "libascendcl.so"
    cc = shutil.which("cc") or shutil.which("gcc") or REAL_CXX
    subprocess.run([cc, "-shared", "-fPIC", "-x", "c", str(src), "-o", str(out)], check=True)
    return out


def compile_count(counter: Path) -> int:
    try:
        return len(Path(counter).read_text().splitlines())
    except FileNotFoundError:
        return 0
