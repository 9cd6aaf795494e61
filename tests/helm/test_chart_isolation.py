"""Worker isolation in the chart (docs/protocols.md §4.8): one attempt per pod by default
(the pod is the isolation, Pod Security "restricted" kept); ``isolation: uid`` as the opt-in
for more, rendered as a root worker with exactly the capabilities uid isolation needs (all
allowed by Pod Security "baseline"); more than one attempt per pod without isolation is
refused at render time unless ``allowSharedUid`` says so."""

from __future__ import annotations

from typing import Any

import helm_python
import pytest
from chart_render import CI_VALUES, load_values, render

MINIMAL = next(p for p in CI_VALUES if p.name == "minimal-values.yaml")
WORKER = "ql3-qinglong-worker-default"
# Pod Security Standards, baseline: the only capabilities a container may add
BASELINE_CAPS = {"AUDIT_WRITE", "CHOWN", "DAC_OVERRIDE", "FOWNER", "FSETID", "KILL", "MKNOD",
                 "NET_BIND_SERVICE", "SETFCAP", "SETGID", "SETPCAP", "SETUID", "SYS_CHROOT"}


def _worker(worker: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    values = load_values(MINIMAL)
    values["worker"] = {**values["worker"], **worker}
    spec = render(values).one("Deployment", WORKER)["spec"]["template"]["spec"]
    return spec, spec["containers"][0]


def test_the_default_is_one_attempt_per_pod_and_restricted() -> None:
    spec, container = _worker({})
    assert "--concurrency=1" in container["args"]
    assert "--isolation=none" in container["args"]
    assert "--allow-shared-uid" not in container["args"]
    assert spec["securityContext"]["runAsNonRoot"] is True
    assert container["securityContext"]["capabilities"] == {"drop": ["ALL"]}


def test_isolation_uid_runs_each_attempt_as_its_own_uid_within_baseline() -> None:
    spec, container = _worker({"concurrency": 4, "isolation": "uid"})
    args = container["args"]
    assert "--concurrency=4" in args and "--isolation=uid" in args
    assert "--attempt-root=/var/lib/qinglong/work/attempts" in args
    assert spec["securityContext"]["runAsUser"] == 0
    sc = container["securityContext"]
    assert sc["runAsUser"] == 0 and sc["runAsNonRoot"] is False
    assert sc["allowPrivilegeEscalation"] is False  # no_new_privs: no setuid way back
    assert sc["capabilities"]["drop"] == ["ALL"]
    assert set(sc["capabilities"]["add"]) == {"SETUID", "SETGID", "KILL", "CHOWN",
                                             "DAC_OVERRIDE", "FOWNER"}
    assert set(sc["capabilities"]["add"]) <= BASELINE_CAPS
    mounts = {m["mountPath"] for m in container["volumeMounts"]}
    assert "/var/lib/qinglong/work" in mounts  # the attempt root lives on an emptyDir


def test_more_than_one_attempt_per_pod_without_isolation_is_refused() -> None:
    with pytest.raises(helm_python.HelmRenderError) as caught:
        _worker({"concurrency": 2})
    message = str(caught.value)
    assert "worker.pools[default]: concurrency 2 needs isolation: uid" in message
    assert "allowSharedUid" in message


def test_allow_shared_uid_is_passed_on() -> None:
    _, container = _worker({"concurrency": 2, "allowSharedUid": True})
    assert "--allow-shared-uid" in container["args"]
    assert "--isolation=none" in container["args"]


def test_an_unknown_isolation_is_refused_by_the_schema() -> None:
    with pytest.raises(helm_python.HelmValuesError):
        _worker({"isolation": "userns"})  # not in a pod: Kubernetes' seccomp refuses it
