"""The architecture as a test: each layer imports only layers below it, and no modules import each other in a cycle.

Layers, lowest first (edgekit/<folder>):
  core         ground types: errors, artifacts, signatures, formats, the quantization spec, metrics, drift ranking
  targets      the runtimes as runners, artifact inspection, per-layer tracing in a runtime, the runtime worker
  sources      opening source models (torch, TensorFlow/Keras, ONNX) safely
  calibration  calibration data and the quantizers' building blocks
  converters   the converter contract (base) and the converters: the graph's edges
  engine       plan → prepare → run, building routes, runtime workers, verification, the cache, the search
  features     check, report, attribution
  cli          the command line
`edgekit/__init__.py` (the Python API) may use any layer. Imports inside functions count too.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1] / "edgekit"
LAYERS = ["core", "targets", "sources", "calibration", "converters", "engine", "features", "cli"]


def _modules() -> dict[str, Path]:
    out = {}
    for f in ROOT.rglob("*.py"):
        parts = list(f.relative_to(ROOT.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = f
    return out


MODULES = _modules()


def _imports(name: str, path: Path) -> set[str]:
    """The edgekit modules `name` imports, at the top or inside functions."""
    found = set()
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(package.split(".")[: len(package.split(".")) - node.level + 1] + ([base] if base else []))
            for alias in node.names:
                full = f"{base}.{alias.name}"
                found.add(full if full in MODULES else base)
        elif isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
    return {m for m in found if m in MODULES and m != name}


GRAPH = {name: _imports(name, path) for name, path in MODULES.items()}


def _layer(name: str) -> int | None:
    parts = name.split(".")
    return LAYERS.index(parts[1]) if len(parts) > 1 and parts[1] in LAYERS else None


def test_every_module_is_in_a_layer():
    loose = [m for m in MODULES if _layer(m) is None and m not in ("edgekit", "edgekit.__main__")]
    assert loose == [], f"modules outside the layers {LAYERS}: {loose}"


@pytest.mark.parametrize("name", sorted(m for m in MODULES if _layer(m) is not None))
def test_imports_go_down_the_layers(name):
    mine = _layer(name)
    upward = sorted(m for m in GRAPH[name] if _layer(m) is not None and _layer(m) > mine and m != "edgekit")
    assert upward == [], f"{name} ({LAYERS[mine]}) imports a higher layer: {upward}"


def test_no_import_cycles():
    """Between modules (a package's __init__ re-exporting its own modules is not a cycle)."""
    def edges(m):
        return {d for d in GRAPH[m] if not (MODULES[m].name == "__init__.py" and d.startswith(m + "."))
                and not (MODULES[d].name == "__init__.py" and m.startswith(d + "."))}

    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(m):
        state[m] = 1
        stack.append(m)
        for d in edges(m):
            if state.get(d) == 1:
                raise AssertionError("import cycle: " + " → ".join(stack[stack.index(d):] + [d]))
            if d not in state:
                visit(d)
        stack.pop()
        state[m] = 2

    for m in sorted(MODULES):
        if m not in state:
            visit(m)


def test_engine_modules_stay_small():
    big = {m: n for m, p in MODULES.items() if _layer(m) == LAYERS.index("engine")
           and (n := len(p.read_text().splitlines())) > 320}
    assert big == {}, f"engine modules over ~300 lines: {big}"
