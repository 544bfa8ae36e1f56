"""The package's layers: no import circles (imports inside functions included), and the
planner and the host-side grid arithmetic import without the DSL."""

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "src" / "wsgemm"


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported(path: Path) -> set[str]:
    """Modules of the package that ``path`` imports, anywhere in it."""
    name = module_name(path)
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                target = f"{base}.{node.module}" if node.module else base
            else:
                target = node.module or ""
            # ``from . import x`` imports the submodule x; ``from .m import name`` the module m.
            submodules = [f"{target}.{alias.name}" for alias in node.names if f"{target}.{alias.name}" in MODULES]
            candidates = submodules if len(submodules) == len(node.names) else [target] + submodules
        elif isinstance(node, ast.Import):
            candidates = [alias.name for alias in node.names]
        else:
            continue
        found.update(c for c in candidates if c.startswith("wsgemm") and c in MODULES)
    found.discard(name)
    return found


MODULES = {module_name(p) for p in PACKAGE.rglob("*.py")}


def graph() -> dict[str, set[str]]:
    return {module_name(p): imported(p) for p in PACKAGE.rglob("*.py")}


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index, low, stack, on_stack, found = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in edges.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in edges:
        if v not in index:
            visit(v)
    return found


def test_no_module_imports_one_that_imports_it_back():
    edges = graph()
    # The package's own __init__ re-exports the public API; leave it out of the circles.
    for name in edges:
        edges[name] = {m for m in edges[name] if m != "wsgemm"}
    assert cycles(edges) == []


PLANNER = ("gpu", "problem", "candidates", "cost", "rank", "table", "launch")


def test_the_planner_does_not_reach_the_api_the_kernels_or_torch_facing_modules():
    """The modules that choose a plan need only config.py and grid.py: the autotuner,
    which times plans, and the package's entry point are the only ones that reach
    further."""
    edges = graph()
    reached, todo = set(), [f"wsgemm.tuning.{name}" for name in PLANNER]
    while todo:
        m = todo.pop()
        if m in reached:
            continue
        reached.add(m)
        todo += edges.get(m, ())
    assert reached - {f"wsgemm.tuning.{name}" for name in PLANNER} == {"wsgemm.config", "wsgemm.grid",
                                                                         "wsgemm.errors", "wsgemm.hardware"}
