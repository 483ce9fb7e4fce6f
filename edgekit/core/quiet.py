"""Keep converters' and runtimes' own chatter off stdout (which may carry JSON) and off the terminal."""

from __future__ import annotations

import contextlib
import os
import shutil
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
    """Libraries called inside the block, and the processes they start, put their temporary files
    in `folder` (tempfile's default folder and TMPDIR; onnxruntime writes a `.ses` file there when
    imported), which edgekit removes after each run: nothing is left outside --out."""
    saved, saved_env = tempfile.tempdir, os.environ.get("TMPDIR")
    tempfile.tempdir = os.environ["TMPDIR"] = str(os.path.abspath(folder))
    try:
        yield
    finally:
        tempfile.tempdir = saved
        if saved_env is None:
            os.environ.pop("TMPDIR", None)
        else:
            os.environ["TMPDIR"] = saved_env


def private_dir(parent, prefix: str) -> str:
    """A new private folder `<prefix><pid>-<random>` in `parent`. The process id lets a later run tell
    the folders of a process that was killed (SIGKILL, power loss) from those of one still running;
    `sweep` removes the former."""
    sweep(parent, prefix)
    return tempfile.mkdtemp(prefix=f"{prefix}{os.getpid()}-", dir=parent)


def sweep(parent, prefix: str) -> None:
    """Remove the `<prefix><pid>-*` folders in `parent` whose process no longer exists."""
    try:
        names = os.listdir(parent)
    except OSError:
        return
    for name in names:
        pid = name[len(prefix):].partition("-")[0] if name.startswith(prefix) else ""
        if pid.isdigit() and int(pid) != os.getpid() and not _alive(int(pid)):
            shutil.rmtree(os.path.join(parent, name), ignore_errors=True)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    return True


@contextlib.contextmanager
def private_temp() -> Iterator[str]:
    """A private folder in the system's temporary folder for the libraries called inside the block
    (onnxruntime's session file, torch's compile cache), removed at the end: a command without --out
    leaves nothing behind either."""
    folder = private_dir(tempfile.gettempdir(), "edgekit-")
    try:
        with temp_files_in(folder):
            yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)
