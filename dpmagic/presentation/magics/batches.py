"""``%%dpbatch``: a whole workload at once, one charge (the batches family)."""

from __future__ import annotations

from typing import Any

from IPython.core.magic import line_cell_magic, magics_class
from IPython.core.magic_arguments import argument, magic_arguments

from dpmagic.errors import ConfigurationError
from dpmagic.presentation.magic_cells import cost_arg, split_batch_cell
from dpmagic.presentation.magics.base import MagicCall, MagicsBase, friendly, routed

__all__ = ["BatchMagics"]


@magics_class
class BatchMagics(MagicsBase):
    """``%%dpbatch``."""

    @magic_arguments()
    @argument("--epsilon", "-e", default=None, help="Cost in ε (pure-DP sessions), or 'max'.")
    @argument("--rho", "-r", default=None, help="Cost in ρ (zCDP sessions), or 'max'.")
    @argument("--mu", "-m", default=None, help="Cost in μ (GDP sessions), or 'max'.")
    @argument(
        "--strategy",
        "-s",
        default="auto",
        help="auto (smallest expected RMSE), identity, workload, hierarchical, opt, opt_gaussian (zCDP/GDP, one "
        "ordered column).",
    )
    @argument("--rmse", type=float, default=None, help="Accuracy first: the smallest cost with expected RMSE ≤ this.")
    @argument("--dry-run", action="store_true", help="Preview strategies, expected RMSE and the charge; spend nothing.")
    @argument("--out", "-o", default=None, help="Assign the answer's DataFrame to this variable (same as 'name <<').")
    @argument("--keep", "-k", default=None, help="Keep the released estimate under this name for free follow-ups.")
    @argument(
        "--from", "-f", dest="source", default=None, help="Line form: answer from the estimate kept under this name."
    )
    @argument("--column", "-c", default=None, help="Line form: the column of a range/prefix/point (several columns).")
    @argument("follow", nargs="*", help="Line form: range LO HI | prefix V | point V.")
    @line_cell_magic
    @friendly
    @routed(assign=True)
    def dpbatch(self, call: MagicCall, session: Any) -> Any:
        """Answer a whole workload of counts at once, for one charge (the matrix mechanism with HDMM strategies).

        ::

            %%dpbatch [name <<] [--epsilon E | --rho R | --mu M | --rmse T] [--strategy S] [--dry-run] [--out name]
            prefix(age) * identity(sex) + marginals([race, education], 1)
            WHERE "hours-per-week" >= 40

        The cell is a workload over declared columns, then optionally one WHERE line (the region it counts in):

        - identity(a, b, ...): one count per combination of the columns' declared values
        - total(a, ...): the total over the columns (total(): the grand total)
        - prefix(a), all_range(a), width_range(a, k): ranges over an int column (a ≤ v; every lo ≤ a ≤ hi;
          every window of k consecutive values)
        - marginals([a, b, c], k): every marginal on at most k of the columns
        - ``*`` combines distinct columns (Kronecker product), ``+`` stacks workloads, parentheses group

        or several ``SELECT COUNT(*) FROM t WHERE <box>;`` statements, measured together with noise calibrated
        to their exact batch sensitivity.

        The strategy (``--strategy``, default auto: the smallest expected RMSE) is measured once with noise and
        every workload count is answered from it with a 95% interval; ``--rmse T`` asks for the smallest cost
        whose expected RMSE is at most T; ``--dry-run`` shows each strategy's expected RMSE and the charge,
        reading nothing.  At most 10,000 cells; over several columns at most 200,000 counts (one column has no
        limit: beyond 200,000 counts the estimate's cells are listed and every count is asked from it).  The
        charge covers the WHERE region only (disjoint regions compose in parallel) and is made before any row is
        read.

        ``--keep NAME`` keeps the released estimate; any count over its columns is then answered from it for free
        (no charge, consistent with the batch, with a 95% interval), on one line::

            %dpbatch --from NAME range 10 200        # NAME's column between 10 and 200
            %dpbatch --from NAME prefix 65           # at most 65
            %dpbatch --from NAME point 'Male' --column sex
        """
        args = call.args
        if call.body is None:
            return self._follow_up(call, session)
        if args.source is not None or args.follow or args.column is not None:
            raise ConfigurationError(
                "%%dpbatch: --from, --column and follow-up words belong to the line form",
                hint="%dpbatch --from NAME range LO HI (one line, one %)",
            )
        costs = {k: cost_arg(getattr(args, k), k) for k in ("epsilon", "rho", "mu")}
        named = [f"--{k}" for k, v in costs.items() if v is not None]
        if args.rmse is not None and named:
            raise ConfigurationError(
                f"--rmse and {named[0]} together: give a cost or an accuracy target, not both",
                hint="--rmse T charges the smallest cost whose expected RMSE is at most T",
            )
        workload, where = split_batch_cell(call.body or "")
        out = session.batch(
            workload,
            where=where,
            strategy=args.strategy,
            rmse=args.rmse,
            dry_run=args.dry_run,
            keep=args.keep,
            **costs,
        )
        if args.dry_run:
            return self.preview(out, call.target)
        return self.deliver(out, call.target)

    def _follow_up(self, call: MagicCall, session: Any) -> Any:
        """``%dpbatch --from NAME range LO HI | prefix V | point V [--column C]``: free, from the kept estimate."""
        args = call.args
        others = [f"--{k.replace('_', '-')}" for k in ("epsilon", "rho", "mu", "rmse", "keep") if getattr(args, k)]
        others += ["--dry-run"] if args.dry_run else []
        others += ["--strategy"] if args.strategy != "auto" else []
        if args.source is None:
            raise ConfigurationError(
                "%dpbatch (one line) answers from a kept estimate: give --from NAME",
                hint="%dpbatch --from NAME range LO HI; a new batch is a %%dpbatch cell",
            )
        if others:
            raise ConfigurationError(f"%dpbatch --from: {others[0]} does not apply (a follow-up costs nothing)")
        est = session.estimate(args.source)
        words = list(args.follow)
        forms = {"range": 2, "prefix": 1, "point": 1}
        if not words or words[0].lower() not in forms or len(words) != 1 + forms[words[0].lower()]:
            raise ConfigurationError(
                f"%dpbatch --from {args.source}: expected range LO HI, prefix V or point V, got {' '.join(words)!r}"
            )
        kind = words[0].lower()
        vals = [_value(w) for w in words[1:]]
        out = getattr(est, kind)(*vals, column=args.column)
        return self.deliver(out, call.target)


def _value(word: str) -> object:
    """A follow-up value: an integer, else the word (quotes removed) for a categorical value."""
    w = word.strip()
    if len(w) >= 2 and w[0] == w[-1] and w[0] in "'\"":
        return w[1:-1]
    try:
        return int(w)
    except ValueError:
        return w
