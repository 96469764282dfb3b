"""The ``dpmagic`` command line.

``dpmagic overlap --schema SCHEMA.json QUERIES [--json] [--neighbors add-remove|replace] [--timeout SECONDS]``
analyses a query log for a data custodian (docs/design.md §3.2): it needs only the public schema and the queries,
never the data, and reports the sequential sum, the maximum overlap (with a witness row), the clique and
colouring bounds and the utility gain.  Exit status 0 on success; 2 with a one-line message on stderr for a
bad schema or query.

``dpmagic ledger show|verify|export|backup|keygen|init|upgrade|set-budget|reset`` inspects and administers a
ledger file (README, "The ledger" and "Threat model"); ``--key-file`` gives the custodian key of a keyed ledger.

One module (about 540 lines) because it is the command line's argument parsing and its small command bodies,
each a few lines over the library's public API (bounds: :class:`~dpmagic.accountant.bounds.BoundsSummary`;
reports: :mod:`dpmagic.presentation.reports`; ledger: :mod:`dpmagic.accountant.ledger`).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from dpmagic.accountant.bounds import BoundsSummary
from dpmagic.domain.schema import Schema
from dpmagic.domain.sets import Box
from dpmagic.errors import DPMagicError, QueryError

__all__ = ["main", "load_workload", "analyse", "split_sql"]


@dataclass(frozen=True)
class WorkloadItem:
    sql: str
    weight: float
    box: Box


def split_sql(text: str) -> list[str]:
    """Split a ``.sql`` text on the ``;`` outside strings, quoted identifiers and comments; statements that are
    blank or only comments are dropped.  Each statement is then parsed once, by
    :func:`~dpmagic.query.sql.parse_query` (splitting with sqlglot parsed and regenerated every statement
    first: ≈ 1.3 ms a statement).  ``'…'``, ``"…"`` and `````…````` quote (doubled quotes escape), ``--`` comments
    run to the end of the line, ``/* … */`` comments to their end.  One regular-expression pass, ``O(len(text))``.
    """
    out: list[str] = []
    start = 0
    meaningful = False  # the current statement has something other than whitespace and comments
    for m in _SQL_TOKEN.finditer(text):
        kind = m.lastgroup
        if kind == "end":
            if meaningful:
                out.append(text[start : m.start()].strip())
            start, meaningful = m.end(), False
        elif kind == "quoted" or (kind == "other" and not m.group().isspace()):
            meaningful = True
    if meaningful:
        out.append(text[start:].strip())
    return out


#: the lexical pieces :func:`split_sql` tells apart (an unterminated quote or comment runs to the end)
_SQL_TOKEN = re.compile(
    r"""(?P<quoted>'(?:[^']|'')*'?|"(?:[^"]|"")*"?|`(?:[^`]|``)*`?)"""
    r"|(?P<comment>--[^\n]*\n?|/\*.*?(?:\*/|\Z))"
    r"|(?P<end>;)"
    r"|(?P<other>[^'\"`;/-]+|[/-])",
    re.S,
)


def load_workload(path: Path, schema: Schema) -> list[WorkloadItem]:
    """Read a ``.sql`` (statements separated by ``;``, weight 1) or ``.jsonl`` (``{"sql", "weight"}``) log."""
    from dpmagic.query.sql import parse_query

    if not path.is_file():
        raise QueryError(f"query file {str(path)!r} does not exist")
    text = path.read_text(encoding="utf-8")
    raw: list[tuple[str, float, str]] = []
    if path.suffix.lower() == ".jsonl":
        for lineno, line in enumerate(text.splitlines(), 1):
            if not line.strip():
                continue
            where = f"line {lineno}"
            try:
                obj = json.loads(line)
            except json.JSONDecodeError as exc:
                raise QueryError(f"{where}: not valid JSON ({exc.msg})") from None
            if not isinstance(obj, dict) or not isinstance(obj.get("sql"), str):
                raise QueryError(f"{where}: expected an object with a string 'sql'")
            w = obj.get("weight", 1.0)
            if isinstance(w, bool) or not isinstance(w, (int, float)) or not math.isfinite(w) or w <= 0:
                raise QueryError(f"{where}: weight must be a positive number, got {w!r}")
            raw.append((obj["sql"], float(w), where))
    else:
        for i, stmt in enumerate(split_sql(text), 1):
            raw.append((stmt, 1.0, f"statement {i}"))
    items = []
    for sql, w, where in raw:
        try:
            q = parse_query(sql, schema)
        except DPMagicError as exc:
            raise type(exc)(f"{where}: {exc}") from None
        items.append(WorkloadItem(sql, w, q.coverage))
    return items


