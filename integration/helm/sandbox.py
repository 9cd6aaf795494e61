"""Run a rendered container the way its pod would, on this machine (no Kubernetes here), with
bubblewrap: the container's own command, args and env from the manifest; another uid (the
pod's runAsUser/runAsGroup, no capabilities); a read-only root filesystem where only the
pod's volumes are writable (emptyDirs) or present (Secrets, ConfigMaps, read-only); root's
files hidden; ``/etc/hosts`` naming the chart's Services so its URLs resolve to loopback.

What a pod gets from its image rather than its manifest (PATH, the working directory) is
``Image``: here the dev venv stands in for the image's /opt/ql3.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

VENV_BIN = Path(sys.executable).parent
BWRAP = shutil.which("bwrap")
SETPRIV = shutil.which("setpriv")


@dataclass(frozen=True)
class Image:
    """What the Dockerfile gives a container: PATH (ql3's venv first) and WORKDIR."""

    workdir: str = "/"
    path: str = f"{VENV_BIN}:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


def _python_root() -> list[str]:
    """Bind arguments that keep this interpreter reachable when it lives under /root (a pyenv
    build): the top directory under /root, since bwrap would create its parents 0700."""
    real = Path(os.path.realpath(sys.base_prefix))
    if real.parts[:2] != ("/", "root"):
        return []
    top = Path("/root") / real.parts[2]
    return ["--ro-bind", str(top), str(top)]


CHECKOUT = VENV_BIN.parents[1]  # the image's /opt/ql3 stands in: the venv and the sources


def _checkout_bind(mount_paths: list[str]) -> list[str]:
    """Bind arguments that keep the checkout (the dev venv, which stands in for the image's
    installed ql3, and the source roots its editable install points at) visible when a pod
    volume covers it — a clone under /tmp is hidden by the pod's /tmp emptyDir otherwise.
    Read-only, at its own path, on top of the volumes; its parents below the covering
    volume are made 0755 first (bwrap would make them 0700)."""
    covering = [m for m in mount_paths if CHECKOUT.is_relative_to(m) and Path(m) != CHECKOUT]
    if not covering:
        return []
    top = Path(max(covering, key=len))
    args: list[str] = []
    for parent in reversed(CHECKOUT.parents):
        if parent != top and parent.is_relative_to(top):
            args += ["--perms", "0755", "--dir", str(parent)]
    return [*args, "--ro-bind", str(CHECKOUT), str(CHECKOUT)]


def _parent_tmpfs(mount_path: str) -> str | None:
    """The existing directory to cover with a tmpfs so that ``mount_path`` can be created
    under the read-only root: the nearest existing ancestor of its first missing component;
    None when ``mount_path`` exists already."""
    path = Path(mount_path)
    if path.exists():
        return None
    while not path.parent.exists():
        path = path.parent
    return str(path.parent)


def _between(covers: list[str], mount_paths: list[str]) -> list[str]:
    """The directories between a tmpfs cover and a mount path below it (parents first)."""
    found: list[str] = []
    for mount_path in mount_paths:
        parents = [str(p) for p in reversed(Path(mount_path).parents)]
        for parent in parents:
            below = any(parent.startswith(cover + "/") for cover in covers)
            if below and parent not in found:
                found.append(parent)
    return found


@dataclass
class Pod:
    """One pod's volumes laid out on the host: ``secrets`` maps (Secret name, key) to the
    value a Secret would hold, ``config_maps`` a ConfigMap's name to its data (rendered by
    the chart too); ``hosts`` names to put in /etc/hosts as 127.0.0.1."""

    spec: dict[str, Any]
    name: str
    secrets: dict[tuple[str, str], str]
    hosts: list[str]
    config_maps: dict[str, dict[str, str]] = field(default_factory=dict)
    root: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="ql3-pod-")))

    def __post_init__(self) -> None:
        self.uid = int(self.spec["securityContext"]["runAsUser"])
        self.gid = int(self.spec["securityContext"]["runAsGroup"])
        self.root.chmod(0o755)
        self.volumes: dict[str, tuple[Path, bool]] = {}
        for volume in self.spec.get("volumes", []):
            self.volumes[volume["name"]] = self._lay_out(volume)
        hosts = self.root / "hosts"
        hosts.write_text("127.0.0.1 localhost " + " ".join(self.hosts) + "\n")
        hosts.chmod(0o644)

    def _lay_out(self, volume: dict[str, Any]) -> tuple[Path, bool]:
        """(host directory, writable) of one volume: an emptyDir is an empty directory the
        pod's user may write (0777, as a kubelet makes it); a Secret's items are files of
        mode defaultMode owned by root and the pod's fsGroup; a ConfigMap's data files."""
        where = self.root / "volumes" / volume["name"]
        where.mkdir(parents=True)
        if "emptyDir" in volume:
            where.chmod(0o777)
            return where, True
        where.chmod(0o755)
        if "secret" in volume:
            secret = volume["secret"]
            for item in secret["items"]:
                path = where / item["path"]
                path.write_text(self.secrets[(secret["secretName"], item["key"])])
                os.chown(path, 0, self.gid)
                path.chmod(secret.get("defaultMode", 0o644))
        elif "configMap" in volume:
            for name, text in self.config_maps[volume["configMap"]["name"]].items():
                (where / name).write_text(text)
                (where / name).chmod(0o644)
        else:
            raise ValueError(f"volume {volume['name']}: kind not emulated")
        return where, False

    def env(self, container: dict[str, Any], image: Image) -> dict[str, str]:
        """The container's environment as the kubelet would build it from the manifest:
        literal values, Secret keys and the pod's name; PATH from the image."""
        env = {"PATH": image.path, "HOSTNAME": self.name}
        for entry in container.get("env", []):
            if "value" in entry:
                env[entry["name"]] = str(entry["value"])
                continue
            source = entry["valueFrom"]
            if "secretKeyRef" in source:
                ref = source["secretKeyRef"]
                env[entry["name"]] = self.secrets[(ref["name"], ref["key"])]
            elif source.get("fieldRef", {}).get("fieldPath") == "metadata.name":
                env[entry["name"]] = self.name
            else:
                raise ValueError(f"env {entry['name']}: source not emulated: {source}")
        return env

    def argv(self, container: dict[str, Any], image: Image) -> list[str]:
        """The bwrap command line that runs ``container`` (command + args exactly as the
        manifest has them) as the pod's user with only the pod's volumes mounted."""
        assert BWRAP and SETPRIV, "bubblewrap (bwrap) and setpriv are needed"
        mounts = container.get("volumeMounts", [])
        covers = sorted({c for m in mounts if (c := _parent_tmpfs(m["mountPath"]))})
        args = [BWRAP, "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc",
                "--tmpfs", "/root", *_python_root()]
        for cover in covers:
            args += ["--perms", "0755", "--tmpfs", cover]
        for directory in _between(covers, [m["mountPath"] for m in mounts]):
            args += ["--perms", "0755", "--dir", directory]  # bwrap would make them 0700
        for mount in mounts:
            host, writable = self.volumes[mount["name"]]
            bind = "--bind" if writable and not mount.get("readOnly") else "--ro-bind"
            args += [bind, str(host), mount["mountPath"]]
        args += _checkout_bind([m["mountPath"] for m in mounts])
        args += ["--ro-bind", str(self.root / "hosts"), "/etc/hosts",
                 "--hostname", self.name, "--unshare-uts", "--unshare-pid",
                 "--die-with-parent", "--chdir", image.workdir, "--clearenv"]
        for key, value in self.env(container, image).items():
            args += ["--setenv", key, value]
        args += ["--", SETPRIV, "--reuid", str(self.uid), "--regid", str(self.gid),
                 "--clear-groups", "--inh-caps=-all", "--bounding-set=-all", "--"]
        return args + list(container.get("command", [])) + list(container.get("args", []))

    def run(self, container: dict[str, Any], image: Image, timeout: float = 120
            ) -> subprocess.CompletedProcess[str]:
        """Run ``container`` to its end (an init container, a Job's step, a test pod)."""
        return subprocess.run(self.argv(container, image), capture_output=True, text=True,
                              timeout=timeout, check=False)

    def start(self, container: dict[str, Any], image: Image, log: Path) -> Sandboxed:
        """Start ``container`` (a Deployment's) in the background, output to ``log``."""
        with open(log, "ab") as out:
            popen = subprocess.Popen(self.argv(container, image), stdout=out, stderr=out,
                                     start_new_session=True)
        return Sandboxed(popen, log)

    def close(self) -> None:
        shutil.rmtree(self.root, ignore_errors=True)


