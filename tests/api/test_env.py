"""Every environment variable is validated where it is read: a nonsense value gets one warning naming the
variable, the value and the default used instead; ``info`` marks it; the C++ emulation parses as ``_env`` does."""

from __future__ import annotations

import ctypes
import json
import logging

import pytest

from ascend_rmsnorm import _env, _log
from ascend_rmsnorm.backends import choice
from ascend_rmsnorm.cli import main as cli
from ascend_rmsnorm.errors import UnsupportedArchError
from ascend_rmsnorm.jit import cache, locks, toolchain

# (variable, nonsense value, how to read it, the default that must come back)
NONSENSE = [
    ("ASCEND_RMSNORM_BACKEND", "foo", lambda: choice.requested_name(None), "auto"),
    ("ASCEND_RMSNORM_STRICT", "maybe", choice.strict, False),
    ("ASCEND_RMSNORM_JIT", "sometimes", cache.jit_mode, "import"),
    ("ASCEND_RMSNORM_LOCK_TIMEOUT", "abc", locks.lock_timeout, 600.0),
    ("ASCEND_RMSNORM_LOCK_TIMEOUT", "-5", locks.lock_timeout, 600.0),
    ("ASCEND_RMSNORM_LOCK_TIMEOUT", "nan", locks.lock_timeout, 600.0),
    ("ASCEND_RMSNORM_EMU_SEED", "xyz", lambda: _env.get("ASCEND_RMSNORM_EMU_SEED"), None),
    ("ASCEND_RMSNORM_EMU_SEED", "-5", lambda: _env.get("ASCEND_RMSNORM_EMU_SEED"), None),
    ("ASCEND_RMSNORM_EMU_SATURATE", "sure", lambda: _env.get("ASCEND_RMSNORM_EMU_SATURATE"), False),
    # str.isdigit() is true of these, int() refuses them: a ValueError from every trust walk / log call
    ("ASCEND_RMSNORM_TRUSTED_USERS", "\u00b2", lambda: _env.get("ASCEND_RMSNORM_TRUSTED_USERS"), ()),
    ("ASCEND_RMSNORM_TRUSTED_USERS", "no-such-user-here", lambda: _env.get("ASCEND_RMSNORM_TRUSTED_USERS"), ()),
    ("ASCEND_RMSNORM_LOG_LEVEL", "\u00b2", lambda: _env.get("ASCEND_RMSNORM_LOG_LEVEL"), None),
    ("LOCAL_RANK", "\u00b2", lambda: _env.get("LOCAL_RANK"), 0),
    # relative paths: each rank would take them against its own working directory
    ("ASCEND_RMSNORM_CACHE_DIR", "cache", lambda: _env.get("ASCEND_RMSNORM_CACHE_DIR"), None),
    ("ASCEND_RMSNORM_PREBUILT_DIR", "/srv/tier:tier", lambda: _env.get("ASCEND_RMSNORM_PREBUILT_DIR"), []),
    ("ASCEND_RMSNORM_LOCK_DIR", "./locks", lambda: _env.get("ASCEND_RMSNORM_LOCK_DIR"), None),
    ("ASCEND_HOME_PATH", "Ascend/latest", lambda: _env.get("ASCEND_HOME_PATH"), None),
    ("ASCEND_RMSNORM_CACHE_DIR", "~no-such-user-here/cache", lambda: _env.get("ASCEND_RMSNORM_CACHE_DIR"), None),
]


NONSENSE_IDS = [f"{n.removeprefix('ASCEND_RMSNORM_')}={v}" for n, v, _, _ in NONSENSE]


@pytest.mark.parametrize("name, value, reader, default", NONSENSE, ids=NONSENSE_IDS)
def test_a_nonsense_value_warns_once_naming_it_and_the_default(name, value, reader, default, monkeypatch, caplog):
    monkeypatch.setenv(name, value)
    with caplog.at_level(logging.WARNING, logger="ascend_rmsnorm"):
        assert reader() == default
        assert reader() == default  # the second read says nothing more
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1, warnings
    assert f"{name}={value!r}" in warnings[0] and "using the default" in warnings[0]
    assert _env.VARS[name].default_text in warnings[0]


