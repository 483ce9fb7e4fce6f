"""The user's own code: resolving `package.module:name` import specs (held to a check config's project folder)
and calling a user's factory or data function, whose failures become BadInput."""

from __future__ import annotations

import importlib
import importlib.machinery
import sys
from pathlib import Path
from typing import Any

from edgekit.core.errors import BadInput, first_line


def import_spec(spec: str, what: str, project: str | Path | None = None) -> Any:
    """Resolve `package.module:name`.

    With `project` (a check config's folder, whose specs come from a pull request), the module must
    be a file of that folder: a standard-library or installed module (`sys:exit`, `os:system`) is
    refused before anything is imported.
    """
    module_name, _, attr = spec.partition(":")
    if not attr:
        raise BadInput(f"{what} {spec!r} is not an import spec", fix="write it as package.module:name")
    root = Path(project).resolve() if project is not None else Path.cwd()
    if project is not None:
        _refuse_outside(module_name, root, spec, what)
    if str(root) not in sys.path and (project is not None or "" not in sys.path):
        sys.path.insert(0, str(root))
    try:
        module = importlib.import_module(module_name)
    except ImportError as e:
        raise BadInput(f"cannot import {module_name!r} for {what} {spec}: {e}", fix="check the module is on PYTHONPATH") from None
    except (Exception, SystemExit) as e:
        raise BadInput(f"importing {module_name!r} for {what} {spec} failed: {type(e).__name__}: {first_line(e)}") from None
    if project is not None:
        _refuse_outside(module_name, root, spec, what, module)
    try:
        return getattr(module, attr)
    except AttributeError:
        raise BadInput(f"{module_name} has no attribute {attr!r} ({what} {spec})") from None


def _refuse_outside(module_name: str, root: Path, spec: str, what: str, module: Any = None) -> None:
    """BadInput unless `module_name` (or the imported `module`) is a Python file under `root`."""
    top = module_name.split(".")[0]
    if module is not None:
        where = getattr(module, "__file__", None)
        inside = where is not None and Path(where).resolve().is_relative_to(root)
    elif top in sys.stdlib_module_names or top in sys.builtin_module_names:
        inside = False
    else:
        found = importlib.machinery.PathFinder.find_spec(top, [str(root)])
        loaded = sys.modules.get(top)
        shadowed = loaded is not None and not Path(getattr(loaded, "__file__", None) or "/").resolve().is_relative_to(root)
        inside = found is not None and found.origin is not None and not shadowed
    if not inside:
        raise BadInput(f"{what} {spec} names a module outside the project folder {root} (a standard-library or "
                       "installed module); a check config may only name its own project's code",
                       fix=f"put the function in a module under {root}, or give a data file instead")


def call_user(fn: Any, what: str) -> Any:
    """Call a user's factory or data function; its errors, and sys.exit() inside it, become BadInput."""
    try:
        return fn() if callable(fn) else fn
    except (Exception, SystemExit) as e:
        raise BadInput(f"{what} failed: {type(e).__name__}: {first_line(e)}") from None