@dataclass
class Sandboxed:
    """A container running in bwrap: ``popen`` is bwrap itself; ``main_pid`` the container's
    process (what the kubelet signals: PID 1 of the container)."""

    popen: subprocess.Popen[bytes]
    log: Path

    def main_pid(self) -> int | None:
        """The pid of the process bwrap's child became (setpriv execs the command)."""
        for child in _children(self.popen.pid):
            for grandchild in [child, *_children(child)]:
                if proc_uid(grandchild) not in (None, 0):
                    return grandchild
        return None

    def stop(self, timeout: float = 60) -> int:
        """SIGTERM to the container's process (as the kubelet does), then wait for bwrap;
        SIGKILL to bwrap's session after ``timeout``. Returns bwrap's exit status."""
        pid = self.main_pid()
        if pid is not None:
            os.kill(pid, signal.SIGTERM)
        try:
            return self.popen.wait(timeout)
        except subprocess.TimeoutExpired:
            os.killpg(self.popen.pid, signal.SIGKILL)
            return self.popen.wait(10)

    def text(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""


def _children(pid: int) -> list[int]:
    try:
        text = Path(f"/proc/{pid}/task/{pid}/children").read_text()
    except OSError:
        return []
    return [int(p) for p in text.split()]


def proc_uid(pid: int) -> int | None:
    """The real uid of ``pid``, or None when it is gone (the tests check the container's
    user with it)."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("Uid:"):
                return int(line.split()[1])
    except OSError:
        return None
    return None

