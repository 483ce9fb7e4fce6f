"""onnx → onnx at int8, int8-dynamic or fp16 with onnxruntime's quantization tools.

Static int8 is QDQ with per-channel int8 weights, after `quant_pre_process`, with the activation and weight
types edgekit.converters.onnx_int8_types chooses by what ONNX Runtime runs fastest on this CPU within the
accuracy of the best (uint8 × int8 or int8 × int8; uint8 × uint8 where its int8 products saturate: x86-64
without VNNI, see edgekit.core.cpu); the artifact records which and why (`int8_types`, with every candidate
measured) and the types decide the dtype of integer I/O.
Calibration methods map onto onnxruntime's calibrators: minmax → MinMax, percentile → Percentile,
entropy → Entropy (histogram of 2048 bins); percentile and entropy ranges are computed as onnxruntime's
calibrators compute them from statistics collected in one pass (edgekit.calibration.onnx_statistics, its
entropy search vectorized), and `auto`'s candidates share that pass, the pre-processed model and the
quantized model before bias correction (ConvertContext.reuse). onnxruntime has no MSE calibrator, so mse
is refused.

Real models need more than `quantize_static` alone (see the README's "int8 on real models"): dynamic
inputs are fixed to the signature first, pre-processing falls back to ONNX shape inference, what an
exporter spelled as several elementwise ops is written as the one layer it is (edgekit.converters.onnx_simplify), and
after calibration the ranges and the graph decide which nodes stay float (`mixed_scale_concats`,
`keep_float`); the weights those nodes hold are then stored int8 (`int8_weights_only`).
"""

from __future__ import annotations

import os
import shutil
from dataclasses import replace
from itertools import islice
from pathlib import Path

import numpy as np

from edgekit.calibration import onnx_bias_correction, onnx_gptq, onnx_statistics, smooth_quant
from edgekit.core import io_params
from edgekit.core.artifact import ArtifactMeta, LayerNote, ModelArtifact, OpsetUpgrade
from edgekit.core.cpu import int8_products_saturate
from edgekit.calibration.methods import LEVEL_SPREAD_DB, LEVEL_WHY, ON_INT8_WEIGHTS, mixed_scale, spread_db
from edgekit.converters import onnx_int8_types, recurrent_input
from edgekit.converters.onnx_simplify import simplify
from edgekit.converters.onnx_score_heads import score_head_nodes, stem_activations
from edgekit.core.errors import ConversionFailed, first_line
from edgekit.core.drift import keras_layer
from edgekit.core.formats import onnx_dims, onnx_files
from edgekit.converters.base import ConvertContext, Converter
from edgekit.core.quant import Capabilities, Precision, unknown_layers
from edgekit.targets.onnx.layers import NAME_SCOPES, layer_name


SATURATES = "this CPU (x86-64 without VNNI) saturates onnxruntime's uint8 × int8 products"


