"""Child-process entry point: the inspection of one artifact file, which may be damaged or hostile.

    python -m edgekit.targets.inspect_child FORMAT ARTIFACT OUT.json

Writes {"inspection": ...} (edgekit.targets.inspection.Inspection as JSON), or {"error": {"message",
"fix"}} when the reader cannot make sense of the file. A native crash in a reader ends only this process.
"""

from __future__ import annotations

import json
import sys

from edgekit.core.errors import EdgekitError, reading
from edgekit.core.process import die_with_parent
from edgekit.core.quiet import captured
from edgekit.targets.inspection import inspect_artifact


def main(argv: list[str]) -> int:
    die_with_parent()
    fmt, path, out_path = argv
    try:
        with reading(path, f"the .{fmt} artifact"), captured():
            doc = {"inspection": inspect_artifact(fmt, path).to_json(everything=True)}
    except EdgekitError as e:
        doc = {"error": {"message": e.message, "fix": e.fix}}
    with open(out_path, "w") as f:
        json.dump(doc, f)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
