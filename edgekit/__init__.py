"""edgekit: PyTorch, TensorFlow/Keras and ONNX models to LiteRT/TFLite, ExecuTorch, ONNX, ONNX Runtime's mobile
format and PyTorch Mobile, each artifact proven in its own runtime.

The Python API is the main commands in Python form:

    import edgekit

    result = edgekit.convert("model.pt2", ["tflite"], int8=True, calibration="calib.npz", eval_data="eval.npz")
    result.artifacts[0].verdict.status          # "pass" or "fail", with .metrics and .reasons
    checked = edgekit.check("edgekit.toml", jobs=2)
    checked.failed                              # the cases that broke a budget; .to_json(), .to_junit()
    timed = edgekit.bench("edgekit-out")        # host CPU latency per artifact; .to_json() is `bench --json`

`convert` returns a `ConvertResult` (an `ArtifactResult` per target), `check` a `CheckResult` (a `Case` per
model × target × precision), `bench` a `BenchReport` (an `ArtifactLatency` per artifact). What was given
is checked before any work: a bad keyword or value, a missing file or a damaged model raises `BadInput`
(the command line's exit 2), a converter or runtime that fails `ConversionFailed` (exit 3), a missing
extra `MissingDependency` (exit 4); all three are `EdgekitError`s with `.message` and `.fix`. A failed
verdict or a broken budget is a result, not an exception.

Importing edgekit loads no framework (nor numpy): torch, litert, executorch and onnxruntime are imported by
the converter or runner that needs them, and the result types when first used.
"""

from __future__ import annotations

import contextlib
import difflib
import os
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import TYPE_CHECKING

from edgekit.core.artifact import ModelArtifact
from edgekit.core.errors import BadInput, ConversionFailed, EdgekitError, MissingDependency, environment_error
from edgekit.core.formats import detect
from edgekit.core.quiet import private_temp
from edgekit.core.signature import Signature, TensorSpec

if TYPE_CHECKING:
    from edgekit.core.results import ArtifactResult, ConvertResult
    from edgekit.features.bench import ArtifactLatency, BenchReport
    from edgekit.features.check import Case, CheckResult

__version__ = "0.1.0"
__all__ = [
    "ArtifactLatency",
    "ArtifactResult",
    "BadInput",
    "BenchReport",
    "Case",
    "CheckResult",
    "ConversionFailed",
    "ConvertResult",
    "EdgekitError",
    "MissingDependency",
    "ModelArtifact",
    "Signature",
    "TensorSpec",
    "bench",
    "check",
    "convert",
    "detect",
]

# The command line's spelling of an option (or an old keyword) → the keyword that means it here.
_SPELLED = {"target": "targets", "t": "targets", "eval": "eval_data", "calib": "calibration",
            "threshold": "thresholds", "budget": "budgets", "input_shape": "input_shapes", "out_dir": "out",
            "o": "out", "p": "precision", "no_cache": "cache", "overrides": "keep", "j": "jobs",
            "junit": None, "markdown": None, "as_json": None, "json": None}
_WHERE = {"junit": "write result.to_junit() to a file", "markdown": "write result.to_markdown() to a file",
          "as_json": "call result.to_json()", "json": "call result.to_json()"}


