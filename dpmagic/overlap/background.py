"""A second core for the overlap engine: pending terms of γ solved in a worker process (issue 28).

An admission's region search must finish before its cell answers, so it runs in the kernel, capped
(:mod:`.engine`, graceful degradation).  What it leaves behind — a *pending term* of γ's upper bound, the proven
interval of ``w_k + max load over box_k`` among the nodes registered before k — is a fixed, historical problem: it
never changes as later queries arrive, so it can be solved anywhere, at any time, and its result applied whenever it
comes back.  Before this module the engine re-tightened terms on the kernel's own core, ``retighten_seconds`` per
commit; the drill-down sessions' regions need 0.2–2 s of search or HiGHS each, so their terms were seldom closed and
γ's slack stayed (1.23 on the drill-down variant, session 13).

:class:`BackgroundSolver` is one worker process (started lazily: a fresh interpreter on a socket pair, stopped at exit) shared by every engine of the
Python process, one problem at a time.  A task is a self-contained problem: the schema, the boxes and weights of
the term's nodes (those registered before k that meet its box; the whole set for the global term of a bulk load),
the box, the proven hint and floor, the per-node terms and a time limit.  The worker encodes it once and keeps the
encoded problem with its paused scoped search (:func:`~.maxoverlap.solve_overlap` ``resume``) under the task's key,
so a later try of the same term continues where the last one stopped (only the key and the new limits are sent
again); it keeps ``KEEP`` such problems, the most recently used.

Soundness needs nothing new: the worker runs the same :func:`~.maxoverlap.solve_overlap` on the same problem, whose
``upper`` is proven (exact search, frontier, dual bound with margins, hint) and whose witness is checked again in the
kernel (its load among the engine's nodes, computed there, is the lower bound used).  Only query boxes — public,
analyst-written predicates over the declared domain — cross the process boundary, never data.  A failed worker
(an exception, a crash) yields "no result": the term stays as it was, proven.

Cost in the kernel: building a task (the term's boxes, pickled once per term) and a non-blocking poll of a pipe.
Used only where the machine has a second core (:func:`BackgroundSolver.available`).
"""

from __future__ import annotations

import atexit
import contextlib
import math
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import weakref
from collections import OrderedDict
from dataclasses import dataclass
from multiprocessing.connection import Connection
from typing import Any

import numpy as np

__all__ = ["BackgroundSolver", "RegionTask", "TaskResult", "default_solver", "start_pump", "KEEP"]

#: encoded problems (with their paused searches) the worker keeps, the most recently used
KEEP = 4
#: the memory those paused searches may hold in all (bytes; as the kernel's ``RESUME_MAX_BYTES``: a paused search
#: holds up to ≈ 100 MB on the largest instances; red team 14)
HELD_MAX_BYTES = 64 * 2**20
#: restarts of a worker that died before the solver gives up (and the engines re-tighten in the kernel again)
MAX_RESTARTS = 3
#: finished results kept for their engines (an engine dropped with a task in flight never collects its result)
KEEP_DONE = 16
#: a task not answered within ``OVERDUE_FACTOR`` × its time limit + ``OVERDUE_SECONDS`` (wall clock, kernel side)
#: is given up: the worker is stopped as a dead one (a search that overran its limit, a stopped process), else the
#: engine would wait for it for good — and, its problem "in the worker", never re-tighten in the kernel either
OVERDUE_FACTOR = 2.0
OVERDUE_SECONDS = 30.0
#: the worker's thread pools: one thread each (OpenBLAS, OpenMP, MKL, numexpr)
WORKER_THREADS_ENV = {
    name: "1" for name in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS", "NUMEXPR_NUM_THREADS")
}


@dataclass(frozen=True)
class RegionTask:
    """One pending term's problem: ``max over x in region of Σ weights[i] [x in boxes[i]]``, needed only above
    ``floor`` (``boxes`` None: the worker holds this ``key``'s problem from an earlier try; ``region`` None: the
    whole domain, a bulk load's global term)."""

    key: tuple[Any, ...]
    schema: Any
    boxes: list[Any] | None
    weights: np.ndarray | None
    terms: np.ndarray | None
    region: Any
    upper_hint: float
    floor: float
    time_limit: float
    config: Any


