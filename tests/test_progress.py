"""Progress while the accountant works (issue 11): ticks with the elapsed time, a terminal line, the panel."""

from __future__ import annotations

import io
import threading

from dpmagic.session.progress import Ticker, terminal_progress


def test_ticker_ticks_only_while_the_block_runs() -> None:
    seen: list[float] = []
    release = threading.Event()
    with Ticker(seen.append, delay=0.0, every=0.001):
        release.wait(0.2)  # a slow accounting step (the ticks come from another thread)
    n = len(seen)
    assert n >= 1 and all(b >= a >= 0.0 for a, b in zip(seen, seen[1:]))
    release.wait(0.05)
    assert len(seen) == n  # nothing after the block ended


def test_ticker_is_silent_for_a_short_step() -> None:
    seen: list[float] = []
    with Ticker(seen.append, delay=3600.0):
        pass
    assert seen == []


def test_ticker_swallows_callback_errors() -> None:
    def bad(_: float) -> None:
        raise RuntimeError("display problem")

    with Ticker(bad, delay=0.0, every=0.001) as t:
        threading.Event().wait(0.05)
    assert t.ticks >= 1


def test_terminal_line_is_written_then_cleared() -> None:
    out = io.StringIO()
    listen = terminal_progress(out)
    listen("progress", {"elapsed": 1.25, "message": "checking the maximum overlap with 10 registered queries"})
    assert "1.2 s" in out.getvalue() or "1.3 s" in out.getvalue()
    assert "checking the maximum overlap with 10" in out.getvalue()
    listen("charged", {"entry": 1})
    assert out.getvalue().endswith("\r\x1b[K")


def test_session_emits_progress_for_a_slow_admission(adult, monkeypatch) -> None:
    """A slow accounting step (simulated) makes the session emit ``progress`` events with the elapsed time."""
    from dpmagic import Session
    from dpmagic.session import progress as progress_mod

    df, schema = adult
    s = Session(df, schema, "epsilon=1.0")
    events: list[tuple[str, dict]] = []
    s.subscribe(lambda k, i: events.append((k, i)))
    slow = s.accountant.preview

    def preview(box, cost):
        threading.Event().wait(0.3)
        return slow(box, cost)

    monkeypatch.setattr(s.accountant, "preview", preview)
    monkeypatch.setattr(progress_mod.Ticker, "__init__", _fast_init(progress_mod.Ticker.__init__))
    s.query("SELECT COUNT(*) FROM adult WHERE age < 30", epsilon=0.1)
    kinds = [k for k, _ in events]
    assert "progress" in kinds and kinds[-1] == "charged"
    prog = [i for k, i in events if k == "progress"]
    assert all(i["elapsed"] >= 0 and i["limit"] == s.accountant.time_limit for i in prog)
    assert kinds.index("progress") < kinds.index("charged")


def _fast_init(init):
    def fast(self, callback, *, delay=0.0, every=0.01):
        init(self, callback, delay=0.0, every=0.01)

    return fast


def test_panel_shows_elapsed_time_then_hides_it(adult) -> None:
    from dpmagic import Session
    from dpmagic.presentation.widgets import BudgetWidget

    df, schema = adult
    s = Session(df, schema, "epsilon=1.0")
    panel = BudgetWidget(s)
    assert panel.working.layout.display == "none"
    panel.on_event("progress", {"elapsed": 1.5, "limit": 10.0, "message": "checking the maximum overlap"})
    assert panel.working.layout.display is None and panel.working.value == 1.5 and panel.working.max == 10.0
    assert "1.5 s" in panel.status.value and "limit 10 s" in panel.status.value
    s.query("SELECT COUNT(*) FROM adult WHERE age < 30", epsilon=0.1)  # the panel listens: charged hides it
    assert panel.working.layout.display == "none"