class OnnxQuantize(Converter):
    """The onnx → onnx edge below fp32 (see the module's docstring); it needs no torch, so ONNX models made
    from TensorFlow take it too. It has no mse calibration."""

    name = "onnx_quantize"
    source = "onnx"
    target = "onnx"
    precisions = (Precision.FP16, Precision.INT8, Precision.INT8_DYNAMIC)
    capabilities = Capabilities(
        methods=("minmax", "percentile", "entropy", "mean-minmax"),
        default_methods=("minmax", "mean-minmax"),  # mean-minmax where it drifts clearly less (the README's zoo)
        int8_io=True,
        fallbacks=("int16", "float"),  # TensorQuantOverrides with QInt16 activations (a16w8); nodes_to_exclude
        granularities=("per_channel", "per_tensor"),
        bias_correction=True,  # edgekit.calibration.onnx_bias_correction on the QDQ model
        smooth_quant=True,  # edgekit.calibration.smooth_quant on the float model
        int16_stem=True,  # QInt16 TensorQuantOverrides on the stem's activations (onnx_score_heads.stem_activations)
        int16_activations=True,  # the same on every activation onnxruntime calibrates (a16w8)
    )
    extra = "onnx"
    requires = ("onnx", "onnxruntime")  # no torch: ONNX models from TensorFlow take this edge too
    cost = 1.0
    tools = ("onnx", "onnxruntime")

    def convert(self, src: ModelArtifact, out_path: Path, precision: str, ctx: ConvertContext) -> ModelArtifact:
        """fp16 (float32 I/O kept), int8-dynamic (int8 weights, activations quantized at run time) or static
        int8 QDQ calibrated on ctx.calibration with the spec's overrides and passes. The int8 models are checked
        to load in onnxruntime, and their integer types are recorded (`int8_types`)."""
        import onnx

        files = [str(out_path)]
        if precision == Precision.FP16:
            from onnxruntime.transformers.float16 import convert_float_to_float16

            model = convert_float_to_float16(onnx.load(src.path), keep_io_types=True)
            onnx.save(model, str(out_path))
            return ModelArtifact("onnx", str(out_path), src.signature, precision)

        from onnxruntime.quantization import QuantType, quantize_dynamic

        prepared, upgrade = self._prepared(src, ctx.work_dir / f"{out_path.stem}.pre.onnx", precision, ctx)
        if precision == Precision.INT8_DYNAMIC:  # activations are uint8 at run time: only the weights' type is chosen
            unsigned = int8_products_saturate()
            quantize_dynamic(str(prepared), str(out_path), per_channel=True,
                             weight_type=QuantType.QUInt8 if unsigned else QuantType.QInt8)
            types = {"activations": "uint8", "weights": "uint8" if unsigned else "int8"}
            if unsigned:
                types["why"] = SATURATES
            kept = ()
        else:
            kept, (level, notes) = _float_input_weights(prepared, src, ctx), _level_layers(prepared, src, ctx)
            types = self._static(prepared, out_path, src, ctx, {w for w, _ in kept}, level)
            if ctx.spec.int8_io:
                files.append(str(_integer_io(out_path, src)))
            kept = tuple(note for _, note in kept) + notes
        prepared.unlink()
        loads_in_onnxruntime(out_path, Path(src.path).name)
        meta = ArtifactMeta(int8_types=types, opset_upgrade=upgrade or None, kept_float=kept)
        return ModelArtifact("onnx", str(out_path), src.signature, precision, files=tuple(files), meta=meta)

    def _prepared(self, src: ModelArtifact, prepared: Path, precision: str, ctx: ConvertContext) -> tuple[Path, dict | None]:
        """The source with its shapes fixed to the signature, at the opset per-channel weights need, through
        onnxruntime's pre-processing, at `prepared`, and the opset upgrade made (None when none was). A copy of
        what another conversion of the run made, when the run shares its work (ctx.reuse)."""
        per_channel = ctx.spec.granularity == "per_channel" or precision == Precision.INT8_DYNAMIC  # dynamic is per channel too
        kept, key = ctx.reuse.kept if ctx.reuse else {}, ("prepared", per_channel)
        if key in kept:
            shutil.copyfile(kept[key][0], prepared)
            return prepared, kept[key][1]
        fixed = fixed_shapes(Path(src.path), src, ctx.work_dir)
        upgrade = None
        if per_channel:
            fixed, upgrade = _at_least(PER_CHANNEL_OPSET, fixed, ctx.work_dir, Path(src.path).name)
        _pre_process(fixed, prepared, ctx.work_dir)
        _keep_metadata(fixed, prepared)  # its optimizer rebuilds nodes without the module paths that name layers
        simplify(prepared)  # exact, and one int8 rounding fewer per op it removes
        if ctx.reuse is not None:
            kept[key] = (shutil.copyfile(prepared, ctx.work_dir / "shared.pre.onnx"), upgrade)
        return prepared, upgrade

    def _static(self, prepared: Path, out_path: Path, src: ModelArtifact, ctx: ConvertContext,
                float_weights: set[str], level: set[str]) -> dict:
        """Static int8 QDQ at `out_path` in the integer types onnx_int8_types chooses (once per run with
        ctx.reuse: a search's steps keep the first conversion's pair), the weights named in `float_weights`
        kept float, the nodes named in `level` float on int8 weights (`level_path`); its `int8_types` record."""
        from onnxruntime.quantization import save_tensors_data

        reader = _Reader(ctx.calibration, _graph_inputs(prepared, src))
        smoothed = []
        if ctx.spec.smooth_quant:
            smoothed = smooth_quant.smooth_onnx(prepared, prepared, iter(reader.get_next, None))
            reader.rewind()
        # Calibrate first, so that the ranges can decide what stays float, then quantize with them.
        ranges = _ranges(prepared, reader, ctx)
        cache = ctx.work_dir / "ranges.json"
        save_tensors_data(ranges, cache)
        shared = ctx.reuse.kept if ctx.reuse else {}
        if "int8 types" in shared:
            pair, record = shared["int8 types"]
            self._quantized(prepared, out_path, (reader, ranges, cache, smoothed, float_weights, level), ctx, pair)
            return record
        pairs = onnx_int8_types.candidates(ctx.spec.int16_activations)
        made = [onnx_int8_types.Candidate(p, out_path if len(pairs) == 1 else ctx.work_dir / f"{out_path.stem}.{p.activations}.onnx")
                for p in pairs]
        for c in made:
            self._quantized(prepared, c.path, (reader, ranges, cache, smoothed, float_weights, level), ctx, c.pair)
        timed = None  # the kept pair against the float model, where it runs ops with no int8 kernel
        if len(made) == 1:
            pick, why = made[0], SATURATES if int8_products_saturate() else "every activation is int16"
        else:
            reader.rewind()
            feeds = list(iter(reader.get_next, None))[:onnx_int8_types.SAMPLES]
            try:
                pick, why = onnx_int8_types.choose(made, prepared, feeds, ctx.spec.optimize)
                timed = onnx_int8_types.against_float(pick, prepared, feeds[0]) if ctx.spec.optimize == "latency" else None
            except Exception as e:  # noqa: BLE001 - every candidate is a valid model: keep the first, say why
                pick, why, timed = made[0], (f"the first pair this CPU runs: the candidates could not be measured "
                                             f"({type(e).__name__}: {first_line(str(e))[:160]})"), None
            shutil.move(pick.path, out_path)
            for c in made:
                c.path.unlink(missing_ok=True)
        record = onnx_int8_types.record(pick, why, made, ctx.spec.optimize, timed)
        if ctx.reuse is not None:
            shared["int8 types"] = (pick.pair, record)
        return record

    def _quantized(self, prepared: Path, out_path: Path, calibrated: tuple, ctx: ConvertContext, pair) -> None:
        """`prepared` quantized with its calibration (reader, ranges, the ranges' file, the smoothed nodes, the
        weights kept float, the nodes on a level path) in `pair`'s types at `out_path`, the level path's layers
        rounded by GPTQ (edgekit.calibration.onnx_gptq), bias-corrected as the spec says, kept nodes' weights
        stored int8."""
        from onnxruntime.quantization import CalibrationMethod, QuantFormat, QuantType, quantize_static

        import onnx

        reader, ranges, cache, smoothed, float_weights, level = calibrated
        spec = ctx.spec
        layers = layer_nodes(prepared, spec.layers("float") + spec.layers("int16"))
        kept = [n.name for layer in spec.layers("float") for n in layers[layer]]
        shared, key = ctx.reuse.kept if ctx.reuse else {}, ("quantized", pair, replace(spec, bias_correction=False))
        if key in shared:  # the same quantization, made for a candidate without bias correction (or with it)
            shutil.copyfile(shared[key], out_path)
        else:
            wide = list(ranges.data) if spec.int16_activations else [*stem_activations(prepared, spec.int16_stem),
                                                                      *_wide_by_rule(prepared), *(
                t for layer in spec.layers("int16") for t in activations(prepared, layers[layer]))]
            int16 = {t: [{"quant_type": QuantType.QInt16}] for t in wide}
            method = {"minmax": CalibrationMethod.MinMax, "percentile": CalibrationMethod.Percentile,
                      "entropy": CalibrationMethod.Entropy, "mean-minmax": CalibrationMethod.MinMax}[spec.method]
            activation_type, weight_type = pair.quant_types()
            excluded = mixed_scale_concats(prepared, ranges) + keep_float(prepared) + kept + smoothed + sorted(level)
            rounded = self._rounded(prepared, reader, level, ctx.work_dir)
            quantize_static(str(rounded), str(out_path), None, calibration_cache_path=str(cache),
                            nodes_to_exclude=excluded,
                            quant_format=QuantFormat.QDQ, per_channel=spec.granularity == "per_channel",
                            activation_type=activation_type, weight_type=weight_type,
                            calibrate_method=method, extra_options={"TensorQuantOverrides": int16} if int16 else None)
            if rounded != prepared:
                rounded.unlink()
            if int16:
                _keep_metadata(prepared, out_path)
            if ctx.reuse is not None:
                shared[key] = shutil.copyfile(out_path, ctx.work_dir / f"shared.quantized.{pair.activations}.onnx")
        if spec.bias_correction:
            reader.rewind()
            onnx_bias_correction.correct(out_path, prepared, iter(reader.get_next, None), ctx.work_dir)
        model = onnx.load(str(out_path))
        int8_weights_only(model.graph, keep=set(kept), float_weights=float_weights, convs=level)
        float_weights_stay_float(model.graph)
        onnx.save(model, str(out_path))


    @staticmethod
    def _rounded(prepared: Path, reader, names: set[str], work_dir: Path) -> Path:
        """A copy of `prepared` whose layers named in `names` (float arithmetic on int8 weights, stored per
        channel: `int8_weights_only`) are rounded by GPTQ on the calibration samples (edgekit.calibration.onnx_gptq),
        or `prepared` itself when none is named."""
        if not names:
            return prepared
        rounded = shutil.copyfile(prepared, work_dir / f"{prepared.stem}.rounded.onnx")
        reader.rewind()
        onnx_gptq.round_layers(rounded, names, iter(reader.get_next, None), work_dir)
        return rounded


