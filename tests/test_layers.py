"""Imports run one way: the folder a module sits in says its layer, and nothing imports from a layer above
its own (DESIGN.md, Layout and the path of one request)."""

import ast
import re
from pathlib import Path

ROOT = Path(__file__).parent.parent / "xladdin"
# lowest first: the folders (packages) and top-level modules of xladdin/, by layer. A module may import its
# own layer and the layers below it, never one above.
LAYERS = [
    {"errors", "settings", "periods", "version", "lazy", "collector"},  # the foundation every layer imports
    {"reading"},  # what is read: pool files, cell values, report files, their text and code's readings of it
    {"tasks", "engine"},  # what is asked and how an answer is checked, the rules (no I/O); how a request reaches
    # a model
    {"core"},  # one request prepared, read, batched, cached and resolved
    {"jobs"},  # whole tables: a pool to a report, compared, replayed, evaluated; pandas and Ray
    {"sheet"},  # the worksheet functions, the same for Excel, Calc and the cells service
    {"excel", "calc", "cells", "cli", "server", "testing", "__init__"},  # the doors
]


def unit_of(module: str) -> str:
    """The folder or top-level module ``module`` (dotted, below xladdin) belongs to."""
    return module.split(".")[0] or "__init__"


def layer_of(module: str, layers: list[set[str]] = LAYERS) -> int:
    unit = unit_of(module)
    for i, names in enumerate(layers):
        if unit in names:
            return i
    raise AssertionError(f"xladdin.{module} is in no layer: add {unit!r} to LAYERS")


def units(root: Path = ROOT) -> set[str]:
    """The top-level modules and the folders of Python modules in ``root`` (a data folder is none)."""
    return {p.stem for p in root.glob("*.py")} | {d.name for d in root.iterdir()
                                                 if d.is_dir() and any(d.rglob("*.py"))}


def modules(root: Path = ROOT) -> dict[str, Path]:
    """Every module of ``root`` by its dotted name below xladdin (a package by its own name)."""
    found = {}
    for path in sorted(root.rglob("*.py")):
        parts = path.relative_to(root).with_suffix("").parts
        if parts[-1] == "__init__" and len(parts) > 1:
            parts = parts[:-1]
        found[".".join(parts)] = path
    return found


def imported(path: Path, *, top_level: bool = False, root: Path = ROOT) -> set[str]:
    """The xladdin modules ``path`` imports (relative imports resolved; ``from package import module``
    as that module): anywhere in the file, or with ``top_level`` only what runs when it is imported (not
    the imports inside functions)."""
    package = path.relative_to(root).with_suffix("").parts[:-1]
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found = set()
    for node in tree.body if top_level else ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = ".".join(list(package[: len(package) - node.level + 1])
                                + (node.module.split(".") if node.module else []))
            elif node.module == "xladdin" or (node.module or "").startswith("xladdin."):
                base = node.module.removeprefix("xladdin").removeprefix(".")
            else:
                continue
            for alias in node.names:
                sub = f"{base}.{alias.name}" if base else alias.name
                found.add(sub if _is_module(sub, root) else _module(base, root))
        elif isinstance(node, ast.Import):
            found.update(_module(a.name.removeprefix("xladdin."), root) for a in node.names
                         if a.name.startswith("xladdin."))
    return found


def _is_module(name: str, root: Path) -> bool:
    where = root / Path(*name.split("."))
    return where.with_suffix(".py").is_file() or where.is_dir()


def _module(name: str, root: Path = ROOT) -> str:
    """``name`` if it is a module or package of xladdin, else the package it is a name in."""
    parts = name.split(".") if name else []
    while parts and not _is_module(".".join(parts), root):
        parts.pop()
    return ".".join(parts) or "__init__"


def import_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """A cycle of ``graph`` (node → the nodes it imports), or ``None``."""
    state: dict[str, int] = {}  # 1: on the path, 2: done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return path[path.index(nxt):] + [nxt]
            if nxt not in state and (found := visit(nxt)):
                return found
        path.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state and (found := visit(node)):
            return found
    return None


