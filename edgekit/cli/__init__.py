"""The command line: `edgekit convert | graph | demo`. Parses, calls the library, renders."""

from edgekit.cli.app import app, main

__all__ = ["app", "main"]
