"""Elapsed-time progress while the accountant works (issue 11: "when the accountant works longer than ~0.5 s,
the cell and the live panel say so").

:class:`Ticker` is a context manager around the accounting step of a query (the overlap admission and the
ledger charge — public computations, before any data is read).  If the step lasts longer than ``delay``
seconds, a daemon thread calls ``callback(elapsed)`` every ``every`` seconds until it ends, then once more
with ``done=True`` semantics left to the caller (the session emits ``charged`` / ``refused`` anyway).  The
searches hold the GIL only between bytecodes and HiGHS / numpy release it, so the ticks arrive on time; a
callback's exception is swallowed (a display problem never affects accounting).  One daemon thread of the process
(:class:`_Clock`) ticks every running ticker: entering and leaving one costs a lock and a notify, not a thread
start and join (issue 28: that was about 0.4 ms of every query); leaving one waits for its callback in flight, so
no tick follows the block.

:func:`terminal_progress` is the listener used where no widget frontend exists (terminal IPython): one line
on stderr, rewritten in place (``\\r``), cleared when the step ends.
"""

from __future__ import annotations

import contextlib
import math
import os
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
        #: held while a tick runs; the block's end takes it, so that no tick runs after the block ended
        self._calling = threading.Lock()
        self._stopped = False
        self._t0 = 0.0

    def _tick(self) -> None:
        """One tick (on the clock's thread), then the next one scheduled, unless the block has ended."""
        with self._calling:
            if self._stopped:
                return
            self.ticks += 1
            with contextlib.suppress(Exception):
                self.callback(time.perf_counter() - self._t0)
            _CLOCK.add(self, time.perf_counter() + self.every)

    def __enter__(self) -> Ticker:
        self._t0 = time.perf_counter()
        self._stopped = False
        _CLOCK.add(self, self._t0 + self.delay)
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        with self._calling:  # waits for a tick in flight
            self._stopped = True
        _CLOCK.remove(self)


class _Clock:
    """The one daemon thread that runs the ticks of every :class:`Ticker` of the process, each when it is due.

    Started on first use (again in a forked child: :func:`os.register_at_fork`).  Lock order: a ticker's
    ``_calling`` lock may be held while the clock's is taken, never the reverse (ticks run outside the clock's
    lock).
    """

    def __init__(self) -> None:
        self._cond = threading.Condition(threading.Lock())
        self._due: dict[Ticker, float] = {}
        self._thread: threading.Thread | None = None
        #: when the waiting thread wakes up next (-inf while it is not waiting: it looks at every due time
        #: before it waits again); a ticker due later needs no notify, so a short step never wakes the thread
        self._wake = -math.inf

    def add(self, ticker: Ticker, due: float) -> None:
        """Run ``ticker._tick()`` at ``due`` (``time.perf_counter()`` time)."""
        with self._cond:
            self._due[ticker] = due
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._run, name="dpmagic-progress", daemon=True)
                self._wake = -math.inf
                self._thread.start()
            elif due < self._wake:
                self._cond.notify()

    def remove(self, ticker: Ticker) -> None:
        with self._cond:
            self._due.pop(ticker, None)

    def _run(self) -> None:
        while True:
            with self._cond:
                now = time.perf_counter()
                ready = [t for t, due in self._due.items() if due <= now]
                if not ready:
                    self._wake = min(self._due.values()) if self._due else math.inf
                    self._cond.wait(self._wake - now if self._due else None)
                    self._wake = -math.inf
                    continue
                for t in ready:  # each is scheduled again by its own tick
                    del self._due[t]
            for t in ready:
                t._tick()


_CLOCK = _Clock()


def _reset_clock() -> None:  # pragma: no cover - runs in a forked child
    global _CLOCK
    _CLOCK = _Clock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_reset_clock)


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
