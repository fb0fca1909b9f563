"""The package's import graph has no cycle (every import counts: TYPE_CHECKING ones, imports
inside functions and ``importlib.import_module("...")`` / ``__import__("...")`` with a
literal name too), no module is over 500 lines; and the architecture's counts: no arrow runs
back up between packages (``LAYERS``) nor inside ``bisect/`` (``BISECT_LAYERS``), no circle
between packages nor between ``bisect/``'s sub-packages and modules, no module over 400
lines, no function over 60 lines in bisect/ and verdict/."""

from __future__ import annotations

import ast
from collections.abc import Callable
from pathlib import Path

import vllm_bisect

SRC = Path(vllm_bisect.__file__).parent
MAX_LINES = 500
# Known cycles: none (the CLI's former cli <-> cli_tools / cli_sweep cycles went with its
# split into the cli/ package).
KNOWN: set[tuple[str, str]] = set()


def module_name(path: Path, src: Path = SRC) -> str:
    parts = list(path.relative_to(src.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


IMPORT_CALLS = {"import_module", "__import__"}


def imported_by_call(node: ast.Call) -> str | None:
    """The module a call imports by a literal name (``importlib.import_module("a.b")``,
    ``import_module("a.b")``, ``__import__("a.b")``), else None."""
    f = node.func
    name = f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else ""
    if name in IMPORT_CALLS and node.args and isinstance(node.args[0], ast.Constant) \
            and isinstance(node.args[0].value, str):
        return node.args[0].value
    return None


def imports(path: Path, modules: set[str], src: Path = SRC) -> set[str]:
    """The package modules ``path`` imports (``from pkg import mod`` names the module)."""
    me = module_name(path, src)
    package = me if path.name == "__init__.py" else me.rpartition(".")[0]
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Call) and (called := imported_by_call(node)):
            names = [called]
        elif isinstance(node, ast.Import):
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


def graph(src: Path = SRC) -> dict[str, set[str]]:
    files = {module_name(p, src): p for p in src.rglob("*.py")}
    mods = set(files)
    return {m: {d for d in imports(p, mods, src) if (m, d) not in KNOWN}
            for m, p in files.items()}


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
    assert "vllm_bisect.runtime.container" in g["vllm_bisect.bisect.measurement.evaluate"]


def test_no_import_cycle() -> None:
    cycle = find_cycle(graph())
    assert cycle is None, "import cycle: " + " -> ".join(cycle or [])


def test_no_module_over_500_lines() -> None:
    long = {module_name(p): n for p in SRC.rglob("*.py")
            if (n := len(p.read_text().splitlines())) > MAX_LINES}
    assert not long, f"modules over {MAX_LINES} lines: {long}"


# -- the architecture's counts (issue 27) ----------------------------------------------------
MAX_LINES_NOW = 400
MAX_FUNCTION_LINES = 60
SHORT_FUNCTIONS_IN = ("bisect", "verdict")
# packages from the bottom layer up: a module may import its own layer and the ones below
LAYERS: list[set[str]] = [
    {"", "errors", "models", "symptoms", "spec", "envinfo", "net", "text", "gitrepo",
     "interrupt"},
    {"runtime", "verdict"},
    {"builders", "probes"},
    {"bisect"},
    # the report renders result documents; the studies (isolate, explain) own their sections
    # (model and render, report_section.py) and write their documents; the report names
    # each section by dotted path and imports it only for a result that has it, so it sits
    # below them (issues 27, 52)
    {"report"},
    {"isolate", "sim", "triage", "compare", "sweep", "demo", "explain", "watch", "run_bisect"},
    {"bot"},
    {"cli"},
]


def layer_of(module: str) -> int:
    parts = module.split(".")
    top = parts[1] if len(parts) > 1 else ""
    return next(i for i, layer in enumerate(LAYERS) if top in layer)


def test_every_package_has_a_layer() -> None:
    for m in graph():
        layer_of(m)  # StopIteration: a new package needs its place in LAYERS


def test_no_arrow_runs_back_up_between_packages() -> None:
    up = {(m, d) for m, ds in graph().items() for d in ds if layer_of(d) > layer_of(m)}
    assert not up, f"imports that run back up between packages: {sorted(up)}"
    assert ("vllm_bisect.runtime.container", "vllm_bisect.builders.base") not in up


def test_the_checker_sees_an_arrow_up() -> None:
    assert layer_of("vllm_bisect.runtime.launch") < layer_of("vllm_bisect.builders.base")
    assert layer_of("vllm_bisect") == 0


def test_no_module_over_400_lines() -> None:
    long = {module_name(p): n for p in SRC.rglob("*.py")
            if (n := len(p.read_text().splitlines())) > MAX_LINES_NOW}
    assert not long, f"modules over {MAX_LINES_NOW} lines: {long}"


def long_functions(path: Path, limit: int) -> dict[str, int]:
    """Functions (and methods) in ``path`` longer than ``limit`` lines, by name."""
    out = {}
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            n = (node.end_lineno or node.lineno) - node.lineno + 1
            if n > limit:
                out[f"{path.name}:{node.name}"] = n
    return out


def test_the_checker_sees_a_long_function(tmp_path: Path) -> None:
    f = tmp_path / "f.py"
    f.write_text("def f() -> None:\n" + "    x = 1\n" * 70)
    assert long_functions(f, 60) == {"f.py:f": 71}
    assert long_functions(f, 71) == {}


def test_no_function_over_60_lines_in_bisect_and_verdict() -> None:
    long: dict[str, int] = {}
    for pkg in SHORT_FUNCTIONS_IN:
        for p in (SRC / pkg).rglob("*.py"):
            long |= long_functions(p, MAX_FUNCTION_LINES)
    assert not long, f"functions over {MAX_FUNCTION_LINES} lines: {long}"


# -- inside bisect/ and between packages (issue 43) --------------------------------------------
# bisect/'s sub-packages and top-level modules from the bottom layer up (bisect/__init__.py
# says what each layer is): a module may import its own layer and the ones below
BISECT_LAYERS: list[set[str]] = [
    {"", "release", "range", "terms", "events", "endpoint_doc", "memory_step", "forecast"},
    {"policies"},
    {"state"},
    {"measurement", "bench"},
    {"tester", "reruns"},
    {"search", "recheck", "rest", "forecast_spread", "forecast_events", "endpoint_env"},
    # the composition root sits above the searches: a search is handed the tester (and the
    # store, the policy) and never reaches for the root that assembles them (issue 52)
    {"core", "wiring"},
    {"driver", "culprits", "multi", "run_session", "hook"},
]


def bisect_unit(module: str) -> str | None:
    """``vllm_bisect.bisect.search.binary`` -> ``search``; None outside bisect/."""
    parts = module.split(".")
    if parts[1:2] != ["bisect"]:
        return None
    return parts[2] if len(parts) > 2 else ""


def bisect_layer_of(module: str) -> int:
    unit = bisect_unit(module)
    return next(i for i, layer in enumerate(BISECT_LAYERS) if unit in layer)


def bisect_arrows_up(g: dict[str, set[str]]) -> set[tuple[str, str]]:
    return {(m, d) for m, ds in g.items() if bisect_unit(m) is not None for d in ds
            if bisect_unit(d) is not None and bisect_layer_of(d) > bisect_layer_of(m)}


def unit_graph(g: dict[str, set[str]], unit: Callable[[str], str | None]) -> dict[str, set[str]]:
    """The graph between units (``unit(module)``; None: left out), arrows inside one unit
    dropped."""
    out: dict[str, set[str]] = {}
    for m, ds in g.items():
        u = unit(m)
        if u is None:
            continue
        out.setdefault(u, set()).update(v for d in ds if (v := unit(d)) is not None and v != u)
    return out


def package(module: str) -> str:
    """``vllm_bisect.isolate.studies`` -> ``isolate``; a top-level module is its own."""
    parts = module.split(".")
    top = parts[1] if len(parts) > 1 else ""
    return top


def test_every_bisect_module_has_a_layer() -> None:
    for m in graph():
        if bisect_unit(m) is not None:
            bisect_layer_of(m)  # StopIteration: a new module of bisect/ needs its BISECT_LAYERS


def test_no_arrow_runs_back_up_inside_bisect() -> None:
    up = bisect_arrows_up(graph())
    assert not up, f"imports that run back up inside bisect/: {sorted(up)}"


def test_no_circle_between_packages_nor_inside_bisect() -> None:
    g = graph()
    for what, unit in (("packages", package), ("bisect/'s parts", bisect_unit)):
        cycle = find_cycle(unit_graph(g, unit))
        assert cycle is None, f"a circle between {what}: " + " -> ".join(cycle or [])


def _tree(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        f = root / "vllm_bisect" / name
        f.parent.mkdir(parents=True, exist_ok=True)
        f.write_text(text)
    return root / "vllm_bisect"


def test_the_checker_sees_an_arrow_up_inside_bisect_and_through_importlib(tmp_path: Path) -> None:
    src = _tree(tmp_path, {
        "__init__.py": "", "bisect/__init__.py": "", "bisect/search/__init__.py": "",
        # the range reaches up to the hook, through importlib
        "bisect/range.py": "import importlib\n\n\ndef f():\n"
                           "    return importlib.import_module('vllm_bisect.bisect.hook')\n",
        "bisect/hook.py": "from vllm_bisect.bisect import range\n",
        # the composition root and a search import each other
        "bisect/core.py": "from vllm_bisect.bisect.search.binary import BinarySearch\n",
        "bisect/search/binary.py": "from vllm_bisect.bisect.core import open_core\n",
    })
    g = graph(src)
    assert g["vllm_bisect.bisect.range"] == {"vllm_bisect.bisect.hook"}
    assert bisect_arrows_up(g) == {("vllm_bisect.bisect.range", "vllm_bisect.bisect.hook"),
                                   ("vllm_bisect.bisect.search.binary", "vllm_bisect.bisect.core")}
    assert find_cycle(unit_graph(g, bisect_unit)) == ["core", "search", "core"]
    assert bisect_layer_of("vllm_bisect.bisect.hook") > bisect_layer_of("vllm_bisect.bisect.core")


SEARCH_TO_CORE = {
    "the module": "from vllm_bisect.bisect import core\n",
    "a name from it": "from vllm_bisect.bisect.core import open_core\n",
    "relatively": "from ..core import Core\n",
    "inside a function": "def f():\n    from vllm_bisect.bisect.core import Core\n"
                         "    return Core\n",
    "through importlib": "import importlib\n\n\ndef f():\n"
                         "    return importlib.import_module('vllm_bisect.bisect.core')\n",
}


def test_a_search_may_not_import_the_composition_root(tmp_path: Path) -> None:
    """A search is handed the tester; importing ``bisect/core`` (the root that assembles it)
    is an arrow up, however it is written (issue 52). The root may import a search."""
    for i, (how, text) in enumerate(SEARCH_TO_CORE.items()):
        src = _tree(tmp_path / str(i), {
            "__init__.py": "", "bisect/__init__.py": "", "bisect/search/__init__.py": "",
            "bisect/core.py": "from vllm_bisect.bisect.search.binary import BinarySearch\n",
            "bisect/search/binary.py": text,
        })
        assert bisect_arrows_up(graph(src)) == {
            ("vllm_bisect.bisect.search.binary", "vllm_bisect.bisect.core")}, how
    assert bisect_layer_of("vllm_bisect.bisect.core") > bisect_layer_of(
        "vllm_bisect.bisect.search.binary")


# -- the report imports no study (issue 52) ----------------------------------------------------
def study_packages() -> set[str]:
    """The packages that own a section of result.json (``report.sections.STUDY_SECTIONS``)."""
    from vllm_bisect.report.sections import STUDY_SECTIONS

    return {package(k.path.partition(":")[0]) for k in STUDY_SECTIONS.values()}


def report_imports_of(g: dict[str, set[str]], packages: set[str]) -> set[tuple[str, str]]:
    """The imports from report/ into ``packages``."""
    return {(m, d) for m, ds in g.items() if package(m) == "report" for d in ds
            if package(d) in packages}


def test_the_report_imports_no_study() -> None:
    """Each study owns its section (model and render) in its own package, above the report;
    report/ names it by dotted path only, and imports none of it."""
    studies = study_packages()
    assert studies == {"isolate", "explain"}
    assert all(layer_of(f"vllm_bisect.{s}") > layer_of("vllm_bisect.report") for s in studies)
    assert not report_imports_of(graph(), studies)


def test_the_checker_sees_the_report_import_a_study(tmp_path: Path) -> None:
    plants = {
        "the section": "from vllm_bisect.explain.report_section import explain_lines\n",
        "the package": "from vllm_bisect import isolate\n",
        "inside a function": "def f():\n    from vllm_bisect.isolate import report_section\n"
                             "    return report_section\n",
        "through importlib": "import importlib\n\n\ndef f():\n    return importlib."
                             "import_module('vllm_bisect.explain.report_section')\n",
    }
    for i, (how, text) in enumerate(plants.items()):
        src = _tree(tmp_path / str(i), {
            "__init__.py": "", "report/__init__.py": "", "report/view.py": text,
            "isolate/__init__.py": "", "isolate/report_section.py": "",
            "explain/__init__.py": "", "explain/report_section.py": ""})
        found = report_imports_of(graph(src), {"isolate", "explain"})
        assert {m for m, _ in found} == {"vllm_bisect.report.view"}, how