def analyse(
    items: list[WorkloadItem], schema: Schema, *, timeout: float = 60.0, neighbors: str = "add-remove"
) -> dict[str, Any]:
    """The JSON object of docs/design.md §3.2 for a parsed workload; for a person-level schema also ``unit``,
    ``person`` (the three bounds of one person's worst case) and ``charged`` (their minimum)."""

    t0 = time.perf_counter()
    boxes, weights = [it.box for it in items], [it.weight for it in items]
    summary = _row_summary(boxes, weights, schema, timeout, neighbors)
    unit = schema.person_unit
    if unit is not None and items:
        # person level (docs/people.md §3): min(the bound of the boxes projected on the id and invariant columns,
        # K′ × the bound of the full boxes, Σw)
        from dpmagic.accountant.accountant import person_bounds, project_box

        projected = _row_summary([project_box(b, unit.separating) for b in boxes], weights, schema, timeout, neighbors)
        label, plabel = (_label(x, neighbors) for x in (summary, projected))
        pb = person_bounds(unit, (summary.overlap_upper, label), (projected.overlap_upper, plabel), summary.sequential)
        charged, _ = pb.charge()
        witness = projected.witness
        if isinstance(witness, dict) and neighbors == "add-remove":
            witness = {c: witness[c] for c in unit.separating if c in witness}
        seq = summary.sequential
        summary = replace(
            summary.with_person({**pb.to_dict(), "witness": witness}, schema.unit_label),
            charged=charged,
            saving=0.0 if seq <= 0 else 1.0 - charged / seq,
        )
    seconds = time.perf_counter() - t0
    return {"queries": len(items), **summary.to_cli(), "neighbors": neighbors, "seconds": round(seconds, 6)}


def _label(summary: BoundsSummary, neighbors: str) -> str:
    """Which bound ``summary.overlap_upper`` is, as the accountant labels it."""
    if neighbors == "replace":
        return "replace-one pair (exact)" if summary.overlap_exact else "replace-one ≤ 2×overlap-upper"
    return "exact" if summary.overlap_exact else "overlap-upper"


def _row_summary(
    boxes: list[Any], weights: list[float], schema: Schema, timeout: float, neighbors: str
) -> BoundsSummary:
    """The bounds of one query set, one point's worst case (add/remove) or a pair of points' (replace-one)."""
    from dpmagic.overlap import OverlapEngine

    engine = OverlapEngine(schema, time_limit=timeout)
    engine.extend(boxes, weights)
    b = engine.bounds() if boxes else None
    summary = BoundsSummary.of(b)
    if b is not None and neighbors == "replace":
        # Replace-one (bounded DP, Inan et al. 2017): the loss of a pair (x, x') is the weight of the queries covering
        # x or x'.  Exact on a small compressed domain; otherwise in [γ, min(2γ, Σw)].
        from dpmagic.overlap.pairs import max_pair_load

        pair = max_pair_load(boxes, weights, schema)
        if pair is not None:
            witness = {"row": pair.rows[0], "other_row": pair.rows[1]}
            summary = replace(summary, overlap_lower=pair.value, overlap_exact=True, witness=witness)
            upper = pair.value
        else:
            upper = min(2.0 * summary.overlap_upper, summary.sequential)
            summary = replace(summary, overlap_exact=False)
        seq = summary.sequential
        summary = replace(summary, overlap_upper=upper, charged=upper, saving=0.0 if seq <= 0 else 1.0 - upper / seq)
    return summary


