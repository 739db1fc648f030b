"""Device code calls only device code: every function the kernels run is marked ``__aicore__``, and no
lambda stands in for one.

A function with no execution-space mark is a host function to bisheng, and an ``__aicore__`` function may
call only ``__global__`` and other ``__aicore__`` functions (asc-devkit docs/zh/guide, 编程指南/语言扩展层/
SIMD-BuiltIn关键字.md, 函数执行空间限定符); asc-devkit marks even its constexpr helpers. The one device-side
lambda in asc-devkit carries ``__attribute__((cce_aicore))``, and its docs say nothing of lambdas, so the
kernels use none. Neither the emulation (g++) nor ``tools/typecheck_asc.py`` (clang, the marks defined
empty) can see a missing mark, so this reads the sources: every function defined in a kernel header, and
in an ``.asc`` before its host part, must carry ``__aicore__`` (or the macros that expand to it).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

import ascend_rmsnorm

KERNELS = Path(ascend_rmsnorm.__file__).parent / "kernels"
#: What marks a function as device code here: the mark itself, the kernel entry's macro, and the UB plan's
#: (``common/device_plan.h`` defines it as ``__aicore__``; ``host/tiling.h`` includes the same file for the host).
DEVICE_MARKS = ("__aicore__", "RMSNORM_KERNEL", "RMSNORM_PLAN_FN")
#: Where an ``.asc`` file's host part (the launchers) begins.
HOST_PART = '#include "host/'

_SCOPE = re.compile(r"\b(namespace|class|struct|union|enum)\b")
_FUNCTION = re.compile(r"\)\s*(const\s*)?(noexcept\s*)?(override\s*)?(final\s*)?$")
_CTOR_INIT = re.compile(r"\)\s*:[^;]*[)}]$")  # a constructor's initialiser list, then its body
_CTOR_MEMBER = re.compile(r"\)\s*:[^;]*\w$")  # a member's brace initialiser inside that list
_LAMBDA = re.compile(r"\[[^\[\]]*\]\s*(\([^()]*\))?\s*(mutable\s*)?(->[^{};]*)?$")
_BRACE_INIT = re.compile(r"(=|\w|>|\])\s*$")


def _blank(text: str) -> str:
    """``text`` with comments, string and char literals and preprocessor lines made spaces (lines kept)."""
    out, i, n = [], 0, len(text)
    line_start = True
    while i < n:
        c = text[i]
        if line_start and text[i:].lstrip(" \t").startswith("#"):  # a directive, with its continuations
            j = i
            while j < n:
                k = text.find("\n", j)
                k = n if k < 0 else k
                if k > j and text[k - 1] == "\\":
                    j = k + 1
                    continue
                j = k
                break
            out.append(re.sub(r"[^\n]", " ", text[i:j]))
            i = j
            continue
        if text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            out.append(" " * (j - i))
            i = j
            continue
        if text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            out.append(re.sub(r"[^\n]", " ", text[i:j]))
            i = j
            continue
        if c in "\"'":
            j = i + 1
            while j < n and text[j] != c:
                j += 2 if text[j] == "\\" else 1
            out.append(c + " " * (j - i - 1) + c)
            i = j + 1
            continue
        out.append(c)
        line_start = c == "\n" or (line_start and c in " \t")
        i += 1
    return "".join(out)


def unmarked(text: str, name: str = "<text>") -> list[str]:
    """Each function defined without a device mark, and each lambda, in device source ``text``: ``name:line:
    what``. A brace this reader cannot place raises, so a new construct is placed here, not passed over."""
    code = _blank(text)
    found: list[str] = []
    # "scope" (namespace, class, ...), "fn" (a function body and blocks in it), "init" (a brace initialiser),
    # "member" (a member's brace initialiser in a constructor's initialiser list)
    stack: list[str] = []
    head_start = 0
    for i, c in enumerate(code):
        if c in ";}":
            if c == "}" and stack and stack.pop() == "member":
                continue  # the initialiser list goes on: the head is still the constructor's
            head_start = i + 1
            continue
        if c != "{":
            continue
        head = " ".join(code[head_start:i].split())
        where = f"{name}:{code.count(chr(10), 0, i) + 1}"
        if stack and stack[-1] in ("fn", "init"):
            if stack[-1] == "fn" and _LAMBDA.search(head):
                found.append(f"{where}: a lambda: {head}")
            stack.append(stack[-1])
        elif _SCOPE.search(head) and "(" not in head or head == 'extern " "':
            stack.append("scope")
        elif _CTOR_MEMBER.search(head):
            stack.append("member")
            continue
        elif _FUNCTION.search(head) or _CTOR_INIT.search(head):
            if not any(mark in head for mark in DEVICE_MARKS):
                found.append(f"{where}: no __aicore__: {head}")
            stack.append("fn")
        elif _BRACE_INIT.search(head):
            stack.append("init")  # a brace initialiser at namespace or class scope
        else:
            raise AssertionError(f"{where}: cannot tell what this brace opens: {head!r}")
        head_start = i + 1
    return found


def device_sources() -> dict[str, str]:
    """The device code of every kernel source: the headers outside host/ and emu/, and each .asc up to its
    host part."""
    sources = {}
    for path in sorted(KERNELS.rglob("*")):
        rel = path.relative_to(KERNELS).as_posix()
        if path.suffix == ".h" and rel.split("/")[0] not in ("host", "emu"):
            sources[rel] = path.read_text()
        elif path.suffix == ".asc":
            text = path.read_text()
            assert HOST_PART in text, f"{rel} has no host part where this test expects one"
            sources[rel] = text[: text.index(HOST_PART)]
    return sources


def test_every_device_function_is_marked_and_none_is_a_lambda():
    sources = device_sources()
    assert {"rmsnorm.asc", "calibrate.asc", "bwd/backward_stream.h", "common/ub_plan.h"} <= set(sources)
    found = [f for rel, text in sources.items() for f in unmarked(text, rel)]
    assert found == []


def test_the_reader_counts_the_device_functions():
    """It reads what it checks: the forward group's header defines its methods, each marked."""
    text = device_sources()["fwd/forward_group.h"]
    marked_defs = len(re.findall(r"__aicore__[^;{}]*\)\s*(const\s*)?\{", _blank(text)))
    assert marked_defs >= 5
    assert unmarked(text) == []


