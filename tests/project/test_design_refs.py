"""Every design reference in the repo points at a section of docs/ that exists, and nothing points
outside the repo: no design brief, plan or notes file a clone does not have, no issue tracker numbers,
no absolute paths of the machine the code was written on (docs/design.md, its opening paragraph)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = next(p for p in Path(__file__).resolve().parents if (p / "pyproject.toml").is_file())
DOCS = {"design.md": ROOT / "docs" / "design.md", "perf-model.md": ROOT / "docs" / "perf-model.md"}

#: What is scanned: the package (kernels and emulation headers included), tests, benchmarks, examples,
#: tools, docs, and the files at the top.
SCANNED_DIRS = ("ascend_rmsnorm", "tests", "benchmarks", "examples", "tools", "docs")
SCANNED_TOP = ("README.md", "Makefile", "pyproject.toml", "_ascend_rmsnorm_cli.py")
SUFFIXES = {".py", ".asc", ".h", ".hpp", ".cpp", ".c", ".md", ".toml", ".sh", ".ipynb", ".txt", ".cfg", ".ini"}

#: "design.md §3", "docs/design.md §3 item 3b", "§3 items 1-4", "§3, §9", "perf-model.md §2".
_REF = re.compile(r"\b(design|perf-model)\.md((?:,? (?:and )?§\d+(?: items? \d+[a-z]?(?:-\d+[a-z]?)?)?)+)")
_TAIL = re.compile(r"§(\d+)(?: items? (\d+[a-z]?)(?:-(\d+[a-z]?))?)?")

#: References to things a clone of the repo does not have. Spelled in pieces so this file is no hit.
_OUTSIDE = [
    (re.compile(r"(?<!docs/)\b" + "DESIGN" + r"\.md"), "a design brief outside the repo (cite docs/design.md §N)"),
    (re.compile(r"\b" + "PLAN" + r"\.md|\bcoord " + "PLAN" + r"\b"), "a plan outside the repo"),
    (re.compile(r"/" + "work" + r"/"), "an absolute path of the machine the code was written on"),
    (re.compile(r"\b" + "jit-cache-" + r"anchors\b"), "notes outside the repo"),
    (re.compile(r"(?<![\w/.])" + "reference" + r"/[\w-]+\.md"), "a reference note outside the repo"),
    (re.compile(r"(?i)\bissues? #?\d+"), "an issue tracker number"),
]


def sections(doc: Path) -> dict[str, str]:
    """Section number -> its text, from the ``## N. Title`` headings."""
    text = doc.read_text(encoding="utf-8")
    heads = list(re.finditer(r"^## (\d+)\. .+$", text, flags=re.M))
    ends = [h.start() for h in heads[1:]] + [len(text)]
    return {m.group(1): text[m.end() : end] for m, end in zip(heads, ends)}


def _items(body: str) -> set[str]:
    """The numbered items of a section: lines that start with ``1.``, ``3b.``, ..."""
    return set(re.findall(r"^\s*(\d+[a-z]?)\. ", body, flags=re.M))


def problems(text: str, docs: dict[str, dict[str, str]]) -> list[str]:
    """Every bad reference in ``text`` (one line each), given the sections of each doc."""
    out = []
    for lineno, line in enumerate(text.splitlines(), 1):
        for m in _REF.finditer(line):
            secs = docs[f"{m.group(1)}.md"]
            for sec, first, last in _TAIL.findall(m.group(2)):
                if sec not in secs:
                    out.append(f"{lineno}: {m.group(1)}.md §{sec} does not exist")
                    continue
                for item in (first, last):
                    if item and item not in _items(secs[sec]):
                        out.append(f"{lineno}: {m.group(1)}.md §{sec} has no item {item}")
        for pattern, why in _OUTSIDE:
            for m in pattern.finditer(line):
                out.append(f"{lineno}: {m.group(0)!r}: {why}")
    return out


def _scanned_files() -> list[Path]:
    files = [ROOT / name for name in SCANNED_TOP if (ROOT / name).is_file()]
    for d in SCANNED_DIRS:
        for p in sorted((ROOT / d).rglob("*")):
            if p.is_file() and p.suffix in SUFFIXES and "__pycache__" not in p.parts:
                files.append(p)
    return files


@pytest.fixture(scope="module")
def doc_sections() -> dict[str, dict[str, str]]:
    return {name: sections(path) for name, path in DOCS.items()}


def test_the_docs_have_numbered_sections(doc_sections):
    assert {"1", "2", "3", "4", "5", "6", "7", "8", "9", "10", "11"} <= set(doc_sections["design.md"])
    assert {"1", "2", "3", "4"} <= set(doc_sections["perf-model.md"])
    assert {"1", "2", "3", "3b", "4", "5"} <= _items(doc_sections["design.md"]["3"])  # the contract's items


