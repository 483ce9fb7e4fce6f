"""onnx → onnx at int8, int8-dynamic or fp16 with onnxruntime's quantization tools.

Static int8 is QDQ with per-channel int8 weights and int8 activations, after `quant_pre_process`.
Calibration methods map onto onnxruntime's calibrators: minmax → MinMax, percentile → Percentile,
entropy → Entropy (histogram of 2048 bins). onnxruntime has no MSE calibrator, so mse is refused.
"""

from __future__ import annotations

from pathlib import Path

from edgekit import io_params
from edgekit.artifact import ModelArtifact
from edgekit.registry import Converter

ENTROPY_BINS = 2048  # quantize_static's default (128) leaves entropy a single candidate: MinMax


class OnnxQuantize(Converter):
    name = "onnx_quantize"
    source = "onnx"
    target = "onnx"
    precisions = ("fp16", "int8", "int8-dynamic")
    methods = ("minmax", "percentile", "entropy")
    int8_io = True
    extra = "onnx"
    requires = ("onnx", "onnxruntime")  # no torch: ONNX models from TensorFlow take this edge too
    cost = 1.0
    tools = ("onnx", "onnxruntime")

    def convert(self, src: ModelArtifact, out_path: Path, precision: str, ctx) -> ModelArtifact:
        import onnx

        files = [str(out_path)]
        if precision == "fp16":
            from onnxruntime.transformers.float16 import convert_float_to_float16

            model = convert_float_to_float16(onnx.load(src.path), keep_io_types=True)
            onnx.save(model, str(out_path))
            return ModelArtifact("onnx", str(out_path), src.signature, precision)

        from onnxruntime.quantization import QuantType, quant_pre_process, quantize_dynamic

        prepared = ctx.work_dir / f"{out_path.stem}.pre.onnx"
        quant_pre_process(src.path, str(prepared))
        if precision == "int8-dynamic":
            quantize_dynamic(str(prepared), str(out_path), per_channel=True, weight_type=QuantType.QInt8)
        else:
            self._static(prepared, out_path, src, ctx)
            if ctx.int8_io:
                files.append(str(_integer_io(out_path, src)))
        prepared.unlink()
        return ModelArtifact("onnx", str(out_path), src.signature, precision, files=tuple(files))

    def _static(self, prepared: Path, out_path: Path, src: ModelArtifact, ctx) -> None:
        from onnxruntime.quantization import CalibrationMethod, QuantFormat, QuantType, quantize_static

        method = {"minmax": CalibrationMethod.MinMax, "percentile": CalibrationMethod.Percentile,
                  "entropy": CalibrationMethod.Entropy}[ctx.method]
        reader = _Reader(ctx.calibration, _graph_inputs(prepared, src))
        options = dict(quant_format=QuantFormat.QDQ, per_channel=True, activation_type=QuantType.QInt8,
                       weight_type=QuantType.QInt8, calibrate_method=method)
        if ctx.method == "entropy":
            from onnxruntime.quantization import create_calibrator, save_tensors_data

            calibrator = create_calibrator(str(prepared), calibrate_method=method,
                                           augmented_model_path=str(ctx.work_dir / "augmented.onnx"),
                                           extra_options={"num_bins": ENTROPY_BINS})
            calibrator.collect_data(reader)
            cache = ctx.work_dir / "entropy-ranges.json"
            save_tensors_data(calibrator.compute_data(), cache)
            quantize_static(str(prepared), str(out_path), None, calibration_cache_path=str(cache), **options)
        else:
            quantize_static(str(prepared), str(out_path), reader, **options)


def _graph_inputs(path: Path, src: ModelArtifact) -> dict[str, str]:
    """Signature input name → ONNX graph input name (same order)."""
    import onnx

    graph = onnx.load(str(path), load_external_data=False).graph
    initializers = {i.name for i in graph.initializer}
    names = [i.name for i in graph.input if i.name not in initializers]
    return dict(zip(src.signature.input_names, names))


class _Reader:
    """Feeds calibration samples to onnxruntime one at a time (a CalibrationDataReader)."""

    def __init__(self, samples, names: dict[str, str]):
        self.samples, self.names, self.i = samples, names, 0

    def get_next(self):
        if self.i >= len(self.samples):
            return None
        feed = {onnx_name: self.samples.inputs[ours][self.i].copy() for ours, onnx_name in self.names.items()}
        self.i += 1
        return feed

    def rewind(self):
        self.i = 0

    def __len__(self):
        return len(self.samples)


def _integer_io(path: Path, src: ModelArtifact) -> Path:
    """Remove the QuantizeLinear after each graph input and the DequantizeLinear before each
    output, so the model takes and returns int8; record their scale/zero-point beside it."""
    import onnx
    from onnx import TensorProto, numpy_helper

    model = onnx.load(str(path))
    graph = model.graph
    consts = {i.name: numpy_helper.to_array(i) for i in graph.initializer}

    def params(name, node):
        return {"name": name, "dtype": "int8", "scale": float(consts[node.input[1]]),
                "zero_point": int(consts[node.input[2]])}

    inputs, outputs = [], []
    for spec, graph_input in zip(src.signature.inputs, [i for i in graph.input if i.name not in consts]):
        quant = [n for n in graph.node if n.op_type == "QuantizeLinear" and n.input[0] == graph_input.name]
        if len(quant) != 1:
            inputs.append(None)
            continue
        for node in graph.node:
            node.input[:] = [graph_input.name if x == quant[0].output[0] else x for x in node.input]
        inputs.append(params(spec.name, quant[0]))
        graph_input.type.tensor_type.elem_type = TensorProto.INT8
        graph.node.remove(quant[0])
    for spec, graph_output in zip(src.signature.outputs, graph.output):
        deq = [n for n in graph.node if n.op_type == "DequantizeLinear" and n.output[0] == graph_output.name]
        if len(deq) != 1:
            outputs.append(None)
            continue
        produced = deq[0].input[0]
        for node in graph.node:
            if node is not deq[0]:
                node.output[:] = [graph_output.name if x == produced else x for x in node.output]
                node.input[:] = [graph_output.name if x == produced else x for x in node.input]
        outputs.append(params(spec.name, deq[0]))
        graph_output.type.tensor_type.elem_type = TensorProto.INT8
        graph.node.remove(deq[0])
    onnx.checker.check_model(model)
    onnx.save(model, str(path))
    return io_params.write(path, inputs, outputs)
