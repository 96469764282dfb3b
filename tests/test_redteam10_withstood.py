"""Red team (session 10): attacks the code withstood, kept as regression tests.

* the shared COUNT / centred SUM / sum-of-squares releases of a query (:mod:`dpmagic.aggregates.moments`) never
  cost more together than the query's cost: each release's actual loss, computed back from its calibrated noise
  (pure: Δ₁/b; zCDP: Δ₂²/(2σ²)), summed, is at most the cost charged — row and person level, both relations;
* idempotency keys are per analyst and per request: another analyst's key is not theirs to replay, the same key
  with another body is refused (422) and charges nothing, a replay charges nothing;
* a lookup JOIN never multiplies a row: a non-unique or null lookup join column is refused before any charge.
"""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest
from conformance import PERSON_TINY, TINY
from server_support import write_config

from dpmagic.accountant.currency import CURRENCIES
from dpmagic.domain.schema import Schema
from dpmagic.errors import SchemaError, UnsupportedQueryError
from dpmagic.presentation.server.config import load_config
from dpmagic.presentation.server.state import Custodian
from dpmagic.query.sql import parse_query
from dpmagic.releases.query import QueryMechanism

SELECTS = [
    "COUNT(*), AVG(x)",
    "AVG(x), VAR(x), STDDEV(f)",
    "SUM(x), AVG(x), COUNT(*), VAR(x)",
    "SUM(f), AVG(f)",
    "COUNT(*), SUM(x), SUM(f), AVG(f), STDDEV(f), VAR(x)",
]


@pytest.mark.parametrize("schema", [TINY, PERSON_TINY], ids=["rows", "persons"])
@pytest.mark.parametrize("select", SELECTS)
def test_shared_moment_releases_cost_no_more_than_the_query(schema: Schema, select: str) -> None:
    cost = 0.7
    for group, definition, replace_one in itertools.product(("", "g"), ("pure", "zcdp"), (False, True)):
        key, gb = ("g, ", " GROUP BY g") if group else ("", "")
        q = parse_query(f"SELECT {key}{select} FROM t WHERE x >= 0{gb}", schema)
        m = QueryMechanism(q, schema, CURRENCIES[definition], cost, replace_one=replace_one)
        spent = 0.0
        for noise in m.noise.values():
            d = noise.calibrated or noise.sensitivity
            spent += d / noise.scale if definition == "pure" else d * d / (2.0 * noise.scale**2)
        assert spent <= cost * (1 + 1e-9), (select, group, definition, replace_one, spent)


@pytest.fixture
def custodian(tmp_path: Path) -> Custodian:
    return Custodian(load_config(write_config(tmp_path, budget="epsilon=1.0", quota=0.6)))


def test_idempotency_keys_are_per_analyst_and_per_request(custodian: Custodian) -> None:
    body = {"sql": "SELECT COUNT(*) FROM pums WHERE age > 30", "epsilon": 0.1}
    status, first, read = custodian.query("alice", "pums", body, "k1")
    assert status == 200 and read
    # bob's request with alice's key is bob's own: charged to bob, never alice's stored answer
    status, bobs, read = custodian.query("bob", "pums", body, "k1")
    assert status == 200 and read and bobs["entry_id"] != first["entry_id"]
    spent = custodian.budget("alice", "pums")["global"]["spent"]
    # the same key with another body: refused, nothing charged
    other = {"sql": "SELECT COUNT(*) FROM pums WHERE age > 50", "epsilon": 0.1}
    status, reply, read = custodian.query("alice", "pums", other, "k1")
    assert status == 422 and not read and "another request" in reply["error"]["message"]
    # a replay: the stored answer, charged nothing
    status, again, read = custodian.query("alice", "pums", body, "k1")
    assert status == 200 and not read and again == first
    assert custodian.budget("alice", "pums")["global"]["spent"] == spent
    assert custodian.budget("alice", "pums")["quota"]["spent"] == pytest.approx(0.1)


LOOKUP_SPEC = {
    "table": "t",
    "columns": {"region": {"type": "int", "lower": 1, "upper": 3}, "age": {"type": "int", "lower": 0, "upper": 9}},
    "public_tables": {
        "regions": {
            "key": "code",
            "rows": [
                {"code": 1, "zone": "A", "alt": 7},
                {"code": 2, "zone": "A", "alt": 7},
                {"code": 3, "zone": "B", "alt": None},
            ],
        }
    },
}


@pytest.mark.parametrize(
    "rows",
    [
        [{"code": 1, "zone": "A"}, {"code": 1, "zone": "B"}],  # a duplicate key
        [{"code": 1, "zone": "A"}, {"code": 1.0, "zone": "B"}],  # the same key as int and float
        [{"code": None, "zone": "A"}],  # a null key
    ],
)
def test_a_lookup_whose_key_could_multiply_a_row_is_refused_at_load(rows: list[dict[str, object]]) -> None:
    spec = {**LOOKUP_SPEC, "public_tables": {"regions": {"key": "code", "rows": rows}}}
    with pytest.raises(SchemaError):
        Schema.from_dict(spec)


@pytest.mark.parametrize("on", ["t.region = r.alt", "t.region = r.zone"])
def test_a_join_on_a_non_unique_or_null_lookup_column_is_refused(on: str) -> None:
    schema = Schema.from_dict(LOOKUP_SPEC)
    with pytest.raises(UnsupportedQueryError):
        parse_query(f"SELECT COUNT(*) FROM t JOIN regions r ON {on}", schema)


def test_two_served_data_sets_with_one_ledger_key_share_one_global_budget(tmp_path: Path) -> None:
    """The custodian serves the same data twice (ids pums and pums2, no 'dataset' id: one ledger key from the
    domain): two sessions, one global budget — the second data set cannot hand out a fresh budget."""
    cfg = write_config(tmp_path, budget="epsilon=1.0", quota=1.0)
    text = cfg.read_text()
    i, j = text.index("[[datasets]]"), text.index("[[analysts]]")
    cfg.write_text(text[:j] + text[i:j].replace('id = "pums"', 'id = "pums2"') + text[j:])
    c = Custodian(load_config(cfg))
    assert c.hosts["pums"].session.ledger_key == c.hosts["pums2"].session.ledger_key
    assert c.query("alice", "pums", {"sql": "SELECT COUNT(*) FROM pums", "epsilon": 0.6}, None)[0] == 200
    status, reply, read = c.query("bob", "pums2", {"sql": "SELECT COUNT(*) FROM pums2", "epsilon": 0.6}, None)
    assert status == 409 and not read, reply
    assert c.budget("bob", "pums2")["global"]["spent"] == pytest.approx(0.6)
