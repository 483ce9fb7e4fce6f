"""One pass of activation statistics for onnxruntime's three calibration methods (the onnx and ort targets).

`--calib-method auto` tries minmax, percentile and entropy ranges. onnxruntime's calibrators would each
run the model over the calibration samples again, and its entropy calibrator searches every tensor's
threshold in a Python loop (961 KL divergences of a 2048-bin histogram, with a Python sum per merged
bin: minutes on a real model). Here the model runs once, with every tensor onnxruntime calibrates as an
output (its HistogramCalibrater's augmented model), and each tensor keeps what the three calibrators
keep: its min and max (MinMax), the histogram of |x| in 2048 bins over min|x|..max|x| (Percentile,
symmetric at 99.999) and the histogram of x in 2048 bins over ±max|x| (Entropy, 128 quantized bins),
made from the same values with the same numpy calls. Each method's ranges come from these: percentile
by onnxruntime's own HistogramCollector, entropy by the same KL search vectorized over all candidate
thresholds at once (equal to onnxruntime's up to float32 rounding of the divergences). mean-minmax (NNCF's
default for activations, MEAN_MINMAX) takes the mean over the samples of each tensor's min and of its max:
one sample's outlier no longer sets the range of all.

onnxruntime's histogram calibrators copy every value of every tensor of every sample out of the session
(16 GB for PP-OCR rec's 77 samples) and histogram them all, which costs more than the rest of `auto`
together. `auto`'s pass is bounded instead (`collect(per_sample=...)`): min and max still over every
value, reduced in the session, the histograms from at most VALUES evenly strided values of each tensor;
a conversion with percentile or entropy alone keeps every value, as onnxruntime does.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from edgekit.core.errors import ConversionFailed

BINS = 2048  # both histograms: onnxruntime's percentile default, and what edgekit gives its entropy calibrator
QUANTIZED_BINS = 128  # onnxruntime's entropy default
PERCENTILE = 99.999  # onnxruntime's percentile default
VALUES = 2 ** 18  # of each tensor histogrammed by `auto`'s pass, spread over the samples (its min and max: all)
EPS = 0.0001  # onnxruntime's smooth_distribution


@dataclass
class Statistics:
    """What one calibration pass over a float model leaves for every method's ranges, so that `auto`'s
    candidates calibrate without running the model again."""

    extremes: dict = field(default_factory=dict)  # tensor → (min, max), 1-element arrays as MinMax's
    magnitudes: dict = field(default_factory=dict)  # tensor → (hist, edges, min, max) of |x| (percentile)
    values: dict = field(default_factory=dict)  # tensor → (hist, edges, min, max, threshold) of x (entropy)
    failed: dict = field(default_factory=dict)  # method → why its histogram cannot be made
    computed: dict = field(default_factory=dict)  # method → its ranges, computed once
    means: dict = field(default_factory=dict)  # tensor → the means over the samples of its min and max (mean-minmax)

    def ranges(self, method: str):
        """onnxruntime's TensorsData for `method`: minmax, percentile or entropy as onnxruntime's calibrator of
        that method would compute it from the same samples; mean-minmax from the per-sample extremes."""
        if method not in self.computed:
            self.computed[method] = self._ranges(method)
        return self.computed[method]

    def _ranges(self, method: str):
        from onnxruntime.quantization.calibrate import CalibrationMethod, HistogramCollector, TensorData, TensorsData

        if method in self.failed:
            raise ConversionFailed(self.failed[method],
                                   fix="use --calib-method minmax, or auto (it leaves out a method that fails)")
        if method == "minmax":
            return TensorsData(CalibrationMethod.MinMax, dict(self.extremes))
        if method == "mean-minmax":  # a tensor whose every sample had no value keeps its (empty) extremes
            return TensorsData(CalibrationMethod.MinMax, {**self.extremes, **self.means})
        if method == "percentile":
            collector = HistogramCollector("percentile", True, BINS, QUANTIZED_BINS, PERCENTILE, "same")
            collector.histogram_dict = self.magnitudes
            found = collector.compute_percentile()
            return TensorsData(CalibrationMethod.Percentile,
                               {t: TensorData(lowest=r[0], highest=r[1]) for t, r in found.items()})
        found = {t: entropy_threshold(*h[:4]) for t, h in self.values.items()}
        return TensorsData(CalibrationMethod.Entropy, {t: TensorData(lowest=lo, highest=hi) for t, (lo, hi) in found.items()})


def collect(model: Path, feeds, work_dir: Path, per_sample: int | None = None) -> Statistics:
    """Run `model` once over `feeds` (an iterable of {input name: array}) with every tensor onnxruntime
    would calibrate as an output, and keep each tensor's statistics (see the module's docstring). With
    `per_sample`, each tensor's min and max still come from all its values (reduced in the session, as
    onnxruntime's MinMax calibrater does), its histograms from at most that many of each sample's values,
    evenly strided (a Slice in the session): `auto` bounds its pass so (see VALUES), where onnxruntime
    copies out every value of every tensor of every sample (GBs on a real model) and histograms them all."""
    import onnx
    from onnxruntime.quantization.calibrate import HistogramCalibrater

    calibrator = HistogramCalibrater(str(model), augmented_model_path=str(work_dir / "statistics.onnx"))
    if per_sample is None:
        calibrator.augment_graph()
        wanted = {t: (t, None) for t in sorted(calibrator.tensors_to_calibrate)}
    else:
        wanted = _bounded(calibrator, per_sample)
        onnx.save(calibrator.model, calibrator.augmented_model_path)
    calibrator.create_inference_session()  # as onnxruntime's calibrators run: no graph optimizations
    session, names = calibrator.infer_session, [n for values, ext in wanted.values() for n in (values, *(ext or ()))]
    del calibrator
    inputs = {i.name for i in session.get_inputs()}
    outputs: dict[str, list] = {n: [] for n in names}
    for feed in feeds:
        for name, value in zip(names, session.run(names, feed)):
            outputs[name].append(value.copy() if name in inputs else value)  # onnxruntime issue 21922
    del session
    (work_dir / "statistics.onnx").unlink()
    if not any(outputs.values()):
        raise ValueError("No data is collected.")
    stats = Statistics()
    for tensor, (values, extremes) in wanted.items():
        x = np.asarray(outputs.pop(values)).reshape(-1)
        if extremes is None:
            _add(stats, tensor, x)
        else:
            low, high = np.asarray(outputs.pop(extremes[0])), np.asarray(outputs.pop(extremes[1]))
            if low.size:
                stats.means[tensor] = tuple(np.nanmean(v, dtype=np.float64).astype(x.dtype).reshape(1) for v in (low, high))
            _add(stats, tensor, x, np.nanmin(low) if low.size else None, np.nanmax(high) if high.size else None)
    return stats


def _bounded(calibrator, per_sample: int) -> dict:
    """Add to the calibrator's model, for each tensor it calibrates, its min and max (ReduceMin/ReduceMax
    of it flattened) and every k-th of its values (at most `per_sample`) as outputs: tensor → (values
    output, (min output, max output))."""
    from onnx import TensorProto, helper, numpy_helper

    tensors, infos = calibrator.select_tensors_to_calibrate(calibrator.model)
    graph = calibrator.model.graph
    graph.initializer.extend([numpy_helper.from_array(np.array(v, np.int64), n) for n, v in (
        ("edgekit_flat", [-1]), ("edgekit_zero", [0]), ("edgekit_end", [2 ** 62]))])
    wanted = {}
    for i, tensor in enumerate(sorted(tensors)):
        dims = [d.dim_value if d.HasField("dim_value") else 0 for d in infos[tensor].type.tensor_type.shape.dim]
        size = int(np.prod(dims)) if all(dims) else 0  # 0: unknown, every value is kept
        step = f"edgekit_step{i}"
        graph.initializer.append(numpy_helper.from_array(np.array([max(1, -(-size // per_sample))], np.int64), step))
        flat, out = (f"edgekit_{kind}{i}" for kind in ("flat", "values"))
        low, high = f"edgekit_min{i}", f"edgekit_max{i}"
        graph.node.extend([helper.make_node("Reshape", [tensor, "edgekit_flat"], [flat]),
                           helper.make_node("Slice", [flat, "edgekit_zero", "edgekit_end", "edgekit_zero", step], [out]),
                           helper.make_node("ReduceMin", [flat], [low], keepdims=0),
                           helper.make_node("ReduceMax", [flat], [high], keepdims=0)])
        elem = infos[tensor].type.tensor_type.elem_type or TensorProto.FLOAT
        graph.output.extend([helper.make_tensor_value_info(out, elem, None),
                             helper.make_tensor_value_info(low, elem, None), helper.make_tensor_value_info(high, elem, None)])
        wanted[tensor] = (out, (low, high))
    return wanted


def _add(stats: Statistics, name: str, x: np.ndarray, low=None, high=None) -> None:
    """One tensor's statistics from its values `x` (and the min and max of all of them, when `x` are some),
    made as onnxruntime's MinMax calibrater and its HistogramCollector (collect_value for entropy,
    collect_absolute_value for percentile) make them."""
    if low is None:
        low, high = (np.nanmin(x), np.nanmax(x)) if x.size else (np.array(0, dtype=x.dtype), np.array(0, dtype=x.dtype))
    stats.extremes[name] = (np.asarray(low, dtype=x.dtype).reshape(1), np.asarray(high, dtype=x.dtype).reshape(1))  # as MinMax's
    threshold = np.array(max(abs(low), abs(high)), dtype=x.dtype)
    with np.errstate(over="ignore", invalid="ignore"):  # a range numpy cannot split is reported below
        _histograms(stats, name, x, low, high, threshold)


def _histograms(stats: Statistics, name: str, x: np.ndarray, low, high, threshold) -> None:
    try:
        hist, edges = np.histogram(x, BINS, range=(-threshold, threshold))
        stats.values[name] = (hist, edges, low, high, threshold)
    except ValueError as e:
        stats.failed.setdefault("entropy", _unfinite("entropy", name, e))
    try:
        magnitudes = np.absolute(x)
        # onnxruntime's range: that of the magnitudes (numpy's own when all are here; else up to the largest of all)
        whole = not magnitudes.size or float(magnitudes.max()) >= float(threshold)
        span = None if whole else (float(magnitudes.min()), float(threshold))
        hist, edges = np.histogram(magnitudes, bins=BINS, range=span)
        stats.magnitudes[name] = (hist, edges.astype(x.dtype), low, high)
    except ValueError as e:
        stats.failed.setdefault("percentile", _unfinite("percentile", name, e))


def _unfinite(method: str, name: str, e: ValueError) -> str:
    return (f"onnxruntime's {method} calibration cannot make a histogram of {name}, whose range is not finite in "
            f"float32 (an additive attention mask spans -3.4e38..0): {str(e).splitlines()[0] if str(e) else e!r}")


def entropy_threshold(hist: np.ndarray, edges: np.ndarray, low, high, quantized: int = QUANTIZED_BINS) -> tuple:
    """The (low, high) range of least KL divergence between the histogram cut at each candidate threshold
    and its quantized form: onnxruntime's HistogramCollector.get_entropy_threshold, with every candidate's
    divergence from prefix sums over the histogram instead of a Python loop over its bins (float64, so
    equal to onnxruntime's float32 divergences up to their rounding)."""
    n = hist.size
    zero, half = n // 2, quantized // 2
    s = zero - np.arange(half, zero + 1)  # each candidate's first bin
    e = np.minimum(2 * zero - s + 1, n)  # ... and its end
    size, merged = e - s, (e - s) // quantized  # bins per quantized bin; the remainder counts in the last one
    h = hist.astype(np.float64)
    counts, nonzero = _prefix(h), _prefix(h != 0)
    left, right = counts[s], counts[n] - counts[e]
    first, last = h[s] + left, h[e - 1] + right  # p's end bins take the outliers
    nnz_p = nonzero[e - 1] - nonzero[s + 1] + (first != 0) + (last != 0)
    eps_p = EPS * (size - nnz_p) / np.maximum(nnz_p, 1)
    # Σ a log a for p smoothed (a): its zeros are EPS, its other bins give up eps_p each.
    t1 = (_shifted_xlogx(h, s + 1, e - 1, eps_p) + _xlogx(first - eps_p, first != 0) + _xlogx(last - eps_p, last != 0)
          + (size - nnz_p) * EPS * np.log(EPS))
    k = np.arange(quantized)[None, :]
    starts = s[:, None] + k * merged[:, None]
    ends = starts + merged[:, None]
    tail = s + quantized * merged  # the remainder's first bin
    last_in = (e - 1 < tail)  # p's last bin is in the last quantized bin, else in the remainder
    sums = counts[ends] - counts[starts]
    quantized_sums = sums.copy()
    quantized_sums[:, -1] += counts[e] - counts[tail]
    norm = nonzero[ends] - nonzero[starts]
    norm[:, 0] += (first != 0) & (h[s] == 0)
    norm[:, -1] += last_in & (last != 0) & (h[e - 1] == 0)
    level = np.where(norm > 0, quantized_sums // np.maximum(norm, 1), 0)
    p_sums = sums
    p_sums[:, 0] += left
    p_sums[:, -1] += np.where(last_in, right, 0)
    a_sums = p_sums - eps_p[:, None] * norm + EPS * (merged[:, None] - norm)
    rest = size - quantized * merged
    nnz_rest = nonzero[e] - nonzero[tail] + np.where(last_in, 0, (last != 0) & (h[e - 1] == 0))
    a_rest = counts[e] - counts[tail] + np.where(last_in, 0, right) - eps_p * nnz_rest + EPS * (rest - nnz_rest)
    zeros_q = merged * (level == 0).sum(axis=1) + rest
    eps_q = EPS * zeros_q / np.maximum(size - zeros_q, 1)
    with np.errstate(divide="ignore", invalid="ignore"):
        b = np.where(level > 0, level - eps_q[:, None], EPS)
        t2 = (a_sums * np.log(b)).sum(axis=1) + a_rest * np.log(EPS)
        total, q_total = counts[n], merged * level.sum(axis=1)
        kl = (t1 - t2) / total - np.log(total) + np.log(q_total)
    kl = np.where((q_total > 0) & (total > 0), kl, np.inf)
    best = int(np.argmin(kl))
    low_t, high_t = edges[s[best]], edges[e[best]]
    if low_t < low:
        low_t = low
    if high_t > high:
        high_t = high
    return np.asarray(low_t, dtype=edges.dtype), np.asarray(high_t, dtype=edges.dtype)


TERMS = 12  # of the series below: eps_p ≤ EPS × 2048 ≈ 0.2 and bins hold ≥ 1, so the next term is < 1e-11 of a bin


def _prefix(values: np.ndarray) -> np.ndarray:
    return np.concatenate(([0], np.cumsum(values, dtype=np.float64 if values.dtype == np.float64 else np.int64)))


def _xlogx(x: np.ndarray, where: np.ndarray) -> np.ndarray:
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(where, x * np.log(np.where(where, x, 1.0)), 0.0)


def _shifted_xlogx(h: np.ndarray, start: np.ndarray, end: np.ndarray, eps: np.ndarray) -> np.ndarray:
    """Σ (h − eps) log(h − eps) over the non-zero bins h[start:end], for each row's eps at once: the Taylor
    series h log h − eps (log h + 1) + Σ_k eps^k / (k (k − 1) h^(k − 1)), each sum a prefix sum over the bins."""
    nz = h != 0
    safe = np.where(nz, h, 1.0)
    log = np.where(nz, np.log(safe), 0.0)
    window = lambda v: (c := _prefix(v))[end] - c[start]  # noqa: E731
    out = window(np.where(nz, h * log, 0.0)) - eps * (window(log) + window(nz.astype(np.float64)))
    power = np.where(nz, 1.0, 0.0)
    for k in range(2, TERMS + 1):
        power = power / safe
        out += eps ** k / (k * (k - 1)) * window(power)
    return out
