"""The overlap engine's second core (issue 28, session 14; :mod:`dpmagic.overlap.background`), against brute force.

Pending terms of γ are solved in a worker process, the largest first, and applied when they come back.  Checked: every bound stays sound at every step (γ ≤ upper, lower ≤ γ, the
witness's load = lower, exact only when equal), the worker's results close γ to the from-scratch value, a dead worker
yields no result and nothing changes, and the worker never re-runs the caller's unguarded ``__main__``.
"""

from __future__ import annotations

import math
import os
import signal
import socket
import subprocess
import sys
import textwrap
from collections import OrderedDict
from pathlib import Path
from typing import Any
from unittest.mock import patch

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from overlap_support import SCHEMA, assert_sound, boxes, brute_max, tri_boxes

from dpmagic.domain.sets import Box
from dpmagic.overlap import OverlapEngine, PortfolioConfig, background, max_overlap
from dpmagic.overlap import engine as engine_module
from dpmagic.overlap.background import BackgroundSolver, RegionTask, default_solver

#: HiGHS alone (a zero time limit stops it on these small instances: every kernel-side result is an interval)
HIGHS = PortfolioConfig(steps=frozenset({"milp"}))
STARVED = dict(solver=HIGHS, quick_time_limit=0.0, hard_time_limit=0.0, near_time_limit=0.0, retighten_seconds=0.0)
weights = st.sampled_from([0.01, 0.037, 0.05, 0.1, 0.083, 0.3, 0.07, 0.5, 1.25])
workloads = st.lists(st.tuples(boxes(), weights), min_size=1, max_size=8)
ROOT = Path(__file__).resolve().parents[1]
#: per admission of the property test: whether it left a problem to the worker (the test checks it happened)
SENT: list[bool] = []
#: ... and whether that problem was a snapshot (every node from scratch, session 18), or a top set standing in for
#: one (session 19)
SNAPS: list[bool] = []
TOPS: list[bool] = []


_tri = tri_boxes


@pytest.fixture(scope="module")
def solver():  # type: ignore[no-untyped-def]
    s = BackgroundSolver()
    yield s
    s.close()


def _drain(eng: OverlapEngine, solver: BackgroundSolver, rounds: int = 40) -> None:
    """Let the worker solve the engine's problems one after another until nothing is pending (or ``rounds``)."""
    for _ in range(rounds):
        if eng._bg_task is None and not eng._bg_submit():
            return
        assert eng._bg_task is not None
        solver.wait(eng._bg_task[0], 30.0)
        eng._bg_collect()


@pytest.mark.parametrize(
    "snapshot_min_terms,top_as_snapshot", [(engine_module.SNAPSHOT_MIN_TERMS, True), (1, True), (1, False)]
)
@given(wl=workloads)
@settings(max_examples=40, deadline=None)
def test_worker_results_keep_every_bound_sound_and_close_gamma(solver, snapshot_min_terms, top_as_snapshot, wl) -> None:  # type: ignore[no-untyped-def]
    """A starved engine (no kernel-side search succeeds) with the worker, after three boxes it cannot close alone: after every admission (a result may be
    applied in it) the bounds are sound; once the worker has solved what is pending γ is exact and equals brute
    force and a from-scratch solve.  Run with the default snapshot rule and with a snapshot (every node from
    scratch, or a top set standing in for it) for every pending term."""
    with (
        patch.object(engine_module, "SNAPSHOT_MIN_TERMS", snapshot_min_terms),
        patch.object(engine_module, "TOP_AS_SNAPSHOT", top_as_snapshot),
    ):
        _property_run(solver, wl)


def _property_run(solver: BackgroundSolver, wl: list[tuple[Box, float]]) -> None:
    eng = OverlapEngine(SCHEMA, charged="exact", background=solver, **STARVED)
    bs: list = []
    ws: list[float] = []
    # three pairwise-overlapping boxes without a common row first: a starved engine cannot close γ on them alone
    for b, w in [(t, 0.5) for t in _tri()] + list(wl):
        eng.add(b, w)
        SENT.append(eng._bg_task is not None)
        SNAPS.append(eng._bg_task is not None and eng._bg_task[1][2] == "snapshot")
        TOPS.append(eng._bg_task is not None and eng._bg_task[1][2] == "top")
        bs.append(b)
        ws.append(w)
        assert_sound(eng.overlap(), bs, ws)
        assert_sound(eng.bounds().overlap, bs, ws)
    _drain(eng, solver)
    g = eng.overlap()
    assert_sound(g, bs, ws)
    assert g.exact
    truth = brute_max(SCHEMA, bs, ws)
    assert math.isclose(g.upper, truth, rel_tol=1e-9, abs_tol=1e-12)
    assert math.isclose(g.upper, max_overlap(bs, ws, SCHEMA).upper, rel_tol=1e-9, abs_tol=1e-12)


