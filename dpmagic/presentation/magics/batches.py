"""``%%dpbatch``: a whole workload at once, one charge (the batches family)."""

from __future__ import annotations

from typing import Any

from IPython.core.magic import cell_magic, magics_class
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
    @cell_magic
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
        reading nothing.  At most 10,000 cells and 200,000 counts.  The charge covers the WHERE region only
        (disjoint regions compose in parallel) and is made before any row is read.
        """
        args = call.args
        costs = {k: cost_arg(getattr(args, k), k) for k in ("epsilon", "rho", "mu")}
        named = [f"--{k}" for k, v in costs.items() if v is not None]
        if args.rmse is not None and named:
            raise ConfigurationError(
                f"--rmse and {named[0]} together: give a cost or an accuracy target, not both",
                hint="--rmse T charges the smallest cost whose expected RMSE is at most T",
            )
        workload, where = split_batch_cell(call.body or "")
        out = session.batch(
            workload, where=where, strategy=args.strategy, rmse=args.rmse, dry_run=args.dry_run, **costs
        )
        if args.dry_run:
            return self.preview(out, call.target)
        return self.deliver(out, call.target)
