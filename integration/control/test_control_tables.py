"""``db/tables.py`` equals the migrated schema (issue 11 item 9; docs/protocols.md §4.5).

Alembic's metadata comparison runs against a database migrated by our own runner (the
``pg_db`` clone) and must find no difference in tables, columns, column types (alembic's
``compare_type``), nullability or foreign keys. What is deliberately not compared, because
``tables.py`` does not declare it (the migrations own it and nothing renders DDL from the
metadata): secondary indexes, unique constraints and constraint names (``add_index``,
``remove_index``, ``add_constraint``, ``remove_constraint`` are dropped from the diff), the
runner's own ledger table ``ql3_migration_ledger`` and the view
``run_attempt_log_retention_candidates``.
Alembic 1.20 on SQLAlchemy 2.1 warns ``Can't validate argument 'dialect_options'``
while reflecting indexes; that library warning is ignored here, nothing else is.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from pg_control_db import PgDb
from sqlalchemy import Column, ForeignKey, Integer, MetaData, Table

from qinglong.control.db.tables import metadata

pytestmark = [
    pytest.mark.integration, pytest.mark.postgres,
    pytest.mark.filterwarnings(
        "ignore:Can't validate argument 'dialect_options':sqlalchemy.exc.SAWarning"),
]

NOT_IN_METADATA = frozenset({"ql3_migration_ledger", "run_attempt_log_retention_candidates"})
IGNORED_KINDS = frozenset({"add_index", "remove_index", "add_constraint", "remove_constraint"})


def _include(obj: Any, name: str | None, type_: str, reflected: bool, _other: Any) -> bool:
    return not (type_ == "table" and name in NOT_IN_METADATA)


def _flat(diffs: list[Any]) -> Iterator[tuple[Any, ...]]:
    """Alembic groups a column's modifications in a list; yield every change as one tuple."""
    for diff in diffs:
        if isinstance(diff, list):
            yield from diff
        else:
            yield diff


def schema_differences(pg_db: PgDb, meta: MetaData) -> list[tuple[Any, ...]]:
    """The differences between ``meta`` and ``pg_db``'s migrated schema that count."""
    with pg_db.sa() as conn:
        context = MigrationContext.configure(
            conn, opts={"compare_type": True, "include_object": _include})
        found = compare_metadata(context, meta)
    return [d for d in _flat(found) if d[0] not in IGNORED_KINDS]


def _copy_with(table_name: str, column_name: str, **changes: Any) -> MetaData:
    """A copy of ``metadata`` whose ``table_name`` lacks ``column_name`` (no ``changes``)
    or has it with ``changes`` (``nullable=True``, ``type_=Integer``)."""
    copy = MetaData()
    for table in metadata.sorted_tables:
        if table.name != table_name:
            table.to_metadata(copy)
            continue
        columns = []
        for c in table.columns:
            if c.name == column_name and not changes:
                continue
            keys = [ForeignKey(fk.target_fullname, ondelete=fk.ondelete) for fk in c.foreign_keys]
            options = {"nullable": c.nullable, "primary_key": c.primary_key}
            type_ = c.type
            if c.name == column_name:
                options.update(changes)
                type_ = options.pop("type_", type_)
            columns.append(Column(c.name, type_, *keys, **options))
        Table(table.name, copy, *columns)
    return copy


def test_the_table_metadata_equals_the_migrated_schema(pg_db: PgDb) -> None:
    assert len(metadata.tables) >= 22  # every table of migrations 0001–0015 is described
    assert schema_differences(pg_db, metadata) == []


def test_a_column_missing_from_the_metadata_is_a_difference(pg_db: PgDb) -> None:
    differences = schema_differences(pg_db, _copy_with("tasks", "schedule"))
    assert [(d[0], d[2], d[3].name) for d in differences] == [
        ("remove_column", "tasks", "schedule")]


def test_a_nullability_that_disagrees_with_the_schema_is_a_difference(pg_db: PgDb) -> None:
    differences = schema_differences(pg_db, _copy_with("tasks", "name", nullable=True))
    assert [(d[0], d[2], d[3]) for d in differences] == [("modify_nullable", "tasks", "name")]


def test_a_column_type_that_disagrees_with_the_schema_is_a_difference(pg_db: PgDb) -> None:
    differences = schema_differences(pg_db, _copy_with("tasks", "log_retention_s",
                                                       type_=Integer))
    assert [(d[0], d[2], d[3]) for d in differences] == [
        ("modify_type", "tasks", "log_retention_s")]