def test_the_property_test_exercised_the_worker() -> None:
    """The property test above is only evidence when some of its admissions left a problem to the worker."""
    if SENT:  # (run alone, this test has nothing to check)
        assert sum(SENT) >= 10, f"{sum(SENT)} of {len(SENT)} admissions left a problem to the worker"
        assert sum(SNAPS) >= 5, f"{sum(SNAPS)} of {len(SENT)} admissions left a snapshot to the worker"
        assert sum(TOPS) >= 5, f"{sum(TOPS)} of {len(SENT)} admissions left a top set to the worker"


def test_a_pending_term_is_closed_by_the_worker_and_the_kernel_does_not_retighten(solver) -> None:  # type: ignore[no-untyped-def]
    """Three pairwise-overlapping boxes with no common row (γ = 2 weights, Smith et al. 2022, Prop. 4): starved,
    the third admission leaves γ an interval; the commit hands the problem to the worker instead of re-tightening in
    the kernel; its answer makes γ exact."""
    tri = _tri()
    eng = OverlapEngine(SCHEMA, charged="exact", background=solver, **{**STARVED, "retighten_seconds": 10.0})
    calls: list[float] = []
    real = eng.retighten
    eng.retighten = lambda s: calls.append(s) or real(s)  # type: ignore[method-assign]
    for b in tri:
        eng.add(b, 0.5)
    assert not eng.overlap().exact and eng._bg_task is not None
    assert calls == []  # the worker has it: the kernel spent nothing on it
    _drain(eng, solver)
    g = eng.overlap()
    assert g.exact and math.isclose(g.upper, 1.0)
    assert_sound(g, tri, [0.5, 0.5, 0.5])


def test_a_dead_worker_gives_no_result_and_changes_nothing(solver) -> None:  # type: ignore[no-untyped-def]
    """The worker is stopped (SIGSTOP: it cannot answer) before the problem reaches it, then killed: the task has no
    result and the bounds stay as they were; the next submission starts a new worker, which closes γ."""
    tri = _tri()
    eng = OverlapEngine(SCHEMA, charged="exact", background=solver, **STARVED)
    warm = solver.submit(RegionTask(("warm", 0, False), SCHEMA, tri, [0.5] * 3, None, None, 9.0, 0.0, 5.0, None))
    assert warm is not None and solver.wait(warm, 60.0)
    solver.result(warm)
    os.kill(solver._proc.pid, signal.SIGSTOP)
    for b in tri:
        eng.add(b, 0.5)
    assert eng._bg_task is not None
    before = eng.overlap()
    solver._proc.kill()
    solver._proc.wait()
    assert solver.wait(eng._bg_task[0], 5.0)
    assert eng._bg_collect() is False and eng._bg_task is None
    assert eng.overlap() == before and not before.exact
    _drain(eng, solver)  # a new worker is started, the problem sent again (it was lost with the old one)
    assert eng.overlap().exact and math.isclose(eng.overlap().upper, 1.0)


def test_a_task_the_worker_does_not_hold_is_reported_missing(solver) -> None:  # type: ignore[no-untyped-def]
    region_task = RegionTask(("nobody", 1, False), SCHEMA, None, None, None, None, 1.0, 0.0, 1.0, None)
    tid = solver.submit(region_task)
    assert tid is not None
    assert solver.wait(tid, 30.0)
    done, res = solver.result(tid)
    assert done and res is not None and res.missing


def test_worker_is_off_by_environment_or_on_one_core(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setenv("DPMAGIC_OVERLAP_WORKER", "0")
    assert default_solver() is None
    monkeypatch.setenv("DPMAGIC_OVERLAP_WORKER", "1")
    monkeypatch.setattr(BackgroundSolver, "available", staticmethod(lambda: False))
    assert default_solver() is None


def test_the_worker_does_not_rerun_an_unguarded_main_script(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """An analyst's script without ``if __name__ == "__main__"`` must run once: multiprocessing's spawn would
    re-import it in the worker (it did, in the first version of this module)."""
    script = tmp_path / "analysis.py"
    script.write_text(
        textwrap.dedent(
            f"""
            import sys
            sys.path.insert(0, {str(ROOT / "tests")!r})
            from overlap_support import SCHEMA
            from test_overlap_background import _tri
            from dpmagic.overlap.background import BackgroundSolver, RegionTask
            print("ran", flush=True)
            s = BackgroundSolver()
            tid = s.submit(RegionTask(("k", 0, False), SCHEMA, _tri(), [0.5] * 3, None, None, 9.0, 0.0, 5.0, None))
            s.wait(tid, 60.0)
            done, res = s.result(tid)
            print("result", res.upper, flush=True)
            s.close()
            """
        )
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "tests")])}
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, env=env, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.count("ran") == 1
    assert "result 1.0" in out.stdout


