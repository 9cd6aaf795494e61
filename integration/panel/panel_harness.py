"""Start the real `ql3 local web` beside a real `ql3 local serve` (docs/panel.md)."""

from __future__ import annotations

import re
import select
import signal
import subprocess
import time
from dataclasses import dataclass
from typing import Any

from harness import QL3, Ql3

LINK = re.compile(r"(http://127\.0\.0\.1:\d+)/signin\?token=([A-Za-z0-9_-]+)")


@dataclass
class Web:
    proc: subprocess.Popen[str]
    base: str  # http://127.0.0.1:PORT
    link: str  # the one-time sign-in link

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(20)
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
                self.proc.wait()
            for pipe in (self.proc.stdout, self.proc.stderr):
                if pipe is not None:
                    pipe.close()


def start_web(ql3: Ql3, *extra: str, timeout: float = 30) -> Web:
    """`ql3 local web --listen 127.0.0.1:0 [extra…]`; waits for its sign-in link on stdout."""
    proc = subprocess.Popen([QL3, "local", "web", "--listen", "127.0.0.1:0", *extra],
                            env=ql3.env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    deadline = time.monotonic() + timeout
    seen = ""
    while time.monotonic() < deadline:
        ready, _, _ = select.select([proc.stdout], [], [], 0.5)
        if ready:
            line = proc.stdout.readline()
            seen += line
            match = LINK.search(line)
            if match:
                return Web(proc, match.group(1), match.group(0))
        if proc.poll() is not None:
            raise AssertionError(f"ql3 local web exited {proc.returncode}: {seen}"
                                 f"{proc.stderr.read() if proc.stderr else ''}")
    proc.kill()
    proc.wait()
    raise AssertionError(f"no sign-in link from ql3 local web: {seen!r}")


def close_contexts(browser: Any) -> None:
    """Close every context still open in ``browser`` (the session's ``chromium``): what a
    module's tests opened and left open ends with the module."""
    for context in list(browser.contexts):
        context.close()
