"""Typed errors of the cluster control plane (names follow ADR-0379 and docs/protocols.md §4.1)."""

from __future__ import annotations

from qinglong.shared.errors import QinglongError, ValidationError


class ControlSchemaError(QinglongError):
    """The PostgreSQL schema and this code disagree; the message names the file or row."""


class MigrationCapError(ControlSchemaError):
    """The migration files disagree with the reviewed hard cap pinned in the code."""


class MigrationChecksumError(ControlSchemaError):
    """A migration already recorded in the ledger differs from the file of the same name."""


class SchemaNewerThanCodeError(ControlSchemaError):
    """A non-additive migration unknown to this code is in the ledger (schema_newer_than_code)."""


class RuntimeRoleError(QinglongError):
    """The runtime role name is invalid, or its grants are not exactly the reviewed set."""


class RuntimeRoleRefusedError(ValidationError, RuntimeRoleError):
    """The runtime role given is malformed, or one that must not get the runtime grants:
    the connecting (owner) role, a superuser, or a role owning objects in ``public``
    (exit 2: bad input)."""


class MigrationOwnerRequiredError(ValidationError):
    """``migrate`` or ``token create|import|revoke`` connected as a role that cannot create
    objects in schema ``public`` (for example the runtime role's URL); it must run as the
    migration owner (exit 2: bad input). Raised before anything is changed."""


class TokenNameTakenError(ValidationError):
    """A live (not revoked) token already has this name: revoke it first or choose another
    name (exit 2; the API answers 409 ``token_name_taken``)."""

    code = "token_name_taken"


class ControlExtraMissingError(ValidationError):
    """``ql3 control`` ran without the ``control`` extra (psycopg, SQLAlchemy, boto3)
    installed: exit 2 with the install command instead of a traceback."""


class FenceMismatchError(QinglongError):
    """A claim's owner, token, version, lease, status or identity no longer holds; no change."""


class NotReadyError(QinglongError):
    """``ql3 control readiness`` found the control plane not ready (exit 1, reason named)."""


class RetryRefusedError(QinglongError):
    """``ql3 control retention retry`` left some ids unchanged (unknown, retired or leased)."""


class DrainTimeoutError(QinglongError):
    """``ql3 control retention sweep`` did not drain its running sweep within the stop budget
    (unreached rows stay leased and are settled after their lease expires)."""


class DatabaseUnavailableError(QinglongError):
    """PostgreSQL refused or failed a command's work (connect, permission, missing schema).
    The message is one line with the server's reason and never the URL or its password."""


class ObjectStoreUnavailableError(QinglongError):
    """The S3-compatible store could not be used (unreachable, no credentials, no bucket)."""