# -- fourteenth red-team pass ----------------------------------------------------------------------------------
def _task(key: str, bs: list[Box]) -> RegionTask:
    """The whole-domain problem of ``bs`` at weight 0.5 each (its answer: 0.5 × their deepest overlap)."""
    return RegionTask((key, 0, False), SCHEMA, bs, [0.5] * len(bs), None, None, 9.0, 0.0, 5.0, None)


def _started() -> BackgroundSolver:
    s = BackgroundSolver()
    warm = s.submit(_task("warm", _tri()))
    assert warm is not None and s.wait(warm, 60.0)
    s.result(warm)
    return s


def _in_child(body) -> int:  # type: ignore[no-untyped-def]
    """Run ``body()`` in a forked child (exit status 0 when it returned, 1 when it raised); the child's exit status."""
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        code = 1
        try:
            body()
            code = 0
        finally:
            os._exit(code)
    return os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])


def test_a_forked_child_does_not_take_its_parents_answer() -> None:
    """After ``os.fork()`` with a task in flight both processes read the same socket: the child (its copy of the
    engine collecting at its next admission) took the parent's answer, and the parent's solver stayed busy for
    good — no engine of the parent had the worker again.  The child must forget the parent's worker."""
    s = _started()
    try:
        tid = s.submit(_task("parent", _tri()))
        assert tid is not None
        assert _in_child(lambda: s.wait(tid, 60.0)) == 0
        assert s.wait(tid, 30.0)
        done, res = s.result(tid)
        assert done and res is not None and math.isclose(res.upper, 1.0)
        assert s.idle()
    finally:
        s.close()


def test_a_forked_child_uses_a_worker_of_its_own() -> None:
    """(Regression, not a finding: the child's submission goes to a new worker, its answer never to the parent.)"""
    s = _started()
    try:
        assert _in_child(lambda: s.submit(_task("child", _tri()[:1]))) == 0  # (it exits without reading its answer)
        tid = s.submit(_task("parent", _tri()))
        assert tid is not None and s.wait(tid, 60.0)
        done, res = s.result(tid)
        assert done and res is not None and res.upper >= 1.0
        assert res.key == ("parent", 0, False)
    finally:
        s.close()


def test_a_forked_child_exiting_does_not_stop_its_parents_worker() -> None:
    """(Regression, not a finding: the child's ``atexit`` — ``close`` — leaves the parent's worker running.)"""
    s = _started()
    try:
        assert _in_child(s.close) == 0
        assert s._proc is not None and s._proc.poll() is None
        tid = s.submit(_task("after", _tri()))
        assert tid is not None and s._restarts == 0
    finally:
        s.close()


def test_an_answer_to_another_problem_is_never_applied(solver) -> None:  # type: ignore[no-untyped-def]
    """Whatever mixes answers up (a shared socket after a fork, two threads racing on the shared solver), the
    engine applies an answer only to the term it was computed for: here the answer of a one-box problem (0.5) is
    filed under the engine's task id, and the bounds stay as they were."""
    eng = OverlapEngine(SCHEMA, charged="exact", background=solver, **STARVED)
    tri = _tri()
    for b in tri:
        eng.add(b, 0.5)
    assert eng._bg_task is not None
    tid = eng._bg_task[0]
    assert solver.wait(tid, 60.0)
    solver.result(tid)  # (its own answer taken away)
    other = solver.submit(_task("other", []))
    assert other is not None and solver.wait(other, 60.0)
    solver._done[tid] = solver.result(other)[1]
    before = eng.overlap()
    eng._bg_collect()
    assert eng.overlap() == before
    assert_sound(eng.overlap(), tri, [0.5] * 3)


def test_an_unpicklable_task_is_not_sent_and_the_worker_stays(solver) -> None:  # type: ignore[no-untyped-def]
    """A task that cannot be pickled raised out of ``submit`` (so out of an engine's ``commit``, after the node was
    registered); now nothing is sent and the worker serves the next task."""
    t = _task("unpicklable", _tri())
    bad = RegionTask(t.key, t.schema, t.boxes, t.weights, None, None, 9.0, 0.0, 5.0, lambda: None)
    assert solver.submit(bad) is None
    tid = solver.submit(_task("fine", _tri()))
    assert tid is not None and solver.wait(tid, 60.0)
    done, res = solver.result(tid)
    assert done and res is not None and math.isclose(res.upper, 1.0)


