"""Child processes that end with the edgekit process that started them."""

from __future__ import annotations

import ctypes
import os
import signal
import sys
import threading
import time


def die_with_parent() -> None:
    """Make this child process exit when the edgekit process that started it dies, even by SIGKILL:
    the kernel's parent-death signal on Linux, and a thread watching the parent id everywhere."""
    parent = os.getppid()
    if sys.platform.startswith("linux"):
        try:
            ctypes.CDLL(None, use_errno=True).prctl(1, int(signal.SIGKILL))  # PR_SET_PDEATHSIG
        except (OSError, AttributeError):
            pass

    def watch():
        while os.getppid() == parent:
            time.sleep(0.5)
        os._exit(1)

    if os.getppid() != parent:  # the parent died before the signal was asked for
        os._exit(1)
    threading.Thread(target=watch, name="edgekit-parent-watch", daemon=True).start()