def _table(result: dict[str, Any]) -> str:
    """The text form of :func:`analyse`'s result: the bounds' one text rendering between the CLI's own lines."""
    from dpmagic.session.rendering import bounds_text  # imports pandas: only for the text output

    return bounds_text(
        BoundsSummary.from_cli(result),
        spec=".6g",
        before=[("queries", f"{result['queries']}")],
        after=[("neighbours", result["neighbors"]), ("seconds", f"{result['seconds']:.3f}")],
    )


def _cmd_overlap(args: argparse.Namespace) -> int:
    try:
        schema = Schema.from_json(args.schema)
        items = load_workload(Path(args.queries), schema)
    except DPMagicError as exc:
        print(f"dpmagic overlap: {exc}", file=sys.stderr)
        return 2
    if args.timeout <= 0 or not math.isfinite(args.timeout):
        print("dpmagic overlap: --timeout must be a positive number of seconds", file=sys.stderr)
        return 2
    result = analyse(items, schema, timeout=args.timeout, neighbors=args.neighbors)
    if args.sensitivity:
        from dpmagic.batch.sensitivity import format_sensitivity, sensitivity_report

        try:
            result["sensitivity"] = sensitivity_report(schema, [it.sql for it in items], time_limit=args.timeout)
        except DPMagicError as exc:
            print(f"dpmagic overlap: {exc}", file=sys.stderr)
            return 2
    if args.json:
        print(json.dumps(result))
    else:
        print(_table(result) + ("\n" + format_sensitivity(result["sensitivity"]) if args.sensitivity else ""))
    return 0


def _cli_key(args: argparse.Namespace) -> bytes | None:
    """The custodian key: ``--key-file``, else ``$DPMAGIC_LEDGER_KEY`` / ``$DPMAGIC_LEDGER_KEY_FILE``."""
    from dpmagic.accountant.ledger import key_from_env, load_key

    if getattr(args, "key_file", None):
        return load_key(args.key_file)
    return key_from_env()


def _open_existing(path: str, key: bytes | None) -> Any:
    from dpmagic.accountant.ledger import Ledger

    if not Path(path).is_file():
        raise FileNotFoundError(f"no ledger file at {path}")
    _check_is_ledger(path)
    return Ledger(path, key=key)


