"""What travels between ``dpmagic serve`` and a :class:`~dpmagic.presentation.remote.RemoteSession`: JSON only.

An answer is its released table (``columns`` and ``data``: noisy values and their intervals, nothing else) and
its public figures (cost, charge summary, noise, budget); the client renders it with the same
:mod:`dpmagic.session.rendering` as a local session (``"render": "client"``).  An answer the client cannot render
from its own parse (a scalar subquery's or composed query's parts, one restored from the ledger) carries the
server's text and HTML rendering instead;
a dry run is its summary and rendering; an error is ``{"error": {"type", "message", "hint"}}`` and becomes the
same :class:`~dpmagic.errors.DPMagicError` subclass on the client.
"""

from __future__ import annotations

import dataclasses
import html
import math
from typing import Any

import pandas as pd

from dpmagic import errors

__all__ = [
    "answer_to_wire",
    "coverage_to_wire",
    "frame_to_wire",
    "frame_from_wire",
    "result_to_wire",
    "error_body",
    "raise_error",
]


def _plain(v: Any) -> Any:
    if hasattr(v, "item"):
        v = v.item()
    if isinstance(v, float) and not math.isfinite(v):
        return None if math.isnan(v) else ("Infinity" if v > 0 else "-Infinity")
    return v


def frame_to_wire(df: pd.DataFrame) -> dict[str, Any]:
    """A released table as JSON: column names, rows (NaN → null) and the release's own notes (``df.attrs
    ["dp_notes"]``: computed from the noisy values only, e.g. an AVG clamped into its range)."""
    return {
        "columns": [str(c) for c in df.columns],
        "data": [[_plain(v) for v in row] for row in df.astype(object).itertuples(index=False, name=None)],
        "dp_notes": [str(n) for n in df.attrs.get("dp_notes", [])],
    }


def coverage_to_wire(coverage: dict[str, Any]) -> dict[str, Any]:
    """A query's region as recorded (:func:`~dpmagic.domain.sets.box_to_json`) in strict JSON: an unbounded end
    is ``"Infinity"`` / ``"-Infinity"`` (read back by :func:`~dpmagic.domain.sets.box_from_json`)."""
    out: dict[str, Any] = {}
    for c, spec in coverage.items():
        if "intervals" in spec:
            spec = {"intervals": [[_plain(a), _plain(b), lc, hc] for a, b, lc, hc in spec["intervals"]]}
        out[c] = spec
    return out


def answer_to_wire(answer: Any) -> Any:
    """A released answer as the ledger recorded it (``columns`` and ``data``) in strict JSON (NaN → null, ±∞ →
    ``"Infinity"``), as :func:`frame_to_wire` sends a fresh one."""
    if not isinstance(answer, dict) or "data" not in answer:
        return answer
    return answer | {"data": [[_plain(v) for v in row] for row in answer["data"]]}


def frame_from_wire(body: dict[str, Any]) -> pd.DataFrame:
    rows = [[float(v) if v in ("Infinity", "-Infinity") else v for v in row] for row in body["data"]]
    df = pd.DataFrame(rows, columns=body["columns"])
    df = df.fillna(value=float("nan")) if len(df) else df
    if body.get("dp_notes"):
        df.attrs["dp_notes"] = [str(n) for n in body["dp_notes"]]
    return df


def result_to_wire(result: Any) -> dict[str, Any]:
    """A :class:`QueryResult`, :class:`PublicResult` or :class:`Preview` as the JSON the client renders."""
    from dpmagic.session.results import Preview, PublicResult, QueryResult

    if isinstance(result, Preview):
        return {
            "kind": "preview",
            "admissible": bool(result.admissible),
            "cost": result.cost,
            "affordable": result.affordable,
            "cached": result.cached,
            "text": result.summary(),
            "html": result._repr_html_(),
        }
    if type(result) is QueryResult and result.threshold is None and not result.extra_notes:
        # a plain answer travels as its released table and public figures; the client renders it with the same
        # rendering module as a local session (:class:`~dpmagic.presentation.remote.RemoteAnswer`): its notes come
        # from the released values and the query, which the client parses from the same SQL and schema
        return {
            "kind": "result",
            "render": "client",
            **frame_to_wire(result.df),
            "cost": float(result.cost),
            "cached": bool(result.cached),
            "summary": result.summary(),
            "noise": result.noise_description(),
            "spent": float(result.spent),
            "budget": float(result.budget),
            "entry_id": int(result.entry_id),
        }
    notes = list(result.notes)  # computed once (from the released values), then rendered with them
    fixed = (
        dataclasses.replace(result, notes=tuple(notes)) if isinstance(result, PublicResult) else _Noted(result, notes)
    )
    out = {
        "kind": "public" if isinstance(result, PublicResult) else "result",
        **frame_to_wire(result.df),
        "cost": float(result.cost),
        "cached": bool(result.cached),
        "summary": fixed.summary(),
        "notes": notes,
        "text": repr(fixed),
        "html": fixed._repr_html_(),
    }
    if not isinstance(result, PublicResult):
        out["entry_id"] = int(result.entry_id)
    return out


