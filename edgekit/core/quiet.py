"""Keep converters' and runtimes' own chatter off stdout (which may carry JSON) and off the terminal.

`own_output` is where a command's standard error becomes edgekit's alone (unless --verbose or --debug):
every command runs in it (edgekit.cli.app's `handled`). `captured` keeps what a library prints while it
converts or runs out of both streams, whatever the mode. Where the noise comes from, and where it goes:

- native code writing to file descriptor 2: torchao's extension loader ("Failed to load ….so") when torch
  quantization is imported, TensorFlow's and XLA's C++ logs, onnxruntime's default logger, XNNPACK — to
  /dev/null (fd 2 points there; sys.stderr, which edgekit writes with, at the user's stderr);
- Python warnings (torch's pytree FutureWarning, TensorFlow's and Keras' deprecations): ignored;
- Python logging (absl, TensorFlow, torch, onnxruntime's tools, Ray): off below CRITICAL;
- TF_CPP_MIN_LOG_LEVEL=2 (unless set), so TensorFlow, here and in the processes edgekit starts, does not
  log its C++ INFO and WARNING lines at all.

What explains a failure is not lost: a library's exception text is in edgekit's error line, a runtime
worker's stderr (a file of its own) is quoted when it crashes, and should edgekit's own process die of a
fatal signal (a segfault or an abort in native code), Python's fault handler writes the error and the
stack of every thread to the user's standard error.
"""

from __future__ import annotations

import contextlib
import faulthandler
import logging
import os
import shutil
import sys
import tempfile
import threading
import warnings
from multiprocessing import reduction
from typing import Callable, Iterator, TextIO

VERBOSE_ENV = "EDGEKIT_VERBOSE"  # set while a --verbose (or --debug) command runs, for `captured` and workers
QUIET_ENV = {"TF_CPP_MIN_LOG_LEVEL": "2"}

_user_fd: int | None = None  # while `own_output` runs: a descriptor of the user's standard error
_listeners: list[Callable[[bool], None]] = []  # progress displays to finish before edgekit writes anything else
_lock = threading.Lock()


def passing_through() -> bool:
    """--verbose or --debug: third-party warnings, logs and output reach the user's standard error."""
    return bool(os.environ.get(VERBOSE_ENV))


def before_output(finish: Callable[[bool], None]) -> None:
    """Call `finish(ok)` before edgekit next writes to stdout or stderr, or when the command ends (ok False
    on an error): a progress line in the making is completed first. Once."""
    with _lock:
        if finish not in _listeners:
            _listeners.append(finish)


def forget(finish: Callable[[bool], None]) -> None:
    with _lock:
        if finish in _listeners:
            _listeners.remove(finish)


def guarded() -> bool:
    """Inside `own_output`, quiet: nothing but edgekit writes to stderr, and its writes call `before_output`."""
    return _user_fd is not None and not passing_through()


def _finish(ok: bool) -> None:
    with _lock:
        waiting = list(_listeners)
        _listeners.clear()
    for finish in waiting:
        finish(ok)


def plain(stream):
    """`stream` itself, not the announcing wrapper `own_output` puts around sys.stdout and sys.stderr (for a
    progress display, whose own writes must not finish it)."""
    return stream._stream if isinstance(stream, _Announcing) else stream


class _Announcing:
    """sys.stdout or sys.stderr while a command runs: finishes the progress display before edgekit writes."""

    def __init__(self, stream: TextIO):
        self._stream = stream

    def write(self, text: str) -> int:
        if text and _listeners:
            _finish(True)
        return self._stream.write(text)

    def writelines(self, lines) -> None:
        for line in lines:
            self.write(line)

    def __getattr__(self, name):
        return getattr(self._stream, name)


