"""``ql3 control serve`` stops on SIGTERM or SIGINT by draining: the HTTP server stops, every
lifecycle ends within its budget, and the process exits 0 (issue 11 item 8; its --help).
A Kubernetes rollout sends SIGTERM; a developer presses Ctrl-C."""

from __future__ import annotations

import signal

import pytest
from cluster_kit import Cluster

pytestmark = [pytest.mark.integration, pytest.mark.postgres]


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_a_signal_drains_the_replica_and_it_exits_0(cluster: Cluster,
                                                    sig: signal.Signals) -> None:
    control = cluster.start_control("c1")

    control.popen.send_signal(sig)
    code = control.popen.wait(30)

    assert code == 0, control.log()[-3000:]
    assert "control replica c1 stopped (lifecycles drained: yes)" in control.log()
    assert "Traceback" not in control.log()
