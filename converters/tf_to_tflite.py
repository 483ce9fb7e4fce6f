"""tf/keras → tflite with TensorFlow's TFLiteConverter; static int8 by ai-edge-quantizer on the float .tflite
(edgekit.converters.tflite_int8), or, for a model with loops, through TFLiteConverter's representative dataset."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from edgekit.calibration import tflite_bias_correction
from edgekit.calibration.tflite_io import float_io
from edgekit.core.artifact import ModelArtifact
from edgekit.core.errors import ConversionFailed
from edgekit.converters import tflite_int8
from edgekit.converters.base import ConvertContext, Converter
from edgekit.core.drift import keras_layer
from edgekit.core.quant import Capabilities, Method, Precision, unknown_layers


class TfToTflite(Converter):
    """The tf → tflite edge, TensorFlow's own converter on the SavedModel; static int8 by ai-edge-quantizer on the
    float .tflite with edgekit's calibration (no SmoothQuant). A model with loops (more than one subgraph) is
    quantized by TFLiteConverter instead: minmax only, a layer kept back only as float."""

    name = "tf_to_tflite"
    source = "tf"
    target = "tflite"
    precisions = (Precision.FP32, Precision.FP16, Precision.INT8, Precision.INT8_DYNAMIC)
    capabilities = Capabilities(
        methods=("minmax", "mean-minmax"),  # from one calibration pass (tflite_int8.statistics)
        default_methods=("minmax", "mean-minmax"),  # mean-minmax where it drifts clearly less (tempocnn: 0.75 → 0.96)
        int8_io=True,
        fallbacks=("int16", "float"),  # a16w8 on the layer's ops; left out of quantization
        bias_correction=True,  # edgekit.calibration.tflite_bias_correction on the int8 .tflite
        int16_activations=True,  # ai-edge-quantizer's a16w8 recipe
    )
    extra = "tf"
    requires = ("tensorflow", "ai_edge_quantizer")
    cost = 1.0
    tools = ("tensorflow", "ai_edge_quantizer")

    def convert(self, src: ModelArtifact, out_path: Path, precision: str, ctx: ConvertContext) -> ModelArtifact:
        """fp16 weights, int8-dynamic weights, or static int8 calibrated on ctx.calibration with the spec's method,
        kept layers, passes and int8 I/O (an op ai-edge-quantizer has no int8 form for stays float, which the
        inspection counts).
        A SavedModel that tf.saved_model.load cannot read (the source says which loader read it) goes through
        TensorFlow's v1 converter, which reads the serving signature's graph alone."""
        import tensorflow as tf

        converter = _converter(ctx)
        if precision == Precision.FP16:
            converter.optimizations = [tf.lite.Optimize.DEFAULT]
            converter.target_spec.supported_types = [tf.float16]
        elif precision == Precision.INT8_DYNAMIC:
            converter.optimizations = [tf.lite.Optimize.DEFAULT]
        elif precision == Precision.INT8:
            float_model = _float_model(ctx)
            try:
                model = _int8(float_model, src, ctx)
            except tflite_int8.ControlFlow:
                model = _int8_with_loops(converter, float_model, src, ctx)
            if ctx.spec.bias_correction:
                model, _ = tflite_bias_correction.correct(model, float_model, ctx.calibration, src.signature.input_names)
            out_path.write_bytes(model)
            return ModelArtifact("tflite", str(out_path), src.signature, precision)
        out_path.write_bytes(converter.convert())
        return ModelArtifact("tflite", str(out_path), src.signature, precision)


def _float_model(ctx) -> bytes:
    """The float .tflite, converted once per run (ctx.reuse)."""
    shared = ctx.reuse.kept if ctx.reuse is not None else {}
    if "float tflite" not in shared:
        shared["float tflite"] = _converter(ctx).convert()
    return shared["float tflite"]


def _int8(float_model: bytes, src: ModelArtifact, ctx) -> bytes:
    """`float_model` at static int8 by ai-edge-quantizer (tflite_int8) on ctx.calibration with the spec's method,
    layers and int16 activations, the batch norms no conv took (`unfolded_affines`) float unless asked at int16;
    float inputs and outputs unless int8_io. Raises tflite_int8.ControlFlow."""
    shared = ctx.reuse.kept if ctx.reuse is not None else {}
    if tflite_int8.STATISTICS not in shared:
        shared[tflite_int8.STATISTICS] = tflite_int8.statistics(float_model, ctx.calibration, src.signature)
    spec = ctx.spec
    scopes = _layer_scopes(float_model, ctx, (*spec.layers("float"), *spec.layers("int16")))
    int16 = [s for layer in spec.layers("int16") for s in scopes[layer]]
    by_rule = [] if spec.int16_activations else [s for s in tflite_int8.unfolded_affines(float_model) if s not in int16]
    model = tflite_int8.quantize(float_model, tflite_int8.ranges(shared[tflite_int8.STATISTICS], spec.method),
                                 float_scopes=[*by_rule, *(s for layer in spec.layers("float") for s in scopes[layer])],
                                 int16_scopes=int16, int16_activations=spec.int16_activations)
    return model if spec.int8_io else float_io(model)


def _layer_scopes(float_model: bytes, ctx, layers) -> dict[str, list[str]]:
    """The scopes (tflite_int8.op_scopes) of the ops of each of `layers` (Keras layers, as `edgekit layers` names
    them, or op names); a layer with no op is refused, naming the layers there are."""
    scopes: dict[str, list[str]] = {layer: [] for layer in layers}
    known = _keras_layers(ctx)
    for scope in tflite_int8.op_scopes(float_model) if layers else ():
        layer = _layer_of(scope, known, layers)
        if layer in scopes:
            scopes[layer].append(scope)
    if missing := sorted(layer for layer, found in scopes.items() if not found):
        raise unknown_layers(missing, known, "the model")
    return scopes


def _layer_of(name: str, known: set[str], layers) -> str:
    """Which of `layers` the op with output tensor name(s) `name` belongs to: its Keras layer (`known`), or, in a
    SavedModel that is not a Keras model, the part of its name that names it as `edgekit layers` does (a
    "model_1/block/conv1d_16" among the fused names); else the name itself."""
    parts = name.split(";")
    return (keras_layer(name, known or set(layers)) or (None if known else next((layer for layer in layers if layer in parts), None))
            or name.rstrip(";"))


def _keras_layers(ctx) -> set[str]:
    """The names of the source's Keras layers (none for a SavedModel that is not a Keras model)."""
    model = getattr(ctx.source, "keras_model", None)
    return {layer.name for layer in model.layers} if model is not None else set()


