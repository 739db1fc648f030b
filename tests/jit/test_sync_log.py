"""``bench --sync-log``: the kernels built with bisheng's auto-sync log, outside the cache, and summarised
(jit/sync_log.py). The fake bisheng writes the log in the format asc-devkit documents."""

from __future__ import annotations

import os

from jit_helpers import NOBODY, as_root

from ascend_rmsnorm.cli import main as cli
from ascend_rmsnorm.jit import build, sync_log

DOCUMENTED = """The BiSheng Auto Sync log of sync_log_test :
Position: /abs/sync_log_test.h:4 : line before insert sync : SetFlag<HardEvent::V_S>(EVENT_ID0);
Position: /abs/sync_log_test.h:5 : line before insert sync : PipeBarrier<PIPE_V>();
"""


def test_the_documented_format_parses():
    first, second = sync_log.parse(DOCUMENTED)
    assert (first.path, first.line, first.where, first.kind) == (
        "/abs/sync_log_test.h", 4, "line before insert sync", "SetFlag<HardEvent::V_S>"
    )  # fmt: skip
    assert (second.line, second.sync, second.kind) == (5, "PipeBarrier<PIPE_V>();", "PipeBarrier<PIPE_V>")


def test_a_line_number_outside_the_file_quotes_no_source_line(tmp_path):
    (tmp_path / "k.h").write_text("first\nlast\n")
    at = [
        sync_log.Inserted(str(tmp_path / "k.h"), n, "line before insert sync", "PipeBarrier<PIPE_V>();")
        for n in (0, 1, 3)
    ]
    lines = sync_log.summary(at, tmp_path)
    assert [line.rsplit("| ", 1)[1] for line in lines[:3]] == ["", "first", ""]  # line 0 is not the last line


def test_the_command_is_the_build_command_with_the_log_and_line_numbers(jit, tmp_path):
    for version in ("9.0.0", "8.3.RC2"):  # the -x asc and the -xcce builds
        tc = jit.npu(version)
        src, lib, log = tmp_path / "k.asc", tmp_path / "k.so", tmp_path / "k.log"
        argv = sync_log.command(tc, "dav-2201", src, lib, log)
        plain = sync_log.build.compile_command(tc, "dav-2201", str(src), str(lib))
        assert argv == [plain[0], "-g", f"--cce-auto-sync-log={log}", *plain[1:]]


def test_bench_sync_log_builds_outside_the_cache_and_names_our_lines(jit, tmp_path, capsys, monkeypatch):
    """Outside the cache, in the environment the cache's builds get (toolpath.compiler_env): no CPATH, the
    compiler's temp files in DIR."""
    jit.npu("9.0.0")
    out = tmp_path / "logs"
    monkeypatch.setenv("CPATH", str(tmp_path))
    envs, run = [], build.run_command
    monkeypatch.setattr(
        build, "run_command", lambda argv, workdir, env=None: envs.append(env) or run(argv, workdir, env)
    )
    assert cli.main(["bench", "--sync-log", str(out)]) == 0
    assert len(envs) == 2 and all("CPATH" not in e and e["TMPDIR"] == str(out.resolve()) for e in envs)
    printed = capsys.readouterr().out
    assert jit.entries() == []  # nothing went into the kernel cache
    calib = printed.split("calibrate.asc:", 1)[1]
    assert "3 synchronisations inserted" in calib  # two in calibrate.asc, one in a CANN header
    lines = (sync_log.KERNELS_DIR / "calibrate.asc").read_text().splitlines()
    first = next(i + 1 for i, text in enumerate(lines) if "PipeBarrier<PIPE_V>()" in text)
    barrier = "PipeBarrier<PIPE_V>();"
    assert f"calibrate.asc:{first}: line before insert sync: {barrier}    | {barrier}" in calib
    assert "in our files: 2 PipeBarrier<PIPE_V>; in other files (the devkit's headers): 1" in calib
    assert "rmsnorm.asc: 1 synchronisations inserted" in printed and "in our files: none" in printed
    assert (out / "librmsnorm.sync.so").is_file() and (out / "rmsnorm.build.log").read_text().startswith("$ ")