def test_sensible_values_are_taken_without_a_word(monkeypatch, caplog, tmp_path):
    good = {
        "ASCEND_RMSNORM_BACKEND": ("EMU", lambda: choice.requested_name(None), "emu"),
        "ASCEND_RMSNORM_STRICT": ("yes", choice.strict, True),
        "ASCEND_RMSNORM_JIT": ("0", cache.jit_mode, "off"),
        "ASCEND_RMSNORM_LOCK_TIMEOUT": (" 2.5 ", locks.lock_timeout, 2.5),
        "ASCEND_RMSNORM_EMU_SEED": ("18446744073709551615", lambda: _env.get(_env.EMU_SEED), 2**64 - 1),
        "ASCEND_RMSNORM_ARCH": ("2201", lambda: _env.get(_env.ARCH), "dav-2201"),
        "ASCEND_RMSNORM_LOG_LEVEL": ("10", lambda: _env.get(_env.LOG_LEVEL), logging.DEBUG),  # a number, as logging's
        "ASCEND_RMSNORM_LOCK_DIR": (str(tmp_path / "locks"), locks.lock_dir, tmp_path / "locks"),
    }
    with caplog.at_level(logging.WARNING, logger="ascend_rmsnorm"):
        for name, (value, reader, want) in good.items():
            monkeypatch.setenv(name, value)
            assert reader() == want, name
    assert caplog.records == []


def test_log_level_loud_falls_back_to_the_default_with_one_warning(monkeypatch, caplog):
    logger = logging.getLogger("ascend_rmsnorm")
    _log.reset()
    _log.get_logger()
    unset_level = logger.level
    monkeypatch.setenv("ASCEND_RMSNORM_LOG_LEVEL", "LOUD")
    _log.reset()
    with caplog.at_level(logging.NOTSET):
        _log.get_logger()
        _log.get_logger()
    assert logger.level == unset_level
    (record,) = [r for r in caplog.records if r.name == "ascend_rmsnorm"]
    assert "ASCEND_RMSNORM_LOG_LEVEL='LOUD'" in record.getMessage() and "(INFO)" in record.getMessage()
    monkeypatch.setenv("ASCEND_RMSNORM_LOG_LEVEL", "error")
    _log.reset()
    assert _log.get_logger().level == logging.ERROR
    logger.setLevel(unset_level)