def _int8_with_loops(converter, float_model: bytes, src: ModelArtifact, ctx) -> bytes:
    """A model with loops at int8 through TFLiteConverter's calibrator (see TfToTflite)."""
    import tensorflow as tf

    spec = ctx.spec
    if spec.method != Method.MINMAX or spec.layers("int16") or spec.int16_activations:
        asked = (f"{spec.method} calibration" if spec.method != Method.MINMAX else
                 "int16 activations" if spec.int16_activations else f"--keep {spec.layers('int16')[0]}=int16")
        raise ConversionFailed(f"this model has loops (a recurrent layer runs as a TFLite WHILE), which only "
                               f"TFLiteConverter's int8 takes: it has no {asked}", converter="tf_to_tflite",
                               fix="use --calib-method minmax and keep layers float (--keep LAYER=float) on tflite, "
                                   "or convert to onnx, which has both")
    converter.optimizations = [tf.lite.Optimize.DEFAULT]
    converter.representative_dataset = _representative(ctx.calibration, src.signature.input_names)
    converter.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS_INT8]
    if spec.int8_io:
        converter.inference_input_type = tf.int8
        converter.inference_output_type = tf.int8
    return _with_float_layers(converter, ctx, src, float_model) if spec.layers("float") else converter.convert()


def _converter(ctx):
    """TFLiteConverter (v2) on the source's SavedModel, or the v1 one when TF 2's loader could not read it."""
    import tensorflow as tf

    path = ctx.source.saved_model(ctx.work_dir)
    if getattr(ctx.source, "signature_only", False):
        return tf.compat.v1.lite.TFLiteConverter.from_saved_model(path, signature_key="serving_default",
                                                                  tag_set=set(ctx.source.serving_tags()))
    return tf.lite.TFLiteConverter.from_saved_model(path)


def _representative(samples, names):
    def generate():
        for i in range(len(samples)):
            yield [np.array(samples.inputs[n][i], copy=True) for n in names]

    return generate


def _with_float_layers(converter, ctx, src, float_model: bytes) -> bytes:
    """The int8 model with the spec's float layers left float, through TensorFlow's quantization
    debugger: its `denylisted_nodes` are the names of the ops' output tensors, read here from the
    float model and matched to Keras layers as `edgekit layers` names them."""
    import tensorflow as tf

    layers = set(ctx.spec.layers("float"))
    interp = tf.lite.Interpreter(model_content=float_model)
    names = {d["index"]: d["name"] for d in interp.get_tensor_details()}
    known = _keras_layers(ctx)
    nodes, found = [], set()
    for op in interp._get_ops_details():  # noqa: SLF001 - the interpreter's op list (no public equivalent)
        for out in op["outputs"]:
            name = names.get(out, "")
            layer = _layer_of(name, known, layers)
            if layer in layers:
                nodes.append(name)
                found.add(layer)
    if found != layers:
        raise unknown_layers(sorted(layers - found), known, "the model")
    options = tf.lite.experimental.QuantizationDebugOptions(denylisted_nodes=nodes)
    debugger = tf.lite.experimental.QuantizationDebugger(
        converter=converter, debug_dataset=_representative(ctx.calibration, src.signature.input_names),
        debug_options=options)
    return debugger.get_nondebug_quantized_model()
