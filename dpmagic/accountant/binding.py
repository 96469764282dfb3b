"""Binding a data set to a ledger: its key, and the first binding that fixes its definition, budget and domain.

The ledger key is the data set's identity (:func:`ledger_key`): never the bound rows.  :func:`open_binding`
records the first binding or checks a later one against it (Session construction; statistical-privacy
sessions key their own events under ``sp|`` + the same key).
"""

from __future__ import annotations

import hashlib
import json

from dpmagic.accountant.currency import Budget
from dpmagic.accountant.ledger import Ledger
from dpmagic.domain.schema import Schema
from dpmagic.errors import BudgetError, ConfigurationError

__all__ = ["ledger_key", "open_binding", "public_record", "unit_record"]


def public_record(schema: Schema) -> str | None:
    """SHA-256 of the schema's public lookup tables (``public_tables``, as declared), or None without any: a
    ledger records it at a data set's first binding, so a later binding with changed lookups is noticed.  Not part
    of the ledger key (:func:`ledger_key`): editing a lookup never hands out a fresh budget."""
    if not schema.public_tables:
        return None
    tables = {name: t.to_dict() for name, t in schema.public_tables.items()}
    return hashlib.sha256(json.dumps(tables, sort_keys=True, default=str).encode()).hexdigest()


def unit_record(schema: Schema) -> dict[str, object] | None:
    """The privacy unit a ledger fixes at a data set's first binding: None for a row-level table (whatever its
    free text), else the person unit's every field that decides the kept rows or the charge — id, max_rows,
    invariant columns (sorted), invariant_mode, per_group bounds and the *effective* truncation salt."""
    unit = schema.person_unit
    if unit is None:
        return None
    return {
        "id": unit.id,
        "max_rows": unit.max_rows,
        "invariant": sorted(unit.invariant),
        "invariant_mode": unit.invariant_mode,
        "per_group": {c: b.to_dict() for c, b in sorted(unit.per_group.items())},
        "salt": unit.salt_for(schema.dataset, schema.table),
    }


def ledger_key(schema: Schema) -> str:
    """The ledger key of a data set: from its declared ``dataset`` id, else from its canonical domain only.

    Never from the rows: the budget protects the people of the data set, whatever frame is bound under its
    id.  Without an id, two data sets with the same domain share one budget (conservative) unless the
    custodian declares different ids.
    """
    identity = f"dataset|{schema.dataset}" if schema.dataset is not None else f"domain|{schema.domain_fingerprint()}"
    return hashlib.sha256(identity.encode()).hexdigest()[:24]


def open_binding(ledger: Ledger, key: str, schema: Schema, budget: Budget, neighbors: str) -> None:
    """Record the first binding of this data set, or check that this binding matches the recorded one.

    The ledger key is the data set's identity: the schema's declared ``dataset`` id, else its canonical
    domain (:func:`ledger_key`) — never the bound rows, so dropping, duplicating or editing a row, or
    editing the schema's free text, cannot hand out a fresh budget for the same people.  Its privacy
    definition, budget and neighbouring relation are fixed by its first binding; binding it with another
    definition or budget is refused: changing the budget is a custodian action (``dpmagic ledger
    set-budget`` / ``reset``), recorded in the ledger.  Nothing computed from the rows (no hash, no row
    count) is written: the ledger file and its exports are not private data.
    """
    cur = budget.currency
    domain = schema.domain_fingerprint()
    if not ledger.can_append:
        raise ConfigurationError(
            f"the ledger at {ledger.path} is keyed by its custodian: a session charging it needs the custodian key",
            hint="the custodian provides it to the kernel: $DPMAGIC_LEDGER_KEY_FILE",
        )
    with ledger.transaction():
        opening = ledger.opening(key)
        if opening is None:
            ledger.append(
                key,
                "open",
                {
                    "dataset": schema.dataset,
                    "table": schema.table,
                    "domain": domain,
                    "definition": cur.definition,
                    "parameter": cur.parameter,
                    "budget": budget.total,
                    "delta": budget.delta,
                    "neighbors": neighbors,
                    "unit": unit_record(schema),
                }
                | ({"public": public_record(schema)} if schema.public_tables else {}),
            )
            return
    if opening.get("domain") != domain:
        raise ConfigurationError(
            f"data set {schema.dataset!r} was first bound in this ledger with another domain (columns, "
            "categories or bounds); its recorded charges are about that domain",
            hint="bind the schema it was opened with, or have the custodian declare a new 'dataset' id",
        )
    if opening.get("public") != public_record(schema):
        raise ConfigurationError(
            "this data set was first bound in this ledger with other public lookup tables ('public_tables'); the "
            "answers recorded under it were computed with those lookups",
            hint="bind the schema it was opened with; changing a public lookup is a custodian action: declare a new "
            "'dataset' id (or reset the ledger)",
        )
    if opening["definition"] != cur.definition:
        raise BudgetError(
            f"this data set's ledger is kept in {opening['parameter']} ({opening['definition']}); it cannot be "
            f"re-bound under {cur.definition}",
            hint=f"bind with --budget {opening['parameter']}=..., or use another ledger for a separate, throw-away "
            "budget (--ledger memory, or --ledger PATH; Session(..., ledger=None))",
        )
    recorded = ledger.budget_of(key)
    if recorded is not None and abs(recorded - budget.total) > 1e-12 * max(1.0, recorded):
        raise BudgetError(
            f"this data set's ledger has a budget of {cur.parameter}={recorded:g}, not {budget.total:g}: "
            "changing a budget is a custodian action",
            hint=f"bind with --budget {cur.parameter}={recorded:g} to continue this budget, ask the custodian "
            "(dpmagic ledger set-budget), or use another ledger for a separate, throw-away budget (--ledger memory, "
            "or --ledger PATH; Session(..., ledger=None))",
        )
    recorded_unit = opening.get("unit")  # absent in a ledger opened before units were recorded: row level
    if recorded_unit != unit_record(schema):
        was = "one row" if recorded_unit is None else f"one person ({recorded_unit})"
        raise ConfigurationError(
            f"this data set was first bound in this ledger with another privacy unit ({was}); its recorded charges "
            "were computed on the rows that unit kept and are counted per that unit, so they cannot be re-read "
            "under another one",
            hint="bind the schema it was opened with; changing the privacy unit is a custodian action: declare a "
            "new 'dataset' id (or reset the ledger)",
        )
    if opening.get("neighbors", "add-remove") != neighbors:
        raise ConfigurationError(f"this data set's ledger uses {opening.get('neighbors')} neighbours, not {neighbors}")
