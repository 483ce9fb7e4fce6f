"""tf/keras → tflite with TensorFlow's TFLiteConverter; int8 through its representative dataset."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from edgekit.artifact import ModelArtifact
from edgekit.registry import Converter


class TfToTflite(Converter):
    name = "tf_to_tflite"
    source = "tf"
    target = "tflite"
    precisions = ("fp32", "fp16", "int8", "int8-dynamic")
    methods = ("minmax",)  # the converter's calibrator records min/max per tensor; no other choice
    int8_io = True
    extra = "tf"
    requires = ("tensorflow",)
    cost = 1.0
    tools = ("tensorflow",)

    def convert(self, src: ModelArtifact, out_path: Path, precision: str, ctx) -> ModelArtifact:
        import tensorflow as tf

        converter = tf.lite.TFLiteConverter.from_saved_model(ctx.source.saved_model(ctx.work_dir))
        if precision == "fp16":
            converter.optimizations = [tf.lite.Optimize.DEFAULT]
            converter.target_spec.supported_types = [tf.float16]
        elif precision == "int8-dynamic":
            converter.optimizations = [tf.lite.Optimize.DEFAULT]
        elif precision == "int8":
            converter.optimizations = [tf.lite.Optimize.DEFAULT]
            converter.representative_dataset = _representative(ctx.calibration, src.signature.input_names)
            converter.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS_INT8]
            if ctx.spec.int8_io:
                converter.inference_input_type = tf.int8
                converter.inference_output_type = tf.int8
        out_path.write_bytes(converter.convert())
        return ModelArtifact("tflite", str(out_path), src.signature, precision)


def _representative(samples, names):
    def generate():
        for i in range(len(samples)):
            yield [np.array(samples.inputs[n][i], copy=True) for n in names]

    return generate
