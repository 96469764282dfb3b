"""A ledger that survives: restarts, concurrent processes, crashes, tampering; custodian actions; audit export."""

from __future__ import annotations

import json
import math
import multiprocessing as mp
import os
import random
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from dpmagic import BudgetError, BudgetExceededError, Session
from dpmagic.accountant.ledger import Ledger, verify
from dpmagic.domain.schema import Schema
from dpmagic.domain.sets import box_from_json
from dpmagic.overlap import OverlapEngine
from dpmagic.presentation.cli import main as cli_main
from dpmagic.presentation.reports import export_ledger

sys.path.insert(0, str(Path(__file__).parent))
import ledger_worker  # noqa: E402

WORKER = Path(__file__).parent / "ledger_worker.py"


def run_worker(ledger: Path, seed: int, n: int, *extra: str) -> list[dict]:
    out = subprocess.run(
        [sys.executable, str(WORKER), str(ledger), str(seed), str(n), *extra],
        capture_output=True,
        text=True,
        timeout=600,
        check=True,
    )
    return [json.loads(line) for line in out.stdout.splitlines() if line.strip()]


def recomputed_gamma(path: Path) -> tuple[float, int, list[int]]:
    """The exact maximum load of every counted charge in the file, recomputed from scratch."""
    df, schema = ledger_worker.pums()
    ledger = Ledger(path)
    (key,) = ledger.ledger_keys()
    entries = ledger.entries(key)
    engine = OverlapEngine(schema, time_limit=60)
    engine.extend([box_from_json(e.coverage, schema) for e in entries], [e.weight for e in entries])
    g = engine.overlap() if entries else None
    ledger.close()
    assert g is None or g.exact
    return (g.upper if g else 0.0), len(entries), [e.id for e in entries]


def test_restart_resumes_exactly(tmp_path: Path) -> None:
    path = tmp_path / "l.sqlite"
    df, schema = ledger_worker.pums()
    s = Session(df, schema, ledger_worker.BUDGET, ledger=path)
    rng = random.Random(7)
    done = 0
    while done < 50:
        sql, eps = ledger_worker.random_query(rng)
        try:
            s.query(sql, epsilon=eps / 10, fresh=True)
            done += 1
        except BudgetExceededError:
            pass
    before = s.bounds_summary()
    lines = run_worker(path, 1234, 0, "--state")  # a new process binds the same data
    state, nxt = lines
    assert state["queries"] == 50
    assert state["spent"] == pytest.approx(s.spent, rel=0, abs=1e-12)
    for k in ("sequential", "chromatic", "clique", "overlap_upper", "overlap_lower"):
        assert state["bounds"][k] == pytest.approx(before[k], abs=1e-12), k
    sql, eps = ledger_worker.random_query(random.Random(1234))
    here = s.preview(sql, epsilon=eps)
    assert nxt["after"] == pytest.approx(here.charge.after, abs=1e-12)
    assert nxt["before"] == pytest.approx(here.charge.before, abs=1e-12)


_OPEN_AT_ONCE = """
import sys, time
from dpmagic.accountant.ledger import Ledger
start, paths = float(sys.argv[1]), sys.argv[2:]
for k, path in enumerate(paths):
    while time.time() < start + 0.25 * k:
        pass
    ledger = Ledger(path)
    with ledger.transaction():
        pass
    ledger.close()
print("ok")
"""


def test_processes_opening_a_new_ledger_at_the_same_moment_all_succeed(tmp_path: Path) -> None:
    """Six processes open the same new ledger file at the same instant, twenty times over: switching a new file to
    WAL takes an exclusive lock and SQLite may answer "database is locked" at once, without waiting, to the losers
    (seen in CI: a worker of the test below died in ``Ledger.__init__``; before the fix this loop failed 12 of 240
    opens on the 2-core CI machine).  Every open must succeed."""
    paths = [str(tmp_path / f"new{k}.sqlite") for k in range(20)]
    start = time.time() + 3.0  # after every interpreter has imported dpmagic
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", _OPEN_AT_ONCE, str(start), *paths],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(6)
    ]
    results = [p.communicate(timeout=300) for p in procs]
    for p, (out, err) in zip(procs, results):
        assert p.returncode == 0 and out.strip() == "ok", err[-2000:]
    for path in paths:
        conn = sqlite3.connect(path)
        try:
            assert str(conn.execute("PRAGMA journal_mode").fetchone()[0]).upper() == "WAL"
        finally:
            conn.close()