def _check_is_ledger(path: str) -> None:
    """Refuse, read-only and before opening it for real (which would add a ledger's tables to any sqlite file),
    a file that is not a dpmagic ledger: not sqlite at all, or sqlite without the ledger's ``events`` and ``meta``."""
    import sqlite3

    try:
        conn = sqlite3.connect(Path(path).resolve().as_uri() + "?mode=ro", uri=True)
        try:
            tables = {row[0] for row in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        finally:
            conn.close()
    except sqlite3.DatabaseError as exc:
        raise ValueError(f"{path} is not a dpmagic ledger (not a readable sqlite file: {exc})") from None
    if not {"events", "meta"} <= tables:
        raise ValueError(f"{path} is not a dpmagic ledger (a sqlite file without the ledger's tables)")


def _resolve_key(ledger: Any, name: str) -> str | None:
    """A ledger key given as itself or as the declared data-set id it belongs to (if unambiguous)."""
    keys = ledger.ledger_keys()
    if name in keys:
        return name
    matches = [k for k in keys if (ledger.opening(k) or {}).get("dataset") == name]
    return matches[0] if len(matches) == 1 else None


def _keyed_summary(path: str) -> str:
    """A verified keyed ledger's identity for the custodian to note and compare later (a rollback or a swap for
    another keyed ledger is a valid ledger too): its ledger id, data sets and head."""
    from dpmagic.accountant.chain import read_chain

    rows, head, _ = read_chain(path)
    genesis = json.loads(rows[0][4])
    named = genesis.get("datasets")
    return (
        f"ledger id {genesis.get('ledger')}, "
        + (f"for data set(s) {', '.join(named)}, " if named else "for any data set, ")
        + f"head: event {(head or {}).get('seq')} {str((head or {}).get('hash'))[:16]} "
        + f"(note it; later: verify --expect-head {(head or {}).get('seq')}:{str((head or {}).get('hash'))[:16]})"
    )


def _noted_head(noted: str) -> tuple[int, str]:
    """``--expect-head SEQ:HASH`` as ``verify`` printed it (one clear error otherwise)."""
    seq_text, _, prefix = noted.partition(":")
    if not seq_text.isdigit() or len(prefix) < 16 or any(c not in "0123456789abcdef" for c in prefix):
        raise ValueError(f"--expect-head is SEQ:HASH as verify prints it (16 or more hex digits), got {noted!r}")
    return int(seq_text), prefix


def _check_noted_head(path: str, seq: int, prefix: str) -> list[str]:
    """The ledger must still hold the noted event with that hash, i.e. extend the state the custodian noted: an
    earlier copy restored (a rollback), or another ledger, fails."""
    from dpmagic.accountant.chain import read_chain

    rows, _, _ = read_chain(path)
    held = {int(r[0]): str(r[6]) for r in rows}
    if seq not in held:
        return [f"event {seq} of the noted head is not in this ledger: an earlier copy was restored (rollback)"]
    if not held[seq].startswith(prefix):
        return [f"event {seq} differs from the noted head: this is another ledger, or a rewritten one"]
    return []


def _cmd_ledger(args: argparse.Namespace) -> int:
    from dpmagic.accountant import ledger as lg
    from dpmagic.presentation.reports import dataset_label, export_ledger
    from dpmagic.session.rendering import plural

    try:
        if args.action == "keygen":
            import secrets

            target = Path(args.file).expanduser()
            if target.exists():
                raise FileExistsError(f"{target} already exists: a key file is never overwritten")
            target.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "w") as fh:
                fh.write(secrets.token_hex(32) + "\n")
            print(f"wrote a new custodian key to {target} (mode 600): keep it secret, never export it")
            return 0
        if args.action == "backup":
            n = lg.backup(args.path, args.dest)
            ok, problems = lg.verify(args.dest, _cli_key(args) if lg.is_keyed(args.dest) else None)
            print(f"backed up {n} events to {args.dest}" + ("" if ok else f" (warning: {problems[0]})"))
            return 0
        key = _cli_key(args)
        if args.action == "init":
            if key is None:
                raise ValueError("init needs the custodian key: --key-file FILE (see 'dpmagic ledger keygen')")
            if Path(args.path).exists():
                raise FileExistsError(f"{args.path} already exists: init starts a new keyed ledger")
            ledger = lg.Ledger(args.path, key=key, create=True, datasets=args.dataset)
            genesis = ledger.genesis or {}
            ledger.close()
            print(
                f"{args.path}: a new keyed ledger (HMAC-SHA256 chain, ledger id {genesis.get('ledger')}); appending "
                "to it needs the custodian key; "
                + (
                    f"it is for data set(s) {', '.join(genesis['datasets'])} only"
                    if genesis.get("datasets")
                    else "any data set may be bound to it (name them with --dataset ID to refuse others)"
                )
            )
            return 0
        if args.action == "upgrade":
            if key is None:
                raise ValueError("upgrade needs the custodian key: --key-file FILE")
            genesis = lg.upgrade(args.path, key, datasets=args.dataset)
            print(
                f"{args.path}: checked under the custodian key and given its genesis (ledger id "
                f"{genesis['ledger']}); {genesis['upgraded']['events']} events kept, re-chained with the key"
            )
            return 0
        if args.action == "verify":
            noted = _noted_head(args.expect_head) if args.expect_head else None
            ok, problems = lg.verify(args.path, key)
            if ok and noted is not None:
                problems = _check_noted_head(args.path, *noted)
                ok = not problems
            if ok:
                if key is not None:
                    note = "HMAC chain intact under the custodian key; " + _keyed_summary(args.path)
                else:
                    note = (
                        "hash chain intact (unkeyed ledger: not tamper-evident, anyone who can write the file "
                        "can rewrite it; see docs/threat-model.md)"
                    )
                print(f"{args.path}: {note}")
                return 0
            for p in problems:
                print(f"{args.path}: {p}")
            return 1
        ledger = _open_existing(args.path, key)
        if args.action == "show":
            print(
                f"ledger {args.path}: "
                + (
                    "keyed (HMAC-SHA256 chain; appending needs the custodian key)"
                    if ledger.keyed
                    else "unkeyed (SHA-256 chain: not tamper-evident)"
                )
            )
            for k in ledger.ledger_keys():
                if k.startswith("sp|"):  # a statistical-privacy ledger (not DP): its own events, no DP budget
                    sp = [ev for ev in ledger.events(k) if ev.kind == "sp-charge"]
                    print(f"key {k}: statistical privacy (NOT differential privacy), {len(sp)} part queries")
                    continue
                o = ledger.opening(k) or {}
                entries = ledger.entries(k)
                spent = max((e.charged_after for e in entries), default=0.0)
                print(
                    f"key {k}: data set {dataset_label(o)!r}, {o.get('definition')} "
                    f"budget {o.get('parameter')}={ledger.budget_of(k):g}, {plural(len(entries), 'counted query', 'counted queries')}, "
                    f"last charged weight {spent:.6g}"
                )
                for number, e in enumerate(entries, 1):  # numbered 1..n, as the notebook numbers them
                    print(f"  #{number:<5} {e.cost:<8.4g} {e.bound:<12} {e.status:<8} {' '.join(e.sql.split())}")
            return 0
        if args.action == "export":
            text = export_ledger(ledger, args.format)
            if args.output:
                Path(args.output).write_text(text, encoding="utf-8")
                print(f"wrote {args.output}")
            else:
                sys.stdout.write(text)
            return 0
        # custodian actions: the custodian key on a keyed ledger, and explicit confirmation
        if ledger.keyed and key is None:
            print(
                f"dpmagic ledger: {args.path} is keyed: {args.action} needs the custodian key (--key-file FILE)",
                file=sys.stderr,
            )
            return 2
        resolved = _resolve_key(ledger, args.key)
        if resolved is None:
            print(f"dpmagic ledger: no key {args.key!r} in {args.path} (see 'dpmagic ledger show')", file=sys.stderr)
            return 2
        what = (
            f"reset the budget of key {resolved}"
            if args.action == "reset"
            else f"set the budget of key {resolved} to {args.to:g}"
        )
        if not args.yes:
            if not sys.stdin.isatty():
                print(f"dpmagic ledger: refusing to {what} without --yes (no terminal to confirm)", file=sys.stderr)
                return 2
            answer = input(f"Type the key to confirm that you {what}: ").strip()
            if answer not in (resolved, args.key):
                print("not confirmed; nothing changed", file=sys.stderr)
                return 2
        if args.action == "reset":
            ledger.reset(resolved, reason=args.reason)
        else:
            if not (args.to > 0 and math.isfinite(args.to)):
                print("dpmagic ledger: --to must be a positive number", file=sys.stderr)
                return 2
            ledger.set_budget(resolved, args.to, reason=args.reason)
        print(f"recorded: {what}")
        return 0
    except (FileNotFoundError, FileExistsError, ValueError, DPMagicError) as exc:
        print(f"dpmagic ledger: {exc}", file=sys.stderr)
        return 2


