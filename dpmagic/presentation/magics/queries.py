"""``%%dpquery`` (and the line form ``%dpquery``): one SQL query, or a decision query with ``--fnr`` (the
queries family).  Every option is checked against the others before the session is asked anything, so a
refused combination charges nothing."""

from __future__ import annotations

import sys
import warnings
from typing import Any

from IPython.core.magic import line_cell_magic, magics_class
from IPython.core.magic_arguments import argument, magic_arguments

from dpmagic.errors import ConfigurationError
from dpmagic.presentation.magic_cells import cost_arg
from dpmagic.presentation.magics.base import MagicCall, MagicsBase, friendly, routed

__all__ = ["QueryMagics", "DECISION_OPTIONS", "given"]

#: the options of a decision query (``--fnr`` required with any of them)
DECISION_OPTIONS = ("fnr", "fpr", "max_epsilon", "max_group_size")
#: options of an answered (noisy) query that a decision query does not take
ANSWER_OPTIONS = ("epsilon", "rho", "mu", "ci", "min_rows", "fresh", "nonneg", "integer")


def given(args: Any, names: tuple[str, ...]) -> list[str]:
    """The options among ``names`` that the call gives, spelled as on the line (``--max-epsilon``)."""
    out = []
    for k in names:
        v = getattr(args, k)
        if v is not None and v is not False:
            out.append("--" + k.replace("_", "-"))
    return out


def check_combination(args: Any) -> None:
    """Refuse options outside their mode, before anything is charged: decision options without ``--fnr``, a
    decision query with a cost or a post-processing option, ``--min-rows`` without ``--ci``, ``--dry-run
    --fresh`` (a dry run charges nothing, so there is nothing to draw anew)."""
    decision = given(args, DECISION_OPTIONS)
    if decision:
        if args.fnr is None:
            raise ConfigurationError(
                f"{decision[0]} applies to a decision query, which needs --fnr (its false-negative target β)",
                hint="%%dpquery --fnr 0.05 [--fpr 0.1] … with SELECT g … GROUP BY g HAVING …",
            )
        wrong = given(args, ANSWER_OPTIONS)
        if wrong:
            raise ConfigurationError(
                f"a decision query (--fnr) does not take {wrong[0]}: it sets its own cost and releases which groups "
                "satisfy HAVING",
                hint="cap its cost with --max-epsilon",
            )
    if args.min_rows is not None and args.ci is None:
        raise ConfigurationError("--min-rows applies with --ci (an accuracy target on AVG)")
    if args.dry_run and args.fresh:
        raise ConfigurationError(
            "--dry-run and --fresh together: a dry run draws nothing and charges nothing",
            hint="preview with --dry-run, then run the cell with --fresh",
        )