def _ranges(prepared: Path, reader, ctx: ConvertContext):
    """The activation ranges of ctx.spec's method (onnxruntime's TensorsData). minmax alone is onnxruntime's
    MinMax calibrater (its reductions run in the session); percentile and entropy, and every method when the
    run shares its work (`auto`), come from activation statistics collected once
    (edgekit.calibration.onnx_statistics: onnxruntime's entropy search, vectorized)."""
    from onnxruntime.quantization import CalibrationMethod, create_calibrator

    method, reuse = ctx.spec.method, ctx.reuse
    if method == "minmax" and reuse is None:
        calibrator = create_calibrator(str(prepared), calibrate_method=CalibrationMethod.MinMax,
                                       augmented_model_path=str(ctx.work_dir / "augmented.onnx"))
        calibrator.collect_data(reader)
        return calibrator.compute_data()
    key = ("statistics", ctx.spec.smooth_quant)  # of the float model calibrated: smoothed or not
    stats = reuse.kept.get(key) if reuse else None
    if stats is None:
        # bounded for auto; minmax and mean-minmax need only each sample's min and max, reduced in the session
        if reuse is not None:
            per_sample = -(-onnx_statistics.VALUES // len(reader)) if reuse.histograms else 1
        else:
            per_sample = 1 if method == "mean-minmax" else None
        stats = onnx_statistics.collect(prepared, iter(reader.get_next, None), ctx.work_dir, per_sample)
        if reuse is not None:
            reuse.kept[key] = stats
            reuse.calibration_passes += 1
    return stats.ranges(method)


def layer_nodes(model: Path, layers: tuple[str, ...]) -> dict[str, list]:
    """The nodes of each named layer, named as `edgekit layers` names them: the module path the exporter
    recorded, else the module of the node's weight, else the node's name — or, for a model converted from
    TensorFlow, the Keras layer whose scope the node's name is in (`.../conv2_1/BiasAdd` is in conv2)."""
    import onnx

    if not layers:
        return {}
    graph = onnx.load(str(model), load_external_data=False).graph
    weights = {i.name for i in graph.initializer}
    by_layer: dict[str, list] = {}
    for node in graph.node:
        name = layer_name(node, [i for i in node.input if i in weights])
        by_layer.setdefault(name, []).append(node)
        scope = keras_layer(name, set(layers) - {name})
        if scope:
            by_layer.setdefault(scope, []).append(node)
    missing = [layer for layer in layers if layer not in by_layer]
    if missing:
        raise unknown_layers(missing, set(by_layer), "the model")
    return {layer: by_layer[layer] for layer in layers}


def activations(model: Path, nodes: list) -> list[str]:
    """The float activation tensors the nodes read and write (not their weights)."""
    import onnx

    graph = onnx.load(str(model), load_external_data=False).graph
    floats = {v.name for v in (*graph.input, *graph.value_info, *graph.output)
              if v.type.tensor_type.elem_type == onnx.TensorProto.FLOAT}
    weights = {i.name for i in graph.initializer}
    return sorted({t for n in nodes for t in (*n.input, *n.output) if t in floats and t not in weights})


def _wide_by_rule(model: Path) -> list[str]:
    """The activations the ONNX model at `model` keeps at int16 by rule: `log_power_signal` and
    `squeeze_excite_pools`."""
    import onnx

    graph = onnx.load(str(model), load_external_data=False).graph
    return [*log_power_signal(graph), *squeeze_excite_pools(graph)]


def _level_layers(prepared: Path, src: ModelArtifact, ctx: ConvertContext) -> tuple[set[str], tuple[LayerNote, ...]]:
    """The nodes on the `level_path` of the inputs whose calibration samples spread over more than LEVEL_SPREAD_DB
    (`spread_db`), outside the layers the spec names (float or int16), none when every activation is int16;
    and the artifact's `kept_float` notes for the layers of their convolutions and linears."""
    import onnx

    if ctx.spec.int16_activations:
        return set(), ()
    graph = onnx.load(str(prepared), load_external_data=False).graph
    loud = {name: spread_db(ctx.calibration.inputs[ours]) for ours, name in _graph_inputs(prepared, src).items()}
    loud = {name: db for name, db in loud.items() if db > LEVEL_SPREAD_DB}
    path = set(level_path(graph, list(loud))) - set(loud)
    weights = {i.name for i in graph.initializer}
    asked = set(ctx.spec.layers("float") + ctx.spec.layers("int16"))
    nodes, notes = set(), {}
    for node in (n for n in graph.node if set(n.output) & path):
        layer = layer_name(node, [i for i in node.input if i in weights])
        if layer in asked:
            continue
        nodes.add(node.name)
        if node.op_type in ("Conv", "MatMul", "Gemm"):
            why = LEVEL_WHY.format(inputs=", ".join(loud), db=max(loud.values()), how=ON_INT8_WEIGHTS)
            notes.setdefault(layer, LayerNote(layer, node.op_type, why))
    return nodes, tuple(notes.values())


def _keep_metadata(prepared: Path, out_path: Path) -> None:
    """Give the nodes of the model at `out_path` back the module path the exporter recorded for the node of
    the same name in `prepared` (NAME_SCOPES, which names layers; not the rest of its metadata, stack traces
    that would grow the file): onnxruntime's pre-processing optimizes the graph into new nodes without it, and
    with 16-bit overrides its quantizer raises the model to opset 21 and rebuilds its nodes without it."""
    import onnx

    source = {n.name: [p for p in n.metadata_props if p.key == NAME_SCOPES]
              for n in onnx.load(str(prepared), load_external_data=False).graph.node}
    model = onnx.load(str(out_path))
    for node in model.graph.node:
        if not any(p.key == NAME_SCOPES for p in node.metadata_props) and source.get(node.name):
            node.metadata_props.extend(source[node.name])
    onnx.save(model, str(out_path))


def fixed_shapes(path: Path, src: ModelArtifact, work_dir: Path) -> Path:
    """The model as one file with its dynamic input dimensions fixed to the signature's
    (--input-shape): onnxruntime's shape inference and calibration need concrete shapes, and its
    pre-processing loses external data it wrote to a folder it has already removed. The model
    itself when it is one file with fixed shapes."""
    import onnx
    from onnxruntime.tools.onnx_model_utils import fix_output_shapes

    model = onnx.load(str(path))  # external data included
    shapes = dict(zip(_graph_inputs(path, src).values(), (s.shape for s in src.signature.inputs)))
    dynamic = [i for i in model.graph.input if i.name in shapes and not all(isinstance(d, int) for d in onnx_dims(i))]
    if not dynamic and len(onnx_files(path)) == 1:
        return path
    for value in dynamic:
        # Each free dimension set where it is: one symbol may name dimensions given different sizes (PaddleOCR
        # writes "?" for height and width), and -1 stands for a free one in older exports.
        for dim, size in zip(value.type.tensor_type.shape.dim, shapes[value.name]):
            if not (dim.HasField("dim_value") and dim.dim_value > 0):
                dim.Clear()
                dim.dim_value = int(size)
    if dynamic:
        del model.graph.value_info[:]  # shapes inferred from the free sizes: inferred again from the fixed ones
        model = onnx.shape_inference.infer_shapes(model)
        fix_output_shapes(model)
    fixed = work_dir / f"{path.stem}.fixed.onnx"
    onnx.save(model, str(fixed))
    return fixed


PER_CHANNEL_OPSET = 13  # DequantizeLinear's `axis` (per-channel weights) exists from opset 13 on


def _at_least(opset: int, path: Path, work_dir: Path, name: str) -> tuple[Path, dict | None]:
    """The model at ONNX opset `opset` or later: many exported models are opset 11-12, where onnxruntime's
    quantizer still writes per-channel DequantizeLinear nodes that onnxruntime then refuses to load
    ("Unrecognized attribute: axis"). Upgraded with ONNX's version converter, checked, and saved in
    `work_dir`; returns the path and what was done (None when nothing was)."""
    import onnx
    from onnx import version_converter

    model = onnx.load(str(path))
    before = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), opset)
    if before >= opset:
        return path, None
    try:
        upgraded = version_converter.convert_version(model, opset)
        onnx.checker.check_model(upgraded)
    except Exception as e:  # noqa: BLE001 - the converter lacks an adapter for one of the model's ops
        raise ConversionFailed(
            f"{name} is ONNX opset {before}; per-channel int8 needs opset {opset} (DequantizeLinear's axis), and "
            f"ONNX's version converter cannot upgrade it: {type(e).__name__}: {_without_paths(str(e), path)}",
            fix="quantize with --granularity per-tensor (it works at any opset), or export the model at "
                f"opset {opset} or later") from e
    out = work_dir / f"{path.stem}.opset{opset}.onnx"
    onnx.save(upgraded, str(out))
    return out, OpsetUpgrade(before, opset, "per-channel int8 weights need DequantizeLinear's axis")