def _startup_file(profile: str) -> Path:
    from IPython.paths import get_ipython_dir

    return Path(get_ipython_dir()) / f"profile_{profile}" / "startup" / "00-dpmagic.py"


def _cmd_autoload(args: argparse.Namespace) -> int:
    from importlib.resources import files

    target = _startup_file(args.profile)
    if args.state == "on":
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text((files("dpmagic") / "data" / "autoload_startup.py").read_text(encoding="utf-8"))
        print(f"dpmagic will load in every kernel of IPython profile {args.profile!r} ({target})")
    elif args.state == "off":
        if target.exists():
            target.unlink()
        print(f"dpmagic no longer loads automatically in profile {args.profile!r}")
    else:
        print(f"autoload {'on' if target.exists() else 'off'} for profile {args.profile!r} ({target})")
    return 0


def _cmd_serve(args: argparse.Namespace) -> int:
    """``dpmagic serve --config FILE`` / ``dpmagic serve hash-token``."""
    from dpmagic.presentation.server.config import hash_token, load_config, new_token

    if args.serve_action == "hash-token":
        token = sys.stdin.readline().strip() if args.stdin else new_token()
        if not token:
            print("dpmagic serve hash-token: no token on stdin", file=sys.stderr)
            return 2
        if not args.stdin:
            print(f"token (give it to its holder; it is not stored): {token}")
        print(f'token_hash = "{hash_token(token)}"')
        return 0
    if args.config is None:
        print("dpmagic serve: --config FILE is required (docs/server.md)", file=sys.stderr)
        return 2
    try:
        load_config(args.config)
    except DPMagicError as exc:
        print(f"dpmagic serve: {exc}", file=sys.stderr)
        return 2
    from dpmagic.presentation.server import serve

    try:
        serve(args.config, host=args.host, port=args.port)
    except DPMagicError as exc:  # a data set that does not bind (schema, data, ledger): one line, nothing served
        print(f"dpmagic serve: {exc}", file=sys.stderr)
        return 2
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="dpmagic", description="dpmagic command-line tools")
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("overlap", help="analyse a query log: maximum overlap, clique and colouring bounds")
    p.add_argument("--schema", required=True, help="public schema JSON file (docs/design.md §3.1)")
    p.add_argument("queries", help=".sql file (statements separated by ';') or .jsonl file ({sql, weight} per line)")
    p.add_argument("--json", action="store_true", help="print exactly one JSON object")
    p.add_argument("--neighbors", choices=["add-remove", "replace"], default="add-remove")
    p.add_argument("--timeout", type=float, default=60.0, help="seconds for the exact search (default 60)")
    p.add_argument(
        "--sensitivity",
        action="store_true",
        help="also report the L1/L2 sensitivity of the COUNT(*) statements as one batch (both relations)",
    )
    p.set_defaults(func=_cmd_overlap)

    lg = sub.add_parser(
        "ledger", help="inspect, verify, export, back up or (custodian) key and change a dpmagic ledger file"
    )
    lsub = lg.add_subparsers(dest="action", required=True)
    key_help = "custodian key file (default: $DPMAGIC_LEDGER_KEY_FILE or $DPMAGIC_LEDGER_KEY)"
    v = lsub.add_parser("verify", help="check the chain (exit 1 if broken); with --key-file, the HMAC chain")
    v.add_argument("path")
    v.add_argument(
        "--expect-head",
        default=None,
        metavar="SEQ:HASH",
        help="a head noted earlier (as verify printed it): exit 1 unless the ledger still holds it (no rollback)",
    )
    sh = lsub.add_parser("show", help="list keys, budgets and charged queries")
    sh.add_argument("path")
    ex = lsub.add_parser("export", help="export all charges as csv, json or a self-contained html report")
    ex.add_argument("path")
    ex.add_argument("--format", choices=["csv", "json", "html"], default="csv")
    ex.add_argument("--output", "-o", default=None)
    bk = lsub.add_parser("backup", help="copy a (live) ledger consistently with sqlite's online backup API")
    bk.add_argument("path", help="the ledger file")
    bk.add_argument("dest", help="the new copy (never overwritten)")
    kg = lsub.add_parser("keygen", help="custodian: write a new random key file (mode 600)")
    kg.add_argument("file")
    it = lsub.add_parser("init", help="custodian: start a new keyed (HMAC-chained) ledger file")
    it.add_argument("path")
    up = lsub.add_parser(
        "upgrade", help="custodian: give a keyed ledger made by an older dpmagic its genesis (checked first)"
    )
    up.add_argument("path")
    for sp in (it, up):
        sp.add_argument(
            "--dataset",
            action="append",
            default=None,
            help="a declared data-set id this ledger is for (repeatable); others are refused (default: any)",
        )
    sb = lsub.add_parser("set-budget", help="custodian: raise or lower a key's budget (recorded in the ledger)")
    sb.add_argument("path")
    sb.add_argument("--key", required=True, help="the ledger key, or the data set's declared id")
    sb.add_argument("--to", type=float, required=True)
    rs = lsub.add_parser("reset", help="custodian: reset a key's budget (recorded; earlier charges stop counting)")
    rs.add_argument("path")
    rs.add_argument("--key", required=True, help="the ledger key, or the data set's declared id")
    for sp in (sb, rs):
        sp.add_argument("--yes", action="store_true", help="confirm without a prompt")
        sp.add_argument("--reason", default="", help="why (kept in the ledger)")
    for sp in (v, sh, ex, bk, it, up, sb, rs):
        sp.add_argument("--key-file", default=None, help=key_help)
    lg.set_defaults(func=_cmd_ledger)

    sv = sub.add_parser(
        "serve",
        help="custodian: serve data sets to analysts over HTTP (per-analyst quotas, a global budget; docs/server.md)",
    )
    sv.add_argument("--config", default=None, help="the custodian's configuration file (TOML or JSON)")
    sv.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1: put TLS in front)")
    sv.add_argument("--port", type=int, default=8000)
    svsub = sv.add_subparsers(dest="serve_action")
    ht = svsub.add_parser("hash-token", help="print a new token and its hash (or the hash of the token on stdin)")
    ht.add_argument("--stdin", action="store_true", help="hash the token read from stdin instead of a new one")
    sv.set_defaults(func=_cmd_serve)

    al = sub.add_parser("autoload", help="opt in or out of loading the extension in every IPython kernel")
    al.add_argument("state", choices=["on", "off", "status"])
    al.add_argument("--profile", default="default", help="IPython profile (default: default)")
    al.set_defaults(func=_cmd_autoload)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    return int(args.func(args))


#: commands that open no file for writing: after them the console entry point skips the interpreter's teardown
_NO_TEARDOWN = frozenset({"overlap"})


def run() -> None:  # pragma: no cover - exercised as a subprocess
    """The ``dpmagic`` console command: :func:`main`, then exit with its status.

    After a command that writes no file (``overlap``), the output is flushed and the process ends with
    ``os._exit``: the interpreter's teardown — freeing every parsed statement, every module — costs ~0.12 s
    of the 2,000-statement census run and does nothing a read-only command needs.  Other commands (the
    ledger's) exit normally, so every file and connection is closed the usual way.
    """
    argv = sys.argv[1:]
    try:
        code = main(argv)
        sys.stdout.flush()
    except BrokenPipeError:
        # the reader went away (``dpmagic ledger show … | head``): stop quietly, as a Unix filter does.  Python
        # would flush stdout again at exit and print the same error: point stdout at /dev/null first.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        sys.exit(141 if os.name == "posix" else 1)  # 128 + SIGPIPE, what a shell reports for a killed writer
    if next((a for a in argv if not a.startswith("-")), None) in _NO_TEARDOWN:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    sys.exit(code)


if __name__ == "__main__":  # pragma: no cover
    run()
