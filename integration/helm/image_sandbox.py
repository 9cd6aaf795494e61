"""Run a built image's root filesystem as a chart's container would run it (no container
engine works here: ``podman run`` is refused, docs/operations.md "Building the images").

``Built`` is one image mounted with ``buildah from`` + ``buildah mount`` (read-only use
only; ``close`` unmounts and removes the working container). ``ImagePod`` is ``sandbox.Pod``
with the image's root instead of this machine's: bubblewrap binds the mounted root read-only
at ``/``, the pod's volumes on top (mount points missing from the image are made on a tmpfs
over their nearest existing parent, as ``sandbox.Pod`` does on the host), and the image's
own ``setpriv`` drops to the pod's uid with no capabilities. The environment is the image's
``ENV`` overlaid with the manifest's; the working directory the image's ``WORKDIR``.
"""

from __future__ import annotations

import json
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sandbox import BWRAP, Image, Pod


def buildah(*args: str) -> str:
    """stdout of ``buildah ARGS`` (stripped); CalledProcessError with its stderr on failure."""
    done = subprocess.run(["buildah", *args], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise subprocess.CalledProcessError(done.returncode, ["buildah", *args],
                                            done.stdout, done.stderr)
    return done.stdout.strip()


@dataclass
class Built:
    """``name`` (an image in buildah's local store) mounted: ``root`` its file system,
    ``config`` its OCI config (``Env``, ``User``, ``WorkingDir``, ``Entrypoint``)."""

    name: str
    container: str = ""
    root: Path = field(default=Path("/nonexistent"))
    config: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        info = json.loads(buildah("inspect", "--type", "image", self.name))
        self.config = dict(info["OCIv1"]["config"])
        self.container = buildah("from", "--pull-never", "--quiet", self.name)
        self.root = Path(buildah("mount", self.container))

    @property
    def env(self) -> dict[str, str]:
        return dict(item.split("=", 1) for item in self.config.get("Env", []))

    @property
    def image(self) -> Image:
        return Image(workdir=self.config.get("WorkingDir") or "/", path=self.env["PATH"])

    def close(self) -> None:
        subprocess.run(["buildah", "umount", self.container], capture_output=True, check=False)
        subprocess.run(["buildah", "rm", self.container], capture_output=True, check=False)


def _cover(root: Path, mount_path: str) -> str | None:
    """The directory (a path in the image) to cover with a tmpfs so that ``mount_path`` can be
    made under the read-only root; None when the image has it already."""
    path = Path(mount_path)
    if (root / path.relative_to("/")).is_dir():
        return None
    while not (root / path.parent.relative_to("/")).is_dir():
        path = path.parent
    return str(path.parent)


@dataclass
class ImagePod(Pod):
    """A pod whose containers run from ``built``'s root file system (see the module)."""

    built: Built | None = None

    def env(self, container: dict[str, Any], image: Image) -> dict[str, str]:
        assert self.built is not None
        return {**self.built.env, **super().env(container, image)}

    def argv(self, container: dict[str, Any], image: Image) -> list[str]:
        """bwrap over the image's root: the container's command and args as the manifest has
        them, as the pod's uid and gid, no capabilities, only the pod's volumes writable."""
        assert BWRAP and self.built is not None
        root = self.built.root
        setpriv = "/usr/bin/setpriv"
        assert (root / setpriv[1:]).exists(), "the image has no setpriv (util-linux)"
        mounts = container.get("volumeMounts", [])
        covers = sorted({c for m in mounts if (c := _cover(root, m["mountPath"]))})
        args = [BWRAP, "--ro-bind", str(root), "/", "--dev", "/dev", "--proc", "/proc"]
        for cover in covers:
            args += ["--perms", "0755", "--tmpfs", cover]
        for mount in mounts:
            for parent in reversed(Path(mount["mountPath"]).parents):
                if any(str(parent).startswith(c + "/") for c in covers):
                    args += ["--perms", "0755", "--dir", str(parent)]
            host, writable = self.volumes[mount["name"]]
            bind = "--bind" if writable and not mount.get("readOnly") else "--ro-bind"
            args += [bind, str(host), mount["mountPath"]]
        args += ["--ro-bind", str(self.root / "hosts"), "/etc/hosts",
                 "--hostname", self.name, "--unshare-uts", "--unshare-pid",
                 "--die-with-parent", "--chdir", image.workdir, "--clearenv"]
        for key, value in self.env(container, image).items():
            args += ["--setenv", key, value]
        args += ["--", setpriv, "--reuid", str(self.uid), "--regid", str(self.gid),
                 "--clear-groups", "--inh-caps=-all", "--bounding-set=-all", "--"]
        command = list(container.get("command") or self.built.config.get("Entrypoint") or [])
        return args + command + list(container.get("args", []))