def convert(source: str | os.PathLike, targets: str | Iterable[str] = "all", *, out: str | os.PathLike = "edgekit-out",
            precision: str = "fp32", int8: bool = False, calibration: str | os.PathLike | None = None,
            calib_samples: int | None = None, calib_method: str | None = None, calib_preprocess: str | None = None,
            eval_data: str | os.PathLike | None = None, thresholds: Mapping[str, float] | None = None,
            output_kinds: Mapping[str, str] | None = None, int8_io: bool = False, bias_correction: bool | None = None, smooth_quant: bool | None = None,
            int16_stem: bool = False, int16_activations: bool = False, granularity: str = "per-channel", keep: Mapping[str, str] | Iterable[str] | None = None,
            budgets: Mapping[str, float] | None = None, min_int8_share: float = 0.8, max_steps: int = 8,
            input_shapes: Mapping[str, Iterable[int]] | Iterable[str] | None = None,
            example_inputs: str | os.PathLike | None = None, model_class: str | None = None,
            trust_pickle: bool = False, trust_model_code: bool = False, cache: bool = False,
            time_budget: float | None = 1800, progress: Callable[[str], object] | None = None,
            optimize: str = "latency", ort_platform: str = "arm", attribution: bool = False,
            group_size: int = 32, max_seq_len: int | None = None, prefill_len: int | None = None,
            **unknown) -> ConvertResult:
    """Convert `source` to each of `targets`, verify every artifact in its own runtime, place it in `out`.

    `edgekit convert` in Python form; each keyword is the command line's option of that name:

    - `source`: a .pt2/.pt file, a `module:factory`, a SavedModel folder, a .keras/.h5 or an .onnx file.
    - `targets`: "tflite", "executorch" (or "pte"), "onnx", "ort", "ptl", a list of them, or "all".
    - `precision`: "fp32", "fp16", "int8" (static, calibrated) or "int8-dynamic"; `int8=True` is "int8".
    - `calibration`: the calibration data as a path (an .npz, a folder of .npy files or images), a
      "module:function", or "random"; `calib_samples` uses the first N, `calib_method` is minmax,
      percentile, mse, entropy, mean-minmax or auto (None, the default: minmax, or on onnx and ort mean-minmax
      where it drifts clearly less on the calibration samples), `calib_preprocess` reads image folders ("size=32x32,scale=1/255").
    - `eval_data`: an .npz of inputs (and optional `labels`) to verify on; without it, held-out calibration
      samples or seeded random inputs (a warning in the result says which).
    - `thresholds`: {metric: limit} overriding verification thresholds, e.g. {"cosine": 0.999}.
    - `output_kinds`: {output: kind} saying what an output is ("scores", "probabilities", "embedding",
      "regression", "map", "score", "sequence"), which decides the metrics that judge it, e.g.
      {"output_1": "regression"}.
    - int8 only: `int8_io`, `bias_correction` (None, the default: on wherever the target's backend has it;
      True or False to insist), `smooth_quant` (None, the default: on wherever the model has linears reading a
      normalization and the target's backend has it; True or False to insist), `int16_stem`, `int16_activations`, `granularity` ("per-channel" or
      "per-tensor"), `keep` ({layer: "float" or "int16"}, or a list of layers kept float), and `budgets`
      ({metric: limit}: keep the fewest layers back until they hold) with `min_int8_share` and `max_steps`.
    - `input_shapes` ({input: (1, 3, 224, 224)}), `example_inputs` (.npz), `model_class` ("module:Class"
      for a state_dict), `trust_pickle`, `trust_model_code`: how to open the source, as on the command line.
    - `cache=True` (the artifact cache) and `attribution=True` (a failed int8 verdict names the layers losing the
      most): off by default here; `progress` receives one line per step (e.g. `progress=print`); `time_budget`,
      `optimize`, `ort_platform`, and a decoder LM's `group_size`, `max_seq_len`, `prefill_len`: as on the CLI.

    Returns a `ConvertResult`: `.artifacts` (an `ArtifactResult` per target: `.target`, `.artifact.path`, `.bytes`,
    `.verdict.status` "pass" or "fail", `.verdict.metrics`, `.verdict.reasons`), `.warnings`, `.failed`,
    `.failures` (with several targets, a `TargetFailure` per target that made no artifact — its conversion failed
    or ran past `time_budget` —, the others kept; a single target raises its error) and `.to_json()` (the
    `edgekit convert --json` document; an exact match's `sqnr_db` stays `inf` where the command line writes
    null). Raises `BadInput` for anything given that cannot be used, before any conversion starts.
    """
    _refuse_unknown(convert, unknown)
    from edgekit.calibration.sources import CalibrationSpec  # local: keeps the engine (~0.4 s) off `import edgekit`
    from edgekit.engine.cache import ArtifactCache  # local: as above
    from edgekit.engine.pipeline import convert as run  # local: as above
    from edgekit.engine.request import build_request  # local: as above
    from edgekit.sources.loading import SourceOptions  # local: as above

    _flags(int8=int8, int8_io=int8_io, bias_correction=True if bias_correction is None else bias_correction,
           smooth_quant=True if smooth_quant is None else smooth_quant, int16_stem=int16_stem, int16_activations=int16_activations, trust_pickle=trust_pickle, trust_model_code=trust_model_code, cache=cache, attribution=attribution)
    _names_and_counts(dict(calib_samples=calib_samples, group_size=group_size, max_seq_len=max_seq_len, prefill_len=prefill_len),
                      precision=precision, calib_method=calib_method or "", granularity=granularity, optimize=optimize, ort_platform=ort_platform)
    _progress(progress)
    _out_folder(out)
    if calibration is not None and not isinstance(calibration, CalibrationSpec):
        calibration = _path(calibration, "calibration")
    request = build_request(
        _path(source, "source"), _names(targets), os.fspath(out), precision=precision, int8=int8,
        calibration=calibration, calib_samples=calib_samples, calib_preprocess=calib_preprocess,
        calib_method=calib_method, eval_data=_path(eval_data, "eval_data") if eval_data is not None else None,
        thresholds=_mapping(thresholds, "thresholds", {"cosine": 0.999}),
        output_kinds=_mapping(output_kinds, "output_kinds", {"output_1": "regression"}), int8_io=int8_io,
        bias_correction=bias_correction, smooth_quant=smooth_quant, int16_stem=int16_stem,
        int16_activations=int16_activations, granularity=granularity, optimize=optimize, ort_platform=ort_platform,
        attribute_failures=attribution, group_size=group_size, keep=_keep(keep),
        budgets=_mapping(budgets, "budgets", {"cosine": 0.99}), min_int8_share=min_int8_share, max_steps=max_steps, time_budget=time_budget,
        source_options=SourceOptions(trust_pickle, model_class, _shapes(input_shapes),
                                     _path(example_inputs, "example_inputs") if example_inputs is not None else None,
                                     trust_model_code, max_seq_len=max_seq_len, prefill_len=prefill_len),
    )
    with _as_a_command():
        return run(request, progress=progress, cache=ArtifactCache() if cache else None)


