"""What the README and the Makefile promise about themselves: every error has a troubleshooting entry,
the first `make` run says what it installs and that it happens once."""

from __future__ import annotations

import inspect
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from ascend_rmsnorm import errors

ROOT = Path(__file__).resolve().parents[2]


def _section(title: str) -> str:
    readme = (ROOT / "README.md").read_text()
    start = readme.index(f"## {title}")
    end = readme.find("\n## ", start + 3)
    return readme[start : end if end != -1 else None]


def test_every_package_error_has_a_troubleshooting_entry():
    text = _section("Troubleshooting")
    classes = [
        name
        for name, obj in inspect.getmembers(errors, inspect.isclass)
        if issubclass(obj, errors.AscendRMSNormError) and obj is not errors.AscendRMSNormError
    ]
    missing = [name for name in classes if name not in text]
    # LibraryLoadError is described as "A library that needs runtime libraries this host lacks"
    assert missing == [], missing


def _test_extras() -> list[str]:
    """The names in pyproject.toml's test extras, in order, each with the Python its marker limits it to
    (the set-up line listed tomli bare, though pip skips it on 3.11 and later)."""
    import re

    from helpers import pyproject

    extras = pyproject()["project"]["optional-dependencies"]["test"]
    said = []
    for e in extras:
        name = re.split(r"[<>=!~;\[]", e, maxsplit=1)[0].strip()
        below = re.search(r";\s*python_version\s*<\s*'([0-9.]+)'", e)
        said.append(f"{name} (on Python below {below.group(1)})" if below else name)
    return said


@pytest.mark.skipif(shutil.which("make") is None, reason="no make")
def test_the_first_make_run_says_what_it_installs_and_that_it_is_once(tmp_path):
    """Run the real Makefile's set-up with a fake python (pip only logs): it speaks, then stays quiet."""
    (tmp_path / "Makefile").write_text((ROOT / "Makefile").read_text())
    for name in ("pyproject.toml", "_ascend_rmsnorm_cli.py"):  # what the set-up depends on
        (tmp_path / name).write_text((ROOT / name).read_text())
    log = tmp_path / "pip.log"
    venv_python = tmp_path / "venv-python"
    venv_python.write_text(f'#!/bin/sh\necho "$@" >> {log}\n[ "$1" = -c ] && exit 1\nexit 0\n')
    venv_python.chmod(0o755)
    fake = tmp_path / "fake-python3"
    fake.write_text(f'#!/bin/sh\nmkdir -p "$3/bin" && cp {venv_python} "$3/bin/python"\n')
    fake.chmod(0o755)
    # as a fresh shell would run it: not inside `make test VENV=... TORCH=...`, whose command-line
    # variables reach this make through its environment as well as through MAKEFLAGS
    outer = {"MAKEFLAGS", "MFLAGS", "MAKELEVEL", "MAKEOVERRIDES", "VENV", "TORCH", "PYTHON"}
    env = {name: value for name, value in os.environ.items() if name not in outer}
    first = subprocess.run(
        ["make", f"PYTHON={fake}", ".venv/.installed"], cwd=tmp_path, capture_output=True, text=True, env=env
    )
    assert first.returncode == 0, first.stdout + first.stderr
    said = first.stdout
    assert "first run: creating .venv" in said and "once" in said
    assert "installing torch==2.13.0 into .venv" in said
    extras = _test_extras()
    assert {"transformers", "nbformat", "hatchling"} <= set(extras)
    assert f"installing ascend-rmsnorm (editable) and its test extras ({', '.join(extras)}) into .venv" in said
    assert "not repeated unless pyproject.toml or _ascend_rmsnorm_cli.py changes" in said
    pip_calls = log.read_text()
    assert "-m pip install --progress-bar on torch==2.13.0" in pip_calls and " -q" not in pip_calls  # progress
    again = subprocess.run(
        ["make", f"PYTHON={fake}", ".venv/.installed"], cwd=tmp_path, capture_output=True, text=True, env=env
    )
    assert again.returncode == 0 and "installing" not in again.stdout


def _code_blocks(text: str) -> list[tuple[int, str, str]]:
    """(line, language, body) of every fenced code block of a Markdown text."""
    import re

    return [
        (text[: m.start()].count("\n") + 1, m.group(1), m.group(2))
        for m in re.finditer(r"^```(\w*)\n(.*?)^```", text, flags=re.M | re.S)
    ]


def test_every_python_block_in_the_docs_is_python():
    """A ```python block of the README or docs/ is what a user pastes into a script: it must at least
    parse (a signature written with a bare ``*,`` in a call does not)."""
    import ast

    bad = []
    for doc in (ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))):
        blocks = [b for b in _code_blocks(doc.read_text(encoding="utf-8")) if b[1] == "python"]
        assert doc.name != "README.md" or len(blocks) >= 2  # the API and the batch_invariant_mode blocks
        for line, _, body in blocks:
            try:
                ast.parse(body)
            except SyntaxError as err:
                bad.append(f"{doc.relative_to(ROOT)}:{line + (err.lineno or 0)}: {err.msg}")
    assert bad == []


def test_every_command_line_the_docs_quote_parses(capsys):
    """Each ``ascend-rmsnorm ...`` line the README, docs/ and examples/ quote (in backticks or at the start of
    a line), as a user would paste it, is one the real parser takes: a renamed or dropped option or
    sub-command shows here. Lines with ``...`` or ``[...]`` are synopses, not commands."""
    import re
    import shlex

    from ascend_rmsnorm.cli.main import build_parser

    files = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")), *sorted((ROOT / "examples").glob("*.sh"))]
    bad, seen = [], 0
    for doc in files:
        text = doc.read_text(encoding="utf-8")
        lines = re.findall(r"`(ascend-rmsnorm [^`]*)`", text) + re.findall(r"^\s*(ascend-rmsnorm [^\n#>]*)", text, re.M)
        for line in lines:
            if "..." in line or "[" in line or "$" in line:
                continue
            seen += 1
            argv = shlex.split(re.split(r"\s[>|]", line)[0])[1:]  # the shell's redirection or pipe is not ours
            try:
                _, extra = build_parser().parse_known_args(argv)
            except SystemExit:
                extra = [capsys.readouterr().err.strip().splitlines()[-1]]
            if extra:
                bad.append(f"{doc.relative_to(ROOT)}: {line!r}: {extra}")
    assert seen > 20 and bad == []


def test_the_design_layout_names_a_build_dir_as_process_tag_makes_it(monkeypatch):
    """docs/design.md §5's layout block spells a ``tmp/`` build dir's name with placeholders; the name
    ``process_tag.build_dir_name`` makes (with a pid namespace, boot id and start time, as on Linux) fits it."""
    import re

    from ascend_rmsnorm.jit import process_tag

    text = (ROOT / "docs" / "design.md").read_text(encoding="utf-8")
    template = re.search(r"^<root>/v<N>/tmp/(\S+)/ ", text, flags=re.M).group(1)
    pattern = "".join(
        (".+" if part == "<host>" else "[0-9a-f]+") if part.startswith("<") else re.escape(part)
        for part in re.split(r"(<\w+>)", template)
        if part
    )
    monkeypatch.setattr(process_tag, "_host", lambda: "node-1.example")
    if "_" not in (process_tag._pid_space() or ""):  # the block spells the name with both
        pytest.skip("no pid namespace or no readable boot id here: the name holds neither or no boot id")
    monkeypatch.setattr(process_tag, "_start_time", lambda pid: "3686684")
    name = process_tag.build_dir_name()
    assert re.fullmatch(pattern, name), (template, name)
