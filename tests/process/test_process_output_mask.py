"""The wrapper masks the attempt's secret values in its log (docs/operations.md "Secrets in
output"): with no cap too (the output then goes through the pipe), across writes, and before
the cap counts bytes."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from process_testkit import Env

pytestmark = pytest.mark.integration

SECRET = "tok-ЖЖ-123456"


def _run(env: Env, script: str, cap: int = 0, names: tuple[str, ...] = ("TOKEN",)) -> bytes:
    request = env.request(argv=("sh", "-c", script),
                          env={"PATH": os.environ["PATH"], "TOKEN": SECRET, "SHORT": "abcde"},
                          secret_names=names)
    with env.launcher(log_cap_bytes=cap).start(request) as proc:
        proc.open_gate()
        assert proc.wait(20) == 0
    return Path(request.output_path).read_bytes()


def test_without_a_cap_a_secret_split_across_writes_is_masked(env: Env) -> None:
    data = _run(env, 'printf %s "$TOKEN" | head -c 5; sleep 0.2; '
                     'printf %s "$TOKEN" | tail -c +6; echo " $SHORT"; echo "$TOKEN" >&2')
    assert data == b"*** abcde\n***\n"


def test_a_variable_not_named_secret_is_written_as_it_is(env: Env) -> None:
    assert _run(env, 'echo "$TOKEN"', names=()) == SECRET.encode() + b"\n"


def test_masking_comes_before_the_cap(env: Env) -> None:
    data = _run(env, 'i=0; while [ $i -lt 200 ]; do echo "$TOKEN"; i=$((i+1)); done', cap=400)
    assert SECRET.encode() not in data and b"\xd0" not in data  # no part of the value
    assert data.startswith(b"***\n" * 50)
    assert data.endswith(b"***\n" * 50)
    assert b"[ql3: 0 bytes" not in data and b"bytes of output left out here]\n" in data
