"""One cron module for both profiles (issue 10 item 0, docs/architecture.md §1 and
docs/protocols.md §4.2): the schedule rules live in ``qinglong.shared.cron``, the local profile
has no copy of its own, and the module loads nothing of the local profile (so the cluster's
scheduler can use it)."""

from __future__ import annotations

import importlib.util
import subprocess
import sys

import qinglong.shared.cron as shared_cron
from qinglong.local.app import legacy_import, task_input
from qinglong.local.scheduling import scheduler


def test_the_local_profile_has_no_cron_module_of_its_own() -> None:
    assert importlib.util.find_spec("qinglong.local.scheduling.cron") is None


def test_the_scheduler_task_input_and_import_all_parse_with_the_shared_module() -> None:
    for module in (scheduler, task_input, legacy_import):
        assert vars(module)["parse_schedule"] is shared_cron.parse_schedule, module.__name__


def test_importing_the_shared_cron_module_loads_no_profile_code() -> None:
    probe = (
        "import sys, qinglong.shared.cron as c;"
        "c.parse_schedule('*/5 * * * *', 'Asia/Shanghai').next_slot_after(0);"
        "bad = sorted(m for m in sys.modules if m.startswith(('qinglong.local',"
        " 'qinglong.control', 'qinglong.worker', 'click', 'rich', 'psycopg', 'boto3')));"
        "print(','.join(bad))"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                         check=True, timeout=60)
    assert out.stdout.strip() == ""
