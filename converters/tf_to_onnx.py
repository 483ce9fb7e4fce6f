"""tf/keras → onnx with tf2onnx, from the SavedModel (tf2onnx cannot read Keras 3 models directly)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from edgekit.core.artifact import ModelArtifact
from edgekit.core.errors import ConversionFailed
from edgekit.core.formats import onnx_files
from edgekit.core.quant import Precision
from edgekit.converters.base import ConvertContext, Converter

OPSET = 17

# tf2onnx reads a SavedModel with tf.saved_model.load whenever TensorFlow is 2.x (its TF1 loader runs only under
# TF 1), so a SavedModel that loader cannot read is loaded here with TF's v1 loader in a Session, frozen
# with tf2onnx's freeze_session, and converted with tf2onnx's from_graph_def: inputs and outputs named by
# their signature keys, the outputs in the order the source gives them.
_V1_SCRIPT = """
import json, sys
from edgekit.core.process import die_with_parent
die_with_parent()
import tensorflow as tf
from tf2onnx import convert, tf_loader
path, out, opset, tags = sys.argv[1], sys.argv[2], int(sys.argv[3]), json.loads(sys.argv[4])
inputs, outputs = json.loads(sys.argv[5]), json.loads(sys.argv[6])
graph = tf.Graph()
with graph.as_default(), tf.compat.v1.Session(graph=graph) as sess:
    sig = tf.compat.v1.saved_model.loader.load(sess, tags, path).signature_def["serving_default"]
    in_names = [sig.inputs[k].name for k in inputs]
    out_names = [sig.outputs[k].name for k in outputs]
    frozen = tf_loader.freeze_session(sess, input_names=in_names, output_names=out_names)
convert.from_graph_def(frozen, input_names=in_names, output_names=out_names, opset=opset, output_path=out,
                       tensors_to_rename={**dict(zip(in_names, inputs)), **dict(zip(out_names, outputs))})
"""


class TfToOnnx(Converter):
    """The tf → onnx edge, fp32 only: lower precisions of a TF model's ONNX are onnx_quantize's, after it."""

    name = "tf_to_onnx"
    source = "tf"
    target = "onnx"
    precisions = (Precision.FP32,)
    extra = "tf"
    requires = ("tensorflow", "tf2onnx", "onnx")
    cost = 1.0
    tools = ("tensorflow", "tf2onnx", "onnx")

    def convert(self, src: ModelArtifact, out_path: Path, precision: str, ctx: ConvertContext) -> ModelArtifact:
        """tf2onnx's command line, in a child process, on the source's SavedModel (a Keras model is exported
        first) at opset OPSET; when it fails, its last error line is the ConversionFailed's message. A SavedModel
        tf.saved_model.load cannot read (the source says which loader read it) is frozen from TF's v1 loader
        and converted with tf2onnx's from_graph_def (_V1_SCRIPT)."""
        saved_model = ctx.source.saved_model(ctx.work_dir)
        if getattr(ctx.source, "signature_only", False):
            command = ["-c", _V1_SCRIPT, saved_model, str(out_path), str(OPSET), json.dumps(ctx.source.serving_tags()),
                       json.dumps(list(ctx.source.input_keys)), json.dumps(list(ctx.source.output_keys))]
        else:
            # tf2onnx's command line is its supported interface for SavedModels.
            command = ["-m", "tf2onnx.convert", "--saved-model", saved_model, "--output", str(out_path),
                       "--opset", str(OPSET)]
        proc = subprocess.run([sys.executable, *command], capture_output=True, text=True, stdin=subprocess.DEVNULL)
        if proc.returncode != 0:
            lines = [ln for ln in proc.stderr.splitlines() if "Error" in ln or "error" in ln] or proc.stderr.splitlines()
            raise ConversionFailed(lines[-1].strip() if lines else "tf2onnx failed", converter=self.name)
        return ModelArtifact("onnx", str(out_path), src.signature, precision, files=onnx_files(out_path))