def test_every_reference_names_a_section_that_exists_and_nothing_points_outside_the_repo(doc_sections):
    me = Path(__file__).resolve()
    files = [p for p in _scanned_files() if p.resolve() != me]
    assert any(p.suffix == ".asc" for p in files) and any(p.suffix == ".h" for p in files)  # kernels scanned
    found = []
    cited = 0
    for path in files:
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            continue
        cited += len(_REF.findall(text))
        found += [f"{path.relative_to(ROOT)}:{p}" for p in problems(text, doc_sections)]
    assert found == []
    assert cited >= 30  # the code does cite the design: this test is not vacuous


def test_the_checker_catches_bad_references(doc_sections):
    """Each kind of bad reference is found, and a good one is not."""
    good = "see docs/design.md §3 item 3b, docs/design.md §3 items 1-4, design.md §3, §9, perf-model.md §2"
    assert problems(good, doc_sections) == []
    bad = {
        "docs/design.md §99": "§99 does not exist",
        "docs/design.md §3 item 9": "has no item 9",
        "docs/design.md §3, §42": "§42 does not exist",
        "docs/perf-model.md §77": "§77 does not exist",
        "DESIGN" + ".md §3": "design brief outside the repo",
        "the backend protocol of " + "PLAN" + ".md": "a plan outside the repo",
        "see /" + "work" + "/coord/notes/x.md": "absolute path",
        "(" + "reference" + "/kernel-performance.md)": "reference note",
        "the families of " + "issue" + " 10": "issue tracker number",
        "jit-cache-" + "anchors K1": "notes outside the repo",
    }
    for text, why in bad.items():
        found = problems(text, doc_sections)
        assert found and any(why in f for f in found), (text, found)


#: The size above which a file of the package needs a reason in docs/design.md §10.
LONG_FILE_LINES = 600


def _long_file_reasons(body: str) -> set[str]:
    """The files §10 gives a reason for: the backticked path that opens each bullet."""
    return set(re.findall(r"^- `([^`]+)`", body, flags=re.M))


def test_every_package_file_over_600_lines_has_a_reason_in_the_design(doc_sections):
    package = ROOT / "ascend_rmsnorm"
    lines = {}
    for p in sorted(package.rglob("*")):
        if p.is_file() and p.suffix in SUFFIXES and "__pycache__" not in p.parts:
            lines[p.relative_to(package).as_posix()] = len(p.read_bytes().splitlines())
    reasons = _long_file_reasons(doc_sections["design.md"]["10"])
    long_files = {name for name, n in lines.items() if n > LONG_FILE_LINES}
    assert long_files - reasons == set(), "give these files a reason in docs/design.md §10"
    stale = {name for name in reasons if lines.get(name, 0) <= LONG_FILE_LINES}
    assert stale == set(), "gone or no longer over the limit: drop their bullets from docs/design.md §10"


_PATH = re.compile(r"`((?:[\w.-]+/)+[\w.-]+\.(?:py|asc|h|cpp|md|sh|ipynb|toml|json))`")


def test_every_file_the_docs_name_exists():
    """A path in backticks in the README or docs/ names a file of the repo (from the top, or from
    inside the package), so moving a file means updating the docs in the same change."""
    missing, seen = [], 0
    for doc in (ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))):
        for m in _PATH.finditer(doc.read_text(encoding="utf-8")):
            name, seen = m.group(1), seen + 1
            if not ((ROOT / name).exists() or (ROOT / "ascend_rmsnorm" / name).exists()):
                missing.append(f"{doc.relative_to(ROOT)}: {name}")
    assert seen > 50 and missing == []  # the docs name over a hundred paths: a pattern gone blind shows


#: The package's own variables the brief's table lists (docs/design.md §11 names every other one).
BRIEF_VARIABLES = {
    f"ASCEND_RMSNORM_{n}"
    for n in ("BACKEND", "JIT", "CACHE_DIR", "PREBUILT_DIR", "ARCH", "BISHENG", "CXX", "STRICT", "LOG_LEVEL")
}


def test_every_variable_beyond_the_briefs_is_a_departure_in_the_design(doc_sections):
    from ascend_rmsnorm import _envvars

    ours = {name for name in _envvars.VARS if name.startswith(_envvars.PREFIX)}
    assert BRIEF_VARIABLES <= ours
    bullet = next(b for b in doc_sections["design.md"]["11"].split("\n- ") if "environment variables" in b)
    named = set(re.findall(r"`(ASCEND_RMSNORM_\w+)`", bullet))
    missing = ours - BRIEF_VARIABLES - named
    assert missing == set(), "name these in docs/design.md §11 (More environment variables)"
