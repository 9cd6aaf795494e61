"""Thin adapters between the API's SQLAlchemy connections and modules that still take a
psycopg connection (``retention/``, ``readiness.py``): one place to delete when those modules
take the engine's connections themselves."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import psycopg
    from sqlalchemy import Connection


def driver(conn: Connection) -> psycopg.Connection[Any]:
    """The psycopg connection under ``conn`` (same transaction, same session)."""
    raw: psycopg.Connection[Any] | None = conn.connection.driver_connection
    assert raw is not None  # an open SQLAlchemy connection always has one
    return raw