def loads_in_onnxruntime(path: Path, name: str) -> None:
    """Refuse to hand on a quantized model that onnxruntime will not load, naming the node it refuses and
    the source, with the whole cause (onnxruntime's message, its temporary paths cut out)."""
    import onnxruntime as ort

    try:
        ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    except Exception as e:  # noqa: BLE001 - onnxruntime raises its own exception types
        raise ConversionFailed(
            f"onnxruntime refuses the quantized model of {name}: {_without_paths(str(e), path)}",
            fix="keep the node it names in float (--keep LAYER=float, layers as `edgekit layers` names them) "
                "or try --granularity per-tensor") from e


def _without_paths(message: str, path: Path) -> str:
    """An onnxruntime/ONNX message on one line, with our temporary file's path reduced to its name."""
    return " ".join(message.replace(str(path.resolve()), path.name).replace(str(path), path.name).split())


def _pre_process(model: Path, prepared: Path, work_dir: Path) -> None:
    """quant_pre_process, run inside the work folder (it writes temporary files into the current
    folder). Its symbolic shape inference gives up on some graphs (transformers, detectors with
    computed shapes); ONNX's own shape inference is the fallback."""
    from onnxruntime.quantization import quant_pre_process

    model, prepared = model.resolve(), prepared.resolve()
    cwd = os.getcwd()
    os.chdir(work_dir)
    try:
        try:
            quant_pre_process(str(model), str(prepared))
        except Exception as symbolic:  # noqa: BLE001 - onnxruntime's symbolic pass gave up; try ONNX's own
            try:
                quant_pre_process(str(model), str(prepared), skip_symbolic_shape=True)
            except Exception as e:  # noqa: BLE001
                raise ConversionFailed(
                    f"onnxruntime's quantization pre-processing failed on {model.name}: symbolic shape "
                    f"inference ({type(symbolic).__name__}: {first_line(symbolic)}), then ONNX shape "
                    f"inference ({type(e).__name__}: {first_line(e)})",
                    fix="give every dynamic input a shape with --input-shape NAME=D0,D1,...; if they all "
                        "have one, simplify the model (onnxsim) before converting") from e
    finally:
        os.chdir(cwd)


def mixed_scale_concats(model: Path, ranges) -> list[str]:
    """Names of the Concat nodes whose inputs span very different ranges (from calibration)."""
    import onnx
    from onnx import numpy_helper

    graph = onnx.load(str(model), load_external_data=False).graph
    consts = {i.name: i for i in graph.initializer}
    out = []
    for node in graph.node:
        if node.op_type != "Concat":
            continue
        spans = []
        for name in node.input:
            if name in consts:
                spans.append(float(np.max(np.abs(numpy_helper.to_array(consts[name])), initial=0.0)))
            elif name in ranges:
                low, high = ranges[name].range_value
                spans.append(float(max(abs(float(np.asarray(low).min())), abs(float(np.asarray(high).max())))))
        if mixed_scale(spans):
            out.append(node.name)
    return out


