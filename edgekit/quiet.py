"""Keep converters' and runtimes' own chatter off stdout (which may carry JSON) and off the terminal."""

from __future__ import annotations

import contextlib
import os
import sys
import tempfile
from typing import Iterator


@contextlib.contextmanager
def captured() -> Iterator[list[str]]:
    """Send everything written to file descriptors 1 and 2 to a log while the block runs.

    The yielded list receives the log's text when the block ends (also on error), so a failure
    can quote what the library said.
    """
    sink: list[str] = []
    sys.stdout.flush()
    sys.stderr.flush()
    saved = os.dup(1), os.dup(2)
    with tempfile.TemporaryFile(mode="w+b") as log:
        os.dup2(log.fileno(), 1)
        os.dup2(log.fileno(), 2)
        try:
            yield sink
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os.dup2(saved[0], 1)
            os.dup2(saved[1], 2)
            os.close(saved[0])
            os.close(saved[1])
            log.seek(0)
            sink.append(log.read().decode("utf-8", "replace"))


@contextlib.contextmanager
def temp_files_in(folder) -> Iterator[None]:
    """Libraries called inside the block put their temporary files (tempfile's default folder)
    in `folder`, which edgekit removes after each run: nothing is left outside --out."""
    saved = tempfile.tempdir
    tempfile.tempdir = str(os.path.abspath(folder))
    try:
        yield
    finally:
        tempfile.tempdir = saved