def _names_and_counts(counts: dict, **names) -> None:
    """Refuse a keyword that names something given as anything but a str, and a count (`counts`: keyword → value,
    None for the default) that is no int."""
    for keyword, value in names.items():
        if not isinstance(value, str):
            raise BadInput(f"{keyword}={value!r} is not a name", fix=f"give {keyword} as a str")
    for keyword, value in counts.items():
        if value is not None and (isinstance(value, bool) or not isinstance(value, int)):
            raise BadInput(f"{keyword}={value!r} is not a whole number", fix=f"give {keyword} as an int, or None for the default")


def check(config: str | os.PathLike = "edgekit.toml", *, out: str | os.PathLike = "edgekit-check", jobs: int = 1,
          executor: str = "local", ray_address: str | None = None, attribution: str = "failing",
          baseline: str | os.PathLike | None = None, update_baseline: bool = False, trust_pickle: bool = False,
          trust_model_code: bool = False, cache: bool = False, progress: Callable[[str], object] | None = None,
          **unknown) -> CheckResult:
    """Convert and verify every model × target × precision the check config lists, and judge each against
    its budgets: `edgekit check` in Python form (see the README's "CI gate" for the config).

    - `config`: the TOML config; `out`: the folder for the artifacts (each model under `<name>/<precision>/`).
    - `jobs`: worker processes (or Ray tasks at once with `executor="ray"`, on a local Ray instance or the
      cluster at `ray_address`); the results are those of one worker.
    - `attribution`: rank the layers of "failing" int8 cases (default), "all" or "none" by SQNR lost.
    - `baseline`: the baseline JSON (default: edgekit.baseline.json beside the config), compared with when
      it exists; `update_baseline=True` writes this run's results there instead.
    - `trust_pickle`, `trust_model_code`: as on the command line (a config never grants trust).
    - `cache=True` uses the artifact cache (off by default here); `progress` receives one line per step
      (with `jobs` > 1 the workers' lines go to stderr).

    Returns a `CheckResult`: `.cases` (a `Case` each: `.name`, `.status`, `.reasons`, `.metrics`, `.bytes`,
    `.path`, `.layers`), `.passed`, `.failed`, `.ok`, and `.to_json()` (the `edgekit check --json` document),
    `.to_junit()`, `.to_markdown()`. Nothing is written but the artifacts in `out` (and the baseline when
    asked). A broken budget is a failed case; a bad config or keyword raises `BadInput`.
    """
    _refuse_unknown(check, unknown)
    from edgekit.features.check.result import ATTRIBUTIONS, EXECUTORS, run_config  # local: keeps the engine off `import edgekit`
    from edgekit.sources.loading import SourceOptions  # local: as above

    _flags(update_baseline=update_baseline, trust_pickle=trust_pickle, trust_model_code=trust_model_code, cache=cache)
    if isinstance(jobs, bool) or not isinstance(jobs, int) or jobs < 1:
        raise BadInput(f"jobs={jobs!r}: at least one worker is needed", fix="give jobs=1 or more")
    if attribution not in ATTRIBUTIONS:
        raise BadInput(f"attribution={attribution!r}", fix=f"use one of {', '.join(map(repr, ATTRIBUTIONS))}")
    if executor not in EXECUTORS:
        raise BadInput(f"executor={executor!r}", fix=f"use one of {', '.join(map(repr, EXECUTORS))}")
    if ray_address is not None and executor != "ray":
        raise BadInput("ray_address needs executor='ray'")
    _progress(progress)
    _out_folder(out)
    with _as_a_command():
        return run_config(_path(config, "config"), os.fspath(out), jobs=jobs, executor=executor,
                          ray_address=ray_address, attribution=attribution,
                          baseline=_path(baseline, "baseline") if baseline is not None else None,
                          update_baseline=update_baseline,
                          trust=SourceOptions(trust_pickle=trust_pickle, trust_model_code=trust_model_code),
                          cache=cache, progress=progress)