@dataclass(frozen=True)
class TopTask:
    """A top set of the engine's nodes ``[0, base + len(boxes))`` (:func:`~.topset.enumerate_top`, cells above
    ``threshold``, at most ``cap``).  The worker keeps the engine's nodes between top tasks (key ``(token,
    "top-store")``): ``boxes`` and ``weights`` are the nodes from ``base`` on (``base`` 0: all of them; a worker
    holding other than ``base`` nodes answers ``missing``)."""

    key: tuple[Any, ...]
    schema: Any
    base: int
    boxes: list[Any]
    weights: np.ndarray
    threshold: float
    cap: int
    time_limit: float
    #: the scoped search's size limits (the engine's ``PortfolioConfig.scoped_max_atoms`` / ``scoped_max_columns``)
    max_atoms: int
    max_columns: int


@dataclass(frozen=True)
class TaskResult:
    """The worker's answer to the task with ``key``: a proven ``upper`` bound of the region's maximum load and the
    witness row it found (``missing``: the worker no longer held the key's problem; send it again).  The engine
    applies it only to the term of that key (red team 14: an answer is never taken on its task id alone)."""

    key: tuple[Any, ...]
    upper: float
    witness: dict[str, Any] | None
    missing: bool = False
    #: a :class:`TopTask`'s answer (:class:`~.topset.TopCells`; None: it timed out or the problem did not fit)
    cells: Any = None


def _solve_top(task: TopTask, held: OrderedDict[tuple[Any, ...], tuple[Any, dict[str, Any], Any]]) -> TaskResult:
    from dpmagic.overlap.encoding import BoxStore
    from dpmagic.overlap.topset import enumerate_top

    skey = (task.key[0], "top-store")
    got = held.pop(skey, None)
    if task.base:
        if got is None or got[0].n != task.base:
            return TaskResult(task.key, math.inf, None, missing=True)
        store = got[0]
    else:
        store = BoxStore(task.schema)
    store.extend(task.boxes, task.weights)  # (a failure leaves the store out of ``held``: sent again from 0)
    held[skey] = (store, {}, None)
    while len(held) > KEEP:
        held.popitem(last=False)
    cells = enumerate_top(
        store, task.threshold, time.perf_counter() + task.time_limit, cap=task.cap, max_atoms=task.max_atoms,
        max_columns=task.max_columns,
    )  # fmt: skip
    if cells is None:
        return TaskResult(task.key, math.inf, None)
    witness = cells.rows[0] if cells.rows else None
    return TaskResult(task.key, cells.upper, witness, cells=cells)


def _solve(
    task: RegionTask | TopTask, held: OrderedDict[tuple[Any, ...], tuple[Any, dict[str, Any], Any]]
) -> TaskResult:
    if isinstance(task, TopTask):
        return _solve_top(task, held)
    from dpmagic.overlap.encoding import BoxStore
    from dpmagic.overlap.maxoverlap import solve_overlap
    from dpmagic.overlap.scoped import scoped_state_nbytes

    if task.boxes is None:
        if task.key not in held:
            return TaskResult(task.key, math.inf, None, missing=True)
        held.move_to_end(task.key)
        store, resume, terms = held[task.key]
    else:
        store = BoxStore(task.schema)
        assert task.weights is not None
        store.extend(task.boxes, task.weights)
        resume = {}
        terms = task.terms
        held[task.key] = (store, resume, terms)
        while len(held) > KEEP:
            held.popitem(last=False)
    r = solve_overlap(
        store, None, region=task.region, time_limit=task.time_limit, upper_hint=task.upper_hint,
        floor=task.floor, config=task.config, terms=terms, resume=resume,
    )  # fmt: skip
    if r.exact or resume.get("search") is None:  # nothing left to continue: the problem need not be held
        held.pop(task.key, None)
    used = 0
    for key in reversed(list(held)):  # the most recently used first; a problem beyond the bytes is sent again
        size = scoped_state_nbytes(held[key][1])
        if used + size > HELD_MAX_BYTES:
            del held[key]
        else:
            used += size
    return TaskResult(task.key, float(r.upper), None if r.witness is None else dict(r.witness))


