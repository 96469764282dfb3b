"""The HTTP layer of ``dpmagic serve``: FastAPI routes over :class:`~dpmagic.presentation.server.state.Custodian`.

FastAPI on uvicorn: an ASGI server in one process (threads for the synchronous routes), so one :class:`Session`
per data set — its accountant, its lock, its ledger connection — serves every analyst; the framework gives JSON
bodies, routing and a documented OpenAPI schema without code of ours, and uvicorn is the usual production
server behind a TLS reverse proxy.

Analysts (``Authorization: Bearer <token>``)::

    GET  /v1/datasets/{id}/schema        the public schema (and the definition, the neighbouring relation)
    POST /v1/datasets/{id}/query         {"sql", "epsilon"|"rho"|"mu", "ci", "min_rows", "dry_run", "fresh",
                                          "postprocess"}, or a batch {"workload", "where", "strategy", "rmse",
                                          "keep", a cost, "dry_run"}, or a decision query {"sql", "fnr", ...};
                                          header Idempotency-Key (a retry returns the stored answer)
    POST /v1/datasets/{id}/afford        {"sql"}: the largest cost your quota and the global budget admit there
    GET  /v1/datasets/{id}/budget        your quota and the global budget: spent, remaining
    GET  /v1/datasets/{id}/budget/view   the live panel's view: the budget above and your own queries (number,
                                          time, SQL, cost, your charged bound after it)
    GET  /v1/datasets/{id}/ledger        your own charges and answers (never anyone else's)
    GET  /v1/datasets/{id}/estimates/{name}   your batch estimate kept as name (a batch with "keep": name)
    POST /v1/datasets/{id}/estimates/{name}   {"kind": range|prefix|point|query|ranges, "args", "column"}: a free
                                          follow-up from it (post-processing: nothing read, nothing charged)

Custodian (the admin token)::

    GET  /v1/admin/analysts              POST /v1/admin/analysts {"id", "quotas"} → a new token (shown once)
    POST /v1/admin/analysts/{id}/revoke  POST /v1/admin/analysts/{id}/rotate → a new token
    POST /v1/admin/datasets/{id}/budget  {"total"} (global) or {"analyst", "total"} (a quota)
    GET  /v1/admin/datasets/{id}/audit   every charge, with the analyst who asked
    GET  /v1/admin/ledger/verify         the ledger's chain (HMAC chain with $DPMAGIC_LEDGER_KEY_FILE)

Hardening: request bodies over ``max_body_bytes`` are refused (413) before they are read; each analyst has a
token bucket of ``rate_limit_per_minute`` (429); a query that read rows answers only at the next multiple of
``response_floor_seconds`` after it began (its duration says nothing about the read unless the read outlasts
the floor: the custodian sets the floor above the slowest read) and any failure after the read is one fixed body.
"""

from __future__ import annotations

import json
import math
import threading
import time
from collections.abc import Awaitable, Callable
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse
from starlette.concurrency import run_in_threadpool

from dpmagic.errors import DPMagicError
from dpmagic.presentation.server.state import Custodian
from dpmagic.presentation.server.wire import error_body

__all__ = ["create_app"]

Scope = dict[str, Any]
ASGI = Callable[[Scope, Callable[[], Awaitable[Any]], Callable[[Any], Awaitable[None]]], Awaitable[None]]


def _body(status: int, message: str) -> JSONResponse:
    return JSONResponse({"error": {"type": "DPMagicError", "message": message, "hint": None}}, status_code=status)


