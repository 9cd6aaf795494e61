"""What a new user following the README met in the cluster panel at ``/ui``, over HTTP
against a real ``ql3 control serve`` (PostgreSQL, moto's S3 server): Settings shows times as
every other page does (docs/panel.md "Times")."""

from __future__ import annotations

import html
import os
import re
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

pytestmark = [pytest.mark.integration, pytest.mark.postgres]


pytest.importorskip("moto")
pytest.importorskip("psycopg")

from cluster_kit import QL3, Cluster, ClusterDb  # noqa: E402
from s3_services import CREDS, moto_server, new_bucket  # noqa: E402

from qinglong.control.retention.objects import make_client  # noqa: E402

# QL3_BIN: another build's `ql3` serving the panel (say, main's, to show a test fails there)
SERVER = os.environ.get("QL3_BIN") or QL3
ISO_TEXT = re.compile(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}")


def shown_text(page: str) -> str:
    """What a page shows: its text outside tags, scripts and attributes."""
    page = re.sub(r"(?s)<(script|style)\b.*?</\1>", "", page)
    return html.unescape(re.sub(r"<[^>]*>", " ", page))


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """One replica (no worker), an admin token, and a browser-like session signed in."""
    tmp = tmp_path_factory.mktemp("panel-fresh-eyes")
    with moto_server() as moto:
        db = ClusterDb.create()
        bucket = new_bucket(make_client(moto, timeout_s=5, **CREDS), versioned=True)
        cluster = Cluster(tmp, db, moto, bucket)
        try:
            url = str(cluster.start_control("c1", command=(SERVER,)).url)
            admin = cluster.token("admin")
            with httpx.Client(base_url=url, timeout=30) as http:
                signed = http.post("/ui/signin", data={"token": admin},
                                   headers={"Origin": url}, follow_redirects=False)
                assert signed.status_code == 303, signed.text[:300]
                yield {"cluster": cluster, "url": url, "admin": admin, "http": http}
        finally:
            cluster.close()
            db.drop()


def test_settings_shows_token_and_signin_times_in_the_viewers_zone(
        world: dict[str, Any]) -> None:
    with world["cluster"].api(world["url"], world["admin"]) as api:
        made = api.post("/v1/tokens", json={"name": "备用令牌", "scope": "viewer"})
        assert made.status_code == 201, made.text
        revoked = api.post(f"/v1/tokens/{made.json()['id']}/revoke")
    assert revoked.status_code == 200, revoked.text
    page = world["http"].get("/ui/settings")
    assert page.status_code == 200, page.text[:300]
    text = shown_text(page.text)
    assert "备用令牌" in text and "已于" in text  # the revoked token, with its time
    assert not ISO_TEXT.search(text), [m.group(0) for m in ISO_TEXT.finditer(text)]
    revoked_cell = page.text.split("已于", 1)[1].split("</td>", 1)[0]
    assert "<time data-local datetime=" in revoked_cell, revoked_cell


def test_runs_with_an_unknown_status_are_refused_by_the_page_and_the_api(
        world: dict[str, Any]) -> None:
    got = world["http"].get("/ui/runs", params={"status": "bogus"})
    assert got.status_code == 400, got.text[:300]
    assert "地址中的运行状态不存在" in got.text
    assert 'href="/ui/runs?status=timed_out"' in got.text and 'href="/ui/runs"' in got.text
    assert world["http"].get("/ui/runs", params={"status": "failed"}).status_code == 200
    with world["cluster"].api(world["url"], world["admin"]) as api:
        answer = api.get("/v1/runs", params={"status": "bogus"})
    assert answer.status_code == 422 and answer.json()["error"]["code"] == "invalid_request"
    assert "status" in answer.text and "bogus" not in answer.text.replace("status=bogus", "")


def test_search_matches_the_command_as_shown_across_argv_words(world: dict[str, Any]) -> None:
    """``["sh", "-c", "echo hello"]`` is shown ``sh -c 'echo hello'``: the panel's search
    and the API's ``q`` find it by a phrase spanning words (docs/protocols.md "Listing
    tasks")."""
    with world["cluster"].api(world["url"], world["admin"]) as api:
        for name, argv in (("京东签到", ["sh", "-c", "echo hello"]),
                           ("备份", ["echo", "sh", "bye"])):
            made = api.post("/v1/tasks", json={"name": name, "argv": argv,
                                               "schedule": "0 8 * * *",
                                               "timezone": "Asia/Shanghai"})
            assert made.status_code == 201, made.text
        for query in ("sh -c", "SH -C 'ECHO", "-c 'echo hello'"):
            page = world["http"].get("/ui/", params={"q": query})
            assert page.status_code == 200
            text = shown_text(page.text)
            assert "京东签到" in text and "备份" not in text, (query, text[-600:])
            found = api.get("/v1/tasks", params={"q": query}).json()["items"]
            assert [t["name"] for t in found] == ["京东签到"], (query, found)
