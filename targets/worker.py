"""Child-process entry point: run one artifact in its runtime on a batch of samples.

    python -m edgekit.targets.worker FORMAT ARTIFACT SIGNATURE.json INPUTS.npz OUTPUTS.npz [INSPECTION.json]

Inputs hold one array per input name with a leading sample axis; outputs are written as
output_0, output_1, ... with the same leading axis. With a fifth path, the artifact is also
inspected (which weights and kernels are int8). A native crash kills only this process.
"""

from __future__ import annotations

import json
import sys

import numpy as np


def main(argv: list[str]) -> int:
    from edgekit.runners import die_with_parent, load_runner
    from edgekit.signature import Signature

    die_with_parent()
    fmt, path, sig_path, in_path, out_path, *inspection_path = argv
    with open(sig_path) as f:
        sig = Signature.from_json(json.load(f))
    runner = load_runner(fmt, path, sig)
    with np.load(in_path) as data:
        inputs = {k: data[k] for k in data.files}
    n = len(next(iter(inputs.values())))
    per_sample = [runner.run({k: v[i] for k, v in inputs.items()}) for i in range(n)]
    outputs = {f"output_{j}": np.stack([np.asarray(s[j]) for s in per_sample]) for j in range(len(per_sample[0]))}
    np.savez(out_path, **outputs)
    if inspection_path:
        from edgekit.targets.inspection import inspect_artifact

        with open(inspection_path[0], "w") as f:
            json.dump(inspect_artifact(fmt, path).to_json(), f)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