def _main(fd: int) -> None:  # pragma: no cover - runs in the worker process
    """The worker's entry point: serve tasks on the socket ``fd`` until it closes (an interrupt meant for the
    kernel is ignored: the worker ends when the kernel's end of the socket closes)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    _worker(Connection(fd))


def _worker(conn: Any) -> None:  # pragma: no cover - runs in the worker process
    held: OrderedDict[tuple[Any, ...], tuple[Any, dict[str, Any], Any]] = OrderedDict()
    while True:
        try:
            msg = conn.recv()
        except (EOFError, OSError):
            return
        if msg is None:
            return
        tid, task = msg
        try:
            out: TaskResult | None = _solve(task, held)
        except Exception:  # noqa: BLE001 - no result: the term stays as it was (proven)
            held.pop(task.key, None)
            out = None
        try:
            conn.send((tid, out))
        except (BrokenPipeError, OSError):
            return


def _python() -> str:
    """The interpreter to run the worker with: multiprocessing's choice (``sys.executable``, unless an embedding
    host such as uWSGI set another with ``multiprocessing.set_executable``)."""
    from multiprocessing import spawn

    exe = spawn.get_executable()
    return os.fsdecode(exe) if exe else sys.executable


class BackgroundSolver:
    """One worker process solving :class:`RegionTask` s one at a time (module docstring).

    ``submit`` returns a task id (None while the worker is busy or broken); ``result(tid)`` is ``(False, None)``
    while it runs, then ``(True, TaskResult | None)`` once (None: the task failed).  Thread-safe (one lock: the
    server's thread pool runs several data sets' accountants, which share the process's solver).  Its process is
    the one that started it: after ``os.fork()`` the child forgets the parent's worker (never writes to its socket,
    reads its answers or stops it) and starts its own when needed (red team 14).
    """

    def __init__(self) -> None:
        self._lock = threading.RLock()
        self._pid = os.getpid()
        self._proc: Any = None
        self._conn: Any = None
        self._next = 0
        self._busy: int | None = None
        self._deadline = math.inf
        self._done: dict[int, TaskResult | None] = {}
        self._restarts = 0
        self._atexit = False
        self.broken = False

    def _owned(self) -> threading.RLock:
        """This process's lock, after forgetting a worker inherited through ``os.fork()`` (the child's copy of the
        socket is closed — the parent's stays open — and the parent's process is neither waited for nor killed)."""
        if self._pid != os.getpid():
            self._lock = threading.RLock()  # (the parent's may have been held by another thread at the fork)
            self._pid = os.getpid()
            if self._conn is not None:
                with contextlib.suppress(OSError):
                    self._conn.close()
            self._proc = self._conn = None
            self._busy = None
            self._done = {}
            self._restarts = 0
        return self._lock

    @staticmethod
    def available() -> bool:
        """Whether a second core is there to use (the worker would only slow a one-core kernel)."""
        try:
            cores = len(os.sched_getaffinity(0))
        except AttributeError:  # pragma: no cover - not Linux
            cores = os.cpu_count() or 1
        return cores >= 2

    def _start(self) -> bool:
        if self.broken:
            return False
        if self._proc is not None and self._proc.poll() is None:
            return True
        if self._proc is not None:
            self._restarts += 1
            if self._restarts > MAX_RESTARTS:
                self.broken = True
                return False
        # a fresh interpreter running this module (not multiprocessing's spawn, which would re-run the caller's
        # ``__main__``, e.g. an analyst's unguarded script): the two ends of a socket pair carry pickled messages
        mine, theirs = socket.socketpair()
        pkg_root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join([pkg_root] + [p for p in [env.get("PYTHONPATH")] if p])
        # the worker is one core: a BLAS thread pool of two would spin against the kernel on the other one
        # (measured, 2-core VM, session 18: a top set of 10,001 nodes took 1.8 s with the kernel idle, 8.4 s with
        # the kernel running Python, 2.0 s with one BLAS thread)
        env.update(WORKER_THREADS_ENV)
        try:
            proc = subprocess.Popen(
                [_python(), "-c", f"import dpmagic.overlap.background as b; b._main({theirs.fileno()})"],
                pass_fds=(theirs.fileno(),), stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL, env=env, close_fds=True, start_new_session=True,
            )  # fmt: skip
        except (OSError, ValueError):  # (no pass_fds on Windows: the kernel re-tightens by itself there)
            mine.close()
            theirs.close()
            self.broken = True
            return False
        theirs.close()
        self._proc, self._conn = proc, Connection(mine.detach())
        if not self._atexit:
            atexit.register(self.close)
            self._atexit = True
        return True

    def idle(self) -> bool:
        """Whether a task can be submitted now (collecting a finished one first)."""
        with self._owned():
            self._poll()
            return self._busy is None and not self.broken

    def submit(self, task: RegionTask | TopTask) -> int | None:
        """Send ``task`` to the worker; its id, or None when the worker is busy or cannot run (or the task cannot be
        pickled: then nothing was sent and the worker stays)."""
        with self._owned():
            if not self.idle():
                return None
            try:
                if not self._start():
                    return None
            except Exception:  # noqa: BLE001 - no worker (e.g. no interpreter to run): the kernel re-tightens
                self.broken = True
                return None
            tid = self._next
            self._next += 1
            try:
                self._conn.send((tid, task))
            except (BrokenPipeError, OSError):
                self._lost()
                return None
            except Exception:  # noqa: BLE001 - not picklable: pickled before anything is written, so nothing was sent
                return None
            except BaseException:  # an interrupt in the middle of a message: the worker would read the next one as
                self._lost()  # its rest; it is stopped instead
                raise
            self._busy = tid
            self._deadline = time.monotonic() + OVERDUE_FACTOR * float(task.time_limit) + OVERDUE_SECONDS
            return tid

    def result(self, tid: int) -> tuple[bool, TaskResult | None]:
        """``(done, result)`` of task ``tid`` (a done result is handed out once)."""
        with self._owned():
            self._poll()
            if tid in self._done:
                return True, self._done.pop(tid)
            if tid == self._busy:
                return False, None
            return True, None  # unknown (a lost worker's task, or one from before a fork): no result

    def wait(self, tid: int, timeout: float) -> bool:
        """Wait up to ``timeout`` seconds for task ``tid`` to finish; whether it has (its result stays for
        :meth:`result`)."""
        with self._owned():
            if tid == self._busy and self._conn is not None:
                try:
                    self._conn.poll(timeout)
                except (EOFError, OSError):
                    self._lost()
            self._poll()
            return tid != self._busy

    def _poll(self) -> None:
        if self._conn is None:
            return
        try:
            while self._conn.poll():
                tid, out = self._conn.recv()
                self._done[tid] = out
                while len(self._done) > KEEP_DONE:  # the oldest: an abandoned task's (its engine is gone)
                    del self._done[next(iter(self._done))]
                if tid == self._busy:
                    self._busy = None
        except Exception:  # noqa: BLE001 - EOF, a broken socket, an answer that does not unpickle: the worker is lost
            self._lost()
            return
        except BaseException:  # an interrupt in the middle of a message: the stream is out of step for good
            self._lost()
            raise
        if self._busy is not None and time.monotonic() > self._deadline:
            self._lost()  # overdue: no result (the next submission starts another worker, up to MAX_RESTARTS)

    def _lost(self) -> None:
        """The worker died: its task has no result; a later submit starts another (up to ``MAX_RESTARTS``)."""
        if self._busy is not None:
            self._done[self._busy] = None
        self._busy = None
        if self._conn is not None:
            with contextlib.suppress(OSError):
                self._conn.close()
        self._conn = None
        if self._proc is not None and self._proc.poll() is None:
            self._proc.kill()
            self._proc.wait()

    def close(self) -> None:
        """Stop the worker (a running task is abandoned).  In a forked child (its ``atexit``) only the child's own
        worker, never the parent's."""
        with self._owned():
            if self._conn is not None:
                with contextlib.suppress(OSError):
                    self._conn.close()
            if self._proc is not None and self._proc.poll() is None:
                self._proc.kill()
                with contextlib.suppress(subprocess.TimeoutExpired):
                    self._proc.wait(5)
            self._proc = self._conn = None
            if self._busy is not None:
                self._done[self._busy] = None
            self._busy = None


