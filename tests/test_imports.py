"""The package's import graph has no cycle (every import counts: TYPE_CHECKING ones and
imports inside functions too), and no module is over 500 lines."""

from __future__ import annotations

import ast
from pathlib import Path

import vllm_bisect

SRC = Path(vllm_bisect.__file__).parent
MAX_LINES = 500
# Known cycles: none (the CLI's former cli <-> cli_tools / cli_sweep cycles went with its
# split into the cli/ package).
KNOWN: set[tuple[str, str]] = set()


def module_name(path: Path) -> str:
    parts = list(path.relative_to(SRC.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def imports(path: Path, modules: set[str]) -> set[str]:
    """The package modules ``path`` imports (``from pkg import mod`` names the module)."""
    me = module_name(path)
    package = me if path.name == "__init__.py" else me.rpartition(".")[0]
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            names = [base] + [f"{base}.{a.name}" for a in node.names]
        else:
            continue
        for name in names:
            # the deepest package module the name refers to
            while name and name not in modules:
                name = name.rpartition(".")[0]
            if name and name != me:
                out.add(name)
    return out


def graph() -> dict[str, set[str]]:
    files = {module_name(p): p for p in SRC.rglob("*.py")}
    mods = set(files)
    return {m: {d for d in imports(p, mods) if (m, d) not in KNOWN} for m, p in files.items()}


def find_cycle(g: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}  # 1: on the stack, 2: done
    stack: list[str] = []

    def visit(m: str) -> list[str] | None:
        state[m] = 1
        stack.append(m)
        for d in sorted(g.get(m, ())):
            if state.get(d) == 1:
                return [*stack[stack.index(d):], d]
            if d not in state and (c := visit(d)):
                return c
        stack.pop()
        state[m] = 2
        return None

    for m in sorted(g):
        if m not in state and (c := visit(m)):
            return c
    return None


def test_the_checker_sees_a_cycle() -> None:
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None


def test_imports_inside_functions_count() -> None:
    g = graph()
    # (evaluate imports the container runtime only when a container is started)
    assert "vllm_bisect.runtime.container" in g["vllm_bisect.bisect.evaluate"]


def test_no_import_cycle() -> None:
    cycle = find_cycle(graph())
    assert cycle is None, "import cycle: " + " -> ".join(cycle or [])


def test_no_module_over_500_lines() -> None:
    long = {module_name(p): n for p in SRC.rglob("*.py")
            if (n := len(p.read_text().splitlines())) > MAX_LINES}
    assert not long, f"modules over {MAX_LINES} lines: {long}"
