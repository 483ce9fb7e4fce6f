"""Child-process entry point: per-layer drift of a quantized artifact against its float counterpart.

    python -m edgekit.targets.layers FORMAT FLOAT QUANTIZED SIGNATURE.json INPUTS.npz LAYERS.json [gains]

Writes the ranked layers (edgekit.core.drift.LayerDrift as JSON), the layer losing the most first; with
`gains`, a backend that can also measures what keeping each layer float gains the outputs, and those
layers come first, the largest gain first.
"""

from __future__ import annotations

import json
import sys

import numpy as np

from edgekit.core.drift import rank, to_json
from edgekit.core.process import die_with_parent
from edgekit.core.signature import Signature
from edgekit.targets import by_format


def main(argv: list[str]) -> int:
    die_with_parent()
    fmt, float_path, quant_path, sig_path, in_path, out_path = argv[:6]
    gains = {"gains": True} if argv[6:] == ["gains"] else {}
    with open(sig_path) as f:
        sig = Signature.from_json(json.load(f))
    with np.load(in_path) as data:
        inputs = {k: data[k] for k in data.files}
    traced, sqnr = by_format(fmt).backend.trace_layers(float_path, quant_path, sig, inputs, **gains)
    with open(out_path, "w") as f:
        json.dump(to_json(rank(traced, sqnr)), f)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