#: how often (seconds) a pump thread gives the worker its next problem and applies its answers
PUMP_INTERVAL = 0.05
#: a pump step acts only when its owner has been idle this long (seconds since ``owner.last_active``): back to back,
#: the pump's steps took kernel CPU between queries (held-out CPU p50 15 → 21 ms, measured session 14) while the
#: commits fed the worker anyway; between cells, the pump is what keeps the worker busy
PUMP_IDLE = 0.25


#: held by a pump for each step (around its owner's lock) and by :func:`os.fork` (``register_at_fork``): a forked
#: child never inherits an owner's lock held by a pump thread, which does not exist there (the child's first use of
#: that lock would wait forever)
_PUMP_GATE = threading.RLock()  # (re-entrant: a fork inside a step, e.g. a host's preexec_fn, cannot wait for itself)
if hasattr(os, "register_at_fork"):
    os.register_at_fork(
        before=_PUMP_GATE.acquire, after_in_parent=_PUMP_GATE.release, after_in_child=_PUMP_GATE.release
    )


def start_pump(owner: Any, interval: float = PUMP_INTERVAL) -> threading.Thread:
    """A daemon thread that keeps the worker busy while the kernel is idle (between cells).

    Without it the worker gets a problem only when an engine commits (one per cell), so an analyst reading an answer
    leaves it idle after one try.  Every ``interval`` seconds the thread takes ``owner.lock`` *without blocking* (a
    busy owner is skipped: the kernel's own work always comes first) and calls ``owner.background_step()``, which
    applies a finished answer and sends the next problem (:meth:`~.engine.OverlapEngine.background_step`).  The
    thread holds ``owner`` only weakly and ends when it is gone, when a step returns False (nothing left for the
    worker: the owner starts another pump when a commit leaves a problem there again), or when a step raises
    (recorded in ``owner.pump_error``: the engines then go on as without it).
    """
    ref = weakref.ref(owner)

    def loop() -> None:
        while True:
            time.sleep(interval)
            o = ref()
            if o is None:
                return
            with _PUMP_GATE:
                if not _pump_step(o):
                    return
            del o

    t = threading.Thread(target=loop, daemon=True, name="dpmagic-overlap-pump")
    t.start()
    return t