@contextlib.contextmanager
def own_output(verbose: bool) -> Iterator[None]:
    """Run a command with nothing but edgekit's own lines on standard error (see the module's docstring).

    With `verbose`, third-party warnings, logs and output pass through (and `captured` sends what a library
    prints on stdout to stderr instead of a log): EDGEKIT_VERBOSE is set, for the processes edgekit starts
    too. A command run inside another (demo runs convert) keeps the outer one's.
    """
    global _user_fd
    if _user_fd is not None:
        yield
        return
    if verbose:
        saved_env = os.environ.get(VERBOSE_ENV)
        os.environ[VERBOSE_ENV] = "1"
        _user_fd = 2
        try:
            yield
        finally:
            _user_fd = None
            _restore_env({VERBOSE_ENV: saved_env})
        return
    sys.stdout.flush()
    sys.stderr.flush()
    streams = sys.stdout, sys.stderr
    saved_fd, user = os.dup(2), os.dup(2)
    saved_env = {k: os.environ.get(k) for k in (*QUIET_ENV, VERBOSE_ENV)}
    disabled = logging.root.manager.disable
    encoding = getattr(streams[1], "encoding", None) or "utf-8"
    with open(os.devnull, "wb") as log, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        warnings.showwarning = lambda *args, **kwargs: None  # also those a library's own filter lets through
        logging.disable(logging.ERROR)
        os.environ.pop(VERBOSE_ENV, None)
        for k, v in QUIET_ENV.items():
            os.environ.setdefault(k, v)
        os.dup2(log.fileno(), 2)
        _user_fd = user
        sys.stdout = _Announcing(streams[0])
        sys.stderr = _Announcing(open(user, "w", buffering=1, encoding=encoding, errors="backslashreplace",
                                      closefd=False))
        handling_faults = faulthandler.is_enabled()
        faulthandler.enable(plain(sys.stderr), all_threads=True)  # a native crash is told, not sent to /dev/null
        ok = False
        try:
            yield
            ok = True
        finally:
            _finish(ok)
            for stream in (sys.stdout, sys.stderr):
                with contextlib.suppress(Exception):
                    stream.flush()
            faulthandler.disable()
            if handling_faults:
                with contextlib.suppress(Exception):  # a stream without a descriptor (a test's capture)
                    faulthandler.enable(streams[1], all_threads=True)
            sys.stdout, sys.stderr = streams
            os.dup2(saved_fd, 2)
            os.close(saved_fd)
            _user_fd = None  # `user` stays open: a handler a library made meanwhile may still hold sys.stderr
            logging.disable(disabled)
            _restore_env(saved_env)


def _restore_env(saved: dict) -> None:
    for k, v in saved.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v


class UserStderr:
    """The user's standard error, for a process multiprocessing spawns (check's workers), whose fd 2 is
    /dev/null while `own_output` runs. Pickled as the process starts, it gives the child its own descriptor of it."""

    def __init__(self):
        if _user_fd is not None:
            self.fd = _user_fd
        else:
            try:
                self.fd = sys.stderr.fileno()
            except (AttributeError, OSError, ValueError):
                self.fd = 2

    def __reduce__(self):
        return _writer, (reduction.DupFd(self.fd),)


def _writer(handle) -> TextIO:
    return open(handle.detach(), "w", buffering=1, encoding="utf-8", errors="replace", closefd=False)


@contextlib.contextmanager
def captured() -> Iterator[list[str]]:
    """Send everything written to file descriptors 1 and 2 to a log while the block runs; sys.stdout and
    sys.stderr write to them meanwhile (not to the user's stderr that `own_output` gives edgekit).

    The yielded list receives the log's text when the block ends (also on error), so a failure
    can quote what the library said. With --verbose (`passing_through`) nothing is kept back: what the
    library writes to stdout goes to stderr, so stdout still carries only edgekit's output.
    """
    sink: list[str] = []
    sys.stdout.flush()
    sys.stderr.flush()
    saved = os.dup(1), os.dup(2)
    streams = sys.stdout, sys.stderr
    through = passing_through()
    with tempfile.TemporaryFile(mode="w+b") as log:
        os.dup2(2 if through else log.fileno(), 1)
        if not through:
            os.dup2(log.fileno(), 2)
        sys.stdout, sys.stderr = sys.__stdout__ or streams[0], sys.__stderr__ or streams[1]
        try:
            yield sink
        finally:
            for stream in (sys.stdout, sys.stderr):
                with contextlib.suppress(Exception):
                    stream.flush()
            sys.stdout, sys.stderr = streams
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
