"""tf/keras → onnx with tf2onnx, from the SavedModel (tf2onnx cannot read Keras 3 models directly)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from edgekit.core.artifact import ModelArtifact
from edgekit.core.errors import ConversionFailed
from edgekit.core.formats import onnx_files
from edgekit.converters.base import ConvertContext, Converter

OPSET = 17


class TfToOnnx(Converter):
    """The tf → onnx edge, fp32 only: lower precisions of a TF model's ONNX are onnx_quantize's, after it."""

    name = "tf_to_onnx"
    source = "tf"
    target = "onnx"
    precisions = ("fp32",)
    extra = "tf"
    requires = ("tensorflow", "tf2onnx", "onnx")
    cost = 1.0
    tools = ("tensorflow", "tf2onnx", "onnx")

    def convert(self, src: ModelArtifact, out_path: Path, precision: str, ctx: ConvertContext) -> ModelArtifact:
        """tf2onnx's command line, in a child process, on the source's SavedModel (a Keras model is exported
        first) at opset OPSET; when it fails, its last error line is the ConversionFailed's message."""
        saved_model = ctx.source.saved_model(ctx.work_dir)
        # tf2onnx's command line is its supported interface for SavedModels.
        proc = subprocess.run(
            [sys.executable, "-m", "tf2onnx.convert", "--saved-model", saved_model, "--output", str(out_path),
             "--opset", str(OPSET)],
            capture_output=True, text=True, stdin=subprocess.DEVNULL,
        )
        if proc.returncode != 0:
            lines = [ln for ln in proc.stderr.splitlines() if "Error" in ln or "error" in ln] or proc.stderr.splitlines()
            raise ConversionFailed(lines[-1].strip() if lines else "tf2onnx failed", converter=self.name)
        return ModelArtifact("onnx", str(out_path), src.signature, precision, files=onnx_files(out_path))
