"""The architecture as a test: each layer imports only layers below it, and no modules import each other in a cycle.

Layers, lowest first (edgekit/<folder>; converters/, calibration/ and targets/ sit at the top of the repository
and install as edgekit.converters, edgekit.calibration and edgekit.targets):
  core         ground types: errors, artifacts, signatures, formats, the quantization spec, metrics, drift ranking,
               the opened source's types and the user-code loader
  targets      the runtimes as runners, artifact inspection, per-layer tracing in a runtime, the runtime worker
  calibration  calibration data and the quantizers' building blocks
  converters   the converter contract (base) and the converters: the graph's edges
  sources      opening source models (torch, TensorFlow/Keras, ONNX, decoder LM folders) safely
  engine       plan → prepare → run, building routes, runtime workers, verification, the cache, the search
  features     check, report, attribution
  cli          the command line
`edgekit/__init__.py` (the Python API) may use any layer. Imports inside functions count too.
The card's folders (targets, calibration, converters) import only edgekit.core and each other.

Where imports go: a framework (FRAMEWORKS below, each with why) only inside the functions that need it,
never at a module's top, so that `import edgekit` and the light commands never load one; everything else
(the standard library, numpy, rich, diskcache, edgekit's own modules) at the module's top. The
exceptions: edgekit/cli/app.py, whose commands import edgekit's modules when they run (its docstring
says why), and an import whose line says why it stays in its function (`# local: <reason>`).
"""

from __future__ import annotations

import ast
import json
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from edgekit.targets import TARGETS

REPO = Path(__file__).resolve().parents[1]
# Where each installed package's modules are: pyproject.toml's package-dir (edgekit/ and the three top-level folders).
PACKAGE_DIRS = {package: REPO / folder for package, folder in
                tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]["package-dir"].items()}
LAYERS = ["core", "targets", "calibration", "converters", "sources", "engine", "features", "cli"]
CARD_FOLDERS = ("targets", "calibration", "converters")  # top-level folders, installed as edgekit.<folder>


def _modules() -> dict[str, Path]:
    out = {}
    for package, root in PACKAGE_DIRS.items():
        for f in root.rglob("*.py"):
            parts = package.split(".") + list(f.relative_to(root).with_suffix("").parts)
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


@pytest.mark.parametrize("folder", CARD_FOLDERS)
def test_card_folders_import_only_core_and_each_other(folder):
    """The design card's rule: converters/, calibration/ and targets/ build on edgekit.core alone (and on each
    other), so a converter or a runtime can be read, tested and replaced without the engine or the sources."""
    allowed = ("core", *CARD_FOLDERS)
    found = sorted(f"{m} → {d}" for m in GRAPH if m.split(".")[1:2] == [folder]
                   for d in GRAPH[m] if d != "edgekit" and d.split(".")[1] not in allowed)
    assert found == [], f"{folder}/ imports outside edgekit.core and the card's folders:\n" + "\n".join(found)


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


def test_public_classes_and_methods_say_why_they_exist():
    """A newcomer reads the contract before the body: every public class and its public methods carry a
    docstring, in every layer."""
    missing = [f"{MODULES[m].relative_to(REPO)}:{node.lineno} {node.name}"
               for m in MODULES for cls in ast.walk(ast.parse(MODULES[m].read_text()))
               if isinstance(cls, ast.ClassDef) and not cls.name.startswith("_")
               for node in (cls, *cls.body)
               if isinstance(node, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
               and not node.name.startswith("_") and not ast.get_docstring(node)]
    assert missing == [], "public classes and methods without a docstring:\n" + "\n".join(missing)


def test_engine_functions_stay_short():
    """An engine function that does several jobs is split by job (a reader holds one screen at a time)."""
    long = {f"{m}.{node.name}": node.end_lineno - node.lineno + 1
            for m, p in MODULES.items() if _layer(m) == LAYERS.index("engine")
            for node in ast.walk(ast.parse(p.read_text())) if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
            and node.end_lineno - node.lineno + 1 > 60}
    assert long == {}, f"engine functions over 60 lines: {long}"


def test_library_functions_stay_under_80_lines():
    """Every function of the library, in every layer, fits in about two screens (the engine's in one)."""
    long = {f"{m}.{node.name}": node.end_lineno - node.lineno + 1
            for m, p in MODULES.items()
            for node in ast.walk(ast.parse(p.read_text())) if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
            and node.end_lineno - node.lineno + 1 > 80}
    assert long == {}, f"functions over 80 lines: {long}"


# Frameworks, and the helpers that come with them rather than with edgekit: imported only inside the
# functions that need them, never at a module's top. Why each stays off the import path (import times
# measured here, on 2 CPUs under load, in a fresh process):
FRAMEWORKS = {
    "torch": "~3.5 s to import; needed only to open, export, quantize or run a PyTorch model",
    "torchao": "the PT2E quantization API; imports torch (~7 s in all); needed only to quantize a torch model",
    "tensorflow": "~12 s to import; needed only to open, check or convert a SavedModel or Keras source",
    "keras": "imports TensorFlow (~9 s); needed only to open a .keras/.h5 source",
    "onnx": "~1.8 s to import; needed only to export, read, quantize, trace or inspect an ONNX model",
    "onnxruntime": "edgekit[onnx], ~0.3 s and more with its tools; needed only to run, quantize or convert ONNX",
    "executorch": "imports torch and, through executorch.exir, its compiler (~11 s); needed only to lower, "
                  "run or inspect a .pte (the runtime worker loads the runtime alone)",
    "litert_torch": "imports torch and TensorFlow (~11 s); needed only to convert torch → .tflite",
    "ai_edge_litert": "edgekit[tflite], ~0.3 s; the LiteRT interpreter, needed only to run or trace a .tflite",
    "ai_edge_quantizer": "~2 s to import; needed only to give the float leftovers of an int8 .tflite int8 weights",
    "ray": "edgekit[ray], ~1 s to import; needed only by `check --executor ray`",
    "flatbuffers": "comes with the runtimes, not with edgekit; needed only to rewrite an .ort's flatbuffer",
    "h5py": "comes with Keras, not with edgekit; needed only to read a Keras .h5 file's config for the safety check",
    "google": "protobuf, comes with TensorFlow and ONNX, not with edgekit; needed only to parse a SavedModel "
              "for the safety check",
    "ort_flatbuffers_py": "onnxruntime's .ort schema (put on sys.path from its tools folder); needed only to read "
                          "or rewrite an .ort",
    "PIL": "Pillow; needed only to read a folder of images as calibration data",
    "transformers": "edgekit[lm], ~5 s to import; needed only to run a decoder LM folder as its reference",
    "safetensors": "edgekit[lm]; needed only to read a decoder LM folder's weights",
    "tokenizers": "edgekit[lm]; needed only to read held-out text with a decoder LM's tokenizer",
}
CLI_APP = "edgekit.cli.app"  # its commands import edgekit's modules when they run: see its docstring
LOCAL_MARKER = re.compile(r"#\s*local:\s*\S")


def _type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _run_imports(path: Path) -> list[tuple[ast.Import | ast.ImportFrom, bool]]:
    """(import statement, inside a function) for every import of the module that runs (those under
    `if TYPE_CHECKING:` never do)."""
    found = []

    def visit(node, local: bool):
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and _type_checking(child.test):
                for other in child.orelse:
                    visit(ast.Module(body=[other], type_ignores=[]), local)
            elif isinstance(child, (ast.Import, ast.ImportFrom)):
                found.append((child, local))
            else:
                visit(child, local or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)))

    visit(ast.parse(path.read_text()), False)
    return found


