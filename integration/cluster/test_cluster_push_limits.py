"""Push limits of a real ``ql3 control serve`` (docs/operations.md "Push limits",
docs/protocols.md §4.7): an extended tar header over 64 KiB is refused before it is read, so
ten concurrent 0.5 MiB pushes each carrying a 512 MiB PAX header cost control little memory;
pushes past ``--max-pushes`` answer 429 with Retry-After before their body is read."""

from __future__ import annotations

import tarfile
import threading
import zlib
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest
from cluster_kit import Cluster, Proc, wait_for

from qinglong.shared.bundles import pack

pytestmark = pytest.mark.integration
GZIP = {"Content-Type": "application/gzip"}
MIB = 1024 * 1024


def pax_bomb(header_bytes: int = 512 * MIB) -> bytes:
    """A gzip tar whose first header is a PAX header claiming ``header_bytes`` of zeros,
    all of them present (about 0.5 MiB compressed)."""
    info = tarfile.TarInfo("././@PaxHeader")
    info.type, info.size = tarfile.XHDTYPE, header_bytes
    gz = zlib.compressobj(9, zlib.DEFLATED, 31)
    parts = [gz.compress(info.tobuf(tarfile.USTAR_FORMAT))]
    zeros = bytes(MIB)
    for _ in range(header_bytes // MIB):
        parts.append(gz.compress(zeros))
    parts.append(gz.flush())
    return b"".join(parts)


def status_kib(pid: int, field: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise AssertionError(f"no {field} for {pid}")


@pytest.fixture
def control(cluster: Cluster) -> Iterator[tuple[Proc, httpx.Client]]:
    proc = cluster.start_control("c1")
    assert proc.url is not None
    api = cluster.api(proc.url, cluster.token("operator"))
    try:
        yield proc, api
    finally:
        api.close()


def test_ten_concurrent_header_bombs_stay_within_64_mib_of_idle(
        control: tuple[Proc, httpx.Client], tmp_path: Path) -> None:
    proc, api = control
    bomb = pax_bomb()
    assert len(bomb) < MIB  # small compressed, 512 MiB once decompressed
    pid = proc.popen.pid
    Path(f"/proc/{pid}/clear_refs").write_text("5")  # VmHWM := current RSS
    idle_kib = status_kib(pid, "VmHWM")

    def push(_: int) -> httpx.Response:
        return api.post("/v1/scripts", content=bomb, headers=GZIP, timeout=120)

    with ThreadPoolExecutor(max_workers=10) as pool:
        answers = list(pool.map(push, range(10)))
    peak_kib = status_kib(pid, "VmHWM")
    print(f"control idle {idle_kib} KiB, peak {peak_kib} KiB over ten hostile pushes")
    assert (peak_kib - idle_kib) <= 64 * 1024, (idle_kib, peak_kib)
    for answer in answers:
        assert answer.status_code in (413, 429), answer.text
        if answer.status_code == 413:
            assert answer.json()["error"]["reason"] == "header_too_large"
        else:
            assert answer.headers["Retry-After"].isdigit()
    assert any(a.status_code == 413 for a in answers)
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "run.sh").write_text("echo 你好\n")
    good = api.post("/v1/scripts", content=pack(tmp_path / "src"), headers=GZIP)
    assert good.status_code == 201, good.text  # every slot was given back


def test_pushes_past_the_limit_answer_429_with_retry_after(
        cluster: Cluster, tmp_path: Path) -> None:
    proc = cluster.start_control("c1", "--max-pushes", "1")
    assert proc.url is not None
    token = cluster.token("operator")
    api, prober = cluster.api(proc.url, token), cluster.api(proc.url, token)  # two pushers
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "run.sh").write_text("echo hi\n")
    data = pack(tmp_path / "src")
    (tmp_path / "src" / "run.sh").write_text("echo other\n")
    other = pack(tmp_path / "src")
    holders: list[tuple[threading.Thread, threading.Event, list[httpx.Response]]] = []

    def hold() -> tuple[threading.Thread, threading.Event, list[httpx.Response]]:
        """A push whose body stalls after its first bytes (it holds the one slot)."""
        sent, release, answers = threading.Event(), threading.Event(), []

        def slow_body() -> Iterator[bytes]:
            yield data[:10]
            sent.set()
            release.wait(60)
            yield data[10:]

        holder = threading.Thread(target=lambda: answers.append(
            api.post("/v1/scripts", content=slow_body(), headers=GZIP, timeout=90)))
        holder.start()
        assert sent.wait(30)
        holders.append((holder, release, answers))
        return holder, release, answers

    def probe_is_refused() -> httpx.Response | None:
        holder, release, _ = hold()
        answer = prober.post("/v1/scripts", content=other, headers=GZIP)
        if answer.status_code == 429:
            return answer
        release.set()  # the probe was let in first (both raced for the slot): again
        holder.join(90)
        return None

    try:
        refused = wait_for(probe_is_refused, 60)
        assert refused is not None
        assert refused.json()["error"]["code"] == "too_many_pushes"
        assert refused.headers["Retry-After"] == "2"
    finally:
        for holder, release, _ in holders:
            release.set()
            holder.join(90)
        api.close()
        prober.close()
    answers = holders[-1][2]
    assert answers and answers[0].status_code in (200, 201), answers