# ------------------------------------------------------------------ the checks, on any tree laid out as xladdin/
def unassigned(root: Path = ROOT, layers: list[set[str]] = LAYERS) -> list[str]:
    """What is wrong with ``layers`` for ``root``: a folder or top-level module in no layer, a name in two,
    a name that is no folder or module."""
    assigned = [name for names in layers for name in names]
    on_disk = units(root)
    return ([f"xladdin/{u} is in no layer: add it to LAYERS" for u in sorted(on_disk - set(assigned))]
            + [f"{u!r} is in two layers" for u in sorted({u for u in assigned if assigned.count(u) > 1})]
            + [f"{u!r} is in LAYERS but no folder or module of xladdin/" for u in sorted(set(assigned) - on_disk)])


def upward_imports(root: Path = ROOT, layers: list[set[str]] = LAYERS) -> list[str]:
    """Every import of a layer above the importer's own (inside functions too)."""
    wrong = []
    for module, path in modules(root).items():
        mine = layer_of(module, layers)
        for other in imported(path, root=root):
            if layer_of(other, layers) > mine:
                wrong.append(f"xladdin.{module} (layer {mine}) imports xladdin.{other} "
                             f"(layer {layer_of(other, layers)})")
    return sorted(wrong)


def package_cycle(root: Path = ROOT) -> list[str] | None:
    """A cycle between the folders and top-level modules: one imports another (inside functions too)
    that imports it back, however far round."""
    graph: dict[str, set[str]] = {}
    for module, path in modules(root).items():
        unit = unit_of(module)
        graph.setdefault(unit, set()).update(unit_of(m) for m in imported(path, root=root) if unit_of(m) != unit)
    return import_cycle(graph)


def module_cycle(root: Path = ROOT) -> list[str] | None:
    """A cycle between the modules of one package: importing one needs one that is still being imported
    (a cycle works only by the order of lines, until it does not). A package stands for its __init__:
    that a submodule's package is imported first is no cycle, the package's own imports of its
    submodules are."""
    graphs: dict[str, dict[str, set[str]]] = {}
    for module, path in modules(root).items():
        unit = unit_of(module)
        graphs.setdefault(unit, {})[module] = {m for m in imported(path, top_level=True, root=root)
                                               if unit_of(m) == unit and m != module}
    for graph in graphs.values():
        if found := import_cycle(graph):
            return found
    return None


def test_every_folder_and_module_has_one_layer():
    wrong = unassigned()
    assert not wrong, "\n".join(wrong)


def test_imports_run_one_way():
    wrong = upward_imports()
    assert not wrong, "\n".join(wrong)


def test_no_import_cycle_between_packages():
    assert package_cycle() is None, " -> ".join(package_cycle() or [])


def test_no_import_cycle_within_a_package():
    assert module_cycle() is None, " -> ".join(module_cycle() or [])


def test_the_cycle_check_finds_a_cycle():
    assert import_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert import_cycle({"a": {"b"}, "b": set()}) is None


def test_each_check_finds_what_it_checks(tmp_path):
    """The checks on a small tree laid out as xladdin/: each finds the fault put in it, and only that."""
    root = tmp_path / "xladdin"
    files = {
        "__init__.py": "from .jobs.run import run\n",
        "errors.py": "",
        "tasks/__init__.py": "from .base import Task\n",
        "tasks/base.py": "from ..errors import Error\n",
        "core/__init__.py": "",
        "core/batcher.py": "from ..tasks.base import Task\nfrom . import cache\n",
        "core/cache.py": "import xladdin.errors\n",
        "jobs/__init__.py": "",
        "jobs/run.py": "from ..core import batcher\n",
        "sheet/__init__.py": "",
    }
    layers = [{"errors"}, {"tasks"}, {"core"}, {"jobs"}, {"sheet"}, {"__init__"}]

    def tree(**changed: str) -> Path:
        for name, text in {**files, **changed}.items():
            (root / name).parent.mkdir(parents=True, exist_ok=True)
            (root / name).write_text(text, encoding="utf-8")
        return root

    clean = tree()
    assert (unassigned(clean, layers), upward_imports(clean, layers)) == ([], [])
    assert package_cycle(clean) is None and module_cycle(clean) is None
    # a folder no layer names, a name no folder is, a name in two layers
    assert unassigned(root, [*layers[:-2], {"doors"}, layers[-1]]) == [
        "xladdin/sheet is in no layer: add it to LAYERS", "'doors' is in LAYERS but no folder or module of xladdin/"]
    assert unassigned(root, [*layers, {"errors"}]) == ["'errors' is in two layers"]
    # a lower layer importing a higher one, even inside a function
    tree(**{"tasks/base.py": "def f():\n    from ..sheet import Cell\n"})
    assert upward_imports(root, layers) == ["xladdin.tasks.base (layer 1) imports xladdin.sheet (layer 4)"]
    assert package_cycle(root) is None and module_cycle(root) is None
    # two packages importing each other, even inside a function
    tree(**{"tasks/base.py": "", "core/cache.py": "def f():\n    from ..jobs import run\n"})
    assert package_cycle(root) == ["jobs", "core", "jobs"]
    # two modules of one package importing each other when imported
    tree(**{"core/cache.py": "from .batcher import Batcher\n"})
    assert module_cycle(root) == ["core.batcher", "core.cache", "core.batcher"]
    assert package_cycle(root) is None and upward_imports(root, layers) == []