class _Noted:
    """A :class:`QueryResult` whose notes are given (rendering reads them twice: computed once here)."""

    def __init__(self, result: Any, notes: list[str]) -> None:
        self._result, self.notes = result, notes

    def __getattr__(self, name: str) -> Any:
        return getattr(self._result, name)

    def summary(self) -> str:
        from dpmagic.session import rendering

        return rendering.result_summary(self)  # type: ignore[arg-type]

    def _repr_html_(self) -> str:
        from dpmagic.session import rendering

        return rendering.result_html(self)  # type: ignore[arg-type]

    def __repr__(self) -> str:
        from dpmagic.session import rendering

        return rendering.result_text(self)  # type: ignore[arg-type]


def _strict(v: Any) -> Any:
    """``v`` as strict JSON values (numpy scalars as Python ones; NaN → null; ±∞ → ``"Infinity"``)."""
    if isinstance(v, dict):
        return {str(k): _strict(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_strict(x) for x in v]
    return _plain(v)


def _loose(v: Any) -> Any:
    """Inverse of :func:`_strict` for the numbers (``"Infinity"`` → ∞)."""
    if isinstance(v, dict):
        return {k: _loose(x) for k, x in v.items()}
    if isinstance(v, list):
        return [_loose(x) for x in v]
    return float(v) if v in ("Infinity", "-Infinity") else v


def batch_to_wire(out: Any) -> dict[str, Any]:
    """A batch's answer (its released table: one noisy count and interval per workload query) or its dry run, with
    the server's text and HTML rendering of it."""
    from dpmagic.session.batch import BatchResult

    body: dict[str, Any] = {"kind": "batch-preview", "cost": float(out.cost), "text": repr(out)}
    if isinstance(out, BatchResult):
        body |= {"kind": "batch", **frame_to_wire(out.df.reset_index(drop=True)), "entry_id": int(out.entry_id)}
        body |= {"summary": out.summary(), "html": out._repr_html_()}
    else:
        body |= {"summary": out.summary(), "html": "<pre>" + html.escape(out.summary()) + "</pre>"}
        body["admissible"] = bool(out.admissible)  # by the budget and your quota, as the run would be
    return body


def decision_to_wire(answer: Any) -> dict[str, Any]:
    """A :class:`~dpmagic.session.decide.DecisionAnswer` as JSON: its fields (released groups, costs, guarantees,
    the plan and each charged read); the client rebuilds it and renders it as a local session does."""
    return {"kind": "decision", "answer": _strict(dataclasses.asdict(answer))}


def decision_from_wire(body: dict[str, Any]) -> Any:
    from dpmagic.session.decide import DecisionAnswer

    fields = _loose({k: v for k, v in body["answer"].items() if k != "groups"})
    return DecisionAnswer(groups=body["answer"]["groups"], **fields)


def error_body(exc: BaseException) -> dict[str, Any]:
    hint = getattr(exc, "hint", None)
    return {"error": {"type": type(exc).__name__, "message": str(exc), "hint": hint}}


def raise_error(body: Any, status: int) -> None:
    """Raise the server's error as the same :class:`DPMagicError` subclass (an unknown name: the base class)."""
    err = body.get("error") if isinstance(body, dict) else None
    if not isinstance(err, dict):
        raise errors.DPMagicError(f"the server answered HTTP {status} without a dpmagic error body")
    cls = getattr(errors, str(err.get("type")), None)
    if not (isinstance(cls, type) and issubclass(cls, errors.DPMagicError)):
        cls = errors.DPMagicError
    raise cls(str(err.get("message")), hint=err.get("hint"))
