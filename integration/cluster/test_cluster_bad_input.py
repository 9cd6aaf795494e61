"""Bad JSON against a real ``ql3 control serve`` (docs/protocols.md §4.5 "Input bounds"):
each class answers a 4xx with its own code and words, on a worker route and on
``/v1/tasks``; nothing of it, and no traceback, reaches control's log."""

from __future__ import annotations

import pytest
from cluster_kit import Cluster

pytestmark = pytest.mark.integration
CLASSES = [
    (b"[" * 5000 + b"]" * 5000, 400, "json_too_deep", "levels deep"),
    (b'{"name": "' + "京东签到".encode("gbk") + b'"}', 400, "json_not_utf8", "not UTF-8"),
    (b'{"max_attempts": ' + b"7" * 5000 + b"}", 400, "json_number_too_long", "number"),
    (b'{"pad": "' + b"x" * (9 * 1024 * 1024) + b'"}', 413, "body_too_large", "bound"),
]


def test_each_class_of_bad_json_gets_a_specific_4xx_and_no_traceback(
        cluster: Cluster) -> None:
    control = cluster.start_control("c1")
    assert control.url is not None
    worker = cluster.api(control.url, cluster.token("worker", pool="default"))
    operator = cluster.api(control.url, cluster.token("admin"))
    try:
        for client, path in ((worker, "/v1/worker/claim"), (worker, "/v1/worker/register"),
                             (operator, "/v1/tasks")):
            for body, status, code, words in CLASSES:
                for media in ("application/json", "text/plain"):
                    answer = client.post(path, content=body, headers={"Content-Type": media})
                    assert answer.status_code == status, (path, code, answer.text)
                    error = answer.json()["error"]
                    assert error["code"] == code and words in error["message"], answer.text
                    assert "京东" not in answer.text and "Traceback" not in answer.text
        ok = operator.post("/v1/tasks", json={"name": "jd-sign", "argv": ["echo", "签到成功"]})
        assert ok.status_code == 201, ok.text  # good bodies still pass
    finally:
        worker.close()
        operator.close()
    log = control.log()
    assert "Traceback" not in log and "RecursionError" not in log and "京东" not in log