def _top_names(node: ast.Import | ast.ImportFrom) -> list[str]:
    """The top-level packages a statement imports ("edgekit" for a relative import)."""
    if isinstance(node, ast.ImportFrom):
        return ["edgekit" if node.level else (node.module or "").split(".")[0]]
    return [a.name.split(".")[0] for a in node.names]


def _where(name: str, node: ast.AST, lines: list[str]) -> str:
    return f"{MODULES[name].relative_to(REPO)}:{node.lineno}: {lines[node.lineno - 1].strip()}"


def test_frameworks_are_imported_only_inside_functions():
    """`import edgekit`, `edgekit --help` and the light commands load no framework: none at a module's top."""
    found = []
    for name, path in sorted(MODULES.items()):
        lines = path.read_text().splitlines()
        found += [_where(name, node, lines) for node, local in _run_imports(path)
                  if not local and any(top in FRAMEWORKS for top in _top_names(node))]
    assert found == [], "frameworks imported at a module's top (import them inside the functions that need them):\n" \
        + "\n".join(found)


def test_function_local_imports_are_frameworks_or_say_why():
    """Inside a function: a framework, an edgekit module in the command line's commands, or a line that says
    why with `# local: <reason>`. Everything else goes at the module's top."""
    found = []
    for name, path in sorted(MODULES.items()):
        lines = path.read_text().splitlines()
        for node, local in _run_imports(path):
            if not local or all(top in FRAMEWORKS for top in _top_names(node)):
                continue
            if name == CLI_APP and all(top == "edgekit" for top in _top_names(node)):
                continue
            if any(LOCAL_MARKER.search(lines[i]) for i in range(node.lineno - 1, node.end_lineno)):
                continue
            found.append(_where(name, node, lines))
    assert found == [], ("imports inside functions that are no framework (FRAMEWORKS) and say no reason: move "
                         "them to the module's top, or end the line with `# local: <why>`:\n" + "\n".join(found))


def test_every_framework_in_the_table_is_imported_somewhere():
    """The table stays true: each entry is a package edgekit imports (lazily)."""
    imported = {top for path in MODULES.values() for node, local in _run_imports(path) if local
                for top in _top_names(node)}
    unused = sorted(set(FRAMEWORKS) - imported)
    assert unused == [], f"FRAMEWORKS lists packages edgekit no longer imports: {unused}"


def test_every_format_package_is_its_backend_and_brings_no_framework():
    code = ("import json, sys; from edgekit.targets import TARGETS, TargetBackend; "
            "backends = {n: t.backend for n, t in TARGETS.items()}; "
            "members = list(TargetBackend.__annotations__); "
            "print(json.dumps({'missing': {n: [m for m in members if not hasattr(b, m)] for n, b in backends.items()}, "
            "'tools': {n: sorted(m for m in members if callable(getattr(b, m, None))) for n, b in backends.items()}, "
            "'frameworks': sorted({m.split('.')[0] for m in sys.modules} & set(sys.argv[1:]))}))")
    out = subprocess.run([sys.executable, "-c", code, *FRAMEWORKS], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    assert doc["missing"] == {n: [] for n in TARGETS}
    assert doc["frameworks"] == []
    assert doc["tools"]["onnx"] == ["Runner", "inspect_file", "lm_entry_points", "open_timed", "trace_layers"]  # its own tracer
    assert doc["tools"]["executorch"] == ["Runner", "inspect_file", "lm_entry_points", "open_timed", "runtime_only"]  # runtime alone
    assert "lm_entry_points" not in doc["tools"]["ptl"]  # a decoder LM is not converted to .ptl