def test_concurrent_processes_never_overspend(tmp_path: Path) -> None:
    path = tmp_path / "shared.sqlite"
    procs = [
        subprocess.Popen([sys.executable, str(WORKER), str(path), str(seed), "250"], stdout=subprocess.PIPE, text=True)
        for seed in range(4)
    ]
    outputs = [p.communicate(timeout=900)[0] for p in procs]
    assert all(p.returncode == 0 for p in procs)
    admitted_ids: list[int] = []
    refused = 0
    for out in outputs:
        lines = [json.loads(x) for x in out.splitlines() if x.strip()]
        summary = lines[-1]
        ids = [x["entry"] for x in lines[:-1]]
        assert summary["admitted"] == len(ids)
        admitted_ids += ids
        refused += summary["refused"]
    assert refused > 0, "the budget must run out in this test"
    gamma, n_entries, entry_ids = recomputed_gamma(path)
    assert n_entries == len(admitted_ids)  # no lost entries
    assert sorted(entry_ids) == sorted(admitted_ids)  # and no duplicates
    assert gamma <= 3.0 * (1 + 1e-9)  # together they never overspent
    assert verify(path)[0]
    print(
        f"concurrency: 4 processes x 250 queries, {len(admitted_ids)} admitted, {refused} refused, "
        f"recomputed maximum load {gamma:.6g} of budget 3.0, {n_entries} ledger entries"
    )


def _crash_worker(path: str, seed: int, conn) -> None:  # runs in a forked child
    df, schema = ledger_worker.pums()
    s = Session(df, schema, ledger_worker.BUDGET, ledger=path)
    conn.send(None)  # the session is open: from here on every kill lands among queries
    rng = random.Random(seed)
    while True:
        sql, eps = ledger_worker.random_query(rng)
        try:
            r = s.query(sql, epsilon=eps / 20, fresh=True)
        except BudgetExceededError:
            continue
        conn.send(r.entry_id)  # the answer has left the process: it is released


@pytest.mark.skipif(sys.platform != "linux", reason="fork + SIGKILL")
def test_sigkill_at_random_points_never_undercharges(tmp_path: Path) -> None:
    path = tmp_path / "crash.sqlite"
    ctx = mp.get_context("fork")
    rng = random.Random(0)
    released: set[int] = set()
    for trial in range(200):
        parent, child = ctx.Pipe(duplex=False)
        p = ctx.Process(target=_crash_worker, args=(str(path), trial, child))
        p.start()
        child.close()
        # Odd trials kill at any point (often while the ledger is being opened); even trials wait until the
        # session is open, so that however slow the machine is, kills also land among charges and releases.
        if trial % 2 == 0 and parent.poll(60):
            parent.recv()
        time.sleep(rng.uniform(0.0, 0.12))
        os.kill(p.pid, signal.SIGKILL)
        p.join()
        while parent.poll():
            try:
                got = parent.recv()
            except EOFError:
                break
            if got is not None:
                released.add(got)
        parent.close()
    ok, problems = verify(path)
    assert ok, problems
    ledger = Ledger(path)
    (key,) = ledger.ledger_keys()
    charged = {e.id: e for e in ledger.entries(key)}
    assert released, "some answers were released"
    assert released <= set(charged)  # every released answer was charged first
    _, schema = ledger_worker.pums()
    engine = OverlapEngine(schema)
    engine.extend([box_from_json(charged[i].coverage, schema) for i in released], [charged[i].weight for i in released])
    released_loss = engine.overlap().upper
    gamma, _, _ = recomputed_gamma(path)
    assert gamma >= released_loss - 1e-12  # the charged total is never below what was released
    print(
        f"crash safety: 200 SIGKILL trials, {len(released)} answers released, {len(charged)} charges in the "
        f"ledger, charged maximum load {gamma:.6g} >= released {released_loss:.6g}, chain intact"
    )


@pytest.mark.parametrize(
    "attack",
    [
        "UPDATE events SET body = replace(body, '\"cost\":0.2', '\"cost\":0.02') WHERE seq = 2",
        "DELETE FROM events WHERE seq = 4",
        "DELETE FROM events WHERE seq = (SELECT MAX(seq) FROM events)",
        "UPDATE events SET seq = -2 WHERE seq = 2; UPDATE events SET seq = 2 WHERE seq = 4; "
        "UPDATE events SET seq = 4 WHERE seq = -2",
        "UPDATE events SET created = created + 1 WHERE seq = 3",
    ],
)
def test_tampering_is_detected(tmp_path: Path, attack: str, adult) -> None:
    path = tmp_path / "t.sqlite"
    df, schema = adult
    s = Session(df, schema, "epsilon=1", ledger=path)
    for q in ["age < 30", "age >= 30", "sex = 'Male'"]:
        s.query(f"SELECT COUNT(*) FROM adult WHERE {q}", epsilon=0.2)
    s.ledger.close()
    assert verify(path) == (True, [])
    conn = sqlite3.connect(path)
    conn.executescript(attack)
    conn.commit()
    conn.close()
    ok, problems = verify(path)
    assert not ok and problems
    assert cli_main(["ledger", "verify", str(path)]) == 1


