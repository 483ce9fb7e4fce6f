"""`edgekit report`: how big every artifact is, and why.

`build` gathers the facts (`build_report(paths)` → `Report`, an `ArtifactSize` per artifact: its files
and bytes, precision, fp32 partner, parameters, weights by dtype, ops, largest tensors); `render` turns
a `Report` into JSON (schema "edgekit.report/1"), Markdown, a self-contained HTML page or the terminal
table. Importing this package imports no framework.
"""

from edgekit.features.report.build import ArtifactSize, Report, build_report
from edgekit.features.report.render import SCHEMA, to_html, to_json, to_json_text, to_markdown, to_rich

__all__ = ["SCHEMA", "ArtifactSize", "Report", "build_report", "to_html", "to_json", "to_json_text", "to_markdown",
           "to_rich"]
