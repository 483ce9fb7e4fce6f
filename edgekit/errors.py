"""The two error families: user errors carry an exit code and a fix; anything else is a bug."""

from __future__ import annotations

import re

EXIT_OK = 0
EXIT_CHECK_FAILED = 1
EXIT_BAD_INPUT = 2
EXIT_CONVERSION_FAILED = 3
EXIT_MISSING_DEPENDENCY = 4
EXIT_INTERNAL = 70


class EdgekitError(Exception):
    """A user-facing error: one clear line (what, why, how to fix) and an exit code."""

    exit_code = EXIT_BAD_INPUT

    def __init__(self, message: str, *, fix: str | None = None):
        super().__init__(message)
        self.message = message
        self.fix = fix

    def __str__(self) -> str:
        return f"{self.message} — {self.fix}" if self.fix else self.message


class BadInput(EdgekitError):
    """The model, data or command line given cannot be used as it is (exit 2)."""

    exit_code = EXIT_BAD_INPUT


class ConversionFailed(EdgekitError):
    """A converter or a runtime failed on a valid input (exit 3)."""

    exit_code = EXIT_CONVERSION_FAILED

    def __init__(self, message: str, *, fix: str | None = None, converter: str | None = None):
        super().__init__(f"{converter}: {message}" if converter else message, fix=fix)
        self.converter = converter


class MissingDependency(EdgekitError):
    """An optional framework needed for this work is not installed (exit 4)."""

    exit_code = EXIT_MISSING_DEPENDENCY

    def __init__(self, what: str, extra: str, modules: tuple[str, ...] = ()):
        missing = f" (missing: {', '.join(modules)})" if modules else ""
        super().__init__(
            f"{what} needs the '{extra}' extra{missing}",
            fix=f"pip install 'edgekit[{extra}]'",
        )
        self.extra = extra


_ANSI = re.compile(r"\x1b\[[0-9;]*m")


def first_line(e: BaseException) -> str:
    """The first line of an exception's message, without terminal colour codes."""
    text = _ANSI.sub("", str(e)).strip()
    return text.splitlines()[0] if text else type(e).__name__