def test_rebinding_with_another_budget_or_definition_is_refused(tmp_path: Path, adult) -> None:
    path = tmp_path / "l.sqlite"
    df, schema = adult
    Session(df, schema, "epsilon=1", ledger=path).query("SELECT COUNT(*) FROM adult", epsilon=0.5)
    with pytest.raises(BudgetError, match="custodian action"):
        Session(df, schema, "epsilon=2", ledger=path)
    with pytest.raises(BudgetError, match="cannot be re-bound under zcdp"):
        Session(df, schema, "rho=1", ledger=path)
    # other rows under the same declared data set → the same budget (audit issue 10, item 5: the budget
    # belongs to the custodian's data-set id, not to a hash of the bound frame)
    other = Session(df.head(100), schema, "epsilon=1", ledger=path)
    assert other.spent == 0.5
    # a data set the custodian declares as another one → another key, with a budget of its own
    renamed = Schema.from_dict({**schema.to_dict(), "dataset": "adult-other"})
    assert Session(df.head(100), renamed, "epsilon=1", ledger=path).spent == 0.0


def test_custodian_set_budget_and_reset(tmp_path: Path, adult, capsys) -> None:
    path = tmp_path / "l.sqlite"
    df, schema = adult
    s = Session(df, schema, "epsilon=1", ledger=path)
    s.query("SELECT COUNT(*) FROM adult", epsilon=0.9)
    key = s.ledger_key
    # without confirmation (no terminal) nothing changes
    assert cli_main(["ledger", "set-budget", str(path), "--key", key, "--to", "2"]) == 2
    assert cli_main(["ledger", "set-budget", str(path), "--key", "nope", "--to", "2", "--yes"]) == 2
    assert (
        cli_main(["ledger", "set-budget", str(path), "--key", key, "--to", "2", "--yes", "--reason", "new grant"]) == 0
    )
    s2 = Session(df, schema, "epsilon=2", ledger=path)
    assert s2.spent == pytest.approx(0.9) and s2.remaining == pytest.approx(1.1)
    # the running session sees the custodian's change at its next decision
    s.query("SELECT COUNT(*) FROM adult WHERE age < 30", epsilon=0.5)
    assert cli_main(["ledger", "reset", str(path), "--key", key, "--yes"]) == 0
    s3 = Session(df, schema, "epsilon=2", ledger=path)
    assert s3.spent == 0.0
    assert verify(path)[0]
    capsys.readouterr()
    assert cli_main(["ledger", "show", str(path)]) == 0
    out = capsys.readouterr().out
    assert key in out and "budget epsilon=2" in out


def test_export_formats(tmp_path: Path, adult) -> None:
    path = tmp_path / "l.sqlite"
    df, schema = adult
    s = Session(df, schema, "epsilon=1", ledger=path)
    s.query("SELECT sex, AVG(age) FROM adult WHERE race = 'Black' GROUP BY sex", epsilon=0.2)
    s.query('SELECT SUM("hours-per-week") FROM adult WHERE age BETWEEN 20 AND 30', epsilon=0.1)
    rows = json.loads(export_ledger(s.ledger, "json"))
    assert len(rows) == 2 and rows[0]["predicates"] == "race ∈ {Black}" and "discrete_laplace" in rows[0]["noise"]
    assert rows[1]["predicates"] == "age ∈ [20, 30]"
    csv_text = export_ledger(s.ledger, "csv")
    assert csv_text.splitlines()[0].startswith("ledger_key,") and len(csv_text.splitlines()) == 3
    out = tmp_path / "report.html"
    assert cli_main(["ledger", "export", str(path), "--format", "html", "-o", str(out)]) == 0
    text = out.read_text()
    assert "<table>" in text and "hash chain: <b>intact</b>" in text and "AVG(age)" in text


