"""Elapsed-time progress while the accountant works (issue 11: "when the accountant works longer than ~0.5 s,
the cell and the live panel say so").

:class:`Ticker` is a context manager around the accounting step of a query (the overlap admission and the
ledger charge — public computations, before any data is read).  If the step lasts longer than ``delay``
seconds, a daemon thread calls ``callback(elapsed)`` every ``every`` seconds until it ends, then once more
with ``done=True`` semantics left to the caller (the session emits ``charged`` / ``refused`` anyway).  The
searches hold the GIL only between bytecodes and HiGHS / numpy release it, so the ticks arrive on time; a
callback's exception is swallowed (a display problem never affects accounting).

:func:`terminal_progress` is the listener used where no widget frontend exists (terminal IPython): one line
on stderr, rewritten in place (``\\r``), cleared when the step ends.
"""

from __future__ import annotations

import contextlib
import sys
import threading
import time
from collections.abc import Callable
from types import TracebackType
from typing import Any, TextIO

__all__ = ["Ticker", "terminal_progress", "PROGRESS_DELAY", "PROGRESS_EVERY"]

#: the first tick comes after this many seconds of accounting (shorter steps show nothing)
PROGRESS_DELAY = 0.5
#: then one tick every this many seconds
PROGRESS_EVERY = 0.25


class Ticker:
    """Call ``callback(elapsed_seconds)`` every ``every`` s once ``delay`` s have passed, until the block ends."""

    def __init__(
        self, callback: Callable[[float], None], *, delay: float = PROGRESS_DELAY, every: float = PROGRESS_EVERY
    ) -> None:
        self.callback = callback
        self.delay = delay
        self.every = every
        self.ticks = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._t0 = 0.0

    def _run(self) -> None:
        wait = self.delay
        while not self._stop.wait(wait):
            self.ticks += 1
            with contextlib.suppress(Exception):
                self.callback(time.perf_counter() - self._t0)
            wait = self.every

    def __enter__(self) -> Ticker:
        self._t0 = time.perf_counter()
        self._thread = threading.Thread(target=self._run, name="dpmagic-progress", daemon=True)
        self._thread.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()


def terminal_progress(stream: TextIO | None = None) -> Callable[[str, dict[str, Any]], None]:
    """A session listener writing ``⏳ <message> … 1.2 s`` on one terminal line while the accountant works."""
    shown = [False]

    def listener(kind: str, info: dict[str, Any]) -> None:
        out = stream if stream is not None else sys.stderr
        if kind == "progress":
            msg = info.get("message", "checking the maximum overlap")
            out.write(f"\r⏳ {msg} … {info.get('elapsed', 0.0):.1f} s\x1b[K")
            out.flush()
            shown[0] = True
        elif shown[0] and kind in ("charged", "refused", "failed", "cached"):
            out.write("\r\x1b[K")
            out.flush()
            shown[0] = False

    return listener
