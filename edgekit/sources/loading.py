"""Opening source models safely and reading their input signature.

Only this module and the converters touch torch; it is imported lazily, when a model is opened.
"""

from __future__ import annotations

import importlib
import importlib.machinery
import inspect
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from edgekit.core.artifact import ModelArtifact
from edgekit.core.deps import require
from edgekit.core.errors import BadInput, ConversionFailed, EdgekitError, first_line, reading
from edgekit.core.formats import FORMATS, detect
from edgekit.core.signature import Signature, TensorSpec, check_against, parse_input_shapes
from edgekit.sources.onnx_source import open_onnx
from edgekit.sources.safe_pt2 import load_exported_program, refuse_code_targets
from edgekit.sources.tf_source import open_tf

_TORCH_DTYPES = {"float32": "float32", "float16": "float16", "int64": "int64", "int32": "int32",
                 "int8": "int8", "uint8": "uint8", "bool": "bool"}


@dataclass(frozen=True)
class SourceOptions:
    """How to open a source model: trust, the class for a state_dict, and the input signature."""

    trust_pickle: bool = False
    model_class: str | None = None
    input_shapes: tuple[TensorSpec, ...] = ()  # --input-shape; given as its text (`x=1,3,224,224`), parsed here
    example_inputs: str | None = None
    trust_model_code: bool = False  # graphs that may run code: TF file/process/callback ops, .pt2 non-operator calls
    project: str | None = None  # import specs must name modules of this folder (set for check configs)
    max_seq_len: int | None = None  # a decoder LM's cache length (--max-seq-len); None: edgekit.sources.lm_source's default
    prefill_len: int | None = None  # the tokens its prefill entry point takes at once (--prefill-len)

    def __post_init__(self):
        specs = tuple(self.input_shapes)
        if specs and all(isinstance(s, str) for s in specs):
            specs = parse_input_shapes(specs)  # BadInput for text that is no shape, before any work
        if not all(isinstance(s, TensorSpec) for s in specs):
            raise BadInput(f"input shapes {specs!r} mix text and tensor specs", fix="give --input-shape NAME=1,3,224,224")
        object.__setattr__(self, "input_shapes", specs)


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


