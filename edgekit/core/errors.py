"""The two error families: user errors carry an exit code and a fix; anything else is a bug."""

from __future__ import annotations

import contextlib
import errno
import re
from typing import Iterator

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

    def __reduce__(self):  # pickled as it reads (a worker process's error reaches the parent whole)
        return _rebuilt, (type(self), self.message, self.fix, dict(self.__dict__))


def _rebuilt(cls, message: str, fix: str | None, attributes: dict) -> EdgekitError:
    error = cls.__new__(cls)
    Exception.__init__(error, message)
    error.__dict__.update(attributes, message=message, fix=fix)
    return error


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


# OS errors that say the environment, not edgekit, stopped the work: each is a usage error (exit 2).
_ENVIRONMENT_ERRNOS = {
    errno.ENOSPC: ("no space left on the device", "free some space, or give --out on another disk"),
    errno.EDQUOT: ("the disk quota is exhausted", "free some space, or give --out on another disk"),
    errno.EACCES: ("permission denied", "choose a path you can write to, or fix its permissions"),
    errno.EPERM: ("operation not permitted", "choose a path you can write to, or fix its permissions"),
    errno.EROFS: ("the file system is read-only", "choose a writable path"),
    errno.ENAMETOOLONG: ("the path is too long", "use a shorter path"),
}


def environment_error(e: BaseException) -> BadInput | None:
    """A BadInput for an OSError the environment caused (full disk, no permission, a path too long), naming
    the file; None for any other exception. Looks through chained causes, as converters wrap errors."""
    seen = 0
    while e is not None and seen < 16:
        if isinstance(e, OSError) and e.errno in _ENVIRONMENT_ERRNOS:
            what, fix = _ENVIRONMENT_ERRNOS[e.errno]
            where = (" writing " if e.errno in (errno.ENOSPC, errno.EDQUOT) else ": ") + str(e.filename) if e.filename else ""
            return BadInput(f"{what}{where}", fix=fix)
        e, seen = e.__cause__ or e.__context__, seen + 1
    return None


@contextlib.contextmanager
def reading(path, what: str, fix: str | None = None) -> Iterator[None]:
    """Turn whatever a reader raises on a damaged or unreadable file into BadInput naming the file.

    Wrap only the call that parses `path` (numpy, a flatbuffer or protobuf reader, an unzipper): any
    exception such a reader raises on bytes it cannot make sense of — BadZipFile, zlib.error,
    struct.error, UnicodeDecodeError, an IndexError deep in a flatbuffer — means the file is damaged,
    and the user's fix is the same: give an intact file.
    """
    try:
        yield
    except EdgekitError:
        raise
    except MemoryError:
        raise BadInput(f"cannot read {what} {path}: it claims more memory than there is (damaged?)",
                       fix=fix or "give an intact file") from None
    except OSError as e:
        env = environment_error(e)
        if env is not None:
            raise BadInput(f"cannot read {what} {path}: {env.message}", fix=env.fix) from None
        raise BadInput(f"cannot read {what} {path}: {_kind(e)}: {first_line(e)}",
                       fix=fix or "give an intact file") from None
    except Exception as e:
        raise BadInput(f"cannot read {what} {path}, it is damaged or of another kind: {_kind(e)}: {first_line(e)}",
                       fix=fix or "give an intact file (re-save or re-copy it)") from None


def _kind(e: BaseException) -> str:
    """`struct.error`, `zipfile.BadZipFile`, `ValueError`: the exception's type as a reader would look it up."""
    module = type(e).__module__
    return type(e).__qualname__ if module == "builtins" else f"{module.rsplit('.', 1)[-1]}.{type(e).__qualname__}"