def test_magics_default_to_a_durable_ledger(tmp_path: Path, adult, monkeypatch) -> None:
    from IPython.core.interactiveshell import InteractiveShell
    from IPython.utils.capture import capture_output

    from dpmagic.presentation.magics import current_session

    path = tmp_path / "default.sqlite"
    monkeypatch.setenv("DPMAGIC_LEDGER", str(path))
    ip = InteractiveShell.instance()
    ip.run_cell("%load_ext dpmagic")
    ip.user_ns.update(adult=adult[0], schema=adult[1])
    with capture_output():
        ip.run_cell("%dpsession adult --schema schema --budget epsilon=1.0")
        ip.run_cell("%%dpquery --epsilon 0.3\nSELECT COUNT(*) FROM adult\n")
        ip.run_cell("%dpsession adult --schema schema --budget epsilon=1.0")  # a "restart"
    assert current_session().ledger.path == path
    assert current_session().spent == pytest.approx(0.3)
    assert math.isclose(current_session().remaining, 0.7)


def _threads_round(path: Path, sqls: list[str]) -> None:
    """One round of :func:`test_one_session_from_many_threads_never_overspends`."""
    import threading

    from dpmagic.accountant.accountant import Accountant

    df, schema = ledger_worker.pums()
    s = Session(df, schema, "epsilon=1", ledger=path)
    outcome: dict[str, str] = {}
    errors: list[BaseException] = []
    start = threading.Barrier(len(sqls) + 2)

    def ask(sql: str) -> None:
        start.wait()
        try:
            s.query(sql, epsilon=0.3)
            outcome[sql] = "charged"
        except BudgetExceededError:
            outcome[sql] = "refused"
        except BaseException as exc:  # noqa: BLE001 - any other outcome fails the test
            errors.append(exc)

    def look() -> None:  # readers of the session's state, at the same time
        start.wait()
        try:
            for sql in sqls[:6]:
                s.preview(sql, epsilon=0.1)
                s.affordable(sql)
                s.bounds()
                s.ledger_frame()
        except BaseException as exc:  # noqa: BLE001
            errors.append(exc)

    threads = [threading.Thread(target=ask, args=(q,)) for q in sqls] + [threading.Thread(target=look) for _ in "ab"]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    events = s.ledger.events(s.ledger_key)
    charges = [e for e in events if e.kind == "charge"]
    admitted = [sql for sql, o in outcome.items() if o == "charged"]
    assert len(outcome) == len(sqls) and len(admitted) == 3  # every two queries share ages 33-39
    assert sorted(e.body["sql"] for e in charges) == sorted(admitted)
    assert {e.body["entry"] for e in events if e.kind == "release"} == {e.seq for e in charges}
    assert len(s.accountant) == len(charges) and s.spent <= 1.0 + 1e-9
    # a sequential replay of the admitted queries, in ledger order, reaches the same state
    replay = Accountant(s.budget, schema, ledger=Ledger())
    for e in charges:
        replay.charge(s.parse(e.body["sql"]).coverage, 0.3, sql=e.body["sql"], canonical="")
    assert replay.charged_weight == s.accountant.charged_weight
    assert replay.bounds().overlap.upper == s.accountant.bounds().overlap.upper
    assert [e.charged_after for e in replay.entries()] == [e.body["charged_after"] for e in charges]
    for sql, o in outcome.items():
        if o == "refused":  # loads only grow: what was refused then is refused now
            assert not s.preview(sql, epsilon=0.3).admissible
    again = Session(df, schema, "epsilon=1", ledger=path)  # a restart resumes the same state
    assert again.accountant.charged_weight == s.accountant.charged_weight
    s.ledger.close()
    again.ledger.close()


def test_one_session_from_many_threads_never_overspends(tmp_path: Path) -> None:
    """Audit issue 24: one Session called from several threads (a server).  Twelve threads fire overlapping
    queries of ε = 0.3 at a budget of 1 (at most three may cover a row) while others read the session; whatever
    the interleaving: only clear refusals, the charges never exceed the budget, the engine holds exactly the
    ledger's charges with the bounds of a sequential replay of them in ledger order, every charge is released,
    every refused query is refused by the final state too (loads only grow), and a restart resumes the same state.
    The assertions hold for every interleaving; the interleaving itself is left to the scheduler (a tiny switch
    interval makes unsafe ones likely: before the fix, 7 rounds in 10 failed)."""
    sqls = [f"SELECT COUNT(*) FROM pums WHERE age >= {3 * i} AND age < {3 * i + 40}" for i in range(12)]
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        for round_ in range(4):
            _threads_round(tmp_path / f"threads{round_}.sqlite", sqls)
    finally:
        sys.setswitchinterval(interval)
