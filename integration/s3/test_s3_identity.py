"""``ArtifactIdentity`` validation and the metadata an uploader writes (no server needed)."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from qinglong.control.retention.objects import ArtifactIdentity
from qinglong.shared.errors import ValidationError

pytestmark = pytest.mark.integration

GOOD: dict[str, Any] = {
    "bucket": "logs", "key": "wlog-x", "version_id": None, "content_type": "text/plain",
    "size": 3, "sha256": "a" * 64,
    "metadata": {"project": "p", "run": "r", "attempt": "a", "artifact": "wlog-x"}}


def test_object_metadata_names_identity_digest_and_length() -> None:
    ident = ArtifactIdentity(**GOOD)
    assert ident.object_metadata() == {
        "ql3-project": "p", "ql3-run": "r", "ql3-attempt": "a", "ql3-artifact": "wlog-x",
        "ql3-sha256": "a" * 64, "ql3-size": "3"}


@pytest.mark.parametrize(("field", "value"), [
    ("bucket", ""), ("key", ""), ("version_id", ""), ("content_type", ""), ("size", -1),
    ("size", True), ("sha256", "A" * 64), ("sha256", "a" * 63),
    ("metadata", {"project": "p", "run": "r", "attempt": "a"}),
    ("metadata", {"project": "p", "run": "r", "attempt": "a", "artifact": "wlög"}),
    ("metadata", {"project": "", "run": "r", "attempt": "a", "artifact": "w"})])
def test_malformed_identity_is_refused(field: str, value: Any) -> None:
    with pytest.raises(ValidationError):
        ArtifactIdentity(**{**GOOD, field: value})


def test_identity_metadata_is_copied() -> None:
    meta = dict(GOOD["metadata"])
    ident = ArtifactIdentity(**{**GOOD, "metadata": meta})
    meta["run"] = "changed"
    assert ident.metadata["run"] == "r"
    assert dataclasses.replace(ident).metadata == ident.metadata