_RESHAPES = ("Reshape", "Flatten", "Squeeze", "Unsqueeze")
_LAYOUT = ("Transpose", *_RESHAPES, "Identity", "Expand")  # ops that move (or repeat) values without changing them
_COMBINERS = ("Add", "Sub", "Mul", "Div", "Where", "Max", "Min")
_NORMS = ("LayerNormalization", "SimplifiedLayerNormalization", "SkipLayerNormalization", "RMSNormalization")


def keep_float(model: Path) -> list[str]:
    """Nodes that stay float, as in edgekit's PT2E quantizer (edgekit.calibration.pt2e_quantizer):
    whatever is computed from integer inputs and constants only (attention masks, positions), an
    op that adds such a tensor to an activation, the adds of a transformer's residual stream
    (those that feed a normalization), whose outlier channels one int8 scale cannot hold, and
    every stretch from a squaring to its square root (`squared_stretches`), and every score head
    (edgekit.converters.onnx_score_heads)."""
    import onnx

    graph = onnx.load(str(model), load_external_data=False).graph
    float_types = {onnx.TensorProto.FLOAT, onnx.TensorProto.FLOAT16, onnx.TensorProto.DOUBLE}
    # Scalars and integer tensors (shapes, axes) are constants; weights are not.
    constant = {i.name for i in graph.initializer if i.data_type not in float_types or _numel(i) <= 1}
    weights = {i.name for i in graph.initializer} - constant
    derived = {i.name for i in graph.input if i.type.tensor_type.elem_type not in float_types} - constant - weights
    out = []
    producer, consumers = _links(graph)
    for node in graph.node:  # topological order
        inputs = [i for i in node.input if i]
        if all(i in constant for i in inputs):
            constant.update(node.output)
        elif all(i in constant or i in derived for i in inputs):
            derived.update(node.output)
            out.append(node.name)
        elif node.op_type in _COMBINERS and any(i in derived for i in inputs):
            out.append(node.name)  # an activation combined with a mask, and what reads the
            out += [c.name for o in node.output for c in consumers.get(o, [])]  # result (its range)
    # Embedding tables: int8 per row afterwards (int8_weights_only); onnxruntime would give a
    # whole table one scale, which a few outlier rows stretch.
    out += [n.name for n in graph.node if n.op_type == "Gather" and n.input[0] in weights]
    for node in graph.node:
        norms = [c for o in node.output for c in consumers.get(o, []) if c.op_type in _NORMS]
        if node.op_type != "Add" or not norms:
            continue
        out += [node.name] + [n.name for n in norms]
        # The linear that writes into the stream (MatMul or Gemm, then a bias Add) keeps a float
        # output; its weights get int8 storage afterwards (int8_weights_only).
        for operand in node.input:
            writer = producer.get(operand)
            while writer is not None and writer.op_type in _RESHAPES:
                out.append(writer.name)
                writer = producer.get(writer.input[0])
            if writer is not None and writer.op_type == "Add" and any(i in weights for i in writer.input):
                out.append(writer.name)
                writer = next((producer[i] for i in writer.input if i in producer), None)
            if writer is not None and writer.op_type in ("MatMul", "Gemm"):
                out.append(writer.name)
    return out + squared_stretches(graph) + written_out_norms(graph) + score_head_nodes(graph) + unfolded_affines(graph)


# ops after which a batch norm cannot be folded into a conv: activations and pools
_AFTER_ACTIVATION = ("Relu", "LeakyRelu", "Elu", "Selu", "Sigmoid", "Tanh", "HardSigmoid", "HardSwish", "PRelu",
                     "AveragePool", "MaxPool", "GlobalAveragePool")


def unfolded_affines(graph) -> list[str]:
    """Each batch norm after an activation or a pool (Keras models that put BatchNormalization after an ELU:
    tempocnn), which no conv took: a Mul by a per-channel constant of an activation's or pool's output whose one
    reader Adds a per-channel constant. At int8 its output shares one scale over channels the norm sets far apart;
    it stays float, with the activation before it, as on tflite (edgekit.converters.tflite_int8.unfolded_affines)."""
    vectors = {i.name: _numel(i) for i in graph.initializer if sum(d > 1 for d in i.dims) == 1}
    producer, readers = _links(graph)

    def channels(node) -> int:
        return next((vectors[i] for i in node.input if i in vectors), 0)

    out = []
    for node in graph.node:
        after = readers.get(node.output[0], []) if node.op_type == "Mul" and channels(node) else []
        if len(after) == 1 and after[0].op_type == "Add" and channels(after[0]) == channels(node) and any(
                producer.get(i) is not None and producer[i].op_type in _AFTER_ACTIVATION for i in node.input):
            out += [node.name, after[0].name]
    return out


# what a power goes through on its way to a root or a logarithm: sums, means, scalings, a floor (Clip, Max),
# weighted sums by a constant matrix (a mel filterbank's MatMul) and layout
_SUMS = ("Add", "Sum", "ReduceMean", "ReduceSum", "Mul", "Div", "Sub", "Clip", "Max", "MatMul", "Gemm", *_LAYOUT)


def squared_stretches(graph) -> list[str]:
    """The nodes from a squaring (Pow by 2, or Mul of a tensor by itself) to the Sqrt that undoes it or the
    Log that compresses it (a log-mel spectrogram), that node included: a spectrum's power or a variance spans
    the square of its signal's dynamic range (a 40 dB signal becomes an 80 dB power), which one int8 scale
    cannot hold: its quiet bins and small variances round to zero, and a logarithm of zero is its floor
    (openWakeWord's log-mel front end: int8 cosine 0.704). Found backwards from each Sqrt and Log through
    sums, means, scalings, floors, weighted sums and layout."""
    return [name for stretch, _ in _stretches(graph) for name in stretch]


def _signal_path(graph, squarings: list) -> list[str]:
    """The float activations from a graph input to `squarings` (their inputs included) when every node between
    is a front end's (_FRONT_END: framing, windowing, convolutions or matmuls with constant weights, layout);
    [] when the path reaches the input through anything else."""
    inits = {i.name for i in graph.initializer}
    inputs = {i.name for i in graph.input} - inits
    producer = {o: n for n in graph.node for o in n.output}
    path, todo = [], [i for node in squarings for i in node.input if i and i not in inits]
    while todo:
        name = todo.pop()
        if name in path:
            continue
        path.append(name)
        if name in inputs:
            continue
        node = producer.get(name)
        if node is None or node.op_type not in _FRONT_END:
            return []
        todo += [i for i in node.input if i and i not in inits and producer.get(i, node).op_type != "Constant"]
    return path