GOOD = """
#include "x.h"
#define MAC(a) \\
    int a() { return 1; }
namespace rmsnorm {
constexpr int kA = 3;
constexpr int kT[2] = {1, 2};
template <typename T> class K : public B<T> {
public:
    __aicore__ inline K(int a) : a_(a), b_{a + 1} {}
    __aicore__ inline static constexpr int Steps() { return kA; }
    __aicore__ inline int F(int x) const { if (x) { return "}"[0]; } return '{'; }
private:
    int a_{0};
    int b_ = 1;
    struct P { int q; };
};
RMSNORM_KERNEL void entry(GM_ADDR x) { K<int> k(1); k.F(2); }
}  // namespace rmsnorm
"""


@pytest.mark.parametrize(
    "bad, what",
    [
        ("    static constexpr int Steps() { return kA; }", "no __aicore__: static constexpr int Steps()"),
        ("    inline int G(int x) const { return x; }", "no __aicore__: inline int G(int x) const"),
        (
            "    __aicore__ inline void H() { auto f = [&](int j) { return j; }; f(1); }",
            "a lambda: auto f = [&](int j)",
        ),
        ("    __aicore__ inline void L() { auto f = [=] { return 1; }; }", "a lambda: auto f = [=]"),
    ],
)
def test_the_reader_finds_an_unmarked_function_or_a_lambda(bad, what):
    assert unmarked(GOOD) == []
    text = GOOD.replace("private:\n", bad + "\nprivate:\n")
    found = unmarked(text)
    assert len(found) == 1 and what in found[0], found
