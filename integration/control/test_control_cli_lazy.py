"""`control` is a lazy subcommand: `ql3 --help` and `ql3 control --help` load no psycopg."""

from __future__ import annotations

import subprocess
import sys

import pytest

pytestmark = pytest.mark.integration


@pytest.mark.parametrize("argv", [["--help"], ["control", "--help"], ["control", "retention",
                                                                       "--help"]])
def test_help_resolves_control_without_loading_psycopg_or_sqlalchemy(argv: list[str]) -> None:
    code = (
        "import sys\nfrom qinglong.local.app.cli import run_main\n"
        f"rc = run_main({argv!r})\n"
        "assert rc == 0, rc\n"
        "assert not [m for m in sys.modules if m.split('.')[0] in ('psycopg', 'sqlalchemy')]\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=60, check=False)
    assert out.returncode == 0, out.stderr
    assert "control" in out.stdout or "migrate" in out.stdout or "status" in out.stdout
