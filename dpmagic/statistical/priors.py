"""The prior of a statistical-privacy session: parsing ``bernoulli(p)`` / ``categorical(p_1, …)`` against the
prior column's declared domain (schema only), and its text for every output."""

from __future__ import annotations

import re

from dpmagic.domain.schema import CategoricalColumn, NumericColumn
from dpmagic.errors import ConfigurationError
from dpmagic.statistical.curves import BernoulliPrior, CategoricalPrior, check_prior

__all__ = ["MAX_INT_DOMAIN", "column_domain", "parse_prior", "prior_text", "same_domain"]

#: an int column becomes a categorical domain of its integers; above this many values it is refused
MAX_INT_DOMAIN = 10_000

_PRIOR = re.compile(r"^\s*(bernoulli|categorical)\s*\((.*)\)\s*$", re.I | re.S)


def column_domain(col: object) -> tuple[object, ...]:
    """The finite public domain of the prior column, from the schema only."""
    if isinstance(col, CategoricalColumn):
        return tuple(col.values)
    if isinstance(col, NumericColumn) and col.is_int:
        lo, hi = int(col.lower), int(col.upper)
        if hi - lo + 1 > MAX_INT_DOMAIN:
            raise ConfigurationError(
                f"column {col.name!r} declares {hi - lo + 1:,} integers; a categorical prior over more than "
                f"{MAX_INT_DOMAIN:,} values is not supported",
                hint="choose a column with a small declared domain (a 0/1 or categorical column)",
            )
        return tuple(range(lo, hi + 1))
    name = getattr(col, "name", "?")
    raise ConfigurationError(
        f"column {name!r} is a float column: statistical privacy is computed only for finite (Bernoulli or "
        "categorical) priors",
        hint="use differential privacy for continuous values (%dpsession without --privacy statistical)",
    )


def parse_prior(spec: object, column: CategoricalColumn | NumericColumn) -> BernoulliPrior | CategoricalPrior:
    """The prior of ``column``: ``"bernoulli(p)"``, ``"categorical(p_1, …, p_k)"`` (in the column's declared order
    of values) or a :class:`BernoulliPrior` / :class:`CategoricalPrior`; its domain must be the column's domain."""
    domain = column_domain(column)
    if isinstance(spec, str):
        m = _PRIOR.match(spec)
        if m is None:
            raise ConfigurationError(
                f"unknown prior {spec!r}",
                hint="statistical privacy supports 'bernoulli(p)' and 'categorical(p_1, ..., p_k)' (i.i.d. rows)",
            )
        kind, inner = m.group(1).lower(), m.group(2)
        try:
            probs = [float(x) for x in inner.split(",")] if inner.strip() else []
        except ValueError:
            raise ConfigurationError(f"the prior {spec!r} must list numbers", hint="e.g. bernoulli(0.5)") from None
        if kind == "bernoulli":
            if len(probs) != 1:
                raise ConfigurationError(f"bernoulli(p) takes one probability, got {spec!r}")
            prior: object = BernoulliPrior(probs[0])
        else:
            if len(probs) != len(domain):
                raise ConfigurationError(
                    f"categorical(...) needs one probability per declared value of column {column.name!r} "
                    f"({len(domain)}), got {len(probs)}",
                    hint=f"in the declared order: {list(domain)!r}",
                )
            prior = CategoricalPrior(dict(zip(domain, probs)))
    else:
        prior = spec
    prior = check_prior(prior)
    if not same_domain(prior.domain, domain):
        raise ConfigurationError(
            f"the prior's domain {list(prior.domain)!r} is not column {column.name!r}'s declared domain "
            f"{list(domain)!r}",
            hint="a Bernoulli prior needs a column with values {0, 1} (int bounds [0, 1] or categories [0, 1])",
        )
    return prior


def same_domain(a: tuple[object, ...], b: tuple[object, ...]) -> bool:
    def norm(vals: tuple[object, ...]) -> set[tuple[bool, object]]:
        return {(isinstance(v, str), v) for v in vals}

    return len(a) == len(b) and norm(a) == norm(b)


def prior_text(prior: BernoulliPrior | CategoricalPrior, column: str) -> str:
    """A short public description, e.g. ``Bernoulli(0.5) in column 'smoker'``."""
    if isinstance(prior, BernoulliPrior):
        return f"Bernoulli({prior.p:g}) in column {column!r}"
    items = list(prior.probabilities.items())
    if len(items) > 8:  # long domains: the first and last values (the ledger's sp-open has the same text)
        head = ", ".join(f"{v!r}: {q:g}" for v, q in items[:3])
        return (
            f"categorical over {len(items)} values ({head}, …, {items[-1][0]!r}: {items[-1][1]:g}) in column {column!r}"
        )
    probs = ", ".join(f"{v!r}: {q:g}" for v, q in items)
    return f"categorical({{{probs}}}) in column {column!r}"
