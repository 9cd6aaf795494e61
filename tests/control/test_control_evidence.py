"""The tombstone evidence is canonical JSON (ADR-0379 §3 step 5): ``canonical_evidence``'s
format-string path must write exactly what ``json.dumps`` with sorted keys, compact
separators and ASCII escapes writes, for any field values, and the read path re-checks it."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from qinglong.control.retention.claims import Claim
from qinglong.control.retention.finalize import EVIDENCE_SCHEMA, Outcome, canonical_evidence

_T0 = datetime(2026, 11, 30, 4, 0, 0, 123456, tzinfo=UTC)


def _claim(**fields: Any) -> Claim:
    base: dict[str, Any] = {
        "attempt_id": "0b9c5a4e-5f3c-4c1e-9a57-6f1f3d2e8a10", "project_id": "p", "run_id": "r",
        "artifact_id": "a", "bucket": "ql3-logs", "object_key": "k/log.txt", "version_id": None,
        "size_bytes": 42, "sha256": "0" * 64, "content_type": "text/plain",
        "owner": "replica-1/abc",
        "token": "t", "version": 1, "lease_expires_at": _T0, "failure_count": 0}
    base.update(fields)
    return Claim(**base)


def _reference(claim: Claim, outcome: Outcome, retired_at: datetime) -> str:
    """The canonical document through the json module, independently of finalize.py."""
    doc = {"schema": EVIDENCE_SCHEMA, "project_id": claim.project_id,
           "run_id": claim.run_id, "attempt_id": claim.attempt_id,
           "artifact_id": claim.artifact_id, "bucket": claim.bucket,
           "object_key": claim.object_key, "version_id": claim.version_id,
           "size_bytes": claim.size_bytes, "sha256": claim.sha256,
           "content_type": claim.content_type, "outcome": outcome.value,
           "retired_at": retired_at.astimezone(UTC).isoformat(timespec="microseconds"),
           "retired_by": claim.owner}
    return json.dumps(doc, sort_keys=True, separators=(",", ":"), ensure_ascii=True)


_text = st.text()  # any code point except surrogates: quotes, controls, non-ASCII, emoji


@given(artifact_id=_text, bucket=_text, object_key=_text, version_id=st.none() | _text,
       size_bytes=st.integers(min_value=-(2**70), max_value=2**70), sha256=_text,
       content_type=_text, owner=_text, project_id=_text, outcome=st.sampled_from(Outcome),
       offset_min=st.integers(min_value=-23 * 60, max_value=23 * 60))
def test_evidence_is_exactly_the_json_modules_canonical_document(
    artifact_id: str, bucket: str, object_key: str, version_id: str | None, size_bytes: int,
    sha256: str, content_type: str, owner: str, project_id: str, outcome: Outcome,
    offset_min: int,
) -> None:
    claim = _claim(artifact_id=artifact_id, bucket=bucket, object_key=object_key,
                   version_id=version_id, size_bytes=size_bytes, sha256=sha256,
                   content_type=content_type, owner=owner, project_id=project_id)
    retired_at = _T0.astimezone(timezone(timedelta(minutes=offset_min)))
    evidence = canonical_evidence(claim, outcome, retired_at)
    assert evidence == _reference(claim, outcome, retired_at)
    assert evidence.isascii()


def test_evidence_keys_are_sorted_and_hold_every_field() -> None:
    evidence = canonical_evidence(_claim(version_id="v1"), Outcome.DELETED, _T0)
    doc = json.loads(evidence)
    assert list(doc) == sorted(doc)
    assert doc["schema"] == EVIDENCE_SCHEMA
    assert doc["retired_at"] == "2026-11-30T04:00:00.123456+00:00"
    assert (doc["version_id"], doc["size_bytes"], doc["outcome"]) == ("v1", 42, "deleted")


def test_a_field_of_another_type_gets_the_json_modules_text() -> None:
    """A bool size (JSON ``true``, not ``1``) or a non-str id falls back to the encoder."""
    for claim in (_claim(size_bytes=True), _claim(size_bytes=1.5), _claim(run_id=7),
                  _claim(version_id=3)):
        assert canonical_evidence(claim, Outcome.ALREADY_ABSENT, _T0) == _reference(
            claim, Outcome.ALREADY_ABSENT, _T0)
    assert '"size_bytes":true' in canonical_evidence(_claim(size_bytes=True),
                                                     Outcome.DELETED, _T0)