def test_an_unusable_lock_dir_warns_and_a_default_is_used(monkeypatch, caplog, tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    monkeypatch.setenv("ASCEND_RMSNORM_LOCK_DIR", str(blocker))
    with caplog.at_level(logging.WARNING, logger="ascend_rmsnorm"):
        chosen = locks.lock_dir()
        assert locks.lock_dir() == chosen
    assert chosen is not None and chosen != blocker and chosen.is_dir()
    (message,) = [r.getMessage() for r in caplog.records]
    assert f"ASCEND_RMSNORM_LOCK_DIR={str(blocker)!r}" in message and str(chosen) in message
    assert "is not a directory" in message


def test_a_malformed_arch_is_ignored_and_the_npu_asked_instead(jit, caplog):
    jit.mp.setenv("ASCEND_RMSNORM_ARCH", "fast")
    with caplog.at_level(logging.WARNING, logger="ascend_rmsnorm"):
        with pytest.raises(UnsupportedArchError, match="cannot tell which NPU arch"):
            toolchain.detect_arch()
    said = [r.getMessage() for r in caplog.records]
    assert any("ASCEND_RMSNORM_ARCH='fast' is not an arch of the form dav-NNNN" in m for m in said), said


def test_info_marks_every_ignored_invalid_and_unknown_variable(jit, capsys, monkeypatch, tmp_path):
    monkeypatch.setenv("ASCEND_RMSNORM_BACKEND", "foo")
    monkeypatch.setenv("ASCEND_RMSNORM_LOCK_TIMEOUT", "-5")
    monkeypatch.setenv("ASCEND_RMSNORM_BISHENG", str(tmp_path / "no-bisheng"))
    monkeypatch.setenv("ASCEND_RMSNORM_BACKNED", "torch")  # a typo
    monkeypatch.setenv("ASCEND_HOME_PATH", str(tmp_path / "no-cann"))
    monkeypatch.setenv("ASCEND_RMSNORM_SWEEP_SEED", "5")  # the tests' own, documented in the README
    (tmp_path / "a-file").write_text("")
    monkeypatch.setenv("ASCEND_RMSNORM_CACHE_DIR", str(tmp_path / "a-file"))
    assert cli.main(["info", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    rows = {r["name"]: r for r in data["environment"]}
    assert rows["ASCEND_RMSNORM_SWEEP_SEED"]["status"] == "ok"
    writable = next(t for t in data["cache"]["tiers"] if t["kind"] == "writable")
    assert not writable["writable"] and "is a file, not a directory" in writable["problem"]  # not "missing"
    assert rows["ASCEND_RMSNORM_BACKEND"]["status"] == "ignored" and rows["ASCEND_RMSNORM_BACKEND"]["using"] == "auto"
    assert rows["ASCEND_RMSNORM_LOCK_TIMEOUT"]["status"] == "ignored"
    assert rows["ASCEND_RMSNORM_BISHENG"]["status"] == "error"
    assert rows["ASCEND_RMSNORM_BACKNED"]["status"] == "unknown"
    assert rows["ASCEND_HOME_PATH"] == {
        "name": "ASCEND_HOME_PATH",
        "value": str(tmp_path / "no-cann"),
        "status": "ignored",
        "problem": "not a directory",
        "using": "the default CANN locations",
    }
    assert "ignored" in data["backend"]["requested"]
    assert cli.main(["info"]) == 0
    text = capsys.readouterr().out
    assert "ASCEND_RMSNORM_BACKEND       'foo'  IGNORED: not one of auto, npu, emu, torch; using auto" in text
    assert "ASCEND_RMSNORM_BACKNED" in text and "UNKNOWN" in text and "INVALID: not an executable file" in text
    assert f"{tmp_path / 'a-file'}  (NOT writable: {tmp_path / 'a-file'} is a file, not a directory)" in text


def test_the_emulation_parses_seed_and_switches_as_env_does(monkeypatch):
    """The C++ side (emu_launch.h, emu_base.h) and _env.py agree on what is valid and what it means."""
    from ascend_rmsnorm.backends import emu

    lib = emu.library()
    next_seed = lib.symbol("ascend_rmsnorm_emu_next_seed")
    next_seed.restype, next_seed.argtypes = ctypes.c_uint64, []
    env_flag = lib.symbol("ascend_rmsnorm_emu_env_flag")
    env_flag.restype, env_flag.argtypes = ctypes.c_int32, [ctypes.c_char_p]

    monkeypatch.setenv("ASCEND_RMSNORM_EMU_SEED", "1000")
    launches = next_seed() - 1000  # the launch counter of this thread so far
    unset = (0x9E3779B97F4A7C15 * (launches + 1)) % 2**64
    for value in ("0", "7", "18446744073709551615", "xyz", "12x", "-5", " 5", "+5", "18446744073709551616", "9" * 21):
        monkeypatch.setenv("ASCEND_RMSNORM_EMU_SEED", value)
        try:
            want = (_env.parse_emu_seed(value) + launches) % 2**64
        except _env.Invalid:
            want = unset
        assert next_seed() == want, value
    for value in ("1", "true", " YES ", "on", "0", "false", "off", "no", "", "sure", "2", "o n"):
        monkeypatch.setenv("ASCEND_RMSNORM_EMU_SATURATE", value)
        try:
            want = _env.parse_flag(value)
        except _env.Invalid:
            want = False  # _env's default for a nonsense switch
        assert env_flag(b"ASCEND_RMSNORM_EMU_SATURATE") == int(want), value


def test_emu_library_load_reports_a_bad_seed(monkeypatch, caplog):
    from ascend_rmsnorm.jit import toolchain as tcmod

    monkeypatch.setenv("ASCEND_RMSNORM_EMU_SEED", "xyz")
    with caplog.at_level(logging.WARNING, logger="ascend_rmsnorm"):
        cache.get_library(tcmod.emu_toolchain(), "dav-2201")
    assert any("ASCEND_RMSNORM_EMU_SEED='xyz'" in r.getMessage() for r in caplog.records)


def test_every_variable_read_is_in_the_readme_table():
    from pathlib import Path

    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    table = readme[readme.index("## Environment variables") :]
    table = table[: table.index("\n## ", 5)]
    missing = [name for name in _env.VARS if f"`{name}`" not in table]
    assert missing == []


def test_our_own_stderr_handler_shows_control_characters_instead_of_sending_them():
    """Where the application has no logging set up, our handler prints the warnings, and they name paths
    that can be anyone's (a tier, a CANN root): an escape sequence in one is shown as ``\\x1b...``."""
    import subprocess
    import sys

    code = "from ascend_rmsnorm import _log; _log.warn_once('t', 'passing over %s', '/tmp/t\\x1b]0;owned\\x07')"
    # the limit bounds a hang only: the child imports torch, which takes a minute on a loaded machine
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    assert done.stderr == "ascend-rmsnorm: WARNING: passing over /tmp/t\\x1b]0;owned\\x07\n", done.stderr


def test_logging_set_up_after_our_first_line_takes_over_instead_of_doubling_every_line(monkeypatch, capsys):
    """A notebook's order: a first call logs (no logging set up, so our own stderr handler is attached),
    then a cell runs ``logging.basicConfig()``. Before: every line from then on was printed twice, by our
    handler and by the application's root handler. Now ours stands in only while no other handler would
    show the line, as Python's last-resort handler does."""
    import io

    logger = logging.getLogger("ascend_rmsnorm")
    monkeypatch.setattr(logging.root, "handlers", [])  # no application logging (pytest's own set aside)
    monkeypatch.setattr(logger, "handlers", [])
    monkeypatch.setattr(logger, "level", logging.NOTSET)
    _log.reset()
    _log.get_logger().info("before the application set logging up")
    assert capsys.readouterr().err == "ascend-rmsnorm: INFO: before the application set logging up\n"
    theirs = io.StringIO()
    handler = logging.StreamHandler(theirs)
    handler.setFormatter(logging.Formatter("%(levelname)s:%(name)s:%(message)s"))
    logging.root.addHandler(handler)  # what logging.basicConfig() does
    _log.get_logger().info("after it")
    _log.warn_once("doubled", "a warning after it")
    assert capsys.readouterr().err == ""
    assert theirs.getvalue() == "INFO:ascend_rmsnorm:after it\nWARNING:ascend_rmsnorm:a warning after it\n"
    logger.propagate = False  # the application silences the package's line on its handlers: ours shows it
    try:
        _log.get_logger().info("not propagated")
    finally:
        logger.propagate = True
    assert capsys.readouterr().err == "ascend-rmsnorm: INFO: not propagated\n"


def test_our_handler_writes_to_stderr_as_it_is_at_each_line(monkeypatch, capsys):
    """A notebook cell under ``%%capture`` (or ``contextlib.redirect_stderr``) that makes the first call:
    our stderr handler is attached while ``sys.stderr`` is that cell's buffer. Before: it kept writing to
    that buffer, so every later line of the package, warnings included, went where nobody looks. Now it
    writes to ``sys.stderr`` as it is when it writes, as Python's last-resort handler does."""
    import contextlib
    import io

    logger = logging.getLogger("ascend_rmsnorm")
    monkeypatch.setattr(logging.root, "handlers", [])  # no application logging (pytest's own set aside)
    monkeypatch.setattr(logger, "handlers", [])
    monkeypatch.setattr(logger, "level", logging.NOTSET)
    _log.reset()
    captured = io.StringIO()
    with contextlib.redirect_stderr(captured):
        _log.get_logger().info("inside the captured cell")
    _log.get_logger().warning("a later cell's warning")
    assert captured.getvalue() == "ascend-rmsnorm: INFO: inside the captured cell\n"
    assert capsys.readouterr().err == "ascend-rmsnorm: WARNING: a later cell's warning\n"


@pytest.mark.parametrize(
    "rank, level, said",
    [
        ("0", None, ["INFO: info", "WARNING: warning"]),
        ("3", None, ["WARNING: warning"]),  # another rank of the node: warnings only
        ("3", "INFO", ["INFO: info", "WARNING: warning"]),  # unless a level is asked for
        (
            "-1",
            None,
            [
                "WARNING: LOCAL_RANK='-1' is not a non-negative integer; using the default (0) instead",
                "INFO: info",
                "WARNING: warning",
            ],
        ),
    ],
)
def test_only_local_rank_0_says_info_on_our_handler_and_every_rank_warns(rank, level, said, monkeypatch, capsys):
    """In a job of several ranks per node only LOCAL_RANK 0 prints INFO lines (each rank would print the
    same "compiling ..." line), unless ASCEND_RMSNORM_LOG_LEVEL asks; a LOCAL_RANK that is no rank is said."""
    logger = logging.getLogger("ascend_rmsnorm")
    monkeypatch.setattr(logging.root, "handlers", [])  # no application logging (pytest's own set aside)
    monkeypatch.setattr(logger, "handlers", [])
    monkeypatch.setattr(logger, "level", logging.NOTSET)
    monkeypatch.setenv("LOCAL_RANK", rank)
    if level is not None:
        monkeypatch.setenv("ASCEND_RMSNORM_LOG_LEVEL", level)
    _log.reset()
    _log.get_logger().info("info")
    _log.get_logger().warning("warning")
    assert capsys.readouterr().err.splitlines() == [f"ascend-rmsnorm: {line}" for line in said]