def test_answers_of_abandoned_tasks_are_not_kept_forever(solver) -> None:  # type: ignore[no-untyped-def]
    """An engine dropped with a task in flight (a reset's new engine, a closed session) never collects its answer:
    the solver keeps only the most recent ones."""
    for i in range(40):
        tid = solver.submit(_task(f"abandoned{i}", _tri()[:1]))
        assert tid is not None and solver.wait(tid, 60.0)
    assert len(solver._done) <= 16


def test_an_overdue_task_is_given_up(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """A worker that never answers (stopped here; a search overrunning its limit alike) kept its task "in flight"
    for good: the engine neither got the worker back nor re-tightened in the kernel.  Past its deadline (here
    zero) the task has no result and the worker is replaced."""
    import dpmagic.overlap.background as bgm

    monkeypatch.setattr(bgm, "OVERDUE_FACTOR", 0.0, raising=False)
    monkeypatch.setattr(bgm, "OVERDUE_SECONDS", 0.0, raising=False)
    s = _started()
    try:
        os.kill(s._proc.pid, signal.SIGSTOP)
        tid = s.submit(_task("stuck", _tri()))
        assert tid is not None
        assert s.result(tid) == (True, None)
        assert s.idle()
        tid = s.submit(_task("next", _tri()))
        assert tid is not None and s.wait(tid, 60.0)
        done, res = s.result(tid)
        assert done and res is not None and math.isclose(res.upper, 1.0)
    finally:
        s.close()


steps = st.lists(st.tuples(st.sampled_from(["add", "stale", "bounds", "answer"]), boxes(), weights), max_size=8)


@pytest.mark.parametrize("snapshot_min_terms", [engine_module.SNAPSHOT_MIN_TERMS, 1])
@given(ops=steps)
@settings(max_examples=30, deadline=None)
def test_interleaved_admissions_bounds_and_answers_stay_sound(solver, snapshot_min_terms, ops) -> None:  # type: ignore[no-untyped-def]
    """Any interleaving of admissions, commits of an admission computed before an answer was applied (recomputed:
    its state is stale), ``bounds()`` and the worker's answers: every bound stays sound against brute force, and
    so does every admission's own bound (what the accountant charged) for the nodes it was computed for.  With the
    default snapshot rule and with a snapshot for every pending term (its answer applied after later admissions)."""
    with patch.object(engine_module, "SNAPSHOT_MIN_TERMS", snapshot_min_terms):
        _interleaved_run(solver, ops)


def _interleaved_run(solver: BackgroundSolver, ops: list[tuple[str, Box, float]]) -> None:
    eng = OverlapEngine(SCHEMA, charged="exact", background=solver, **STARVED)
    bs: list = []
    ws: list[float] = []
    for op, b, w in [("add", t, 0.5) for t in _tri()] + list(ops):
        if op in ("add", "stale"):
            adm = eng.admit(b, w)
            if op == "stale" and eng._bg_task is not None:
                solver.wait(eng._bg_task[0], 30.0)
                eng.bounds()  # the answer is applied: the admission is stale
            eng.commit(adm)
            bs.append(b)
            ws.append(w)
            assert_sound(adm.bounds.overlap, bs, ws)
        elif op == "bounds":
            eng.bounds()
        elif eng._bg_task is not None:
            solver.wait(eng._bg_task[0], 30.0)
            eng._bg_collect()
        assert_sound(eng.overlap(), bs, ws)
        assert_sound(eng.bounds().overlap, bs, ws)
        b_ = eng.bounds(refine=False)
        assert b_.overlap.upper <= b_.clique + 1e-12 <= b_.chromatic + 2e-12 <= b_.sequential + 3e-12


def test_the_worker_holds_at_most_held_max_bytes_of_paused_searches(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """The worker kept ``KEEP`` paused searches whatever their size (up to ≈ 100 MB each on the largest instances,
    where the kernel keeps 64 MB in all): here every search pauses holding 40 MB, and at most 64 MB stay held."""
    import dpmagic.overlap.background as bgm
    import dpmagic.overlap.maxoverlap as mo
    import dpmagic.overlap.scoped as sc
    from dpmagic.overlap.maxoverlap import OverlapResult

    def paused(*args, resume, **kwargs):  # type: ignore[no-untyped-def]
        resume["search"] = "paused"
        return OverlapResult(0.5, 1.5, False, None, (), "scoped")

    monkeypatch.setattr(mo, "solve_overlap", paused)
    monkeypatch.setattr(sc, "scoped_state_nbytes", lambda state: 40 * 2**20 if state and state.get("search") else 0)
    held: OrderedDict = OrderedDict()
    for i in range(4):
        bgm._solve(_task(f"big{i}", _tri()), held)
        assert sum(40 * 2**20 for v in held.values() if v[1].get("search")) <= 64 * 2**20
    assert f"big{3}" in {k[0] for k in held}  # the most recent is kept


def test_a_worker_that_cannot_start_leaves_the_kernel_re_tightening(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """(Regression: an interpreter that exits at once — here ``false``; no dpmagic or numpy on its path alike — is
    a dead worker each time: after ``MAX_RESTARTS`` the solver is broken and the kernel re-tightens by itself; the
    bounds stay sound throughout and nothing blocks.)"""
    import shutil

    false = shutil.which("false")
    if false is None:  # pragma: no cover
        pytest.skip("no `false` here")
    monkeypatch.setattr(background, "_python", lambda: false)
    s = BackgroundSolver()
    try:
        eng = OverlapEngine(SCHEMA, charged="exact", background=s, **STARVED)
        tri = _tri()
        bs: list = []
        for i in range(12):
            b = tri[i % 3]
            eng.add(b, 0.5)
            bs.append(b)
            if eng._bg_task is not None:
                s.wait(eng._bg_task[0], 30.0)
            assert_sound(eng.bounds().overlap, bs, [0.5] * len(bs))
        assert s.broken and s._proc.poll() is not None
        assert s.submit(_task("never", tri)) is None
    finally:
        s.close()


def test_an_interrupt_in_the_middle_of_an_answer_does_not_hang_the_kernel() -> None:
    """^C while the kernel reads an answer (the length and a few bytes read, the rest not) left the socket out of
    step: the next read took pickle bytes for a length and waited for bytes that never come — the kernel hung at
    its next admission, the worker idle.  Now the interrupted solver drops its worker."""
    import threading

    s = _started()
    conn = None
    try:
        tid = s.submit(_task("interrupted", _tri()))
        assert tid is not None
        conn = s._conn
        assert conn.poll(60.0)
        # an offset inside the answer where the next four bytes, read as a length, ask for more than is there
        raw = socket.socket(fileno=os.dup(conn.fileno()))
        try:
            buf = raw.recv(1 << 16, socket.MSG_PEEK)
        finally:
            raw.detach()
        cut = next(
            k for k in range(5, len(buf) - 4) if int.from_bytes(buf[k : k + 4], "big", signed=True) > len(buf) - k - 4
        )

        def interrupted() -> Any:
            conn._recv(cut)  # type: ignore[union-attr]
            raise KeyboardInterrupt

        conn.recv = interrupted  # type: ignore[method-assign]
        with pytest.raises(KeyboardInterrupt):
            s.result(tid)
        del conn.recv
        out: list = []
        t = threading.Thread(target=lambda: out.append(s.result(tid)), daemon=True)
        t.start()
        t.join(60.0)
        assert out == [(True, None)]  # (not hung) no answer: the worker was dropped
        tid = s.submit(_task("after", _tri()))
        assert tid is not None and s.wait(tid, 60.0)
        assert math.isclose(s.result(tid)[1].upper, 1.0)  # type: ignore[union-attr]
    finally:
        s.close()


def test_the_pump_keeps_the_worker_busy_between_cells_and_ends_when_idle(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """An accountant whose charge leaves a problem in the worker starts a pump thread; with nothing else called in
    the kernel (an analyst reading the answer), the pump applies the worker's answers and sends the next problems
    until γ is exact, then ends (and a later charge that needs it starts another)."""
    import time

    from dpmagic.accountant.accountant import Accountant
    from dpmagic.accountant.currency import parse_budget
    from dpmagic.accountant.ledger import Ledger

    solver = BackgroundSolver()
    monkeypatch.setattr("dpmagic.accountant.accountant.default_solver", lambda: solver)
    try:
        acc = Accountant(parse_budget("epsilon=10"), SCHEMA, ledger=Ledger())
        assert acc.engine.background is solver and acc._pump is None
        for name, value in {**STARVED, "display_time_limit": 0.0}.items():
            setattr(acc.engine, name, value)
        tri = _tri()
        for i, b in enumerate(tri):
            acc.charge(b, 0.5, sql=f"q{i}", canonical=f"q{i}")
        assert acc._pump is not None and acc._pump.is_alive()
        pump = acc._pump
        end = time.monotonic() + 60.0
        while time.monotonic() < end and (pump.is_alive() or not acc.engine.overlap().exact):
            time.sleep(0.05)
        assert acc.pump_error is None
        assert not pump.is_alive() and acc._pump is None
        g = acc.engine.overlap()
        assert g.exact and math.isclose(g.upper, 1.0)
        assert_sound(g, tri, [0.5] * 3)
        acc.charge(tri[0], 0.5, sql="q3", canonical="q3")  # γ 1.5 (exact: rows of boxes 0 and 2 twice) or pending
        assert_sound(acc.engine.overlap(), [*tri, tri[0]], [0.5] * 4)
    finally:
        solver.close()


def test_a_pump_ends_with_its_owner() -> None:
    """The pump holds its owner weakly: dropping the owner ends the thread."""
    import gc
    import threading
    import time

    from dpmagic.overlap.background import start_pump

    class Owner:
        def __init__(self) -> None:
            self.lock = threading.RLock()
            self.steps = 0

        def background_step(self) -> bool:
            self.steps += 1
            return True

    o = Owner()
    t = start_pump(o, interval=0.01)
    end = time.monotonic() + 30.0
    while o.steps < 3 and time.monotonic() < end:
        time.sleep(0.01)
    assert o.steps >= 3
    del o
    gc.collect()
    t.join(30.0)
    assert not t.is_alive()


def test_a_replayed_ledger_starts_the_pump(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """Red team 14b: a kernel that rejoins a ledger (a restart, another kernel's charges) replays its charges through
    the engine's commits, which may leave a problem in the worker as a charge does; the pump starts then too (it
    was started only by a charge, so a restarted kernel's worker answered once and idled until the next query)."""
    import time

    from dpmagic.accountant.accountant import Accountant
    from dpmagic.accountant.currency import parse_budget
    from dpmagic.accountant.ledger import Ledger

    solver = BackgroundSolver()
    use: list[BackgroundSolver | None] = [None]  # the first accountant charges without a worker

    def new_engine(self: Accountant) -> OverlapEngine:
        e = OverlapEngine(self.schema, time_limit=self.time_limit, charged=self.bound, background=use[0])
        for name, value in {**STARVED, "display_time_limit": 0.0}.items():
            setattr(e, name, value)
        return e

    monkeypatch.setattr(Accountant, "_new_engine", new_engine)
    try:
        ledger = Ledger()
        first = Accountant(parse_budget("epsilon=10"), SCHEMA, ledger=ledger)
        tri = _tri()
        for i, b in enumerate(tri):
            first.charge(b, 0.5, sql=f"q{i}", canonical=f"q{i}")
        assert not first.engine.overlap().exact and first._pump is None
        use[0] = solver
        acc = Accountant(parse_budget("epsilon=10"), SCHEMA, ledger=ledger)  # replays the three charges
        assert acc.engine.background_busy
        assert acc._pump is not None and acc._pump.is_alive()
        end = time.monotonic() + 60.0
        while time.monotonic() < end and acc._pump is not None:
            time.sleep(0.05)
        assert acc.pump_error is None and acc._pump is None
        g = acc.engine.overlap()
        assert g.exact and math.isclose(g.upper, 1.0)
        assert_sound(g, tri, [0.5] * 3)
    finally:
        solver.close()


@pytest.mark.skipif(not hasattr(os, "fork"), reason="os.fork")
def test_a_fork_during_a_pump_step_leaves_the_child_its_owners_lock() -> None:
    """Red team 14b: a pump step holds its owner's lock; an ``os.fork()`` in the middle of it (an analyst's
    ``multiprocessing`` pool) gave the child a lock held by a thread that does not exist there, and the child's
    first charge waited forever.  A fork now waits for the step to end (``_PUMP_GATE``)."""
    import threading

    from dpmagic.overlap.background import start_pump

    class Owner:
        def __init__(self) -> None:
            self.lock = threading.RLock()
            self.entered = threading.Event()
            self.go = threading.Event()
            self._pump: threading.Thread | None = None

        def background_step(self) -> bool:
            self.entered.set()
            self.go.wait(30.0)
            return False

    o = Owner()
    pump = o._pump = start_pump(o, interval=0.001)
    assert o.entered.wait(30.0)  # the pump is in its step, holding the owner's lock
    timer = threading.Timer(0.2, o.go.set)  # (with the gate the fork waits for it; without, it is set meanwhile)
    timer.start()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        os._exit(0 if o.lock.acquire(timeout=10.0) else 1)
    _, status = os.waitpid(pid, 0)
    timer.join()
    pump.join(30.0)
    assert not pump.is_alive() and o._pump is None
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0, "the child could not take the owner's lock"


@pytest.mark.skipif(not hasattr(os, "fork"), reason="os.fork")
def test_a_forked_child_starts_its_own_pump(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """Red team 14b: a forked child inherits ``_pump`` naming its parent's pump thread, which does not run there; a
    commit in the child that leaves a problem in the worker starts the child's own pump (it was never started: the
    stale thread object counted as a running pump)."""
    from dpmagic.accountant.accountant import Accountant
    from dpmagic.accountant.currency import parse_budget
    from dpmagic.accountant.ledger import Ledger

    solver = BackgroundSolver()
    monkeypatch.setattr("dpmagic.accountant.accountant.default_solver", lambda: solver)
    try:
        acc = Accountant(parse_budget("epsilon=10"), SCHEMA, ledger=Ledger())
        for name, value in {**STARVED, "display_time_limit": 0.0}.items():
            setattr(acc.engine, name, value)
        for i, b in enumerate(_tri()):
            acc.charge(b, 0.5, sql=f"q{i}", canonical=f"q{i}")
        with acc.lock:  # (no pump step runs at the fork)
            assert acc._pump is not None and acc._pump.is_alive() and acc.engine.background_busy
            pid = os.fork()
            if pid == 0:  # pragma: no cover - the child
                ok = acc._pump is not None and not acc._pump.is_alive()
                acc._ensure_pump()
                os._exit(0 if ok and acc._pump is not None and acc._pump.is_alive() else 1)
        _, status = os.waitpid(pid, 0)
        assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0, "the child started no pump"
    finally:
        solver.close()


def test_a_term_the_worker_had_its_share_of_goes_back_to_the_kernel(solver) -> None:  # type: ignore[no-untyped-def]
    """After ``BACKGROUND_MAX_TRIES`` tries of a term the worker is not sent it again (it would keep the second core
    busy for the kernel's life): the commit re-tightens in the kernel, as without a worker."""
    from dataclasses import replace

    from dpmagic.overlap.engine import BACKGROUND_MAX_TRIES

    eng = OverlapEngine(SCHEMA, charged="exact", background=solver, **STARVED)
    tri = _tri()
    for b in tri[:2]:
        eng.add(b, 0.5)
    eng.background = None  # the third admission's term stays pending, not sent
    eng.add(tri[2], 0.5)
    assert eng._pending and eng._bg_task is None
    eng._pending = tuple(replace(t, tries=BACKGROUND_MAX_TRIES) for t in eng._pending)
    eng._snap_n = len(eng)  # no node since the last snapshot: the term itself is the worker's next problem
    eng.background = solver
    assert eng._bg_submit() is False and eng._bg_task is None
    eng._pending = tuple(replace(t, tries=BACKGROUND_MAX_TRIES - 1) for t in eng._pending)
    assert eng._bg_submit() is True and eng._bg_task is not None


# -- snapshots (session 18) ---------------------------------------------------------------------------------------
def _two_triangles(eng: OverlapEngine) -> tuple[list[Box], list[float]]:
    """Two copies of the triangle (weights 0.5 and 0.25), added to the starved ``eng`` without its worker: every
    admission after the second leaves a pending term (γ = 1.5)."""
    bg, eng.background = eng.background, None
    bs = _tri() + _tri()
    ws = [0.5] * 3 + [0.25] * 3
    for b, w in zip(bs, ws):
        eng.add(b, w)
    eng.background = bg
    return bs, ws


@pytest.fixture
def no_top(monkeypatch):  # type: ignore[no-untyped-def]
    """Snapshots as the scoped search from scratch (no top set standing in for them)."""
    monkeypatch.setattr(engine_module, "TOP_AS_SNAPSHOT", False)


def test_a_snapshot_bounds_every_earlier_term_at_once(solver, no_top) -> None:  # type: ignore[no-untyped-def]
    """Several terms pending: the worker is sent γ of every node from scratch (a snapshot) instead of one term; its
    answer replaces all of them, γ is exact and equals brute force, and every node's term is at most γ."""
    eng = OverlapEngine(SCHEMA, charged="exact", background=solver, **STARVED)
    bs, ws = _two_triangles(eng)
    assert len(eng._pending) >= 2 and not eng.overlap().exact
    assert eng._bg_submit() and eng._bg_task is not None and eng._bg_task[1] == (eng._token, 6, "snapshot")
    assert solver.wait(eng._bg_task[0], 60.0) and eng._bg_collect()
    g = eng.overlap()
    assert_sound(g, bs, ws)
    assert g.exact and math.isclose(g.upper, brute_max(SCHEMA, bs, ws)) and eng._pending == ()
    assert (eng._term_up[:6] <= g.upper).all()
    assert eng._bg_submit() is False  # nothing pending: nothing sent


def test_a_snapshot_keeps_the_terms_of_later_admissions(solver, no_top) -> None:  # type: ignore[no-untyped-def]
    """Admissions while the snapshot is in the worker: its answer bounds only the nodes before it (one global term
    replaces theirs), the later admissions' terms stay, and every bound stays sound; the next snapshot closes γ."""
    eng = OverlapEngine(SCHEMA, charged="exact", background=solver, **STARVED)
    bs, ws = _two_triangles(eng)
    assert eng._bg_submit() and eng._bg_task is not None
    task = eng._bg_task
    eng.background = None  # the answer is not collected during these admissions
    for b in _tri():
        eng.add(b, 0.125)
        bs.append(b)
        ws.append(0.125)
    later = {t.n for t in eng._pending if t.n >= 6}
    assert later
    eng.background = solver
    assert solver.wait(task[0], 60.0) and eng._bg_collect()
    assert {t.n for t in eng._pending if t.box is not None} == later  # the later terms, and only those, stay
    assert all(t.n >= 6 for t in eng._pending)
    assert_sound(eng.overlap(), bs, ws)
    assert_sound(eng.bounds().overlap, bs, ws)
    _drain(eng, solver)
    g = eng.overlap()
    assert g.exact and math.isclose(g.upper, brute_max(SCHEMA, bs, ws))
    assert_sound(g, bs, ws)


def test_a_snapshot_that_bounds_nothing_backs_off_and_the_kernel_never_resolves_one(solver) -> None:  # type: ignore[no-untyped-def]
    """A snapshot answer above every term it would replace changes no term and makes the next 2 (then 4, ...)
    submissions skip snapshots; a kept snapshot term (its bound above γ's lower end) is never re-tightened in the
    kernel (only a later snapshot re-solves the whole problem)."""
    eng = OverlapEngine(SCHEMA, charged="exact", background=None, **{**STARVED, "retighten_seconds": 0.0})
    bs, ws = _two_triangles(eng)
    before = eng._pending
    eng._install_snapshot(6, 1e9, None)
    assert eng._pending == before and eng._snap_skip == 2 and eng._snap_fails == 1
    eng._snap_n = 0
    largest = max(eng._pending, key=lambda t: t.upper)
    assert [eng._snapshot_due(largest) for _ in range(3)] == [False, False, True]
    g = eng.overlap()
    mid = (g.lower + g.upper) / 2  # a proven bound in this test only if it is at least γ (it is: γ = g.lower)
    assert mid >= brute_max(SCHEMA, bs, ws)
    eng._install_snapshot(6, mid, None)
    (snap,) = eng._pending
    assert snap.snapshot and snap.box is None and snap.upper == mid and eng._snap_fails == 0
    assert_sound(eng.overlap(), bs, ws)
    eng.retighten(1.0)
    assert eng._pending == (snap,) and eng._pending[0].tries == 0


def test_a_top_set_stands_in_for_a_due_snapshot(solver) -> None:  # type: ignore[no-untyped-def]
    """Several terms pending and the scoped enumeration applies: the worker is sent a top task instead of the
    snapshot; its answer bounds every earlier term at once (γ exact, equal to brute force, nothing pending), and the
    top set is installed for later admissions, whose bounds stay sound."""
    eng = OverlapEngine(SCHEMA, charged="exact", background=solver, **STARVED)
    bs, ws = _two_triangles(eng)
    assert len(eng._pending) >= 2 and not eng.overlap().exact
    assert eng._bg_submit() and eng._bg_task is not None and eng._bg_task[1] == (eng._token, 6, "top")
    assert eng._bg_submit()  # in flight: it stands in for a snapshot, so the kernel does not re-tighten
    assert solver.wait(eng._bg_task[0], 60.0) and eng._bg_collect()
    g = eng.overlap()
    assert_sound(g, bs, ws)
    assert g.exact and math.isclose(g.upper, brute_max(SCHEMA, bs, ws)) and eng._pending == ()
    assert eng._top is not None and eng._top.cells.n == 6
    for b in _tri():
        eng.add(b, 0.125)
        bs.append(b)
        ws.append(0.125)
        assert_sound(eng.overlap(), bs, ws)
        assert_sound(eng.bounds().overlap, bs, ws)


def test_a_top_set_that_does_not_apply_falls_back_to_the_snapshot(solver) -> None:  # type: ignore[no-untyped-def]
    """Where the enumeration does not apply (here: at most one atom per column allowed) the top task's empty answer
    backs off, and the next due snapshots are the scoped search from scratch, which closes γ."""
    cfg = PortfolioConfig(steps=frozenset({"milp"}), scoped_max_atoms=1)
    eng = OverlapEngine(SCHEMA, charged="exact", background=solver, **{**STARVED, "solver": cfg})
    bs, ws = _two_triangles(eng)
    assert eng._bg_submit() and eng._bg_task is not None and eng._bg_task[1][2] == "top"
    assert solver.wait(eng._bg_task[0], 60.0) and not eng._bg_collect()
    assert eng._top is None and eng._top_skip == 2 and eng._bg_task is None
    assert eng._bg_submit() and eng._bg_task is not None and eng._bg_task[1][2] == "snapshot"
    _drain(eng, solver)
    g = eng.overlap()
    assert_sound(g, bs, ws)
    assert g.exact and math.isclose(g.upper, brute_max(SCHEMA, bs, ws))