def written_out_norms(graph) -> list[str]:
    """Each normalization written out in elementwise ops (jax2tf's layer norm: ReduceSum, a variance, Sqrt,
    Reciprocal, Mul) whole: the nodes between the tensor whose squares make its variance and the node that
    applies 1/σ (a Mul by the root's Reciprocal, or a Div by the root). Its variance stretch alone kept float
    (`squared_stretches`) leaves 1/σ, which spans the root's range inverted, to int8 at that node's input:
    magika's byte classifier, int8 cosine 0.9499 either way; its two layer norms whole float: 0.9777."""
    producer, readers = _links(graph)
    by_name = {n.name: n for n in graph.node}
    constants = _constant_names(graph)
    out: list[str] = []
    for stretch, _ in _stretches(graph):
        root = by_name[stretch[0]]
        inverse = [r for r in readers.get(root.output[0], []) if r.op_type == "Reciprocal"]
        applying = [n for r in inverse if (n := _applying(r.output[0], readers, constants)) is not None] + [
            r for r in readers.get(root.output[0], []) if r.op_type == "Div" and r.input[1] == root.output[0]]
        if root.op_type != "Sqrt" or not applying:
            continue
        squared = {i for name in stretch for i in by_name[name].input
                   if by_name[name].op_type in ("Mul", "Pow") and i in producer and i not in {o for n in stretch for o in by_name[n].output}}
        after = set().union(*(_reached({t}, lambda t: [o for n in readers.get(t, []) for o in n.output]) - {t}
                              for t in squared))  # strictly after: the normalized tensor's writer is not the norm's
        before = _reached({o for n in applying for o in n.output}, lambda t: list(producer[t].input) if t in producer else [])
        out += [n.name for n in graph.node if set(n.output) & after & before and n.name not in out]
    return out


def _applying(inverse: str, readers: dict, constants: set[str]):
    """The Mul that applies 1/σ (tensor `inverse`) to the centered values, past Muls scaling it by a constant (the
    norm's scale folded in: jax2tf's `Rsqrt * scale`); None where 1/σ goes anywhere else."""
    while len(readers.get(inverse, [])) == 1 and readers[inverse][0].op_type == "Mul":
        node = readers[inverse][0]
        others = [i for i in node.input if i != inverse]
        if not others or not all(i in constants for i in others):
            return node
        inverse = node.output[0]
    return None


def _links(graph) -> tuple[dict, dict[str, list]]:
    """(tensor → the node writing it, tensor → the nodes reading it, in graph order) of an ONNX graph."""
    producer = {o: node for node in graph.node for o in node.output}
    readers: dict[str, list] = {}
    for node in graph.node:
        for name in node.input:
            readers.setdefault(name, []).append(node)
    return producer, readers


def _constant_names(graph) -> set[str]:
    """The tensors of an ONNX graph that are constants: its initializers and its Constant nodes' outputs."""
    return {i.name for i in graph.initializer} | {o for n in graph.node if n.op_type == "Constant" for o in n.output}


def constant_value(graph, name: str) -> np.ndarray | None:
    """The value of tensor `name` of an ONNX graph where it is a constant: an initializer, or the output of a
    Constant node (exporters write both: torch's exponents of Pow are Constant nodes); None otherwise."""
    from onnx import numpy_helper

    tensor = next((i for i in graph.initializer if i.name == name), None)
    if tensor is None:
        node = next((n for n in graph.node if n.op_type == "Constant" and name in n.output), None)
        tensor = next((a.t for a in node.attribute if a.name == "value"), None) if node is not None else None
    return None if tensor is None else np.asarray(numpy_helper.to_array(tensor))


def _reached(start: set[str], step) -> set[str]:
    """The tensors reached from `start` (included) by repeating `step` (tensor → next tensors)."""
    seen, todo = set(start), list(start)
    while todo:
        for t in step(todo.pop()):
            if t and t not in seen:
                seen.add(t)
                todo.append(t)
    return seen


def log_power_signal(graph) -> list[str]:
    """The float activations from a graph input to the squarings of a power whose logarithm is taken (a
    log-mel front end reading audio), where that path is a front end only (`_signal_path`): a logarithm shows
    the signal's whole dynamic range, and an int8 scale set by the loudest samples floors the quiet ones
    (openWakeWord's audio input: −34.7 dB at int8, its log-mel cosine 0.921 with the power float). They are
    quantized in int16 (a16w8)."""
    tensors: list[str] = []
    for _, signal in _stretches(graph):
        tensors += [t for t in signal if t not in tensors]
    return tensors


# ops whose output's level follows their input's: a signal twice as loud gives outputs twice as large (their
# biases and the sign aside), so quiet and loud samples stay as far apart after them as before
_LEVEL = ("Conv", "ConvTranspose", "MatMul", "Gemm", "Relu", "LeakyRelu", "PRelu", "MaxPool", "AveragePool",
          "GlobalAveragePool", "GlobalMaxPool", "BatchNormalization", "Pad", "Slice", "Split", "Concat", "Gather",
          "Cast", "Add", "Sub", "Mul", "Div", "Pow", "Sqrt", "Abs", "ReduceSum", "ReduceMean", "ReduceMax", *_LAYOUT)


def level_path(graph, inputs: list[str]) -> list[str]:
    """The float activations whose level follows that of the graph inputs `inputs`: from them through convolutions,
    linears, ReLUs, pools, a spectrum's magnitude and layout (`_LEVEL`), up to the first op that compresses a
    level (a logarithm, a sigmoid or tanh, a recurrent layer's gates, a normalization). A model with no such op
    near its input (Silero VAD: STFT, magnitude, four conv + ReLU, then an LSTM) carries the 47 dB between a
    silent and a loud chunk through all of them, and one int8 scale per tensor, set by the loud chunks, rounds
    a silent chunk's spectrum to zero (its speech probability 0.008 → 0.59). Their nodes keep float arithmetic
    on int8 weights: Silero's probability 0.012 off at most, 1.9× its float model's latency in ONNX Runtime (the
    weights' DequantizeLinear runs every call); at int16 activations instead, 0.025 and 2.2×."""
    constants = _constant_names(graph)
    path = list(dict.fromkeys(inputs))
    for node in graph.node:  # topological order
        if node.op_type not in _LEVEL or not node.input:
            continue
        if node.op_type in ("Add", "Sub", "Mul", "Div", "Concat"):  # every operand that is not a constant
            data = [i for i in node.input if i and i not in constants]
        elif node.op_type in ("Conv", "ConvTranspose", "MatMul", "Gemm") and node.input[1] not in constants:
            continue  # a product of two activations: its level is theirs multiplied
        else:
            data = node.input[:1]  # layout, padding, pools: the rest are shapes, pads, axes
        if data and all(i in path for i in data):
            path += [o for o in node.output if o not in path]
    return path


