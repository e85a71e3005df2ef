"""Imports run one way: nothing below imports anything above (DESIGN.md, the path of a request)."""

import ast
from pathlib import Path

ROOT = Path(__file__).parent.parent / "xladdin"
# lowest first; a module may import its own layer and the layers below it, never one above
LAYERS = [
    {"errors", "settings", "rules", "gguf_files", "periods", "version"},
    {"tasks", "pool", "report", "documents", "compare", "changes", "as_of", "replay"},
    {"engine", "cache", "inflight", "lifecycle", "prepared", "structured", "fitting", "reading"},
    {"scheduler"},
    {"batcher"},
    {"resolver"},
    {"pool_screen", "ray_job", "ray_llm", "ray_values", "dataframes", "evaluate", "excel", "calc", "cells", "cli",
     "server", "testing", "__init__", "__main__"},
]


def layer_of(module: str) -> int:
    top = module.split(".")[0]
    for i, names in enumerate(LAYERS):
        if top in names:
            return i
    raise AssertionError(f"xladdin.{module} is in no layer: add it to LAYERS")


def imported(path: Path, *, top_level: bool = False) -> set[str]:
    """The xladdin modules ``path`` imports (relative imports resolved): anywhere in the file, or with
    ``top_level`` only what runs when it is imported (not the imports inside functions)."""
    package = path.relative_to(ROOT).with_suffix("").parts[:-1]
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found = set()
    for node in tree.body if top_level else ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = list(package[: len(package) - node.level + 1])
                parts = base + (node.module.split(".") if node.module else [])
                names = [".".join(parts)] if node.module else [".".join([*base, a.name]) for a in node.names]
            elif node.module and node.module.startswith("xladdin."):
                names = [node.module.removeprefix("xladdin.")]
            else:
                continue
            found.update(_module(n) for n in names)
        elif isinstance(node, ast.Import):
            found.update(a.name.removeprefix("xladdin.") for a in node.names if a.name.startswith("xladdin."))
    return found


def _module(name: str) -> str:
    """``name`` if it is a module or package of xladdin, else the package it is a name in."""
    parts = name.split(".") if name else []
    while parts and not ((ROOT / Path(*parts)).with_suffix(".py").is_file() or (ROOT / Path(*parts)).is_dir()):
        parts.pop()
    return ".".join(parts) or "__init__"


def test_imports_run_one_way():
    wrong = []
    for path in ROOT.rglob("*.py"):
        module = ".".join(path.relative_to(ROOT).with_suffix("").parts)
        if module.endswith("__init__") and "." in module:
            module = module.removesuffix(".__init__")
        mine = layer_of(module)
        for other in imported(path):
            if layer_of(other) > mine:
                wrong.append(f"xladdin.{module} (layer {mine}) imports xladdin.{other} (layer {layer_of(other)})")
    assert not wrong, "\n".join(sorted(wrong))


def test_no_test_asserts_a_timing():
    """Speed is measured in bench/ as ratios; a test asserts behaviour (requests, order, what was kept)."""
    import re

    timing = re.compile(r"assert\b.*(\b(elapsed|seconds|took|wall|duration)\b|(perf_counter|monotonic|time)\(\)\s*-)"
                        r".*[<>]")
    found = [f"{path.name}:{n}: {line.strip()}" for path in (ROOT.parent / "tests").glob("*.py")
             for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
             if timing.search(line) and path.name != "test_layers.py"]
    assert not found, "\n".join(found)


def test_the_design_picture_draws_the_layers_top_to_bottom():
    """DESIGN.md's picture of a request's path names the modules in the order of ``LAYERS``, top first:
    a module drawn below another is never in a higher layer."""
    import re

    design = (ROOT.parent / "DESIGN.md").read_text(encoding="utf-8")
    picture = design.split("## The path of one request", 1)[1].split("```")[1]
    drawn = []
    for line in picture.splitlines():
        for name in re.findall(r"(?:xladdin/)?\b([a-z_]+)(?:\.py|/)", line.split("   ", 1)[0] + " " + line[:40]):
            try:
                drawn.append((name, layer_of(name)))
            except AssertionError:
                continue
    names = [n for n, _ in drawn]
    assert {"excel", "resolver", "batcher", "prepared", "cache", "engine", "tasks", "settings"} <= set(names), names
    layers = [layer for _, layer in drawn]
    wrong = [(a, b) for (a, la), (b, lb) in zip(drawn, drawn[1:], strict=False) if lb > la]
    assert layers == sorted(layers, reverse=True), wrong


def import_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """A cycle of ``graph`` (module → the modules it imports), or ``None``."""
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


def test_no_import_cycle():
    """Importing any module never needs a module that is still being imported (a cycle works only by the
    order of lines, until it does not)."""
    graph = {}
    for path in ROOT.rglob("*.py"):
        module = ".".join(path.relative_to(ROOT).with_suffix("").parts)
        module = module.removesuffix(".__init__") if "." in module else module
        # a package stands for its __init__ (that a submodule's package is imported first is no cycle:
        # the package's own imports of its submodules are)
        graph[module] = {m for m in imported(path, top_level=True) if m and m != module}
    assert import_cycle(graph) is None, " -> ".join(import_cycle(graph) or [])


def test_the_cycle_check_finds_a_cycle():
    assert import_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert import_cycle({"a": {"b"}, "b": set()}) is None
