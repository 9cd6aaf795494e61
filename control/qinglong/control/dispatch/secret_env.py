"""Which of a task's variables are secret, for the worker's output masking (docs/operations.md
§9, cluster half; docs/protocols.md §4.2 ``ClaimedAttempt.secret_names``)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def secret_names(env: Mapping[str, Any] | None) -> list[str]:
    """The names in ``tasks.env`` (``{"NAME": {"value": "v", "secret": bool}}``) marked
    ``secret: true`` with a string value, sorted; a plain string value (older rows) is not
    secret. Never raises on odd shapes: anything else is skipped."""
    return sorted(str(name) for name, spec in (env or {}).items()
                  if isinstance(spec, Mapping) and spec.get("secret") is True
                  and isinstance(spec.get("value"), str))