# a squeeze-excite gate: from the pooled features through the bottleneck to the gate's sigmoid, and layout
_GATE = ("Conv", "Gemm", "MatMul", "Relu", "Clip", "Sigmoid", "HardSigmoid", "HardSwish", "Add", "Mul", "Div", *_LAYOUT)
_POOLS = ("GlobalAveragePool", "ReduceMean", "AveragePool")


def squeeze_excite_pools(graph) -> list[str]:
    """The input of each pooling whose mean, through a bottleneck and a sigmoid, gates a feature map channel by
    channel (squeeze-excite: MobileNetV3, EfficientNet, PP-LCNet; and a decoder's global-context gate, whose
    pool reads another map than the one it gates), quantized in int16 (a16w8): every gate multiplies a whole
    channel by what the mean of the map's int8 values rounds to (mediapipe's selfie segmenter: int8 cosine 0.963,
    0.988 with its pools' inputs at int16; their outputs at int16 as well changed nothing, and kept the
    bottleneck's convolutions from their int8 kernels). Likely, not measured: the map's few large activations
    set its int8 scale, and its many small values round to a step or to zero."""
    producer, consumers = _links(graph)
    weights = {i.name for i in graph.initializer}

    def constant(name: str) -> bool:
        return name in weights or (name in producer and producer[name].op_type == "Constant")

    tensors: list[str] = []
    for pool in (n for n in graph.node if n.op_type in _POOLS and n.input):
        todo, seen = [(pool.output[0], False, 0)], set()  # (tensor, through a sigmoid yet, depth)
        while todo:
            name, gated, depth = todo.pop()
            for node in consumers.get(name, []):
                if id(node) in seen or depth > 12:  # by identity: a node's name may be empty
                    continue
                seen.add(id(node))
                if gated and node.op_type == "Mul" and not all(constant(i) for i in node.input if i != name):
                    tensors += [pool.input[0]] if pool.input[0] not in tensors else []
                    todo = []
                    break
                if node.op_type in _GATE:
                    todo += [(o, gated or node.op_type in ("Sigmoid", "HardSigmoid"), depth + 1) for o in node.output]
    return tensors


# what a signal goes through on its way from the input to the squaring of its spectrum
_FRONT_END = ("Conv", "MatMul", "Gemm", "Mul", "Pad", "Slice", "Split", "Unsqueeze", "Squeeze", "Reshape", "Transpose",
              "Identity", "Cast", "Concat", "Gather")


def _stretches(graph) -> list[tuple[list[str], list[str]]]:
    """Each stretch from squarings to the Sqrt or Log it reaches, for the roots a squaring reaches: (its node
    names, root first; for a Log, the front end from the input to its squarings (`_signal_path`), without
    which a Log's stretch is not one; [] for a Sqrt)."""
    inits = {i.name: i for i in graph.initializer}
    producer = {o: n for n in graph.node for o in n.output}

    def squaring(node) -> bool:
        if node.op_type == "Mul":
            return len(node.input) == 2 and node.input[0] == node.input[1]
        exponent = constant_value(graph, node.input[1]) if node.op_type == "Pow" else None
        return exponent is not None and exponent.size == 1 and float(exponent.ravel()[0]) == 2.0

    out = []
    for root in (n for n in graph.node if n.op_type in ("Sqrt", "Log")):
        stretch, todo, squarings = [root.name], [root.input[0]], []
        while todo:
            node = producer.get(todo.pop())
            if node is None or node.name in stretch:
                continue
            if squaring(node):
                stretch.append(node.name)
                squarings.append(node)
            elif node.op_type in _SUMS:
                stretch.append(node.name)
                todo += [i for i in node.input if i and i not in inits]
        # a logarithm's stretch only where the power is the input signal's (a log-mel front end): the log of a
        # computed magnitude (basic-pitch's normalized log of its CQT) lost 2 points of cosine kept float
        signal = _signal_path(graph, squarings) if squarings and root.op_type == "Log" else []
        if squarings and (root.op_type == "Sqrt" or signal):
            out.append((stretch, signal))
    return out


RECURRENT = ("LSTM", "GRU", "RNN")  # onnxruntime's static quantizer has none: W and R stay float


def _float_weights(node) -> list[tuple[str, int]]:
    """(initializer name, output-channel axis) of the float weights of `node` that weight-only int8
    can store: a MatMul's or Gemm's B, a Gather's table (rows), a recurrent layer's W and R (each
    [directions, gates × hidden, inputs]: one scale per gate row)."""
    if node.op_type == "Gather":
        return [(node.input[0], 0)]
    if node.op_type in RECURRENT:
        return [(node.input[i], 1) for i in (1, 2) if len(node.input) > i]
    if node.op_type in ("MatMul", "Gemm") and len(node.input) > 1:
        # Output channels: the last axis for MatMul (x @ W) and Gemm without transB, else the first.
        trans_b = any(a.name == "transB" and a.i for a in node.attribute)
        return [(node.input[1], 0 if node.op_type == "Gemm" and trans_b else 1)]
    return []


def _float_input_weights(prepared: Path, src: ModelArtifact, ctx: ConvertContext) -> list[tuple[str, LayerNote]]:
    """The input weights (W) of the recurrent layers that read the model's input and that int8 would move
    (edgekit.converters.recurrent_input), outside the layers the spec keeps float whole: [(W's name, the
    artifact's `kept_float` note)]; measured once per run (ctx.reuse)."""
    import onnx

    shared = ctx.reuse.kept if ctx.reuse else {}
    if "float input weights" not in shared:
        reader = _Reader(ctx.calibration, _graph_inputs(prepared, src))
        found = recurrent_input.onnx_nodes(prepared, list(islice(iter(reader.get_next, None), recurrent_input.SAMPLES)))
        weights = {i.name for i in onnx.load(str(prepared), load_external_data=False).graph.initializer} if found else set()
        shared["float input weights"] = [
            (n.input[1], LayerNote(layer_name(n, [i for i in n.input if i in weights]), n.op_type,
                                   recurrent_input.WHY.format(worst))) for n, worst in found]
    return [(w, note) for w, note in shared["float input weights"] if note.layer not in ctx.spec.layers("float")]


