"""Opening source models safely and reading their input signature (the `Source` types they open as
are edgekit.core.source's, the user-code loader edgekit.core.user_code's).

Only this module and the converters touch torch; it is imported lazily, when a model is opened.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from edgekit.core.artifact import ModelArtifact
from edgekit.core.deps import require
from edgekit.core.errors import BadInput, first_line, reading
from edgekit.core.formats import FORMATS, detect
from edgekit.core.signature import Signature, TensorSpec, check_against, parse_input_shapes
from edgekit.core.source import Source, TorchSource, flatten
from edgekit.core.user_code import call_user, import_spec
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
            outs = flatten(module(*args))
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
