"""A small vectorised evaluator of SQL scalar expressions (sqlglot trees) over numpy arrays.

It serves two data-independent or free purposes only:

* on the **public domain**: a single-column predicate or GROUP BY expression (``CASE``, ``CAST``,
  ``FLOOR(age / 10) * 10``, ``WIDTH_BUCKET``, ``LIKE`` ...) is evaluated on every declared value of the
  column, which turns it into an exact set of declared values (a box side) or into declared bins;
* on **released values**: post-processing (arithmetic on aggregates, CAST, HAVING, ORDER BY keys).

It never reads rows.  Semantics follow SQLite / T-SQL where they differ from others: ``int / int``
truncates toward zero, NULL is ``nan`` (numbers) or ``None`` (strings), a comparison with NULL is false.
Complexity: linear in the number of values per node.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
from sqlglot import exp

from dpmagic.errors import QueryTypeError, UnsupportedQueryError

__all__ = ["evaluate", "columns_of", "EvalError", "null_mask"]


class EvalError(UnsupportedQueryError):
    """An expression uses a construct the evaluator does not support."""


def columns_of(node: exp.Expr) -> set[str]:
    """Names of the columns an expression mentions."""
    return {c.name for c in node.find_all(exp.Column)}


def _is_int(a: np.ndarray) -> bool:
    return a.dtype.kind in "iub" or (a.dtype.kind == "f" and False)


def _num(a: np.ndarray) -> np.ndarray:
    if a.dtype.kind == "O":
        try:
            return a.astype(float)
        except (TypeError, ValueError):
            raise QueryTypeError("arithmetic on a string value") from None
    if a.dtype.kind == "b":
        return a.astype(np.int64)
    return a


def null_mask(a: np.ndarray) -> np.ndarray:
    """Where an evaluated column is NULL (``nan`` or None)."""
    if a.dtype.kind == "f":
        return np.isnan(a)
    if a.dtype.kind == "O":
        return np.array([v is None or (isinstance(v, float) and math.isnan(v)) for v in a], dtype=bool)
    return np.zeros(a.shape, dtype=bool)


def _full(n: int, value: Any) -> np.ndarray:
    if value is None:
        return np.full(n, np.nan)
    if isinstance(value, bool):
        return np.full(n, value, dtype=bool)
    if isinstance(value, int):
        return np.full(n, value, dtype=np.int64)
    if isinstance(value, float):
        return np.full(n, value, dtype=float)
    out = np.empty(n, dtype=object)
    out[:] = value
    return out


def _cast(a: np.ndarray, to: exp.DataType) -> np.ndarray:
    t = to.this
    T = exp.DataType.Type
    if t in (T.INT, T.BIGINT, T.SMALLINT, T.TINYINT, T.UBIGINT, T.UINT):
        x = _num(a).astype(float)
        if np.isnan(x).any():
            return np.trunc(x)
        return np.trunc(x).astype(np.int64)
    if t in (T.FLOAT, T.DOUBLE, T.DECIMAL, T.DECFLOAT, T.BIGDECIMAL) or "REAL" in str(t) or "NUMERIC" in str(t):
        return _num(a).astype(float)
    if t in (T.BOOLEAN,):
        return _num(a).astype(float) != 0
    if t in (T.VARCHAR, T.TEXT, T.CHAR, T.NVARCHAR, T.NCHAR):
        out = np.empty(len(a), dtype=object)
        for i, v in enumerate(a.tolist()):
            out[i] = None if v is None else (str(int(v)) if isinstance(v, float) and v.is_integer() else str(v))
        return out
    raise EvalError(f"CAST to {to.sql()} is not supported")


def _like(pattern: str) -> re.Pattern[str]:
    out = []
    for ch in pattern:
        out.append(".*" if ch == "%" else "." if ch == "_" else re.escape(ch))
    return re.compile("".join(out), re.DOTALL)


_FUNCS: dict[str, Callable[..., np.ndarray]] = {
    "ABS": lambda a: np.abs(_num(a)),
    "SQRT": lambda a: np.sqrt(np.maximum(_num(a).astype(float), 0.0)),
    "EXP": lambda a: np.exp(_num(a).astype(float)),
    "LN": lambda a: np.log(_num(a).astype(float)),
    "LOG10": lambda a: np.log10(_num(a).astype(float)),
    "SIGN": lambda a: np.sign(_num(a)),
    "SQUARE": lambda a: _num(a) * _num(a),
}


def evaluate(node: exp.Expr, env: Mapping[str, np.ndarray], n: int, resolve: Callable[[exp.Column], str]) -> np.ndarray:
    """Evaluate ``node`` on ``n`` rows of ``env`` (arrays by name; ``resolve`` maps a Column node to a key)."""

    def ev(e: exp.Expr) -> np.ndarray:
        return evaluate(e, env, n, resolve)

    if isinstance(node, exp.Paren):
        return ev(node.this)
    if isinstance(node, exp.Column):
        return np.asarray(env[resolve(node)])
    if isinstance(node, exp.Literal):
        if node.is_string:
            return _full(n, node.this)
        text = node.this
        try:
            return _full(n, int(text))
        except ValueError:
            return _full(n, float(text))
    if isinstance(node, exp.Boolean):
        return _full(n, bool(node.this))
    if isinstance(node, exp.Pi):  # a constant function: PI()
        return _full(n, math.pi)
    if isinstance(node, exp.Rand):  # RAND() / RANDOM(): a public uniform number per output row, never from the rows
        return np.random.default_rng().random(n)
    if isinstance(node, exp.Null):
        return _full(n, None)
    if isinstance(node, exp.Neg):
        return -_num(ev(node.this))
    if isinstance(node, (exp.Add, exp.Sub, exp.Mul, exp.Div, exp.Mod, exp.IntDiv)):
        a, b = _num(ev(node.this)), _num(ev(node.expression))
        if isinstance(node, exp.Add):
            return a + b
        if isinstance(node, exp.Sub):
            return a - b
        if isinstance(node, exp.Mul):
            return a * b
        with np.errstate(divide="ignore", invalid="ignore"):
            if isinstance(node, exp.Mod):
                bf = b.astype(float)
                r = np.fmod(a.astype(float), np.where(bf == 0, np.nan, bf))
                return (
                    r.astype(np.int64) if a.dtype.kind in "iu" and b.dtype.kind in "iu" and not np.isnan(r).any() else r
                )
            bf = b.astype(float)
            q = a.astype(float) / np.where(bf == 0, np.nan, bf)
            if isinstance(node, exp.IntDiv) or (
                a.dtype.kind in "iu" and b.dtype.kind in "iu" and not node.args.get("typed")
            ):
                q = np.trunc(q)
                return q.astype(np.int64) if not np.isnan(q).any() else q
            return q
    if isinstance(node, (exp.Cast, exp.TryCast)):
        return _cast(ev(node.this), node.to)
    if isinstance(node, exp.Floor):
        x = np.floor(_num(ev(node.this)).astype(float))
        return x.astype(np.int64) if not np.isnan(x).any() else x
    if isinstance(node, exp.Ceil):
        x = np.ceil(_num(ev(node.this)).astype(float))
        return x.astype(np.int64) if not np.isnan(x).any() else x
    if isinstance(node, exp.Round):
        d = node.args.get("decimals")
        digits = 0 if d is None else int(d.this) if isinstance(d, exp.Literal) else 0
        x = _num(ev(node.this)).astype(float)
        scale = 10.0**digits
        return np.sign(x) * np.floor(np.abs(x) * scale + 0.5) / scale  # SQL rounds half away from zero
    if isinstance(node, (exp.Pow,)):
        return np.power(_num(ev(node.this)).astype(float), _num(ev(node.expression)).astype(float))
    if isinstance(node, exp.Log):
        if node.expression is not None:
            base, x = _num(ev(node.this)).astype(float), _num(ev(node.expression)).astype(float)
            return np.log(x) / np.log(base)
        return np.log(_num(ev(node.this)).astype(float))
    if isinstance(node, (exp.Greatest, exp.Least)):
        args = [_num(ev(node.this))] + [_num(ev(e)) for e in node.expressions]
        out = args[0]
        for a in args[1:]:
            out = np.maximum(out, a) if isinstance(node, exp.Greatest) else np.minimum(out, a)
        return out
    if isinstance(node, exp.WidthBucket):
        x = _num(ev(node.this)).astype(float)
        lo = float(_num(ev(node.args["min_value"]))[0]) if n else 0.0
        hi = float(_num(ev(node.args["max_value"]))[0]) if n else 1.0
        k = int(_num(ev(node.args["num_buckets"]))[0]) if n else 1
        if not hi > lo or k < 1:
            raise EvalError("WIDTH_BUCKET needs min < max and a positive bucket count")
        b = np.floor((x - lo) / (hi - lo) * k).astype(np.int64) + 1
        return np.where(x < lo, 0, np.where(x >= hi, k + 1, b))
    if isinstance(node, exp.Coalesce):
        out = ev(node.this).copy()
        for e in node.expressions:
            other = ev(e)
            m = null_mask(out)
            if out.dtype != other.dtype:
                out = out.astype(object) if out.dtype.kind == "O" or other.dtype.kind == "O" else out.astype(float)
            out[m] = other[m]
        return out
    if isinstance(node, (exp.Case, exp.If)):
        return _case(node, ev, n)
    if isinstance(node, exp.Anonymous):
        name = str(node.this).upper()
        if name in _FUNCS and len(node.expressions) == 1:
            return _FUNCS[name](ev(node.expressions[0]))
        raise EvalError(f"function {name} is not supported")
    if isinstance(node, exp.Sqrt):
        return _FUNCS["SQRT"](ev(node.this))
    if isinstance(node, exp.Abs):
        return _FUNCS["ABS"](ev(node.this))
    if isinstance(node, exp.Exp):
        return _FUNCS["EXP"](ev(node.this))
    if isinstance(node, exp.Ln):
        return _FUNCS["LN"](ev(node.this))
    if isinstance(node, exp.Sign):
        return _FUNCS["SIGN"](ev(node.this))
    if isinstance(node, (exp.Upper, exp.Lower)):
        a = ev(node.this)
        f = str.upper if isinstance(node, exp.Upper) else str.lower
        return np.array([None if v is None else f(str(v)) for v in a.tolist()], dtype=object)
    # ---- predicates
    if isinstance(node, exp.And):
        return _truth(ev(node.this)) & _truth(ev(node.expression))
    if isinstance(node, exp.Or):
        return _truth(ev(node.this)) | _truth(ev(node.expression))
    if isinstance(node, exp.Not):
        inner = node.this
        if isinstance(inner, exp.Is):  # NOT (x IS NULL): true where not null
            return ~_truth(ev(inner))
        a = ev(inner)
        return ~_truth(a) & ~null_mask(a)
    if isinstance(node, exp.Is):
        if not isinstance(node.expression, exp.Null):
            raise EvalError(f"{node.sql()!r}: IS takes NULL only")
        return null_mask(ev(node.this))
    if isinstance(node, (exp.EQ, exp.NEQ, exp.LT, exp.LTE, exp.GT, exp.GTE)):
        return _compare(type(node), ev(node.this), ev(node.expression))
    if isinstance(node, exp.Between):
        x = ev(node.this)
        return _compare(exp.GTE, x, ev(node.args["low"])) & _compare(exp.LTE, x, ev(node.args["high"]))
    if isinstance(node, exp.In):
        if node.args.get("query") is not None:
            raise EvalError("IN (subquery) is not supported: list the values")
        x = ev(node.this)
        out = np.zeros(n, dtype=bool)
        for e in node.expressions:
            out |= _compare(exp.EQ, x, ev(e))
        return out
    if isinstance(node, (exp.Like, exp.ILike)):
        x = ev(node.this)
        pat = node.expression
        if not (isinstance(pat, exp.Literal) and pat.is_string):
            raise EvalError("LIKE takes a string pattern")
        rx = _like(pat.this)
        flags = str.lower if isinstance(node, exp.ILike) else (lambda s: s)
        if isinstance(node, exp.ILike):
            rx = re.compile(rx.pattern, re.DOTALL | re.IGNORECASE)
        return np.array([v is not None and rx.fullmatch(flags(str(v))) is not None for v in x.tolist()], dtype=bool)
    raise EvalError(f"{node.sql()!r} is not supported in dpmagic's SQL subset")


def _truth(a: np.ndarray) -> np.ndarray:
    if a.dtype.kind == "b":
        return a
    if a.dtype.kind == "O":
        return np.array([bool(v) if v is not None else False for v in a.tolist()], dtype=bool)
    x = a.astype(float)
    return (x != 0) & ~np.isnan(x)


_OPS: dict[type[exp.Expr], Callable[[Any, Any], Any]] = {
    exp.EQ: np.equal,
    exp.NEQ: np.not_equal,
    exp.LT: np.less,
    exp.LTE: np.less_equal,
    exp.GT: np.greater,
    exp.GTE: np.greater_equal,
}


def _compare(op: type[exp.Expr], a: np.ndarray, b: np.ndarray) -> np.ndarray:
    nulls = null_mask(a) | null_mask(b)
    if a.dtype.kind == "O" or b.dtype.kind == "O":
        if (a.dtype.kind == "O") != (b.dtype.kind == "O"):
            raise QueryTypeError("a number is compared with a string")
        f = _OPS[op]
        out = np.array(
            [False if (x is None or y is None) else bool(f(x, y)) for x, y in zip(a.tolist(), b.tolist(), strict=True)],
            dtype=bool,
        )
        return out
    with np.errstate(invalid="ignore"):
        out = _OPS[op](_num(a), _num(b))
    return np.asarray(out, dtype=bool) & ~nulls


def _case(node: exp.Expr, ev: Callable[[exp.Expr], np.ndarray], n: int) -> np.ndarray:
    if isinstance(node, exp.If):
        branches = [(node.this, node.args.get("true"))]
        default = node.args.get("false")
        subject = None
    else:
        branches = [(i.this, i.args.get("true")) for i in node.args.get("ifs", [])]
        default = node.args.get("default")
        subject = node.this
    taken = np.zeros(n, dtype=bool)
    values: list[tuple[np.ndarray, np.ndarray]] = []
    for cond, then in branches:
        assert then is not None  # the parser gives every WHEN its THEN
        c = _compare(exp.EQ, ev(subject), ev(cond)) if subject is not None else _truth(ev(cond))
        c = c & ~taken
        values.append((c, ev(then)))
        taken |= c
    rest = ev(default) if default is not None else _full(n, None)
    parts = [v for _, v in values] + [rest]
    kinds = {p.dtype.kind for p in parts if not (p.dtype.kind == "f" and np.isnan(p).all())}
    if "O" in kinds:
        out = np.empty(n, dtype=object)
        out[:] = [None] * n
        parts = [
            np.array([None if (isinstance(v, float) and math.isnan(v)) else v for v in p.tolist()], dtype=object)
            for p in parts
        ]
    elif kinds <= {"i", "u", "b"} and not any(null_mask(p).any() for p in parts):  # a THEN NULL stays NULL
        out = np.zeros(n, dtype=np.int64)
    else:
        out = np.full(n, np.nan)
    out[~taken] = parts[-1][~taken]
    for (c, _), v in zip(values, parts[:-1], strict=True):
        out[c] = v[c]
    return out