class BodyLimit:
    """ASGI middleware: a request whose body exceeds ``limit`` bytes gets 413 and is read no further."""

    def __init__(self, app: ASGI, limit: int) -> None:
        self.app, self.limit = app, limit

    async def __call__(self, scope: Scope, receive: Callable[[], Awaitable[Any]], send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = dict(scope.get("headers", [])).get(b"content-length")
        too_big = _body(413, f"the request body is larger than {self.limit} bytes")
        if declared is not None and (not declared.isdigit() or int(declared) > self.limit):
            await too_big(scope, receive, send)
            return
        seen = 0

        async def limited() -> Any:
            nonlocal seen
            message = await receive()
            seen += len(message.get("body", b""))
            if seen > self.limit:
                raise _TooBig
            return message

        try:
            await self.app(scope, limited, send)
        except _TooBig:
            await too_big(scope, receive, send)


class _TooBig(Exception):
    pass


class RateLimit:
    """A token bucket per analyst: ``per_minute`` requests a minute, bursts up to that many."""

    def __init__(self, per_minute: int) -> None:
        self.rate, self.capacity = per_minute / 60.0, float(per_minute)
        self._buckets: dict[str, tuple[float, float]] = {}
        self._lock = threading.Lock()

    def allow(self, who: str) -> bool:
        now = time.monotonic()
        with self._lock:
            level, then = self._buckets.get(who, (self.capacity, now))
            level = min(self.capacity, level + (now - then) * self.rate)
            if level < 1.0:
                self._buckets[who] = (level, now)
                return False
            self._buckets[who] = (level - 1.0, now)
            return True


def create_app(custodian: Custodian) -> FastAPI:
    """The FastAPI application serving ``custodian``."""
    cfg = custodian.cfg
    app = FastAPI(title="dpmagic custodian server", version="1", docs_url=None, redoc_url=None)
    limiter = RateLimit(cfg.rate_limit_per_minute)

    def token_of(request: Request) -> str | None:
        auth = request.headers.get("authorization", "")
        return auth[7:].strip() if auth.lower().startswith("bearer ") and len(auth) < 1000 else None

    def analyst(request: Request) -> str | JSONResponse:
        token = token_of(request)
        who = custodian.analyst_for(token) if token else None
        if who is None:
            return _body(401, "unknown, revoked or missing token (Authorization: Bearer …)")
        if not limiter.allow(who):
            return _body(429, "too many requests: slow down")
        return who

    async def json_of(request: Request) -> Any:
        raw = await request.body()
        try:
            return json.loads(raw)
        except ValueError:
            raise DPMagicError("the request body is not valid JSON") from None

    async def posted(request: Request, handler: Callable[..., Any], *args: Any) -> Any:
        """``handler(*args, body)`` on the request's JSON body in the thread pool, :func:`guarded`; a body that is not
        JSON: 400."""
        try:
            body = await json_of(request)
        except DPMagicError as exc:
            return JSONResponse(error_body(exc), status_code=400)
        return await run_in_threadpool(guarded(handler), *args, body)

    def guarded(handler: Callable[..., Any]) -> Callable[..., Any]:
        """Errors before any read: the dpmagic message (schema and budget only) or, for anything else, 500."""

        def call(*args: Any) -> JSONResponse:
            try:
                return JSONResponse(handler(*args))
            except LookupError:
                return _body(404, "no such data set or analyst")
            except DPMagicError as exc:
                return JSONResponse(error_body(exc), status_code=400)
            except Exception:
                return _body(500, "internal error: nothing was charged")

        return call

    @app.get("/v1/health")
    def health() -> dict[str, str]:
        return {"status": "ok"}

    @app.get("/v1/datasets/{dataset}/schema")
    def schema(dataset: str, request: Request) -> Any:
        who = analyst(request)
        return who if isinstance(who, JSONResponse) else guarded(custodian.schema)(dataset)

    @app.get("/v1/datasets/{dataset}/budget")
    def budget(dataset: str, request: Request) -> Any:
        who = analyst(request)
        return who if isinstance(who, JSONResponse) else guarded(custodian.budget)(who, dataset)

    @app.get("/v1/datasets/{dataset}/budget/view")
    def budget_view(dataset: str, request: Request) -> Any:
        who = analyst(request)
        return who if isinstance(who, JSONResponse) else guarded(custodian.budget_view)(who, dataset)

    @app.get("/v1/datasets/{dataset}/estimates/{name}")
    def estimate(dataset: str, name: str, request: Request) -> Any:
        who = analyst(request)
        return who if isinstance(who, JSONResponse) else guarded(custodian.estimate_info)(who, dataset, name)

    @app.post("/v1/datasets/{dataset}/estimates/{name}")
    async def follow_up(dataset: str, name: str, request: Request) -> Any:
        who = analyst(request)
        if isinstance(who, JSONResponse):
            return who
        return await posted(request, custodian.follow_up, who, dataset, name)

    @app.get("/v1/datasets/{dataset}/ledger")
    def ledger(dataset: str, request: Request) -> Any:
        who = analyst(request)
        return who if isinstance(who, JSONResponse) else guarded(custodian.own_ledger)(who, dataset)

    @app.post("/v1/datasets/{dataset}/afford")
    async def afford(dataset: str, request: Request) -> Any:
        who = analyst(request)
        if isinstance(who, JSONResponse):
            return who
        return await posted(request, custodian.afford, who, dataset)

    @app.post("/v1/datasets/{dataset}/query")
    async def query(dataset: str, request: Request) -> Any:
        started = time.perf_counter()
        who = analyst(request)
        if isinstance(who, JSONResponse):
            return who
        try:
            body = await json_of(request)
        except DPMagicError as exc:
            return JSONResponse(error_body(exc), status_code=400)
        idem = request.headers.get("idempotency-key")

        def answer() -> tuple[int, dict[str, Any], bool]:
            try:
                return custodian.query(who, dataset, body, idem)
            except LookupError:
                return 404, {"error": {"type": "DPMagicError", "message": "no such data set", "hint": None}}, False
            except DPMagicError as exc:  # raised before anything was charged (shape, SQL, cost)
                return 400, error_body(exc), False
            except Exception:
                return 500, {"error": {"type": "DPMagicError", "message": "internal error", "hint": None}}, False

        status, reply, read = await run_in_threadpool(answer)
        floor = cfg.response_floor_seconds
        if read and floor > 0:  # answer on the next multiple of the floor after the request began
            await _sleep_until(started + padded(time.perf_counter() - started, floor))
        return JSONResponse(reply, status_code=status)

    def admin(request: Request) -> JSONResponse | None:
        token = token_of(request)
        if not token or not custodian.is_admin(token):
            return _body(401, "the custodian's token is required")
        return None

    @app.get("/v1/admin/analysts")
    def list_analysts(request: Request) -> Any:
        return admin(request) or guarded(lambda: {"analysts": custodian.analysts()})()

    @app.post("/v1/admin/analysts")
    async def add_analyst(request: Request) -> Any:
        denied = admin(request)
        if denied:
            return denied
        return await posted(request, custodian.add_analyst)

    @app.post("/v1/admin/analysts/{aid}/revoke")
    def revoke(aid: str, request: Request) -> Any:
        return admin(request) or guarded(custodian.revoke)(aid)

    @app.post("/v1/admin/analysts/{aid}/rotate")
    def rotate(aid: str, request: Request) -> Any:
        return admin(request) or guarded(custodian.rotate)(aid)

    @app.post("/v1/admin/datasets/{dataset}/budget")
    async def set_budget(dataset: str, request: Request) -> Any:
        denied = admin(request)
        if denied:
            return denied
        return await posted(request, custodian.set_budget, dataset)

    @app.get("/v1/admin/datasets/{dataset}/audit")
    def audit(dataset: str, request: Request) -> Any:
        return admin(request) or guarded(custodian.audit)(dataset)

    @app.get("/v1/admin/ledger/verify")
    def verify(request: Request) -> Any:
        return admin(request) or guarded(custodian.verify)()

    app.add_middleware(BodyLimit, limit=cfg.max_body_bytes)
    return app


def padded(elapsed: float, floor: float) -> float:
    """The response time of a request that read rows: the smallest positive multiple of ``floor`` that is at
    least ``elapsed`` (a function of ``elapsed`` only through ``ceil(elapsed / floor)``)."""
    return floor * max(1, math.ceil(elapsed / floor))


async def _sleep_until(deadline: float) -> None:
    import asyncio

    left = deadline - time.perf_counter()
    if left > 0:
        await asyncio.sleep(left)
