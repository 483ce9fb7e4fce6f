"""The command line: `edgekit convert | check | report | layers | graph | cache | demo`. Parses, calls the
library, renders."""

from edgekit.cli.app import app, main

__all__ = ["app", "main"]