def test_a_build_that_writes_no_log_fails_and_says_where_its_output_is(jit, tmp_path, capsys):
    jit.npu("9.0.0")
    jit.mp.setenv("FAKE_COMPILER_FAIL", "1")
    assert cli.main(["bench", "--sync-log", str(tmp_path)]) == 1
    printed = capsys.readouterr().out
    assert "rmsnorm.asc: FAILED (exit 3)" in printed and "fake failure number 100" in printed
    assert str(tmp_path / "rmsnorm.build.log") in printed


def test_without_cann_it_says_so(jit, tmp_path, capsys):
    assert cli.main(["bench", "--sync-log", str(tmp_path)]) == 1  # the host lacks it: not a bad command line
    assert "bisheng" in capsys.readouterr().err.lower()


def test_a_log_left_from_an_earlier_run_does_not_pass_for_this_one(jit, tmp_path, capsys, monkeypatch):
    """A bisheng that builds but writes no log (one that ignored the option) fails the run."""
    jit.npu("9.0.0")
    (tmp_path / "rmsnorm.sync.log").write_text("Position: /stale.h:1 : line before insert sync : X();\n")
    monkeypatch.setattr(sync_log, "command", lambda tc, arch, src, lib, log: sync_log.build.compile_command(
        tc, arch, str(src), str(lib)))  # fmt: skip
    assert sync_log.main(tmp_path, kernels=("rmsnorm",), echo=print) == 1
    assert "rmsnorm.asc: FAILED (no log written)" in capsys.readouterr().out


def test_a_directory_others_can_write_is_refused(jit, tmp_path, capsys):
    jit.npu("9.0.0")
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)  # a neighbour could plant a link where the build writes
    assert cli.main(["bench", "--sync-log", str(shared)]) == 2
    assert f"fix: `chmod o-w {shared}`" in capsys.readouterr().err and list(shared.iterdir()) == []


def test_a_refused_directory_is_named_with_its_control_characters_escaped(jit, tmp_path, capsys):
    """The name is the caller's, but it may be a neighbour's directory: an escape sequence in it must
    show as text, not act on the terminal (as every line the commands print)."""
    jit.npu("9.0.0")
    shared = tmp_path / "shared\x1b[2J"
    shared.mkdir()
    shared.chmod(0o777)
    assert cli.main(["bench", "--sync-log", str(shared)]) == 2
    err = capsys.readouterr().err
    assert "\x1b" not in err and "shared\\x1b[2J" in err


def test_a_shared_sticky_directory_is_refused(jit, tmp_path, capsys):
    """As /tmp: the sticky bit keeps others from removing names, not from adding the log's or the
    library's name before the build writes it."""
    jit.npu("9.0.0")
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o1777)
    assert cli.main(["bench", "--sync-log", str(shared)]) == 2
    assert "can add a name" in capsys.readouterr().err and list(shared.iterdir()) == []


@as_root
def test_a_link_someone_else_owns_is_not_followed(jit, tmp_path, capsys):
    """A neighbour's link in a shared place, pointing at your project: refused as given, never resolved
    first (nothing there is removed, replaced or written)."""
    jit.npu("9.0.0")
    project, shared = tmp_path / "project", tmp_path / "shared"
    project.mkdir()
    shared.mkdir()
    shared.chmod(0o1777)
    (project / "rmsnorm.sync.log").write_text("my notes\n")
    link = shared / "synclog"
    link.symlink_to(project)
    os.lchown(link, NOBODY, NOBODY)
    assert cli.main(["bench", "--sync-log", str(link)]) == 2
    assert f"{link} is a symbolic link owned by" in capsys.readouterr().err
    assert sorted(p.name for p in project.iterdir()) == ["rmsnorm.sync.log"]
    assert (project / "rmsnorm.sync.log").read_text() == "my notes\n"


def test_a_relative_directory_is_the_callers_not_the_compilers(jit, tmp_path, capsys, monkeypatch):
    """bisheng runs inside DIR: a relative DIR must not be resolved again from there."""
    jit.npu("9.0.0")
    monkeypatch.chdir(tmp_path)
    assert cli.main(["bench", "--sync-log", "logs"]) == 0
    assert (tmp_path / "logs" / "calibrate.sync.log").is_file() and not (tmp_path / "logs" / "logs").exists()
    assert "calibrate.asc: 3 synchronisations inserted" in capsys.readouterr().out