def int8_weights_only(graph, keep: set[str] = frozenset(), float_weights: set[str] = frozenset(),
                      convs: set[str] = frozenset()) -> None:
    """Store the float weights that quantization left (MatMul/Gemm kept float, embedding tables,
    LSTM/GRU/RNN weights, and the Conv nodes named in `convs`) as int8, per output channel or row, behind
    a DequantizeLinear: int8 in the file, float arithmetic at run time. The nodes named in `keep` (layers
    the spec keeps float) keep float weights, and so do the weights named in `float_weights` (a recurrence's
    input weights: edgekit.converters.recurrent_input). Changes `graph` (an ONNX GraphProto) in place."""
    from onnx import helper, numpy_helper

    inits = {i.name: i for i in graph.initializer}
    for node in list(graph.node):
        if node.name in keep:
            continue
        conv = node.op_type == "Conv" and node.name in convs
        for name, axis in [(node.input[1], 0)] if conv else _float_weights(node):
            if name in float_weights:
                continue
            w = numpy_helper.to_array(inits[name]) if name in inits else None
            if w is None or w.dtype != np.float32 or w.ndim != (w.ndim if conv else 3 if node.op_type in RECURRENT else 2):
                continue
            q, scale = recurrent_input.per_channel_int8(w, axis)
            # Named the way onnxruntime's QDQ quantizer names a weight's tensors, which its QDQ
            # debugging tools (edgekit layers) match on.
            graph.initializer.remove(inits.pop(name))
            graph.initializer.extend([numpy_helper.from_array(q, f"{name}_quantized"),
                                      numpy_helper.from_array(scale, f"{name}_scale"),
                                      numpy_helper.from_array(np.zeros_like(scale, dtype=np.int8), f"{name}_zero_point")])
            dq = helper.make_node("DequantizeLinear", [f"{name}_quantized", f"{name}_scale", f"{name}_zero_point"],
                                  [f"{name}_DequantizeLinear_Output"], name=f"{name}_DequantizeLinear", axis=axis)
            for consumer in graph.node:
                consumer.input[:] = [dq.output[0] if i == name else i for i in consumer.input]
            graph.node.insert(list(graph.node).index(node), dq)


def float_weights_stay_float(graph) -> None:
    """Keep the float weights of a Conv, ConvTranspose or Gemm that reads a quantized activation float
    at run time. onnxruntime's WeightBiasQuantization graph transformer (basic level, so on by default
    and baked into `.ort` files) quantizes such a weight to int8 *per tensor* when the node's input
    comes from a DequantizeLinear with a single scale: a layer kept float becomes a layer with worse
    weights than full int8 (one outlier weight rounds the rest of the tensor to zero). The transformer
    only matches a per-tensor DequantizeLinear, so the node's input is dequantized per channel (axis 1)
    with the same scale and zero point repeated: the same values, a form it leaves alone. Changes
    `graph` (an ONNX GraphProto) in place."""
    import onnx
    from onnx import helper, numpy_helper

    inits = {i.name: i for i in graph.initializer}
    producer = {o: n for n in graph.node for o in n.output}
    added = []
    for node in graph.node:
        if node.op_type not in ("Conv", "ConvTranspose", "Gemm") or len(node.input) < 2:
            continue
        weight, dq = inits.get(node.input[1]), producer.get(node.input[0])
        if weight is None or weight.data_type != onnx.TensorProto.FLOAT or dq is None or dq.op_type != "DequantizeLinear":
            continue
        scale, zero = inits.get(dq.input[1]), inits.get(dq.input[2]) if len(dq.input) > 2 else None
        if scale is None or _numel(scale) != 1 or (len(dq.input) > 2 and dq.input[2] and zero is None):
            continue
        attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
        dims = list(weight.dims)
        if node.op_type == "Conv":
            channels, axis = dims[1] * attrs.get("group", 1), 1
        elif node.op_type == "ConvTranspose":
            channels, axis = dims[0], 1
        else:  # Gemm: A is [M, K], or [K, M] with transA
            channels, axis = (dims[1] if attrs.get("transB") else dims[0]), (0 if attrs.get("transA") else 1)
        name = f"{node.name}_input_DequantizeLinear"
        tensors = [numpy_helper.from_array(np.full(channels, numpy_helper.to_array(scale).item(), np.float32),
                                           f"{name}_scale")]
        inputs = [dq.input[0], tensors[0].name]
        if zero is not None:
            z = numpy_helper.to_array(zero)
            tensors.append(numpy_helper.from_array(np.full(channels, z.item(), z.dtype), f"{name}_zero_point"))
            inputs.append(tensors[1].name)
        graph.initializer.extend(tensors)
        added.append((node, helper.make_node("DequantizeLinear", inputs, [f"{name}_Output"], name=name, axis=axis)))
        node.input[0] = f"{name}_Output"
    for node, per_channel in added:
        graph.node.insert(list(graph.node).index(node), per_channel)


def _numel(tensor) -> int:
    n = 1
    for d in tensor.dims:
        n *= d
    return n


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
    output, so the model takes and returns integers (int8, or uint8 where the quantizer chose it); record
    their scale/zero-point beside it."""
    import onnx
    from onnx import numpy_helper
    from onnx.helper import np_dtype_to_tensor_dtype

    model = onnx.load(str(path))
    graph = model.graph
    consts = {i.name: numpy_helper.to_array(i) for i in graph.initializer}

    def params(name, node):
        zero_point = consts[node.input[2]]
        return {"name": name, "dtype": str(zero_point.dtype), "scale": float(consts[node.input[1]]),
                "zero_point": int(zero_point)}

    inputs, outputs = [], []
    for spec, graph_input in zip(src.signature.inputs, [i for i in graph.input if i.name not in consts]):
        quant = [n for n in graph.node if n.op_type == "QuantizeLinear" and n.input[0] == graph_input.name]
        if len(quant) != 1:
            inputs.append(None)
            continue
        for node in graph.node:
            node.input[:] = [graph_input.name if x == quant[0].output[0] else x for x in node.input]
        inputs.append(params(spec.name, quant[0]))
        graph_input.type.tensor_type.elem_type = np_dtype_to_tensor_dtype(consts[quant[0].input[2]].dtype)
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
        graph_output.type.tensor_type.elem_type = np_dtype_to_tensor_dtype(consts[deq[0].input[2]].dtype)
        graph.node.remove(deq[0])
    onnx.checker.check_model(model)
    onnx.save(model, str(path))
    return io_params.write(path, inputs, outputs)
