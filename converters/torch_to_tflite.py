"""torch → tflite with litert-torch (the renamed ai-edge-torch); int8 through its PT2E quantizer."""

from __future__ import annotations

import copy
import re
import shutil
from contextlib import contextmanager
from pathlib import Path

from edgekit.calibration.tflite_io import float_io
from edgekit.core.artifact import ArtifactMeta, ModelArtifact
from edgekit.core.quant import Precision
from edgekit.calibration import pt2e, pt2e_statistics
from edgekit.calibration.data import SampleSet
from edgekit.converters import pt2e_int8, recurrent_input
from edgekit.converters.base import ConvertContext, Converter


class TorchToTflite(Converter):
    """The torch → tflite edge through litert-torch; a layer kept back from int8 can only stay float (no int16
    activations)."""

    name = "torch_to_tflite"
    source = "torch"
    target = "tflite"
    precisions = (Precision.FP32, Precision.FP16, Precision.INT8, Precision.INT8_DYNAMIC)
    capabilities = pt2e.CAPABILITIES
    measures_before_lowering = True  # auto ranks its candidates by their PT2E graphs (quantized_outputs)
    extra = "tflite"
    cost = 1.0
    tools = ("torch", "litert_torch", "ai_edge_litert", "torchao", "ai_edge_quantizer")

    def convert(self, src: ModelArtifact, out_path: Path, precision: str, ctx: ConvertContext) -> ModelArtifact:
        """fp32, fp16 by litert's recipe, or int8 through PT2E (float layers kept float in strict QDQ mode);
        static int8 gets float I/O back unless int8_io, and weights litert left float are stored int8 where possible."""
        import litert_torch

        source = ctx.source
        module = int32_arg_max(source.exported().module())  # one export, shared with the other torch edges
        args = source.example_args()
        kept = ()
        if precision == Precision.FP32:
            litert_torch.convert(module, args).export(str(out_path))
        elif precision == Precision.FP16:
            from litert_torch.generative.quantize import quant_recipes

            litert_torch.convert(module, args, quant_config=quant_recipes.full_fp16_recipe()).export(str(out_path))
        else:
            from litert_torch.quantize.pt2e_quantizer import PT2EQuantizer, get_symmetric_quantization_config
            from litert_torch.quantize.quant_config import QuantConfig

            dynamic = precision == Precision.INT8_DYNAMIC
            spec = ctx.spec
            quantizer, quantized = pt2e_int8.quantized_graph(src, ctx, PT2EQuantizer(), get_symmetric_quantization_config,
                                                             "tflite", dynamic=dynamic, example_args=args)
            quantized = int32_arg_max(quantized)
            with _strict_qdq(bool(spec.layers("float"))):
                model = litert_torch.convert(quantized, args, quant_config=QuantConfig(pt2e_quantizer=quantizer))
            raw = ctx.work_dir / f"{out_path.stem}.pt2e.tflite"
            model.export(str(raw))
            if not dynamic and not ctx.spec.int8_io:
                raw.write_bytes(float_io(raw.read_bytes()))  # static int8 comes out with integer I/O
            recurrent = recurrent_input.torch_layers(source.exported(), ctx.calibration) if ctx.calibration else ()
            level = () if dynamic or not ctx.calibration else pt2e.level_notes(
                source.exported().module(), ctx.calibration, src.signature.input_names, "tflite")
            recurrent = tuple(note for note in recurrent if note.layer not in spec.layers("float"))
            kept = recurrent + tuple(note for note in level if note.layer not in spec.layers("float"))
            _int8_float_leftovers(raw, out_path, float_input_projections=bool(recurrent), keep=spec.layers("float"))
            raw.unlink()
        return ModelArtifact("tflite", str(out_path), src.signature, precision, meta=ArtifactMeta(kept_float=kept))

    def quantized_outputs(self, src: ModelArtifact, ctx: ConvertContext, samples: SampleSet) -> list:
        """The outputs on `samples` of the PT2E graph `convert` would lower for ctx.spec, in torch."""
        from litert_torch.quantize.pt2e_quantizer import PT2EQuantizer, get_symmetric_quantization_config

        _, graph = pt2e_int8.quantized_graph(src, ctx, PT2EQuantizer(), get_symmetric_quantization_config, "tflite")
        return pt2e_statistics.outputs(graph, src, samples)


