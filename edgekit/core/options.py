"""Reading KEY=VALUE options one way, whether they come as the command line's text (`--budget cosine=0.99`)
or as the mapping the Python API and check configs take ({"cosine": 0.99}): the parsers of budgets,
thresholds, output kinds and kept layers read (key, value) pairs from here, so no caller turns a mapping
back into text."""

from __future__ import annotations

from collections.abc import Mapping


def key_values(items, *, last: bool = False) -> list[tuple[str, object]]:
    """(key, value) pairs of `items`, keys stripped: a mapping's items as they are, or each text item split
    at its first `=` (its last with `last`); a text item without `=` has the value None."""
    if isinstance(items, Mapping):
        return [(str(k).strip(), v) for k, v in items.items()]
    pairs = []
    for item in items:
        key, sep, value = str(item).rpartition("=") if last else str(item).partition("=")
        pairs.append((key.strip(), value.strip()) if sep else (str(item).strip(), None))
    return pairs


def number(value) -> float:
    """A number given as text or as a number (not a bool); ValueError otherwise."""
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        raise ValueError(value)
    return float(value)
