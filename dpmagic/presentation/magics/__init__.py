"""IPython magics: ``%dpsession``, ``%%dpquery``, ``%%dpbatch``, ``%dpbudget``, ``%dpplot`` (the thin presentation
layer), one module per family:

==================  =========================================================================================
:mod:`.sessions`    ``%dpsession``: bind data, schema and budget (``--neighbors``, ``--privacy``, the panel)
:mod:`.queries`     ``%%dpquery``: one query, or a decision query (``--fnr``); the option combinations
:mod:`.batches`     ``%%dpbatch``: a workload, one charge
:mod:`.budget`      ``%dpbudget``, ``%dpplot``, ``%dpconsistent`` and the live panel
:mod:`.statistical` every magic on a statistical-privacy session (NOT differential privacy), chosen once by
                    :func:`.base.routed`
:mod:`.base`        the bound session, one-line errors, the parsed call, the composition of the families
==================  =========================================================================================

Conventions follow JupySQL: options through ``magic_arguments`` (so ``%dpquery?`` shows real help), defaults
through traitlets (``%config DPMagic.default_bound = "chromatic"``), and ``name <<`` at the start of a
``%%dpquery`` line assigns the answer's DataFrame to a variable.  Errors are shown as one readable message
(IPython's ``UsageError``, no traceback) unless ``%config DPMagic.debug = True``.  :class:`DPMagic` is the one
configurable (its traits below) and the one ``Magics`` instance ``%load_ext dpmagic`` registers: the family
classes composed by :func:`.base.compose_magics`.
"""

from __future__ import annotations

from typing import Any

from traitlets import Bool, CaselessStrEnum, Float, TraitError, Unicode, validate

from dpmagic.presentation.budget_report import budget_summary
from dpmagic.presentation.magic_cells import split_batch_cell
from dpmagic.presentation.magics.base import compose_magics, current_session
from dpmagic.presentation.magics.batches import BatchMagics
from dpmagic.presentation.magics.budget import PANEL_CHOICES, BudgetMagics
from dpmagic.presentation.magics.queries import QueryMagics
from dpmagic.presentation.magics.sessions import SessionMagics

# budget_summary and split_batch_cell are re-exported (their homes: dpmagic.presentation.budget_report,
# dpmagic.presentation.magic_cells)
__all__ = ["DPMagic", "current_session", "budget_summary", "split_batch_cell"]


@compose_magics
class DPMagic(SessionMagics, QueryMagics, BatchMagics, BudgetMagics):
    """Differentially private queries on a DataFrame, inside a hard budget."""

    default_bound = CaselessStrEnum(
        ["exact", "clique", "chromatic", "sequential"],
        default_value="exact",
        help="Bound charged by new sessions: exact, clique, chromatic or sequential.",
    ).tag(config=True)
    time_limit = Float(
        10.0, help="Seconds the exact overlap search may take before the proven upper bound is charged."
    ).tag(config=True)
    debug = Bool(False, help="Show full tracebacks instead of one-line errors.").tag(config=True)
    widget = Bool(True, help="Display the live budget panel when %dpsession binds a session.").tag(config=True)
    panel = CaselessStrEnum(
        list(PANEL_CHOICES),
        default_value="auto",
        help="Where the live budget panel goes: 'auto' (JupyterLab's right side bar via the sidecar package when "
        "dpmagic's JupyterLab extension reports JupyterLab, else under the %dpsession cell: Notebook 7 has no side "
        "panel), 'side' (the side bar; under the cell in Notebook 7 or without sidecar), 'inline' (under the "
        "%dpsession cell) or 'none'. Where widgets cannot render (terminal IPython) a text panel is printed.",
    ).tag(config=True)
    postprocess = Unicode(
        "",
        help="Free post-processing of every answer (noisy values and declared bounds only, no charge): a comma "
        "list of 'integer' (counts as whole numbers) and 'nonnegative' (counts and non-negative SUMs clipped at 0).",
    ).tag(config=True)
    default_definition = CaselessStrEnum(
        ["pure", "zcdp", "gdp"],
        default_value="pure",
        help="Privacy definition of a bare --budget number: pure (ε), zcdp (ρ) or gdp (μ).",
    ).tag(config=True)
    default_budget = Unicode("", help="Budget used when %dpsession gets no --budget, e.g. 'epsilon=1.0'.").tag(
        config=True
    )
    ledger = Unicode(
        "",
        help="Ledger file for new sessions ('' = $DPMAGIC_LEDGER or ~/.local/share/dpmagic/ledger.sqlite; "
        "'memory' = not durable, for demos and tests).",
    ).tag(config=True)

    @validate("time_limit")
    def _check_time_limit(self, proposal: Any) -> float:
        value = proposal["value"]
        if not (value > 0 and value < float("inf")):
            raise TraitError(f"DPMagic.time_limit must be a positive number of seconds, got {value!r}")
        return float(value)

    @validate("postprocess")
    def _check_postprocess(self, proposal: Any) -> str:
        options = [o.strip().lower() for o in proposal["value"].split(",") if o.strip()]
        wrong = [o for o in options if o not in ("integer", "nonnegative")]
        if wrong:
            raise TraitError(f"DPMagic.postprocess: unknown option {wrong[0]!r}; use 'integer' and/or 'nonnegative'")
        return ",".join(options)

    def __init__(self, shell: Any = None, **kwargs: Any) -> None:
        # Magics.__init__ appends the instance to shell.configurables and reads its config from the shell's, so
        # `%config DPMagic.<trait> = …` reaches it
        super().__init__(shell=shell, **kwargs)
