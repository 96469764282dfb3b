"""What a statistical-privacy session returns: an answer (:class:`SPResult`) and a dry run (:class:`SPPreview`),
each labelled NOT differential privacy."""

from __future__ import annotations

import html
from dataclasses import dataclass

import pandas as pd

from dpmagic.query.model import Query
from dpmagic.statistical.accountant import SPCharge

__all__ = ["SP_LABEL", "SPPreview", "SPResult"]

#: the label every SP output carries
SP_LABEL = "statistical privacy (NOT differential privacy)"


@dataclass(frozen=True)
class SPResult:
    """One SP answer: the rescaled exact count of one secret part, with what it was charged.  NOT DP."""

    query: Query
    sql: str
    number: int
    estimate: float
    part: int  # 0-based index of the part (displayed 1-based)
    part_size: int
    parts: int
    n: int
    delta_part: float
    delta_total: float
    delta_target: float
    epsilon: float
    assumption: str  # e.g. "Bernoulli(0.5) in column 'x'"

    @property
    def label(self) -> str:
        return f"{SP_LABEL}: holds only if the rows are i.i.d. {self.assumption}"

    @property
    def df(self) -> pd.DataFrame:
        return pd.DataFrame({self.query.aggregates[0].alias: [self.estimate]})

    def summary(self) -> str:
        """The cost line shown under the answer."""
        return (
            f"charged δ(ε={self.epsilon:g}) += {self.part_size}/{self.n} × {self.delta_part:.4g} "
            f"(exact count on secret part {self.part + 1} of {self.parts}, {self.part_size} rows, rescaled by "
            f"n/n_k); δ spent {self.delta_total:.4g} of target {self.delta_target:g} — {self.label}"
        )

    def __repr__(self) -> str:
        return f"[SP query {self.number}] {self.query.aggregates[0].alias} ≈ {self.estimate:.6g}\n{self.summary()}"

    def _repr_html_(self) -> str:
        return (
            f"<div class='dpmagic-sp'>{self.df.to_html(index=False)}"
            f"<div style='color:#b00020'><b>{html.escape(SP_LABEL)}</b>: holds only if the rows are i.i.d. "
            f"{html.escape(self.assumption)}</div>"
            f"<div>{html.escape(self.summary().split(' — ')[0])}</div></div>"
        )


@dataclass(frozen=True)
class SPPreview:
    """What a query would be charged (no data read, nothing spent)."""

    sql: str
    charge: SPCharge | None
    refused: str | None
    n: int
    epsilon: float
    delta_spent: float
    delta_target: float
    label: str

    def __repr__(self) -> str:
        if self.charge is None:
            verdict = f"would be REFUSED: {self.refused}"
        else:
            c = self.charge
            verdict = (
                f"would be answered on secret part {c.part + 1} ({c.part_size} rows) and charged "
                f"{c.part_size}/{self.n} × {c.delta_part:.4g}; δ(ε={self.epsilon:g}) {self.delta_spent:.4g} → "
                f"{c.delta_total:.4g} of {self.delta_target:g}"
            )
        return f"dry run: {verdict}. Nothing was spent and no data was read. {self.label}"

    def _repr_html_(self) -> str:
        return f"<div>{html.escape(repr(self))}</div>"