def bench(artifacts: str | os.PathLike | Iterable[str | os.PathLike] | ConvertResult, *,
          threads: str | Iterable[int | str] = "1,all", inputs: str | os.PathLike | None = None,
          input_shapes: Mapping[str, Iterable[int]] | Iterable[str] | None = None, min_seconds: float = 1.0,
          progress: Callable[[str], object] | None = None, **unknown) -> BenchReport:
    """Host CPU latency of each artifact in its own runtime, its peak memory, and int8 ÷ fp32: `edgekit bench`
    on artifacts in Python form.

    - `artifacts`: an artifact (.tflite, .pte, .ptl, .onnx, .ort), a folder holding them, a list of either, or
      a `ConvertResult` (its artifacts). An int8 artifact is compared with the fp32 artifact of the same stem
      and format beside it, which is timed too.
    - `threads`: the thread counts, "1,all" (default: 1 and every core) or a list such as [1, 4].
    - `inputs`: an .npz whose first sample of each input is fed (default: seeded random inputs of the
      artifact's own shapes and types); `input_shapes` ({input: shape}) sizes a dynamic dimension or a .ptl.
    - `min_seconds`: each artifact is timed at each thread count for at least this long (at most 10×).

    Returns a `BenchReport`: `.artifacts` (an `ArtifactLatency` each: `.path`, `.format`, `.precision`,
    `.median_ms(threads)`, `.timings` with median, p10, p90 and runs per thread count, `.peak_rss_bytes`,
    `.ratio_to_fp32` {threads: int8 ÷ fp32}, `.warnings` where int8 is not faster, with the likely reasons),
    `.skipped`, `.warnings`, `.host` (the CPU it ran on) and `.to_json()` (the `edgekit bench --json`
    document). The figures are this host's CPU, not a phone's.
    """
    _refuse_unknown(bench, unknown)
    from edgekit.core.results import ConvertResult as Converted  # local: numpy stays off `import edgekit`
    from edgekit.core.signature import parse_input_shapes  # local: as above
    from edgekit.features.bench import bench as time_artifacts, parse_threads  # local: the engine, as above

    if isinstance(artifacts, Converted):
        paths = [a.artifact.path for a in artifacts.artifacts]
    elif isinstance(artifacts, (str, os.PathLike)):
        paths = [_path(artifacts, "artifacts")]
    elif isinstance(artifacts, Iterable):
        paths = [_path(a, "artifacts") for a in artifacts]
    else:
        paths = []
    if not paths:
        raise BadInput(f"artifacts={artifacts!r}", fix="give an artifact, a folder, a list of them or a ConvertResult")
    if isinstance(threads, str):
        counts = parse_threads(threads)
    elif isinstance(threads, Iterable) and all(isinstance(n, (int, str)) and not isinstance(n, bool) for n in threads):
        counts = parse_threads(",".join(map(str, threads)))
    else:
        raise BadInput(f"threads={threads!r}", fix="give '1,all' or a list of counts such as [1, 4]")
    if isinstance(min_seconds, bool) or not isinstance(min_seconds, (int, float)) or not min_seconds > 0:
        raise BadInput(f"min_seconds={min_seconds!r} is not a positive number of seconds")
    _progress(progress)
    shapes = {s.name: list(s.shape) for s in parse_input_shapes(_shapes(input_shapes))}
    with _as_a_command():
        return time_artifacts(paths, threads=counts, inputs=_path(inputs, "inputs") if inputs is not None else None,
                              shapes=shapes, min_seconds=float(min_seconds), progress=progress)


