"""tools/typecheck_asc.py given an installed CANN tikcfw (no clang needed: a stand-in records what it is given)."""

from __future__ import annotations

import os
import stat
import sys
from pathlib import Path

from helpers import load_script


def _tool():
    return load_script("tools/typecheck_asc.py", "typecheck_asc_under_test")


def _fake_tikcfw(root: Path) -> Path:
    """A tikcfw laid out as CANN 8.1's: entries that link to <host>-linux/ascendc/include/{basic,highlevel}_api."""
    include = root / "aarch64-linux" / "ascendc" / "include"
    files = {
        "basic_api/kernel_operator.h": '#include "interface/kernel_operator_intf.h"\n',
        "basic_api/interface/kernel_operator_intf.h": "",
        # an enum constant only an interface header names (CANN 8.1 kernel_struct_data_copy.h)
        "basic_api/interface/kernel_struct_data_copy.h": "pad_t padMode = pad_t::PAD_NONE;\n",
        "basic_api/impl/kernel_tpipe_impl.h": "",
        "basic_api/impl/utils/kernel_utils_macros.h": "",
        "highlevel_api/lib/kernel_api.h": "",
        "highlevel_api/kernel_tiling/kernel_tiling.h": "",
    }
    for name, text in files.items():
        (include / name).parent.mkdir(parents=True, exist_ok=True)
        (include / name).write_text(text)
    tikcfw = root / "compiler" / "tikcpp" / "tikcfw"
    tikcfw.mkdir(parents=True)
    for name, where in (("kernel_operator.h", "basic_api"), ("impl", "basic_api"), ("interface", "basic_api"),
                        ("lib", "highlevel_api"), ("kernel_tiling", "highlevel_api")):  # fmt: skip
        (tikcfw / name).symlink_to(os.path.relpath(include / where / name, tikcfw))
    return tikcfw


def test_a_tikcfw_is_checked_with_the_legacy_builds_include_dirs_and_its_own_enum_constants(tmp_path):
    """The legacy build (jit/build.py; tests/jit/test_build.py) searches -I <tikcfw>, <tikcfw>/impl and
    <tikcfw>/interface only: a header found in any other dir (impl/utils) would pass the check and fail
    the build. And the prelude's enums take the constants the tikcfw's own headers name, its interface
    headers included (reached through the tikcfw's links)."""
    tikcfw = _fake_tikcfw(tmp_path / "cann")
    record = tmp_path / "record"
    clang = tmp_path / "clang++"
    clang.write_text(
        f"#!{sys.executable}\n"
        "import sys\n"
        "args = sys.argv[1:]\n"
        f"with open({str(record)!r}, 'a') as f:\n"
        "    f.write(''.join('-isystem ' + a + '\\n' for i, a in enumerate(args) if i and args[i - 1] == '-isystem'))\n"
        "    f.write(open(args[args.index('-include') + 1]).read())\n"
    )
    clang.chmod(clang.stat().st_mode | stat.S_IXUSR)
    source = tmp_path / "k" / "k.asc"
    source.parent.mkdir()
    source.write_text('#include "kernel_operator.h"\n')
    assert _tool().main([str(tikcfw), "--clang", str(clang), "--source", str(source)]) == 0
    text = record.read_text()
    searched = {Path(line.split(" ", 1)[1]).resolve() for line in text.splitlines() if line.startswith("-isystem ")}
    assert "enum class pad_t { PAD_NONE };" in text
    assert searched == {tikcfw.resolve(), (tikcfw / "impl").resolve(), (tikcfw / "interface").resolve()}
