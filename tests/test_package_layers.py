"""The package's layers, read from its own imports (``ast``, nothing imported): each module sits in the folder of
its layer, no import runs from a lower layer to a higher one, and the modules import one another in no cycle.

The floors, lowest first (a module may import its own layer and the floors below it, never above):

====  ==============  =====================================================================================
0     ``errors``      the exception tree
0     ``causes``      the cause of a finding (class, kind, evidence)
0     ``probes/``     node side: standard library, torch, pynvml; imports nothing of gpuaccept but ``probes``
1     ``config/``     everything read and refused before a node is touched (exit 4)
2     ``judging/``    pure: readings, SKU, blockers, the recorder, one file per layer
2     ``transport/``  run one command on one host (judging and transport never import each other)
3     ``runner/``     ship, run, parse, replay, fan-out, interrupt, multi-node launch
3     ``reporting/``  the files of one run (runner and reporting never import each other)
4     ``scaleout/``   Slurm, merge, the xdist scheduler
5     ``plugin/``     the pytest side: hooks, the run state, the report plugin, the progress display
5     ``__init__``    the names suites use
6     ``suites/``     the shipped suites, one pytest module per layer (run by the plugin; nothing imports them)
6     ``cli``         the ``gpuaccept`` command: the input check before pytest starts, then pytest
====  ==============  =====================================================================================
"""
from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "gpuaccept"

FLOOR = {"errors": 0, "causes": 0, "probes": 0, "config": 1, "judging": 2, "transport": 2, "runner": 3, "reporting": 3,
         "scaleout": 4, "plugin": 5, "__init__": 5,
         "suites": 6, "cli": 6}
#: layers on one floor that still never import each other
APART = {frozenset({"judging", "transport"}), frozenset({"runner", "reporting"})}


def module_name(path: Path) -> str:
    rel = path.relative_to(PACKAGE.parent).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def layer_of(module: str) -> str:
    parts = module.split(".")
    return "__init__" if len(parts) == 1 else parts[1]


def imports() -> dict[str, set[str]]:
    """module -> the gpuaccept modules it imports (at any depth: a function-level import counts too)."""
    mods = {module_name(p): p for p in PACKAGE.rglob("*.py")}
    graph: dict[str, set[str]] = {m: set() for m in mods}
    for mod, path in mods.items():
        pkg = mod if path.name == "__init__.py" else mod.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            targets = []
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    up = pkg.split(".")[: len(pkg.split(".")) - node.level + 1]
                    base = ".".join(up + ([base] if base else []))
                targets = [base] + [f"{base}.{a.name}" for a in node.names]
            for t in targets:
                # the longest known module the name starts with (``from x import name`` may name a module)
                while t and t not in mods:
                    t = t.rpartition(".")[0]
                if t and t != mod and t.startswith("gpuaccept"):
                    graph[mod].add(t)
    return graph


def test_every_module_sits_in_a_layer_folder():
    stray = [m for m in imports() if layer_of(m) not in FLOOR]
    assert stray == [], f"modules outside the layer folders: {stray}"


def violations(graph: dict[str, set[str]]) -> list[str]:
    """The imports of ``graph`` that break the floors above, one line each."""
    wrong = []
    for mod, targets in graph.items():
        a = layer_of(mod)
        for t in sorted(targets):
            b = layer_of(t)
            if a == b or t == "gpuaccept":
                continue
            if a == "probes":
                wrong.append(f"{mod} -> {t} (probes import nothing of the controller)")
            elif FLOOR[b] > FLOOR[a]:
                wrong.append(f"{mod} -> {t} ({a} is below {b})")
            elif frozenset({a, b}) in APART:
                wrong.append(f"{mod} -> {t} ({a} and {b} never import each other)")
    return wrong


def test_no_import_runs_up_or_across():
    assert violations(imports()) == []


def test_no_cycle():
    graph = imports()
    # a package's face (__init__ re-exporting its modules) is not a cycle with what it re-exports
    faces = {m for m in graph if (PACKAGE.parent / m.replace(".", "/") / "__init__.py").exists()}
    edges = {m: {t for t in ts if t not in faces} for m, ts in graph.items()}
    cycles, state = [], {}

    def visit(m, stack):
        state[m] = 1
        stack.append(m)
        for t in sorted(edges[m]):
            if state.get(t) == 1:
                cycles.append(" -> ".join(stack[stack.index(t):] + [t]))
            elif t not in state:
                visit(t, stack)
        stack.pop()
        state[m] = 2

    for m in sorted(edges):
        if m not in state:
            visit(m, [])
    assert cycles == []


def test_the_rules_name_an_upward_or_sideways_import():
    graph = {"gpuaccept.judging.x": {"gpuaccept.transport.y", "gpuaccept.config.z"},
             "gpuaccept.config.z": {"gpuaccept.runner.host"},
             "gpuaccept.probes.p": {"gpuaccept.errors"},
             "gpuaccept.runner.host": {"gpuaccept.judging.x", "gpuaccept.transport.y"}}
    assert violations(graph) == [
        "gpuaccept.judging.x -> gpuaccept.transport.y (judging and transport never import each other)",
        "gpuaccept.config.z -> gpuaccept.runner.host (config is below runner)",
        "gpuaccept.probes.p -> gpuaccept.errors (probes import nothing of the controller)"]


#: the sizes a module and a function keep to (the house layout rules): a longer one holds two jobs
MAX_FILE_LINES, MAX_FUNCTION_LINES = 600, 120


def oversized(root: Path = PACKAGE) -> list[str]:
    """``path: N lines`` for each module outside ``probes/`` over :data:`MAX_FILE_LINES`, ``path:line name: N lines``
    for each function anywhere in ``root`` over :data:`MAX_FUNCTION_LINES`."""
    found = []
    for path in sorted(root.rglob("*.py")):
        text = path.read_text()
        rel = path.relative_to(root)
        lines = text.count("\n")
        if rel.parts[0] != "probes" and lines > MAX_FILE_LINES:
            found.append(f"{rel}: {lines} lines")
        for node in ast.walk(ast.parse(text, str(path))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                n = node.end_lineno - node.lineno + 1
                if n > MAX_FUNCTION_LINES:
                    found.append(f"{rel}:{node.lineno} {node.name}: {n} lines")
    return found


def test_modules_and_functions_stay_small():
    assert oversized() == []


def test_the_size_rule_names_a_long_file_and_a_long_function(tmp_path):
    (tmp_path / "probes").mkdir()
    body = "".join(f"    x{i} = {i}\n" for i in range(MAX_FUNCTION_LINES))
    (tmp_path / "long.py").write_text("def f():\n" + body + "\n" * MAX_FILE_LINES)
    (tmp_path / "probes" / "big.py").write_text("x = 1\n" * (MAX_FILE_LINES + 1))  # probes may be long
    (tmp_path / "short.py").write_text("def g():\n    return 1\n")
    assert oversized(tmp_path) == [f"long.py: {MAX_FUNCTION_LINES + MAX_FILE_LINES + 1} lines",
                                   f"long.py:1 f: {MAX_FUNCTION_LINES + 1} lines"]
