"""tests/ mirrors the package: each test file lies in the folder of the part it tests, the helpers in support/."""

from __future__ import annotations

from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]

#: The folders of tests/ and the part of the package each one tests.
PARTS = {
    "numerics": "the numerics contract on the torch path, against the scalar oracle",
    "api": "the public functions and module, the environment variables",
    "ops": "the registered torch ops: schemas, autograd, compile, export, DTensor",
    "backends": "backend choice, the kernel backends' launch, NPU host facts",
    "kernel": "the Ascend C kernel through the CPU emulation, and the emulation's rules",
    "jit": "toolchain discovery, build, cache, trust",
    "perf": "the performance model",
    "cli": "the command line and what a person runs",
    "integrations": "batch_invariant_mode, compile isolation, transformers",
    "project": "packaging, docs, the repository's own layout",
}
SUPPORT = "support"  # helper modules, worker scripts and C++ sources; no tests


def _is_test_file(path: Path) -> bool:
    """The files pytest collects by default."""
    return path.suffix == ".py" and (path.name.startswith("test_") or path.stem.endswith("_test"))


def _files(root: Path) -> list[Path]:
    return [p for p in root.rglob("*") if p.is_file() and "__pycache__" not in p.parts]


def test_every_test_file_lies_in_a_part_folder():
    misplaced = [
        str(p.relative_to(TESTS))
        for p in _files(TESTS)
        if _is_test_file(p) and (len(p.relative_to(TESTS).parts) != 2 or p.relative_to(TESTS).parts[0] not in PARTS)
    ]
    assert misplaced == [], f"test files outside tests/<part>/ (parts: {', '.join(PARTS)}): {misplaced}"


def test_no_test_file_at_the_top_and_none_in_support():
    top = sorted(p.name for p in TESTS.iterdir() if p.is_file() and p.name not in ("conftest.py", ".gitignore"))
    assert top == [], f"only conftest.py belongs at tests/ top level: {top}"
    in_support = sorted(str(p.relative_to(TESTS)) for p in _files(TESTS / SUPPORT) if _is_test_file(p))
    assert in_support == [], f"support/ holds helpers, not tests: {in_support}"


def test_every_folder_is_a_part_or_support_and_holds_tests():
    folders = {p.name for p in TESTS.iterdir() if p.is_dir() and p.name != "__pycache__" and not p.name.startswith(".")}
    strays = sorted(folders - set(PARTS) - {SUPPORT})
    assert strays == [], f"folders of tests/ that are no part of the package (parts: {', '.join(PARTS)}): {strays}"
    empty = sorted(part for part in PARTS if not any(_is_test_file(p) for p in _files(TESTS / part)))
    assert empty == [], f"part folders without a test file: {empty}"
