"""A runtime worker: one child process per format, serving run jobs until its parent closes it.

    python -m edgekit.targets.worker FORMAT [MODULE ...]

Each line on standard input is a job (JSON): the artifact's `path`, its `signature` (a JSON file),
`inputs` (an .npz with one array per input name, leading sample axis), where to write the `outputs`
(output_0, output_1, ... with the same leading axis) and a `tmp` folder for the runtime's temporary
files. The answer, on the standard output the worker started with, is `ok` or `error MESSAGE`;
anything the runtime prints goes to standard error. Only the runtime is imported here (for .pte,
the ExecuTorch runtime without its compiler), as the worker starts: a parent starts its workers
before it converts, so the import is done by the time the first artifact arrives. A native crash
ends only this process. The runner of the last few artifacts is kept, so an artifact run twice
(searched on, then verified) loads once. The MODULEs are what the artifacts this worker runs declare
they need beyond the runtime a default app has (a kernel library: edgekit.targets.inspection's runtime
needs); a worker without them runs exactly what a default app can.
"""

from __future__ import annotations

import contextlib
import importlib
import json
import os
import sys
import tempfile
from collections import OrderedDict

import numpy as np

from edgekit.core.process import die_with_parent
from edgekit.core.signature import Signature
from edgekit.targets import by_format, load_runner, runtime_only

KEPT = 4  # runners kept loaded


def main(argv: list[str]) -> int:
    die_with_parent()
    fmt, *needed = argv
    runtime_only(fmt)
    for module in (*by_format(fmt).modules, *needed):  # now, while the parent converts: the first job runs at once
        with contextlib.suppress(ImportError):  # a missing runtime is reported by the first job, with its fix
            importlib.import_module(module)
    answers = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)  # what the runtime prints is not an answer
    runners: OrderedDict = OrderedDict()
    for line in sys.stdin:
        job = json.loads(line)
        try:
            tempfile.tempdir = os.environ["TMPDIR"] = job["tmp"]
            with open(job["signature"]) as f:
                sig = Signature.from_json(json.load(f))
            st = os.stat(job["path"])
            key = (job["path"], st.st_mtime_ns, st.st_size, json.dumps(sig.to_json()))
            if key not in runners:
                runners[key] = load_runner(fmt, job["path"], sig)
                while len(runners) > KEPT:
                    runners.popitem(last=False)
            runners.move_to_end(key)
            run(runners[key], job["inputs"], job["outputs"])
        except Exception as e:  # the runtime refused the artifact or its inputs: say why, serve the next job
            message = " ".join(f"{type(e).__name__}: {e}".split())
            answers.write(f"error {message[:2000]}\n")
            continue
        answers.write("ok\n")
    return 0


def run(runner, in_path: str, out_path: str) -> None:
    with np.load(in_path) as data:
        inputs = {k: data[k] for k in data.files}
    n = len(next(iter(inputs.values())))
    per_sample = [runner.run({k: v[i] for k, v in inputs.items()}) for i in range(n)]
    outputs = {f"output_{j}": np.stack([np.asarray(s[j]) for s in per_sample]) for j in range(len(per_sample[0]))}
    np.savez(out_path, **outputs)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