def int32_arg_max(module):
    """`module` (a GraphModule) with every arg-max/arg-min over an int64 tensor taking it as int32 first: TFLite's
    ARG_MAX has no int64 input ("failed to legalize operation 'tfl.arg_max'"), and a position found by arg-max over
    a mask or token ids (`(ids == eos).long().argmax(1)`) is that pattern. A copy when anything changes, so the
    shared export stays as it is; the same module otherwise. An int64 value beyond int32's range would wrap."""
    import torch

    ops = (torch.ops.aten.argmax.default, torch.ops.aten.argmin.default)

    def wide(node):
        if node.op != "call_function" or node.target not in ops or not isinstance(node.args[0], torch.fx.Node):
            return False
        return getattr(node.args[0].meta.get("val"), "dtype", None) == torch.int64

    if not any(wide(n) for n in module.graph.nodes):
        return module
    module = copy.deepcopy(module)
    for node in [n for n in module.graph.nodes if wide(n)]:
        with module.graph.inserting_before(node):
            narrow = module.graph.call_function(torch.ops.aten._to_copy.default, (node.args[0],), {"dtype": torch.int32})
        narrow.meta.update(node.args[0].meta)
        narrow.meta["val"] = node.args[0].meta["val"].to(torch.int32)
        node.replace_input_with(node.args[0], narrow)
    module.recompile()
    return module


@contextmanager
def _strict_qdq(on: bool):
    """LiteRT's converter in strict QDQ mode while the block runs (when `on`): only ops between
    quantize/dequantize pairs become int8. By default it also quantizes a float op whose neighbours
    are quantized, weights included, so a layer edgekit keeps float would come out int8 again.
    litert-torch 0.x sets the mode only in its TensorFlow-based v2 converter, which takes no PT2E
    model; the flag is set here on the config its default converter builds (litert-torch is pinned,
    and tests/test_search.py fails if a kept layer comes out int8)."""
    if not on:
        yield
        return
    from litert_torch._convert import litert_converter

    api = litert_converter.converter_api_ext
    plain = api.ConvertToTFLConfig

    def strict():
        config = plain()
        config.strict_qdq_mode = True
        return config

    api.ConvertToTFLConfig = strict
    try:
        yield
    finally:
        api.ConvertToTFLConfig = plain


def _int8_float_leftovers(path: Path, out_path: Path, float_input_projections: bool = False,
                          keep: tuple[str, ...] = ()) -> None:
    """Give the weights that litert left float int8 storage, with ai-edge-quantizer: a
    FULLY_CONNECTED with a float output (edgekit keeps a transformer's residual stream float)
    becomes a hybrid int8-weight kernel, and an EMBEDDING_LOOKUP table int8 per row, read
    as float. Left as they are: ops that are already int8, the ops of the layers in `keep` (module
    paths the spec keeps float), and with `float_input_projections` the FULLY_CONNECTED ops reading
    the model's input (a recurrence's input weights: edgekit.converters.recurrent_input)."""
    from ai_edge_quantizer import algorithm_manager, qtyping
    from ai_edge_quantizer import quantizer as aeq

    ops = qtyping.TFLOperationName
    quantizer = aeq.Quantizer(str(path))
    quantizer.add_dynamic_config(".*", ops.FULLY_CONNECTED, 8)
    quantizer.add_weight_only_config(".*", ops.EMBEDDING_LOOKUP, 8)
    scopes = [f"^{re.escape(s)}$" for s in recurrent_input.tflite_scopes(path)] if float_input_projections else []
    for regex in scopes + [_layer_scope(layer) for layer in keep]:
        for op in (ops.FULLY_CONNECTED, ops.EMBEDDING_LOOKUP):
            quantizer.update_quantization_recipe(regex, op, algorithm_key=algorithm_manager.AlgorithmName.NO_QUANTIZE)
    try:
        quantizer.quantize().export_model(str(out_path), overwrite=True)
    except Exception:  # noqa: BLE001 - a model it cannot rewrite keeps litert's output; inspection shows its float weights
        shutil.copyfile(path, out_path)


def _layer_scope(layer: str) -> str:
    """A regex matching the scope of the ops of the module at path `layer` ("encoder.rnn") in a .tflite litert
    wrote: litert names an op's output tensors by its module stack, one `{class}_{last name}` per module
    ("…/torch.nn.modules.container.Sequential_encoder/torch.nn.modules.rnn.LSTM_rnn;4")."""
    return "(^|/)" + "/".join(f"[^/;]*_{re.escape(part)}" for part in layer.split(".")) + "[;/]"
