"""`ql3 worker run --token-file` through the real CLI (issue 11 item 6): a private file is
read, a readable-by-others one is refused with exit status 2 and no trace of the token."""

from __future__ import annotations

import pytest
from fake_control import TOKEN

pytestmark = pytest.mark.integration


def test_token_file_0600_is_used_to_register(control, start_worker, tmp_path):
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN + "\n")
    token_file.chmod(0o600)
    worker = start_worker("--token-file", str(token_file), token_env=False)
    control.wait_for("register")  # the fake answers 401 to any other bearer
    control.wait_for("claim")
    assert worker.proc.poll() is None


def test_token_file_0644_is_refused_with_exit_2(control, start_worker, tmp_path):
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN + "\n")
    token_file.chmod(0o644)
    worker = start_worker("--token-file", str(token_file), token_env=False)
    assert worker.proc.wait(15) == 2
    err = worker.stderr()
    assert "600" in err
    assert TOKEN not in err
    assert control.seen("register") == []
