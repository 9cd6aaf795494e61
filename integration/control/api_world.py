"""Test helper for the API tier: the app served through an engine acting as the runtime role
(so every request proves the runtime grants suffice), and tokens of every scope."""

from __future__ import annotations

import socket
import threading
import time
import urllib.parse
from dataclasses import dataclass, field
from typing import Any

import httpx
import uvicorn
from pg_control_db import PgDb
from sqlalchemy import Engine

from qinglong.control.api.app import build_app
from qinglong.control.api.context import ApiContext
from qinglong.control.auth.tokens import insert_token, new_token, token_hash
from qinglong.control.db.engine import create_engine
from qinglong.shared.ids import uuid7

SCOPES = ("viewer", "operator", "admin", "worker")


def runtime_url(pg_db: PgDb) -> str:
    return pg_db.url + "?options=" + urllib.parse.quote("-c role=" + pg_db.runtime_role)


@dataclass
class ApiWorld:
    pg_db: PgDb
    engine: Engine
    owner: Engine
    ctx: ApiContext
    client: httpx.Client
    server: Any
    thread: threading.Thread
    tokens: dict[str, str] = field(default_factory=dict)
    issued: dict[str, int] = field(default_factory=dict)
    app: Any = None

    def issue(self, scope: str, *, pool: str = "pool-a", revoked: bool = False) -> str:
        """A new token of ``scope`` recorded by the schema owner; the first of a scope is
        named ``<scope>-token``, later ones ``<scope>-token-<n>`` (a live name is unique)."""
        token = new_token()
        self.issued[scope] = self.issued.get(scope, 0) + 1
        suffix = "" if self.issued[scope] == 1 else f"-{self.issued[scope]}"
        with self.owner.begin() as conn:
            pool_id = None
            if scope == "worker":
                conn.exec_driver_sql(
                    "INSERT INTO worker_pools (id, name, labels) VALUES (%(id)s, %(n)s,"
                    " '{\"zone\": \"a\"}') ON CONFLICT (name) DO NOTHING",
                    {"id": uuid7(), "n": pool})
                pool_id = conn.exec_driver_sql("SELECT id::text FROM worker_pools WHERE"
                                               " name = %(n)s", {"n": pool}).scalar()
            token_id = insert_token(conn, name=f"{scope}-token{suffix}", scope=scope,
                                    sha256=token_hash(token), pool_id=pool_id)
            if revoked:
                conn.exec_driver_sql("UPDATE api_tokens SET revoked_at = now() WHERE id ="
                                     " %(id)s", {"id": token_id})
        return token

    def as_(self, scope: str) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.tokens[scope]}"}

    def sql(self, statement: str, params: dict[str, Any] | None = None) -> list[Any]:
        """Run ``statement`` as the schema owner; rows as tuples (empty for no result)."""
        with self.owner.begin() as conn:
            result = conn.exec_driver_sql(statement, params or {})
            return [tuple(r) for r in result] if result.returns_rows else []


def serve(app: Any) -> tuple[Any, threading.Thread, str]:
    """``app`` served by uvicorn on a free loopback port in a thread; (server, thread, url)."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    # as the replica serves: X-Forwarded-* read by the panel only (--trusted-proxy)
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="off",
                                           proxy_headers=False))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started:
        assert time.monotonic() < deadline, "uvicorn did not start"
        time.sleep(0.01)
    return server, thread, f"http://127.0.0.1:{port}"


def open_world(pg_db: PgDb, **ctx_kwargs: Any) -> ApiWorld:
    engine = create_engine(runtime_url(pg_db))
    owner = create_engine(pg_db.url)
    ctx = ApiContext(engine=engine, project_id=uuid7(), **ctx_kwargs)
    app = build_app(ctx)
    server, thread, url = serve(app)
    client = httpx.Client(base_url=url, timeout=30)
    world = ApiWorld(pg_db, engine, owner, ctx, client, server, thread)
    world.app = app
    for scope in SCOPES:
        world.tokens[scope] = world.issue(scope)
    return world


def close_world(world: ApiWorld) -> None:
    world.client.close()
    world.server.should_exit = True
    world.thread.join(10)
    world.engine.dispose()
    world.owner.dispose()