class Source(Protocol):
    """An opened source model: what it is (`artifact`, with its signature) and how to run it in its
    own framework, one sample at a time, as the reference every artifact is compared with."""

    artifact: ModelArtifact

    def run(self, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
        """One sample (input name → array in the signature's shape) → the outputs, flattened, in order."""
        ...


class TorchSource:
    """A loaded PyTorch source model: its module, its signature and, lazily, an ExportedProgram."""

    def __init__(self, artifact: ModelArtifact, module: Any, exported: Any | None = None):
        self.artifact = artifact
        self.module = module
        self._exported = exported

    @property
    def signature(self) -> Signature:
        """The artifact's signature, settled when the model was opened: what every sample must fit."""
        return self.artifact.signature

    def example_args(self) -> tuple:
        """Seeded example inputs that fit the signature (fresh, contiguous copies)."""
        import torch

        rng = np.random.default_rng(0)
        args = []
        for spec in self.signature.inputs:
            if spec.dtype.startswith("float"):
                arr = rng.standard_normal(spec.shape).astype(spec.dtype)
            else:
                arr = rng.integers(0, 2, spec.shape).astype(spec.dtype)
            args.append(torch.from_numpy(arr.copy()))
        return tuple(args)

    def exported(self):
        """The ExportedProgram: the loaded one for a .pt2, else torch.export of the module. ConversionFailed, the
        same each time it is asked for, when torch.export cannot take the module (every target starts from it)."""
        if isinstance(self._exported, ConversionFailed):
            raise self._exported
        if self._exported is None:
            import torch

            scripted = isinstance(self.module, torch.jit.ScriptModule)
            try:
                if scripted:
                    # torch.export refuses ScriptModules and names this converter as the way across.
                    from torch._export.converter import TS2EPConverter

                    self._exported = TS2EPConverter(self.module, self.example_args()).convert()
                else:
                    self._exported = torch.export.export(self.module, self.example_args())
            except EdgekitError:  # a time budget ran out meanwhile: not the model's failure
                raise
            except Exception as e:  # noqa: BLE001 - whatever torch.export raised is the message
                root = e
                while root.__cause__ is not None:
                    root = root.__cause__
                cause = f"{type(root).__name__}: {first_line(root)}"
                self._exported = ConversionFailed(
                    f"torch.export cannot take {'the TorchScript' if scripted else 'the'} model: "
                    f"{type(e).__name__}: {first_line(e)}" + (f" ({cause})" if first_line(root) != first_line(e) else ""),
                    fix=("a scripted model's control flow (prim::If, prim::Loop on values) does not convert: export the "
                         "Python model with torch.export (torch.cond for a branch on values) and convert the .pt2, or "
                         "convert its .onnx if it has one") if scripted else
                        "make the model exportable (torch.export's error above), or convert its .onnx if it has one")
                raise self._exported from e
        return self._exported

    def run(self, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
        """Run the module once on one sample; outputs flattened in order."""
        import torch

        args = [torch.from_numpy(np.array(feeds[s.name], copy=True)) for s in self.signature.inputs]
        with torch.no_grad():
            out = self.module(*args)
        return [t.detach().cpu().numpy() for t in _flatten(out)]


def _flatten(out: Any) -> list:
    if isinstance(out, (list, tuple)):
        return [t for o in out for t in _flatten(o)]
    if isinstance(out, dict):
        return [t for k in out for t in _flatten(out[k])]
    return [out]


def open_source(location: str, options: SourceOptions = SourceOptions(), say=lambda _msg: None) -> Source:
    """Open a source model — PyTorch, TensorFlow/Keras, ONNX or a decoder LM folder — detect its format, load it
    safely, settle its signature; `say` hears how it was read where that is not the usual way (a SavedModel TF 2's
    loader could not read, a Keras 2 file)."""
    fmt = detect(location)
    family = FORMATS[fmt].family
    if fmt == "onnx":
        return open_onnx(location, _declared_inputs(options))
    if fmt == "hf-causal-lm":
        from edgekit.sources.lm_source import LMSource  # local: only a decoder LM needs it (it reads safetensors)

        return LMSource(location, options.max_seq_len, options.prefill_len)
    if family == "tf":
        return open_tf(fmt, location, _declared_inputs(options), trust_model_code=options.trust_model_code, say=say)
    if family != "torch":
        raise BadInput(f"{location} is a {FORMATS[fmt].description}, which edgekit does not convert from",
                       fix="give a PyTorch (.pt2, .pt, module:factory), TensorFlow/Keras (SavedModel, .keras, .h5) "
                           "or ONNX (.onnx) model")
    return _open_torch(fmt, location, options)


def _open_torch(fmt: str, location: str, options: SourceOptions) -> TorchSource:
    require("torch", f"reading {location}")
    import torch

    declared = _declared_inputs(options)
    exported = None
    if fmt == "torch-export":
        exported = _load_exported(location, options.trust_pickle)
        if not options.trust_model_code:
            refuse_code_targets(exported, location)
        with reading(location, "an ExportedProgram archive", fix="re-save it with torch.export.save"):
            module = exported.module()
        sig = _signature_of_exported(exported, declared, location)
    else:
        module = _load_module(fmt, location, options)
        if declared is None:
            raise BadInput(
                f"{location} ({FORMATS[fmt].description}) does not record its input shapes",
                fix="pass --input-shape NAME=1,3,224,224 (once per input) or --example-inputs x.npz",
            )
        sig = Signature(_in_forward_order(module, declared))
        _check_fits(module, sig, location)

    if hasattr(module, "eval") and fmt != "torch-export":
        module.eval()
    sig = Signature(sig.inputs, _output_specs(module, sig, location), sig.layout)
    files = (location,) if Path(location).is_file() else ()
    artifact = ModelArtifact(fmt, location, sig, "fp32", files)
    return TorchSource(artifact, module, exported)


def _declared_inputs(options: SourceOptions) -> tuple[TensorSpec, ...] | None:
    if options.input_shapes and options.example_inputs:
        raise BadInput("give either --input-shape or --example-inputs, not both")
    if options.input_shapes:
        return options.input_shapes
    if options.example_inputs:
        path = Path(options.example_inputs)
        if not path.is_file():
            raise BadInput(f"example inputs not found: {path}")
        with reading(path, "example inputs", fix="save them as an .npz of arrays with numpy.savez"):
            with np.load(path, allow_pickle=False) as data:
                return tuple(TensorSpec(k, tuple(int(d) for d in data[k].shape), str(data[k].dtype)) for k in data.files)
    return None


def _load_exported(location: str, trust_pickle: bool = False):
    """The ExportedProgram of a .pt2. Untrusted, every pickled member of the archive goes through torch's
    weights-only unpickler (edgekit.sources.safe_pt2; torch.export.load would fully unpickle some of them);
    with trust_pickle, torch.export.load reads it as it stands."""
    import torch

    try:
        return torch.export.load(location) if trust_pickle else load_exported_program(location)
    except BadInput:
        raise
    except Exception as e:  # torch raises many types for a damaged archive
        raise BadInput(f"{location} cannot be read as an ExportedProgram: {first_line(e)}",
                       fix="re-save it with torch.export.save") from None


def _signature_of_exported(ep, declared, location: str) -> Signature:
    import torch

    placeholders = {n.name: n for n in ep.graph.nodes if n.op == "placeholder"}
    specs = []
    for name in ep.graph_signature.user_inputs:
        val = placeholders[name].meta.get("val")
        if not isinstance(val, torch.Tensor):
            raise BadInput(f"{location}: input {name!r} is not a tensor; edgekit converts tensor inputs only")
        dims = []
        for d in val.shape:
            if not isinstance(d, int):
                dims = None
                break
            dims.append(d)
        dtype = _TORCH_DTYPES.get(str(val.dtype).replace("torch.", ""), None)
        if dtype is None:
            raise BadInput(f"{location}: input {name!r} has dtype {val.dtype}, which edgekit does not handle")
        if dims is None:
            if declared is None:
                raise BadInput(f"{location}: input {name!r} has a dynamic shape",
                               fix=f"pass --input-shape {name}=... with the shape to convert for")
            dims = list(next((s.shape for s in declared if s.name == name), declared[len(specs)].shape))
        specs.append(TensorSpec(name, tuple(dims), dtype))
    sig = Signature(tuple(specs))
    if declared is not None:
        check_against(declared, sig, source="--input-shape/--example-inputs")
    return sig


def _load_module(fmt: str, location: str, options: SourceOptions):
    import torch

    if fmt == "torch-python":
        factory = import_spec(location, "model factory", options.project)
        model = factory if isinstance(factory, torch.nn.Module) else call_user(factory, f"model factory {location}")
        if not isinstance(model, torch.nn.Module):
            raise BadInput(f"{location} returned {type(model).__name__}, not a torch.nn.Module")
        return model
    if fmt == "torchscript":
        try:
            return torch.jit.load(location, map_location="cpu")
        except Exception as e:
            raise BadInput(f"{location} cannot be read as TorchScript: {first_line(e)}") from None
    # torch-pickle: never run the pickle's code unless the user trusts it.
    if options.trust_pickle:
        try:
            obj = torch.load(location, map_location="cpu", weights_only=False)
        except Exception as e:
            raise BadInput(f"{location} cannot be unpickled: {e}") from None
    else:
        try:
            obj = torch.load(location, map_location="cpu", weights_only=True)
        except Exception:
            raise BadInput(
                f"{location} is a pickled Python object, and unpickling it could run arbitrary code; refused",
                fix="re-save the model with torch.export.save, or pass --trust-pickle if you trust its author",
            ) from None
    if isinstance(obj, torch.nn.Module):
        return obj
    if isinstance(obj, dict) and obj and all(isinstance(v, torch.Tensor) for v in obj.values()):
        if not options.model_class:
            raise BadInput(f"{location} holds a state_dict (weights without the model)",
                           fix="pass --model-class package.module:Class to build the model they belong to")
        cls = import_spec(options.model_class, "--model-class", options.project)
        model = call_user(cls, f"--model-class {options.model_class}")
        try:
            model.load_state_dict(obj, strict=True)
        except RuntimeError as e:
            raise BadInput(f"{location} does not fit {options.model_class}: {first_line(e)}") from None
        return model
    raise BadInput(f"{location} holds a {type(obj).__name__}, not a model or a state_dict")


def _in_forward_order(module, declared: tuple[TensorSpec, ...]) -> tuple[TensorSpec, ...]:
    """The declared inputs in the order `module.forward` takes them when every one is named by one of its
    parameters (a TorchScript module's schema, a Python module's signature); as given otherwise. `--input-shape
    state=2,1,128 --input-shape x=1,576` on a forward(x, state) is x first."""
    try:
        schema = getattr(module.forward, "schema", None)
        params = ([a.name for a in schema.arguments][1:] if schema is not None
                  else list(inspect.signature(module.forward).parameters))
    except (TypeError, ValueError, AttributeError):
        return declared
    names = [s.name for s in declared]
    if len(set(names)) != len(names) or not set(names) <= set(params):
        return declared
    return tuple(sorted(declared, key=lambda s: params.index(s.name)))


def _check_fits(module, sig: Signature, location: str) -> None:
    import torch

    args = [torch.zeros(s.shape, dtype=getattr(torch, s.dtype)) for s in sig.inputs]
    try:
        with torch.no_grad():
            module(*args)
    except Exception as e:
        raise BadInput(f"input shape {sig.describe()} does not fit {location}: {first_line(e)}",
                       fix="pass the --input-shape the model was built for") from None


def _output_specs(module, sig: Signature, location: str) -> tuple[TensorSpec, ...]:
    import torch

    args = [torch.zeros(s.shape, dtype=getattr(torch, s.dtype)) for s in sig.inputs]
    try:
        with torch.no_grad():
            outs = _flatten(module(*args))
    except Exception as e:
        raise BadInput(f"{location} does not run on zeros of its inputs {sig.describe()}: {type(e).__name__}: "
                       f"{first_line(e)}", fix="check the model runs in PyTorch on inputs of this shape") from None
    if not all(isinstance(o, torch.Tensor) for o in outs):
        raise BadInput(f"{location} returns {', '.join(sorted({type(o).__name__ for o in outs}))}, not only tensors",
                       fix="return a tensor, or a tuple, list or dict of tensors")
    return tuple(
        TensorSpec(f"output_{i}", tuple(int(d) for d in o.shape) or (1,),
                   _TORCH_DTYPES.get(str(o.dtype).replace("torch.", ""), "float32"))
        for i, o in enumerate(outs)
    )