def _pump_step(o: Any) -> bool:
    """One step of a pump (under ``_PUMP_GATE``): whether the pump goes on (its owner busy: skipped, it goes on)."""
    if not o.lock.acquire(blocking=False):
        return True
    try:
        if time.monotonic() - getattr(o, "last_active", -math.inf) < PUMP_IDLE:
            return True  # the kernel is asking questions back to back: its own commits feed the worker
        try:
            if o.background_step():
                return True
            # nothing in the worker: the owner starts a pump again when a commit leaves a problem there
        except Exception as exc:  # noqa: BLE001 - the pump stops; the engines work as without it
            o.pump_error = repr(exc)
        # ``owner._pump`` cleared under its lock, so that a commit never sees a pump about to end
        if getattr(o, "_pump", None) is threading.current_thread():
            o._pump = None
        return False
    finally:
        o.lock.release()


_DEFAULT: BackgroundSolver | None = None


def default_solver() -> BackgroundSolver | None:
    """The process's shared solver, or None on a one-core machine (or with ``DPMAGIC_OVERLAP_WORKER=0``)."""
    global _DEFAULT
    if os.environ.get("DPMAGIC_OVERLAP_WORKER", "1") == "0" or not BackgroundSolver.available():
        return None
    if _DEFAULT is None:
        _DEFAULT = BackgroundSolver()
    return _DEFAULT
