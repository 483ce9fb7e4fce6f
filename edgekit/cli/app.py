"""Typer application.

Each command imports what it runs (edgekit's engine, features and renderers) in its body, when it runs:
`edgekit --help` and every command's parsing import typer and edgekit's ground types, nothing of the
engine (importing every edgekit module takes ~0.7 s; `edgekit --help` takes ~0.45 s in all). This is
the one module where tests/test_layering.py allows function-local imports of edgekit's modules, for
that reason. Frameworks are imported further down, only inside the functions that need them."""

from __future__ import annotations

import functools
import json
import os
import signal
import sys
import traceback
from dataclasses import replace
from pathlib import Path
from typing import Annotated, Optional

import typer

from edgekit.core.errors import EXIT_CHECK_FAILED, EXIT_INTERNAL, BadInput, EdgekitError, environment_error

app = typer.Typer(
    name="edgekit",
    help="Convert PyTorch, TensorFlow/Keras and ONNX models to edge formats (tflite, executorch, onnx, ort, "
         "ptl) and prove each one in its own runtime.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)

TRUST_PICKLE = "Allow unpickling a full module, or a .pt2 member that is not plain tensors (runs its code)."
TRUST_CODE = ("Allow a TensorFlow graph with file-system, process or Python-callback ops, or a .pt2 graph calling "
              "functions other than torch operators (runs them). Keras files still load in safe mode.")

_state = {"debug": bool(os.environ.get("EDGEKIT_DEBUG")), "verbose": bool(os.environ.get("EDGEKIT_VERBOSE"))}
REPO = Path(__file__).resolve().parents[2]


def _stderr():
    """A writer to the real standard error that survives converters redirecting fd 2."""
    try:
        fd = sys.stderr.fileno()
    except (AttributeError, OSError, ValueError):
        return sys.stderr  # captured (tests): write where we are told
    return os.fdopen(os.dup(fd), "w", buffering=1, encoding="utf-8", errors="replace")


def handled(fn):
    """Map edgekit errors to their exit codes with one clear line; hide tracebacks unless --debug. Every
    command runs here with edgekit's own lines alone on stderr unless --verbose or --debug (`own_output`)."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        from edgekit.core.quiet import own_output, private_temp

        try:
            with own_output(_state["verbose"] or _state["debug"]), private_temp():
                return fn(*args, **kwargs)
        except typer.Exit:
            raise
        except KeyboardInterrupt:
            print("edgekit: interrupted; no partial output was left", file=sys.stderr)
            raise typer.Exit(130) from None
        except Exception as e:
            # edgekit's own errors, and what the environment caused: a full disk, no permission, a path too long
            err = e if isinstance(e, EdgekitError) else environment_error(e)
            if _state["debug"]:
                traceback.print_exc()
            if err is None:  # a bug
                print(f"edgekit: internal error: {type(e).__name__}: {e} (this is a bug; rerun with --debug "
                      "for the traceback)", file=sys.stderr)
                raise typer.Exit(EXIT_INTERNAL) from None
            print(f"edgekit: error: {err.message}" + (f" — fix: {err.fix}" if err.fix else ""), file=sys.stderr)
            raise typer.Exit(err.exit_code) from None

    return wrapper


@app.callback()
def _root(debug: Annotated[bool, typer.Option("--debug", help="Show tracebacks of errors (and what --verbose shows).")] = False,
          verbose: Annotated[bool, typer.Option("--verbose", help="Let the frameworks' warnings, logs and output through to stderr.")] = False):
    if debug:
        _state["debug"] = True
    if verbose:
        _state["verbose"] = True


@app.command()
@handled
def convert(
    model: Annotated[str, typer.Argument(help="A .pt2/.pt file, module:factory, SavedModel folder, .keras/.h5, .onnx, or a Hugging Face decoder LM folder (config.json + safetensors).")],
    target: Annotated[list[str], typer.Option("--target", "-t", help="tflite, executorch (pte), onnx, ort or ptl (legacy); repeat, or 'all'.")] = ["all"],
    out: Annotated[Path, typer.Option("--out", "-o", help="Folder for the artifacts.")] = Path("edgekit-out"),
    precision: Annotated[str, typer.Option("--precision", "-p", help="fp32, fp16, int8 (static, calibrated) or int8-dynamic; for a decoder LM int8-weights or int4-weights.")] = "fp32",
    max_seq_len: Annotated[Optional[int], typer.Option("--max-seq-len", help="Decoder LM: the positions of its static KV cache (default 256, or fewer if the model has fewer).", show_default=False)] = None,
    prefill_len: Annotated[Optional[int], typer.Option("--prefill-len", help="Decoder LM: the tokens its prefill entry point takes at once (default 32).", show_default=False)] = None,
    group_size: Annotated[int, typer.Option("--group-size", help="int4-weights: weights sharing one scale (32, 64, 128 or 256).")] = 32,
    int8: Annotated[bool, typer.Option("--int8", help="Shortcut for --precision int8.")] = False,
    int8_io: Annotated[bool, typer.Option("--int8-io", help="Integer model inputs and outputs (int8 only).")] = False,
    calib: Annotated[Optional[str], typer.Option("--calib", help="Calibration data: .npz, folder of .npy or images, module:function, or random; for a decoder LM at int8-weights or int4-weights, text (.txt) its weights are rounded on by GPTQ.")] = None,
    calib_samples: Annotated[Optional[int], typer.Option("--calib-samples", help="Use the first N calibration samples.")] = None,
    calib_method: Annotated[Optional[str], typer.Option("--calib-method", help="minmax, percentile, entropy, mse, mean-minmax (onnx, ort; not tried by auto), or auto. Default: minmax; on onnx and ort, mean-minmax instead where it drifts clearly less on the calibration samples.", show_default=False)] = None,
    bias_correction: Annotated[Optional[bool], typer.Option("--bias-correction/--no-bias-correction", help="int8: after calibration, subtract each layer's mean output error from its bias. Default: on wherever the target's backend has it (tflite, executorch, onnx, ort; not ptl).", show_default=False)] = None,
    smooth_quant: Annotated[Optional[bool], typer.Option("--smooth-quant/--no-smooth-quant", help="int8: SmoothQuant, move a transformer's activation outliers into the weights of the linears reading each LayerNorm. Default: on wherever the model has such linears and the target's backend has it (tflite from torch, executorch, onnx, ort).", show_default=False)] = None,
    int16_stem: Annotated[bool, typer.Option("--int16-stem", help="int8 (onnx, ort): int16 activations (a16w8, weights int8) wherever the feature maps are at least a quarter of the input's height and width, for models whose fine early detail decides their outputs; slower than int8 there.")] = False,
    int16_activations: Annotated[bool, typer.Option("--int16-activations", help="int8 (onnx, ort): int16 activations everywhere (a16w8: weights int8, the same size), for models whose int8 activations lose too much wherever they are; onnxruntime runs its int16 layers in float, so not faster than fp32.")] = False,
    optimize: Annotated[str, typer.Option("--optimize", help="int8: where the target has more than one valid int8 form (onnx, ort: the activation and weight integer types), keep the fastest on this host (latency; within 1 dB of the most accurate on the calibration samples), the smallest (size) or the most accurate (accuracy). Each candidate's figures are in the JSON (int8_types).")] = "latency",
    ort_platform: Annotated[str, typer.Option("--ort-platform", help="ort: the CPU the .ort is laid out for: arm (phones; int8 groups kept signed, no x86-only layout) or x86 (int8 as the uint8 x86 kernels take, the NCHWc layout). Timed on a host of the other kind, it does not run as it would on its own; bench says so.")] = "arm",
    calib_preprocess: Annotated[Optional[str], typer.Option("--calib-preprocess", help="For image folders: size=HxW,scale=1/255,mean=..,std=..,layout=NCHW,color=gray")] = None,
    eval_data: Annotated[Optional[Path], typer.Option("--eval", help=".npz of inputs (and optional 'labels') to verify on; for a decoder LM held-out text (.txt) or token ids (.npz 'tokens').")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Write the JSON report to stdout; human output to stderr.")] = False,
    input_shape: Annotated[list[str], typer.Option("--input-shape", help="NAME=1,3,224,224 (repeat per input).")] = [],
    example_inputs: Annotated[Optional[Path], typer.Option("--example-inputs", help=".npz with one example per input.")] = None,
    trust_pickle: Annotated[bool, typer.Option("--trust-pickle", help=TRUST_PICKLE)] = False,
    trust_model_code: Annotated[bool, typer.Option("--trust-model-code", help=TRUST_CODE)] = False,
    model_class: Annotated[Optional[str], typer.Option("--model-class", help="module:Class for a state_dict.")] = None,
    threshold: Annotated[list[str], typer.Option("--threshold", help="Override a metric threshold, e.g. cosine=0.999.")] = [],
    output_kind: Annotated[list[str], typer.Option("--output-kind", help="What an output is, for the metrics that judge it: OUTPUT=scores|probabilities|embedding|regression|score|map|sequence, e.g. output_1=regression (repeat). Default: read from its values, else guessed from its shape (the JSON says which).")] = [],
    budget: Annotated[list[str], typer.Option("--budget", help="int8: a metric to meet, e.g. cosine=0.99 (repeat); layers are kept back from int8, the fewest that meet it.")] = [],
    min_int8_share: Annotated[float, typer.Option("--min-int8-share", help="With --budget: the least share of weight bytes that stays int8.")] = 0.8,
    max_steps: Annotated[int, typer.Option("--max-steps", help="With --budget: the most conversions the search makes after full int8.")] = 8,
    keep: Annotated[list[str], typer.Option("--keep", help="int8: keep a layer back, LAYER=float or LAYER=int16 (named as `edgekit layers` names it; repeat). Decoder LM: keep a module's weights float, e.g. lm_head.")] = [],
    granularity: Annotated[str, typer.Option("--granularity", help="int8 weights: per-channel or per-tensor.")] = "per-channel",
    no_cache: Annotated[bool, typer.Option("--no-cache", help="Convert and verify again even when the artifact cache holds this exact result.")] = False,
    attribution: Annotated[bool, typer.Option("--attribution/--no-attribution", help="int8: when an artifact fails its verdict, rank its layers (one trace of the model) and name those whose float copy gains the outputs most, with the --keep and --budget options that keep them back.")] = True,
    bench: Annotated[bool, typer.Option("--bench", help="Also time each artifact in its runtime (host CPU latency, 1 thread and all cores); at int8 the fp32 artifacts are made too, for the ratio.")] = False,
    time_budget: Annotated[float, typer.Option("--time-budget", help="Seconds each target may take to convert and verify (0: no limit); past it the target stops with a message naming its step, and the other targets' artifacts are kept.")] = 1800,
):
    """Convert MODEL to each target and verify every artifact against the source model."""
    from edgekit.cli.render import Reporter, render_bench, render_result
    from edgekit.engine.pipeline import convert as run
    from edgekit.engine.request import build_request
    from edgekit.sources.loading import SourceOptions

    _output_folder(out)
    reporter = Reporter(_stderr())
    request = build_request(
        model, target, out, precision=precision, int8=int8, calibration=calib, calib_samples=calib_samples,
        calib_preprocess=calib_preprocess, calib_method=calib_method, eval_data=eval_data, thresholds=threshold,
        output_kinds=output_kind, int8_io=int8_io, bias_correction=bias_correction, smooth_quant=smooth_quant,
        int16_stem=int16_stem, int16_activations=int16_activations, optimize=optimize, granularity=granularity, keep=keep, budgets=budget, min_int8_share=min_int8_share, max_steps=max_steps,
        attribute_failures=attribution, ort_platform=ort_platform, group_size=group_size, time_budget=time_budget,
        source_options=SourceOptions(trust_pickle, model_class, tuple(input_shape),
                                     str(example_inputs) if example_inputs else None, trust_model_code,
                                     max_seq_len=max_seq_len, prefill_len=prefill_len),
    )
    cache = _cache(no_cache)
    result = run(request, progress=reporter.step, cache=cache)
    timed = None
    if bench:
        from edgekit.features.bench import bench_result

        timed = bench_result(request, result, progress=reporter.step, cache=cache)
    if as_json:
        render_result(result, reporter.console)
        doc = result.to_json() | ({"bench": timed.to_json()} if timed else {})
        _write_json(doc)
    else:
        render_result(result, None)
    if timed is not None:
        render_bench(timed, reporter.console if as_json else None)
        for w in timed.warnings:
            print(f"edgekit: warning: {w}", file=sys.stderr)
    for f in result.failures:
        print(f"edgekit: error: {f.message}" + (f" — fix: {f.fix}" if f.fix else ""), file=sys.stderr)
    if result.failures:
        raise typer.Exit(max(f.exit_code for f in result.failures))
    if result.failed:
        raise typer.Exit(EXIT_CHECK_FAILED)


@app.command()
@handled
def graph(as_json: Annotated[bool, typer.Option("--json", help="Print the graph as JSON.")] = False):
    """Show every converter edge and target runtime, and whether each is available here."""
    from edgekit.cli.render import render_graph
    from edgekit.converters.base import converters
    from edgekit.targets import TARGETS

    edges = sorted(converters().values(), key=lambda c: (c.source, c.target))
    if as_json:
        doc = {"schema": "edgekit.graph/1", "edges": [
            {"name": c.name, "source": c.source, "target": c.target, "precisions": list(c.precisions),
             "extra": c.extra, "cost": c.cost, "available": c.available(), "missing": list(c.missing())}
            for c in edges]}
        sys.stdout.write(json.dumps(doc, indent=2) + "\n")
        return
    render_graph(edges, list(TARGETS.values()))


@app.command()
@handled
def report(
    paths: Annotated[list[Path], typer.Argument(help="Artifacts (.tflite, .pte, .ptl, .onnx, .ort) or folders holding them.")],
    as_json: Annotated[bool, typer.Option("--json", help="Write one JSON document (edgekit.report/1) to stdout.")] = False,
    markdown: Annotated[bool, typer.Option("--markdown", help="Write a Markdown table (for a PR comment) to stdout.")] = False,
    html_out: Annotated[Optional[Path], typer.Option("--html", help="Also write a self-contained HTML page here.")] = None,
    bench: Annotated[bool, typer.Option("--bench", help="Also time each artifact in its runtime (host CPU latency, as `edgekit bench` at 1 thread and all cores) and show it beside its size.")] = False,
):
    """How big every artifact is, and why: side files, precision, ratios, dtypes, ops, largest tensors."""
    from edgekit.features import report as sizes
    from edgekit.cli.render import _console

    if as_json and markdown:
        raise BadInput("--json and --markdown both write to stdout", fix="choose one")
    _output_file(html_out, "--html")
    result = sizes.build_report(paths)
    if bench:
        from edgekit.cli.render import Reporter
        from edgekit.features.bench import bench as time_artifacts

        timed = time_artifacts(paths, progress=Reporter(_stderr()).step)
        result = replace(result, latency={a.path: a.to_json() for a in timed.artifacts if a.given},
                         notes=result.notes + tuple(f"not timed: {s['path']}: {s['reason']}" for s in timed.skipped
                                                    if s["path"] not in {k["path"] for k in result.skipped})
                         + timed.warnings)
    if html_out is not None:
        html_out.write_text(sizes.to_html(result), encoding="utf-8")
        print(f"edgekit: wrote {html_out}", file=sys.stderr)
    if as_json:
        _write_json(sizes.to_json(result))
    elif markdown:
        sys.stdout.write(sizes.to_markdown(result))
    else:
        console = _console()
        for renderable in sizes.to_rich(result):
            console.print(renderable)
    err = sys.stderr
    for s in result.skipped:
        print(f"edgekit: skipped {s['path']}: {s['reason']}", file=err)
    for note in result.notes:
        print(f"edgekit: warning: {note}", file=err)


@app.command()
@handled
def inspect(
    paths: Annotated[list[Path], typer.Argument(help="Artifact files (.tflite, .pte, .ptl, .onnx, .ort).")],
    as_json: Annotated[bool, typer.Option("--json", help="Write one JSON document (edgekit.inspect/1) to stdout.")] = False,
):
    """What an artifact is made of: int8 shares, float ops, delegation, I/O dtypes and shapes (? = dynamic), ops, largest tensors."""
    from edgekit.cli.inspect_view import render_inspections
    from edgekit.cli.render import _console
    from edgekit.features.inspect import inspect_files, to_json

    items = inspect_files(paths)
    if as_json:
        _write_json(to_json(items))
    else:
        render_inspections(items, _console())


def _model_format(path: Path) -> str | None:
    """The format of a model file or model folder (a SavedModel, a decoder LM's); None for a folder of artifacts."""
    from edgekit.core.formats import detect

    try:
        return detect(path)
    except BadInput:
        if path.is_dir():  # a folder that is no model: artifacts to scan
            return None
        raise


@app.command()
@handled
def bench(
    paths: Annotated[list[Path], typer.Argument(help="Artifacts (.tflite, .pte, .ptl, .onnx, .ort) or folders holding them; or one source model, converted first (-t, and --calib for int8 too).")],
    threads: Annotated[str, typer.Option("--threads", help="Thread counts to time at: 1,all (every core), or counts like 1,4.")] = "1,all",
    inputs: Annotated[Optional[Path], typer.Option("--inputs", help=".npz: the first sample of each input is fed (default: seeded random inputs of the artifact's own shapes and types).")] = None,
    input_shape: Annotated[list[str], typer.Option("--input-shape", help="NAME=1,3,224,224: the size of a dynamic dimension, or a .ptl's inputs (repeat per input).")] = [],
    min_seconds: Annotated[float, typer.Option("--min-seconds", help="Time each artifact at each thread count for at least this long.")] = 1.0,
    as_json: Annotated[bool, typer.Option("--json", help="Write one JSON document (edgekit.bench/1) to stdout.")] = False,
    target: Annotated[list[str], typer.Option("--target", "-t", help="With a source model: the targets to convert to.")] = ["all"],
    out: Annotated[Path, typer.Option("--out", "-o", help="With a source model: folder for the artifacts.")] = Path("edgekit-bench"),
    calib: Annotated[Optional[str], typer.Option("--calib", help="With a source model: also convert at int8, calibrated on this data.")] = None,
    eval_data: Annotated[Optional[Path], typer.Option("--eval", help="With a source model: .npz to verify on (and to feed when --inputs is not given).")] = None,
    trust_pickle: Annotated[bool, typer.Option("--trust-pickle", help=TRUST_PICKLE)] = False,
    trust_model_code: Annotated[bool, typer.Option("--trust-model-code", help=TRUST_CODE)] = False,
    no_cache: Annotated[bool, typer.Option("--no-cache", help="With a source model: convert and verify again even when the artifact cache holds the result.")] = False,
):
    """Host CPU latency of each artifact in its own runtime (1 thread and all cores), its peak memory, and int8 ÷ fp32."""
    from edgekit.cli.render import Reporter, render_bench
    from edgekit.core.signature import parse_input_shapes
    from edgekit.engine.request import build_request
    from edgekit.features import bench as timing
    from edgekit.sources.loading import SourceOptions
    from edgekit.targets import TARGETS

    if min_seconds <= 0:
        raise BadInput(f"--min-seconds {min_seconds} must be positive")
    counts = timing.parse_threads(threads)
    shapes = {s.name: list(s.shape) for s in parse_input_shapes(input_shape)}
    reporter = Reporter(_stderr())
    artifact_formats = {t.format for t in TARGETS.values()}
    source = len(paths) == 1 and _model_format(paths[0]) not in artifact_formats | {None}
    if source:
        _output_folder(out)
        request = build_request(paths[0], target, out, eval_data=eval_data, calibration=calib, int8=bool(calib),
                                source_options=SourceOptions(trust_pickle, None, tuple(input_shape), None, trust_model_code))
        report = timing.bench_conversion(request, threads=counts, min_seconds=min_seconds, progress=reporter.step,
                                         cache=_cache(no_cache), inputs=str(inputs) if inputs else None)
    else:
        report = timing.bench(paths, threads=counts, inputs=str(inputs) if inputs else None, shapes=shapes,
                              min_seconds=min_seconds, progress=reporter.step)
    if as_json:
        _write_json(report.to_json())
    else:
        render_bench(report)
    for s in report.skipped:
        print(f"edgekit: skipped {s['path']}: {s['reason']}", file=sys.stderr)
    for w in report.warnings:
        print(f"edgekit: warning: {w}", file=sys.stderr)


@app.command()
@handled
def layers(
    artifact: Annotated[Path, typer.Argument(help="An int8 .tflite, .onnx or .pte artifact.")],
    source: Annotated[Path, typer.Option("--source", "-s", help="The source model the artifact was converted from.")],
    eval_data: Annotated[Optional[Path], typer.Option("--eval", help=".npz of inputs to trace (the first 32 are used).")] = None,
    calib: Annotated[Optional[str], typer.Option("--calib", help="The calibration data (needed for .pte; else used as inputs when there is no --eval).")] = None,
    calib_method: Annotated[str, typer.Option("--calib-method", help="The method the .pte was calibrated with: minmax, percentile or mse.")] = "minmax",
    bias_correction: Annotated[bool, typer.Option("--bias-correction/--no-bias-correction", help="The .pte was made with bias correction (convert's default) or --no-bias-correction.")] = True,
    smooth_quant: Annotated[Optional[bool], typer.Option("--smooth-quant/--no-smooth-quant", help="The .pte was made with SmoothQuant (convert's default where the model has linears reading a LayerNorm) or --no-smooth-quant.", show_default=False)] = None,
    input_shape: Annotated[list[str], typer.Option("--input-shape", help="NAME=1,3,224,224 (repeat per input).")] = [],
    top: Annotated[int, typer.Option("--top", help="How many layers to show (all with --json).")] = 10,
    as_json: Annotated[bool, typer.Option("--json", help="Write every layer as JSON (edgekit.layers/1) to stdout.")] = False,
    trust_pickle: Annotated[bool, typer.Option("--trust-pickle", help=TRUST_PICKLE)] = False,
    trust_model_code: Annotated[bool, typer.Option("--trust-model-code", help=TRUST_CODE)] = False,
):
    """Which layers of an int8 artifact lose the most signal: SQNR per layer against the float model (on
    .onnx, ranked by what keeping each layer float gains the outputs, measured)."""
    from edgekit.features.attribution import attribute
    from edgekit.calibration.sources import CalibrationSpec
    from edgekit.cli.render import Reporter
    from edgekit.sources.loading import SourceOptions

    ranked = attribute(str(artifact), str(source), source_options=SourceOptions(trust_pickle=trust_pickle, input_shapes=tuple(input_shape),
                                                  trust_model_code=trust_model_code),
                       eval_data=str(eval_data) if eval_data else None,
                       calibration=CalibrationSpec(calib) if calib else None, method=calib_method,
                       bias_correction=bias_correction, smooth_quant=smooth_quant, progress=Reporter(_stderr()).step,
                       gains=True)
    if as_json:
        doc = {"schema": "edgekit.layers/1", "artifact": str(artifact), "source": str(source),
               "layers": [d.to_json() for d in ranked]}
        sys.stdout.write(json.dumps(doc, indent=2) + "\n")
        return
    for i, d in enumerate(ranked[:top], 1):
        print(f"{i:>3}. {d.text()}")


@app.command()
@handled
def check(
    config: Annotated[Path, typer.Argument(help="The check config (TOML).")] = Path("edgekit.toml"),
    out: Annotated[Path, typer.Option("--out", "-o", help="Folder for the artifacts.")] = Path("edgekit-check"),
    junit: Annotated[Optional[Path], typer.Option("--junit", help="Write JUnit XML here (one case per model × target × precision).")] = None,
    markdown: Annotated[Optional[Path], typer.Option("--markdown", help="Write a Markdown summary here (default: $GITHUB_STEP_SUMMARY when set).")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Write the JSON result to stdout.")] = False,
    baseline: Annotated[Optional[Path], typer.Option("--baseline", help="Baseline JSON (default: edgekit.baseline.json beside the config).")] = None,
    update_baseline: Annotated[bool, typer.Option("--update-baseline", help="Write this run's results as the baseline.")] = False,
    attribution: Annotated[str, typer.Option("--attribution", help="Rank the layers of int8 artifacts by drift: failing (cases), all, or none.")] = "failing",
    jobs: Annotated[int, typer.Option("--jobs", "-j", help="Run the cases in this many worker processes (fewer when memory is short); results are the same as with 1.")] = 1,
    executor: Annotated[str, typer.Option("--executor", help="local (worker processes here) or ray (Ray tasks; needs edgekit[ray]).")] = "local",
    ray_address: Annotated[Optional[str], typer.Option("--ray-address", help="With --executor ray: a running cluster (HEAD:6379 or auto); default: a local Ray instance on --jobs CPUs.")] = None,
    trust_pickle: Annotated[bool, typer.Option("--trust-pickle", help=TRUST_PICKLE)] = False,
    trust_model_code: Annotated[bool, typer.Option("--trust-model-code", help=TRUST_CODE)] = False,
    no_cache: Annotated[bool, typer.Option("--no-cache", help="Convert and verify again even when the artifact cache holds this exact result.")] = False,
):
    """The CI gate: convert and verify what the config lists; exit 1 when a budget is broken."""
    from edgekit.features import check as gate
    from edgekit.cli.render import Reporter

    if attribution not in ("failing", "all", "none"):
        raise BadInput(f"--attribution {attribution!r}", fix="use failing, all or none")
    if jobs < 1:
        raise BadInput(f"--jobs {jobs}: at least one worker is needed", fix="give --jobs 1 or more")
    if executor not in ("local", "ray"):
        raise BadInput(f"--executor {executor!r}", fix="use local or ray")
    if ray_address and executor != "ray":
        raise BadInput("--ray-address needs --executor ray")
    models = gate.load_config(config)
    summary = markdown or (Path(os.environ["GITHUB_STEP_SUMMARY"]) if os.environ.get("GITHUB_STEP_SUMMARY") else None)
    baseline = baseline or config.with_name("edgekit.baseline.json")
    _output_folder(out)
    _output_file(junit, "--junit")
    _output_file(summary, "--markdown")
    if update_baseline:
        _output_file(baseline, "--baseline")
    reporter = Reporter(_stderr())
    from edgekit.sources.loading import SourceOptions

    trust = SourceOptions(trust_pickle=trust_pickle, trust_model_code=trust_model_code)
    cases = list(gate.run_config(config, out, models=models, jobs=jobs, executor=executor, ray_address=ray_address,
                                 attribution=attribution, baseline=baseline, update_baseline=update_baseline,
                                 trust=trust, cache=not no_cache, progress=reporter.step).cases)
    if update_baseline:
        print(f"edgekit: wrote the baseline {baseline}", file=sys.stderr)
    if junit is not None:
        junit.write_text(gate.to_junit(cases), encoding="utf-8")
    if summary is not None:
        with open(summary, "a", encoding="utf-8") as f:
            f.write(gate.to_markdown(cases))
    if as_json:
        _write_json(gate.to_json(cases))
    from edgekit.core.drift import SHOWN
    from edgekit.core.verify import Status

    for c in cases:
        line = f"{'PASS' if c.status == Status.PASS else 'FAIL'} {c.name}"
        layers = "".join(f"\n  layer {i}: {d.text()}" for i, d in enumerate(c.layers[:SHOWN], 1))
        said = "; ".join(c.reasons)
        layers += "".join(f"\n  note: {w}" for w in (c.latency or {}).get("warnings", []) if w not in said)
        print(line + (": " + said if c.reasons else "")
              + ("".join(f"\n  changed: {x}" for x in c.changes)) + layers
              + (f"\n  {c.layers_note}" if c.layers_note else ""), file=sys.stderr if as_json else sys.stdout)
    if any(c.status == Status.FAIL for c in cases):
        raise typer.Exit(EXIT_CHECK_FAILED)


@app.command()
@handled
def demo(out: Annotated[Path, typer.Option("--out", "-o", help="Folder for the artifacts and the report.")] = Path("demo-out")):
    """The main job on the bundled digits CNN: every target at fp32 and at int8 (calibrated), each verified on the
    digits eval split, then the size and latency report as HTML."""
    from edgekit.core.quant import Precision

    samples = REPO / "sample_models"
    model, calib, eval_data = (samples / n for n in ("digits_cnn.pt2", "digits_calib.npz", "digits_eval.npz"))
    if not model.is_file():
        raise BadInput(f"the bundled sample model is not here ({model})", fix="run edgekit demo from a checkout of edgekit")
    page = out / "report.html"
    _output_folder(out)
    _output_file(page, "--out")
    failed = False
    for precision in (Precision.FP32, Precision.INT8):
        print(f"edgekit demo: {model.relative_to(REPO)} → every target at {precision}"
              + (f", calibrated on {calib.name}" if precision == Precision.INT8 else "") + f"; verified on {eval_data.name}",
              file=sys.stderr)
        try:
            convert(str(model), ["all"], out, precision=precision, calib=str(calib) if precision == Precision.INT8 else None,
                    eval_data=eval_data)
        except typer.Exit as e:  # a failed verdict: say so at the end, after the report
            if e.exit_code != EXIT_CHECK_FAILED:
                raise
            failed = True
    print("edgekit demo: the size and latency report (host CPU latency in each runtime)", file=sys.stderr)
    report([out], html_out=page, bench=True)
    print(f"edgekit demo: open {page} in a browser", file=sys.stderr)
    if failed:
        raise typer.Exit(EXIT_CHECK_FAILED)


cache_app = typer.Typer(help="The artifact cache: verified artifacts by everything they depend on.",
                        no_args_is_help=True)
app.add_typer(cache_app, name="cache")


@cache_app.command("info")
@handled
def cache_info(as_json: Annotated[bool, typer.Option("--json", help="Print as JSON.")] = False):
    """Where the cache is, how many results it holds and how much space they take."""
    from edgekit.engine.cache import ArtifactCache

    info = ArtifactCache().info()
    if as_json:
        sys.stdout.write(json.dumps(info, indent=2) + "\n")
        return
    print(f"{info['folder']}: {info['entries']} results, {info['bytes'] / 2**20:.1f} MiB of "
          f"{info['size_limit'] / 2**20:.0f} MiB (EDGEKIT_CACHE_DIR, EDGEKIT_CACHE_SIZE)")


@cache_app.command("clear")
@handled
def cache_clear():
    """Remove every cached result."""
    from edgekit.engine.cache import ArtifactCache

    cache = ArtifactCache()
    removed = cache.clear()
    print(f"edgekit: cleared {cache.folder} ({removed} items)", file=sys.stderr)


def _cache(no_cache: bool):
    from edgekit.engine.cache import ArtifactCache

    return None if no_cache else ArtifactCache()


def _write_json(doc) -> None:
    """One JSON document on stdout, NaN and infinities as null (edgekit.core.results.finite)."""
    from edgekit.core.results import finite

    sys.stdout.write(json.dumps(finite(doc), indent=2, allow_nan=False) + "\n")


def _output_file(path: Path | None, option: str) -> None:
    """Check, before any work, that `path` can be written: its folder is made if missing."""
    if path is None:
        return
    if path.is_dir():
        raise BadInput(f"{option} {path} is a folder", fix=f"give {option} a file name, e.g. {path / 'report'}")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise BadInput(f"{option} {path}: cannot create the folder {path.parent}: {e.strerror}",
                       fix="choose a path you can write to") from None
    if not os.access(path.parent, os.W_OK) or (path.exists() and not os.access(path, os.W_OK)):
        raise BadInput(f"{option} {path}: cannot write there (permission denied)", fix="choose a path you can write to")


def _output_folder(path: Path, option: str = "--out") -> None:
    if path.exists() and not path.is_dir():
        raise BadInput(f"{option} {path} is a file, not a folder", fix=f"give {option} a folder")
    probe = path
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    if not os.access(probe, os.W_OK):
        raise BadInput(f"{option} {path}: cannot write into {probe} (permission denied)",
                       fix="choose a folder you can write to")


def main() -> None:
    def terminate(signum, frame):
        raise KeyboardInterrupt  # SIGTERM ends the run as Ctrl-C does: no partial output, exit 130

    signal.signal(signal.SIGTERM, terminate)
    app(args=global_flags_first(sys.argv[1:]), prog_name="edgekit")


GLOBAL_FLAGS = ("--debug", "--verbose")


def global_flags_first(args: list[str]) -> list[str]:
    """`--debug` and `--verbose` belong to edgekit, not to a command, yet users put them anywhere
    (`edgekit convert m.pt2 --debug`): moved in front of the command, where the parser reads them.
    Nothing after `--` moves."""
    end = args.index("--") if "--" in args else len(args)
    flags = [a for a in args[:end] if a in GLOBAL_FLAGS]
    return flags + [a for a in args[:end] if a not in GLOBAL_FLAGS] + args[end:]
