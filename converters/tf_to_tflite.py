"""tf/keras → tflite with TensorFlow's TFLiteConverter; int8 through its representative dataset."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from edgekit.calibration import tflite_bias_correction
from edgekit.core.artifact import ModelArtifact
from edgekit.converters.base import ConvertContext, Converter
from edgekit.core.drift import keras_layer
from edgekit.core.quant import Capabilities, Precision, unknown_layers


class TfToTflite(Converter):
    """The tf → tflite edge, TensorFlow's own converter on the SavedModel: its int8 calibrates min/max only, and a
    layer kept back from int8 can only stay float (no int16 activations, no SmoothQuant)."""

    name = "tf_to_tflite"
    source = "tf"
    target = "tflite"
    precisions = (Precision.FP32, Precision.FP16, Precision.INT8, Precision.INT8_DYNAMIC)
    capabilities = Capabilities(
        methods=("minmax",),  # the converter's calibrator records min/max per tensor; no other choice
        int8_io=True,
        fallbacks=("float",),  # the quantization debugger's denylisted nodes
        bias_correction=True,  # edgekit.calibration.tflite_bias_correction on the int8 .tflite
    )
    extra = "tf"
    requires = ("tensorflow",)
    cost = 1.0
    tools = ("tensorflow",)

    def convert(self, src: ModelArtifact, out_path: Path, precision: str, ctx: ConvertContext) -> ModelArtifact:
        """fp16 weights, int8-dynamic weights, or full int8 on built-in int8 kernels only (an op without one fails
        the conversion), calibrated on ctx.calibration, with the spec's float layers, bias correction and int8 I/O.
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
            converter.optimizations = [tf.lite.Optimize.DEFAULT]
            converter.representative_dataset = _representative(ctx.calibration, src.signature.input_names)
            converter.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS_INT8]
            if ctx.spec.int8_io:
                converter.inference_input_type = tf.int8
                converter.inference_output_type = tf.int8
            float_model = None  # the float .tflite, converted once for what needs it
            if ctx.spec.layers("float") or ctx.spec.bias_correction:
                float_model = _converter(ctx).convert()
            model = _with_float_layers(converter, ctx, src, float_model) if ctx.spec.layers("float") else converter.convert()
            if ctx.spec.bias_correction:
                model, _ = tflite_bias_correction.correct(model, float_model, ctx.calibration, src.signature.input_names)
            out_path.write_bytes(model)
            return ModelArtifact("tflite", str(out_path), src.signature, precision)
        out_path.write_bytes(converter.convert())
        return ModelArtifact("tflite", str(out_path), src.signature, precision)


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
    known = {layer.name for layer in getattr(ctx.source, "keras_model", None).layers} \
        if getattr(ctx.source, "keras_model", None) is not None else set()
    nodes, found = [], set()
    for op in interp._get_ops_details():  # noqa: SLF001 - the interpreter's op list (no public equivalent)
        for out in op["outputs"]:
            name = names.get(out, "")
            layer = keras_layer(name, known or layers) or name
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
