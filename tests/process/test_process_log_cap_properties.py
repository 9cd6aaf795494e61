"""log_cap.CappedLog in process, under any cut of the output into writes (docs/protocols.md
§3.3 "Bounded output"): head, marker and tail are exact, no cut splits a character, and the
result does not depend on how the output was cut."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from qinglong.local.process.log_cap import MARKER, CappedLog

TEXT = st.lists(st.sampled_from(["a", "\n", "中", "é", "😀"]), max_size=400).map(
    lambda chars: "".join(chars).encode())


def _capped(raw: bytes, cap: int, cuts: list[int]) -> tuple[bytes, str | None]:
    with tempfile.TemporaryDirectory() as folder:
        log = Path(folder) / "a.log"
        out = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        dir_fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
        try:
            capped = CappedLog(cap, dir_fd, "a.log", out_fd=out)
            start = 0
            for cut in [*sorted(cuts), len(raw)]:
                capped.write(raw[start:cut])
                start = max(start, cut)
            capped.finish()
        finally:
            os.close(out)
            os.close(dir_fd)
        layout = Path(folder) / "a.log.layout"
        assert sorted(os.listdir(folder)) in (["a.log"], ["a.log", "a.log.layout"])
        return log.read_bytes(), layout.read_text() if layout.exists() else None


@settings(max_examples=300, deadline=None)
@given(TEXT, st.integers(4, 200), st.lists(st.integers(0, 1600), max_size=8))
def test_any_cut_into_writes_gives_the_exact_head_marker_and_tail(
    raw: bytes, cap: int, cuts: list[int]
) -> None:
    cuts = [c for c in cuts if c <= len(raw)]
    data, layout = _capped(raw, cap, cuts)
    assert (data, layout) == _capped(raw, cap, [])  # independent of the cut into writes
    if len(raw) <= cap:
        assert (data, layout) == (raw, None)
        return
    assert layout is not None
    fields = dict(f.split("=") for f in layout.split()[1:])
    head, tail_from, tail_at = (int(fields[k]) for k in ("head", "tail_from", "tail_at"))
    assert cap // 2 - 3 <= head <= cap // 2
    assert cap - head - 3 <= len(raw) - tail_from <= cap - head
    marker = (b"" if raw[:head].endswith(b"\n") else b"\n") + MARKER % (tail_from - head)
    assert data == raw[:head] + marker + raw[tail_from:]
    assert tail_at == head + len(marker)
    raw[:head].decode()
    raw[tail_from:].decode()
