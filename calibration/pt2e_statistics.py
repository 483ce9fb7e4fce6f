"""One calibration pass for every PT2E calibration method (the tflite-from-torch and executorch targets).

`--calib-method auto` tries minmax, percentile and mse ranges, each without and with bias correction.
Each candidate would prepare the model, run it over the calibration samples and convert it again. A
HistogramObserver keeps what the three methods' observers need: the exact min and max of every value seen
(MinMaxObserver's range) and their histogram (the percentile cut, HistogramObserver's own L2 search for
mse). Here the model is prepared once with a RangeObserver (edgekit.calibration.pt2e) at every activation
and run over the calibration samples once (`collect`); each method's quantized graph is converted from a
copy whose observers give that method's range, once per method, and bias correction is applied to a copy
of that graph (`Statistics.quantized`).

A method's graph made here is the one its own observer would make, with one difference: minmax ignores
infinite values, as HistogramObserver does, where MinMaxObserver would take an infinite range.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from edgekit.calibration import bias_correction, pt2e
from edgekit.calibration.data import SampleSet
from edgekit.core.artifact import ModelArtifact
from edgekit.core.source import TorchSource


@dataclass
class Statistics:
    """A prepared PT2E graph observed once on the calibration samples with RangeObservers, and the quantized
    graphs made from it: one per method, with and without bias correction, each made once."""

    prepared: Any  # the observed GraphModule; never converted itself
    calibration: SampleSet
    input_names: tuple[str, ...]
    fold_quantize: bool
    weights: dict  # bias_correction.float_weights(prepared): what bias correction compares with
    made: dict = field(default_factory=dict)  # (method, bias correction) → quantized GraphModule

    def quantized(self, method: str, correct_biases: bool):
        """The quantized GraphModule of `method` (bias-corrected on the calibration samples if asked), as
        edgekit.calibration.pt2e.quantize would make it with that method's observer; a copy of its own for
        each caller (lowering may change the graph it is given)."""
        return copy.deepcopy(self._made(str(method), bool(correct_biases)))

    def _made(self, method: str, correct_biases: bool):
        key = (method, correct_biases)
        if key not in self.made:
            if correct_biases:
                graph = copy.deepcopy(self._made(method, False))
                names, samples = self.input_names, self.calibration
                bias_correction.correct(graph, self.weights,
                                        (pt2e.sample_args(samples, names, i) for i in range(len(samples))))
            else:
                prepared = copy.deepcopy(self.prepared)
                for observer in prepared.modules():
                    if isinstance(observer, pt2e.range_observer()):
                        observer.method = method
                graph = pt2e.finish(prepared, self.fold_quantize)
            self.made[key] = graph
        return self.made[key]


def collect(module, quantizer, calibration: SampleSet, input_names, *, example_args: tuple, fold_quantize: bool,
            smooth: bool = False) -> Statistics:
    """`module` prepared with `quantizer` (configured with method pt2e.EVERY: RangeObservers) and run over
    `calibration` once (after SmoothQuant, with `smooth`), ready to give every method's quantized graph."""
    prepared = pt2e.observe(module, quantizer, calibration, input_names, example_args=example_args, smooth=smooth)
    return Statistics(prepared, calibration, tuple(input_names), fold_quantize, bias_correction.float_weights(prepared))


def outputs(graph, src: ModelArtifact, samples: SampleSet) -> list[np.ndarray]:
    """The quantized `graph`'s outputs on `samples` in torch (its reference int8 ops: quantize, dequantize,
    float kernels), one sample at a time on one thread, stacked per output as a runtime's are."""
    import torch

    model = TorchSource(src, graph)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        per_sample = [model.run({k: v[i] for k, v in samples.inputs.items()}) for i in range(len(samples))]
    finally:
        torch.set_num_threads(threads)
    return [np.stack([s[j] for s in per_sample]) for j in range(len(per_sample[0]))]