def test_every_folder_is_built_into_the_wheel():
    """pyproject.toml names the packages (one comes from outside xladdin/): a folder added to xladdin/ is
    added there too, or the wheel goes without it."""
    import tomllib

    setuptools = tomllib.loads((ROOT.parent / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["setuptools"]
    folders = {".".join(("xladdin", *d.relative_to(ROOT).parts)) for d in [ROOT, *ROOT.rglob("*")]
               if d.is_dir() and "__pycache__" not in d.parts}
    assert set(setuptools["packages"]) == folders | {"xladdin.profiles_data"}
    profiles = ROOT.parent / setuptools["package-dir"]["xladdin.profiles_data"]
    assert profiles == ROOT.parent / "server" / "profiles" and any(profiles.glob("*.toml"))


def test_no_test_asserts_a_timing():
    """Speed is measured in bench/ as ratios; a test asserts behaviour (requests, order, what was kept)."""
    timing = re.compile(r"assert\b.*(\b(elapsed|seconds|took|wall|duration)\b|(perf_counter|monotonic|time)\(\)\s*-)"
                        r".*[<>]")
    found = [f"{path.name}:{n}: {line.strip()}" for path in (ROOT.parent / "tests").glob("*.py")
             for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
             if timing.search(line) and path.name != "test_layers.py"]
    assert not found, "\n".join(found)


def drawn_layer(token: str) -> int | None:
    """The layer of a path drawn in DESIGN.md's picture (``xladdin/core/``, ``sheet/functions.py``,
    ``errors.py``, ``pool_screen.py``), or ``None`` for a name that is not one module's."""
    parts = token.removeprefix("xladdin/").removesuffix("/").removesuffix(".py").split("/")
    if len(parts) > 1 or parts[0] in units():
        return layer_of(parts[0]) if parts[0] in units() else None
    found = {layer_of(m) for m in modules() if m.split(".")[-1] == parts[0]}
    return found.pop() if len(found) == 1 else None


def test_the_design_picture_draws_the_layers_top_to_bottom():
    """DESIGN.md's picture of a request's path names the folders and modules in the order of ``LAYERS``,
    top first: a module drawn below another is never in a higher layer."""
    design = (ROOT.parent / "DESIGN.md").read_text(encoding="utf-8")
    picture = design.split("## The path of one request", 1)[1].split("```")[1]
    drawn = []
    for line in picture.splitlines():
        for token in re.findall(r"\b[a-z_/]+(?:\.py\b|/)", line.split("   ", 1)[0] + " " + line[:40]):
            if (layer := drawn_layer(token)) is not None:
                drawn.append((token, layer))
    names = {t.removeprefix("xladdin/").split("/")[0].removesuffix(".py") for t, _ in drawn}
    assert {"excel", "sheet", "jobs", "core", "reading", "engine", "tasks", "settings"} <= names, names
    wrong = [(a, b) for (a, la), (b, lb) in zip(drawn, drawn[1:], strict=False) if lb > la]
    assert not wrong, wrong


def test_every_layer_above_the_core_imports_only_its_front():
    """The jobs, the sheet and the doors import ``xladdin.core`` itself (its ``__init__``: the front), never
    one of its modules (its futures, threads, readers or the batcher's insides); every name of the front
    exists."""
    import importlib

    import xladdin.core as front

    above = layer_of("core")
    reached = sorted(f"{name} imports xladdin.{dep}" for name, path in modules().items()
                     if layer_of(name) > above for dep in imported(path) if dep.startswith("core."))
    assert reached == []
    assert sorted(front.__all__) == sorted(front._LAZY)
    for name in front.__all__:
        assert getattr(importlib.import_module("xladdin.core"), name) is not None, name
