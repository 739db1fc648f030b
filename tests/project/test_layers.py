"""The package's import graph, read from the AST of every module (imports inside functions included):
no circles, and no module imports a layer above its own.

The layers, bottom to top. A module belongs to the layer of the longest prefix that names it; ``perf.notes``
is the perf model's leaf, which the backends use to name host-made tensors, so it sits at the bottom.
"""

from __future__ import annotations

import ast
from pathlib import Path

import ascend_rmsnorm

PACKAGE = Path(ascend_rmsnorm.__file__).parent
LAYERS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("foundation", ("_version", "_envvars", "_userns", "_forksafe", "errors", "contract", "_habits", "perf.notes")),
    ("log", ("_log",)),
    ("env", ("_env",)),
    ("jit", ("jit",)),
    ("backends", ("backends",)),
    ("ops", ("_ops", "ops")),
    ("api", ("functional", "modules")),
    ("integrations", ("integrations",)),
    ("perf", ("perf",)),
    ("cli", ("cli",)),
    ("entry", ("", "__main__")),  # the package's __init__ and ``python -m``
)


def _modules() -> dict[str, Path]:
    """Dotted name (without the package prefix; "" for the package itself) -> file."""
    out = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = list(path.relative_to(PACKAGE).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


def _imports(name: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """The package modules ``name`` imports (a ``from X import y`` counts X.y when that is a module)."""
    package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
    package = [p for p in package if p]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[: len(package) - node.level + 1] + ([node.module] if node.module else [])
                stem = ".".join(p for p in base if p)
            elif node.module and (node.module + ".").startswith("ascend_rmsnorm."):
                stem = node.module[len("ascend_rmsnorm") :].lstrip(".")
            else:
                continue
            targets = [f"ascend_rmsnorm.{stem}.{a.name}".replace("..", ".") for a in node.names]
            targets = [t if t[len("ascend_rmsnorm.") :] in modules else f"ascend_rmsnorm.{stem}" for t in targets]
        else:
            continue
        for target in targets:
            if target == "ascend_rmsnorm" or target.startswith("ascend_rmsnorm."):
                short = target[len("ascend_rmsnorm.") :] if target != "ascend_rmsnorm" else ""
                if short.endswith("."):
                    short = short[:-1]
                if short in modules and short != name:
                    found.add(short)
    return found


def _layer(name: str) -> int:
    best = None
    for rank, (_, prefixes) in enumerate(LAYERS):
        for prefix in prefixes:
            matches = name == prefix or (prefix and name.startswith(prefix + "."))
            if matches and (best is None or len(prefix) > best[0]):
                best = (len(prefix), rank)
    assert best is not None, f"module {name!r} has no layer: add it to LAYERS in this test"
    return best[1]


def _graph() -> dict[str, set[str]]:
    modules = _modules()
    return {name: _imports(name, path, modules) for name, path in modules.items()}


def test_the_graph_is_read_right():
    """The reader sees the edges it must (relative, absolute, function-level) and none it must not."""
    graph = _graph()
    ops = set().union(*(deps for name, deps in graph.items() if name == "_ops" or name.startswith("ops.")))
    assert {"backends.choice", "contract"} <= ops
    assert "_envvars" in graph["_log"] and "_log" in graph["_env"]
    assert "perf.notes" in graph["backends.kernel"]  # a function-level import before, a top-level one now
    assert graph["_envvars"] == {"_userns"} and graph["_userns"] == set() and graph["perf.notes"] == set()


def test_no_layer_imports_one_above_it():
    graph = _graph()
    names = [n for n, _ in LAYERS]
    bad = [
        f"{a} ({names[_layer(a)]}) imports {b} ({names[_layer(b)]})"
        for a, deps in sorted(graph.items())
        for b in sorted(deps)
        if _layer(b) > _layer(a)
    ]
    assert not bad, "imports that reach up a layer:\n" + "\n".join(bad)


def test_no_import_circles():
    graph = _graph()
    circles = []
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node: str) -> None:
        state[node] = 1
        path.append(node)
        for dep in sorted(graph[node]):
            if state.get(dep) == 1:
                circles.append(" -> ".join(path[path.index(dep) :] + [dep]))
            elif dep not in state:
                visit(dep)
        path.pop()
        state[node] = 2

    for node in sorted(graph):
        if node not in state:
            visit(node)
    assert not circles, "import circles:\n" + "\n".join(circles)