def __getattr__(name: str):
    """The result types, imported when first used: they bring numpy and the engine, which `import edgekit` does not."""
    if name in ("ConvertResult", "ArtifactResult"):
        from edgekit.core import results  # local: numpy (~0.1 s) stays off `import edgekit`
        return getattr(results, name)
    if name in ("CheckResult", "Case"):
        from edgekit.features import check as gate  # local: the engine (~0.4 s) stays off `import edgekit`
        return getattr(gate, name)
    if name in ("BenchReport", "ArtifactLatency"):
        from edgekit.features import bench as timing  # local: as above
        return getattr(timing, name)
    raise AttributeError(f"module 'edgekit' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})


def _refuse_unknown(fn, unknown: dict) -> None:
    """BadInput naming a keyword `fn` does not take, and the one that was probably meant."""
    if not unknown:
        return
    name = sorted(unknown)[0]
    code = fn.__code__
    known = code.co_varnames[1:code.co_argcount + code.co_kwonlyargcount]
    meant = _SPELLED.get(name, "") if name in _SPELLED else next(iter(difflib.get_close_matches(name, known, 1)), "")
    if name in _WHERE:
        fix = _WHERE[name]
    elif meant in known:
        fix = f"did you mean {meant}=?"
    else:
        fix = f"its keywords are {', '.join(known)}"
    raise BadInput(f"edgekit.{fn.__name__}() takes no keyword {name!r}", fix=fix)


def _flags(**flags) -> None:
    for name, value in flags.items():
        if not isinstance(value, bool):
            raise BadInput(f"{name}={value!r} is not True or False")


def _progress(progress) -> None:
    if progress is not None and not callable(progress):
        raise BadInput(f"progress={progress!r} is not callable", fix="give a function of one string, e.g. print")


def _path(value, keyword: str) -> str:
    if isinstance(value, (str, os.PathLike)) and os.fspath(value):
        return os.fspath(value)
    raise BadInput(f"{keyword}={value!r} is not a path", fix=f"give {keyword} as a str or pathlib.Path")


def _out_folder(out) -> None:
    path = _path(out, "out")
    if os.path.exists(path) and not os.path.isdir(path):
        raise BadInput(f"out={path!r} is a file, not a folder", fix="give out a folder (it is made if missing)")


def _names(targets) -> tuple[str, ...]:
    names = (targets,) if isinstance(targets, str) else tuple(targets) if isinstance(targets, Iterable) else None
    if not names or not all(isinstance(n, str) for n in names):
        raise BadInput(f"targets={targets!r}", fix="give a target name, a list of them, or 'all'")
    return names


def _mapping(value, keyword: str, example: dict) -> dict:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise BadInput(f"{keyword}={value!r} is not a dict", fix=f"give {keyword} as a dict such as {example!r}")
    return dict(value)


def _keep(value) -> Mapping | list[str]:
    """`keep`: {layer: precision} or a list of layers (kept float)."""
    if value is None:
        return []
    if isinstance(value, Mapping):
        return value
    if isinstance(value, str) or not isinstance(value, Iterable):
        raise BadInput(f"keep={value!r}", fix="give {layer: 'float' or 'int16'} or a list of layer names")
    return [str(v) for v in value]


def _shapes(value) -> tuple[str, ...]:
    """`input_shapes` as the command line's --input-shape items ("x=1,3,224,224")."""
    if value is None:
        return ()
    if isinstance(value, Mapping):
        try:
            return tuple(f"{name}={','.join(str(int(d)) for d in dims)}" for name, dims in value.items())
        except (TypeError, ValueError):
            raise BadInput(f"input_shapes={dict(value)!r}", fix="give {input: (1, 3, 224, 224)}") from None
    if isinstance(value, str) or not isinstance(value, Iterable):
        raise BadInput(f"input_shapes={value!r}", fix="give {input: (1, 3, 224, 224)} or a list of 'x=1,3,224,224'")
    return tuple(str(v) for v in value)


@contextlib.contextmanager
def _as_a_command() -> Iterator[None]:
    """What the command line does around a command: the libraries' temporary files go to a private folder
    removed at the end, and an OS error the environment caused (a full disk, no permission) is BadInput."""
    try:
        with private_temp():
            yield
    except EdgekitError:
        raise
    except Exception as e:
        err = environment_error(e)
        if err is None:
            raise
        raise err from e