@magics_class
class QueryMagics(MagicsBase):
    """``%%dpquery``."""

    @magic_arguments()
    @argument(
        "--epsilon", "-e", default=None, help="Cost in ε (pure-DP sessions), or 'max' for all that is affordable here."
    )
    @argument("--rho", "-r", default=None, help="Cost in ρ (zCDP sessions), or 'max'.")
    @argument("--mu", "-m", default=None, help="Cost in μ (GDP sessions), or 'max'.")
    @argument(
        "--ci",
        type=float,
        default=None,
        help="Accuracy first: target half-width of the 95%% interval, in the answer's units.",
    )
    @argument("--min-rows", type=int, default=None, help="With --ci on AVG: a public lower bound on each group's size.")
    @argument(
        "--dry-run",
        action="store_true",
        help="Preview the cost, the overlapping queries and the worst-case row; spend nothing.",
    )
    @argument(
        "--fresh", action="store_true", help="Draw (and charge) anew even if this exact query was answered before."
    )
    @argument("--out", "-o", default=None, help="Assign the answer's DataFrame to this variable (same as 'name <<').")
    @argument(
        "--nonneg",
        action="store_true",
        help="Free post-processing: clip counts (and SUMs of non-negative columns) and their intervals at 0.",
    )
    @argument("--integer", action="store_true", help="Free post-processing: counts as whole numbers.")
    @argument("--fnr", type=float, default=None, help="Decision query (GROUP BY … HAVING): false-negative target β.")
    @argument("--fpr", type=float, default=None, help="Decision query: false-positive target α (ProBE's estimate).")
    @argument("--max-epsilon", type=float, default=None, help="Decision query: cap on the pure-ε loss of a row.")
    @argument("--max-group-size", type=int, default=None, help="Decision query: public bound on a group's size.")
    @line_cell_magic
    @friendly
    @routed(assign=True, sql_in_line=True)
    def dpquery(self, call: MagicCall, session: Any) -> Any:
        """Answer a SQL query with differential privacy.

        ::

            %%dpquery [name <<] [--epsilon E | --rho R | --mu M | --ci T [--min-rows N]] [--dry-run | --fresh]
                      [--nonneg] [--integer] [--out name]
            SELECT sex, COUNT(*) AS n, AVG(age) FROM adult WHERE age >= 30 GROUP BY sex

            %%dpquery [name <<] --fnr B [--fpr A] [--max-epsilon E] [--max-group-size N] [--dry-run]
            SELECT race FROM adult GROUP BY race HAVING COUNT(*) > 1000 AND AVG(age) < 40

        The first is answered with noise; the second (a decision query, ProBE) says which groups satisfy
        HAVING, with false-negative rate at most B (proven) and false-positive rate about A (estimated).

        The SQL answered (one statement on the bound table; the line form ``%dpquery ... SELECT ...`` too)::

            SELECT [TOP n] item, ... FROM table [WHERE ...] [GROUP BY key, ...]
                   [HAVING ...] [ORDER BY ... [ASC|DESC]] [LIMIT n]

        - aggregates, each a noisy release: COUNT(*), COUNT(col), COUNT(DISTINCT col), SUM, AVG,
          VAR / VARIANCE / VAR_POP, STDDEV / STD / STDDEV_POP, MEDIAN, QUANTILE(col, p),
          PERCENTILE_CONT(p) WITHIN GROUP (ORDER BY col), MIN, MAX (quantiles, MIN and MAX not under μ-GDP);
          CLAMP(col, lo, hi) or LEAST(GREATEST(col, lo), hi) inside them tightens the bounds
        - SELECT items: group keys, aggregates and arithmetic, CAST, ROUND, CASE ... on them (free), AS aliases
        - GROUP BY: categorical and int columns (one cell per declared value inside the WHERE region,
          zero-filled, at most 10,000 cells) and binned expressions of one column: FLOOR(age / 10) * 10,
          WIDTH_BUCKET, CASE WHEN
        - WHERE: =, <> / !=, <, <=, >, >=, BETWEEN, IN, NOT IN, LIKE, IS NULL, NOT, AND, OR; any predicate on
          one column; OR across columns is answered exactly and charged over the smallest box covering it
        - HAVING, ORDER BY (names, aliases, positions), LIMIT n / TOP n: post-processing of the noisy values
          (free; HAVING does not lower the cost); the values they read are shown with their intervals, and a
          note names the groups whose membership or order the intervals do not settle
        - every aggregate has a 95% interval: COUNT, SUM, AVG and COUNT(DISTINCT) from their noise; VAR and
          STDDEV from their three releases' intervals; quantiles, MIN and MAX from a noisy histogram of the
          candidates released in the same charge (each takes two releases of the query's cost); a value the
          intervals cannot support is NaN with a note (an AVG, quantile, MIN or MAX of a group that may be empty)
        - GROUP BY keys alone (SELECT educ FROM t WHERE ... GROUP BY educ): the declared keys inside the WHERE
          region, public, free (no data read, nothing charged)
        - refused with one message, before any charge: row-level SELECTs (SELECT *, DISTINCT, no aggregate
          and no GROUP BY),
          JOIN, subqueries (but a scalar one in WHERE: two releases), UNION, window functions, OFFSET, predicates
          comparing two columns

        String values take single quotes ('Female'); column names may be double-quoted ("hours-per-week").
        The cost is charged before any row is read; a query that would exceed the budget is refused and costs
        nothing.  Re-running an identical cell returns the stored answer for free (``--fresh`` draws anew).
        """
        args = call.args
        check_combination(args)
        sql = call.body or ""
        if args.fnr is not None:
            answer = session.decide(
                sql,
                fnr=args.fnr,
                fpr=args.fpr,
                max_epsilon=args.max_epsilon,
                dry_run=args.dry_run,
                max_group_size=args.max_group_size,
            )
            return self.deliver(answer, call.target)
        costs = {k: cost_arg(getattr(args, k), k) for k in ("epsilon", "rho", "mu")}
        options = [o.strip() for o in self.postprocess.split(",") if o.strip()]
        options += [o for o, on in (("nonnegative", args.nonneg), ("integer", args.integer)) if on]
        from dpmagic.releases.postprocess import POSTPROCESS_OPTIONS

        bad = [o for o in options if o not in POSTPROCESS_OPTIONS]
        if bad:
            raise ConfigurationError(
                f"DPMagic.postprocess: unknown option(s) {bad}; choose from {', '.join(POSTPROCESS_OPTIONS)}"
            )
        # public check before anything is charged: a WHERE clause empty on the declared domain (schema only)
        from dpmagic.query.composed import split_conditions
        from dpmagic.query.regions import EmptyRegionWarning, empty_region_message
        from dpmagic.query.scalar import scalar_subquery

        # a scalar subquery, or conditional aggregates of different conditions: the widest region (the session
        # checks the rest)
        scalar = scalar_subquery(sql)
        composed = split_conditions(sql) if scalar is None else None
        parsed = session.parse(
            scalar.outer(None) if scalar is not None else composed.widest if composed is not None else sql
        )
        empty = None if parsed.is_public else empty_region_message(parsed)
        if empty is not None:
            print(f"⚠ warning: {empty}", file=sys.stderr, flush=True)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", EmptyRegionWarning)  # already said above, before the charge
            if args.dry_run:
                return self.preview(session.preview(sql, ci=args.ci, min_rows=args.min_rows, **costs), call.target)
            result = session.query(
                sql, ci=args.ci, min_rows=args.min_rows, fresh=args.fresh, postprocess=tuple(options), **costs
            )
        return self.deliver(result, call.target)
