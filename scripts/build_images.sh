#!/usr/bin/env bash
# Build the cluster profile's two images (Dockerfile targets `control` and `worker`) with
# buildah, from a Debian base made here by debootstrap: no registry is needed
# (docs/operations.md "Building the images").
#
#   scripts/build_images.sh            # prints the built image names, one a line
#   scripts/build_images.sh --base-only  # makes (or finds) the Debian base image only
#
# The base root filesystem is cached under $QL3_IMAGE_CACHE (default /var/cache/ql3-image)
# and imported once as $QL3_BASE_IMAGE; buildah's layer cache (--layers) makes a rebuild of
# an unchanged tree quick. Needs root and: buildah, debootstrap (apt-get install -y buildah
# debootstrap). Env: QL3_IMAGE_TAG (default: the project version), QL3_DEBIAN_MIRROR,
# QL3_DEBIAN_SUITE (default bookworm, the public base's release).
set -euo pipefail
cd "$(dirname "$0")/.."
CACHE="${QL3_IMAGE_CACHE:-/var/cache/ql3-image}"
SUITE="${QL3_DEBIAN_SUITE:-bookworm}"
MIRROR="${QL3_DEBIAN_MIRROR:-http://deb.debian.org/debian}"
BASE="${QL3_BASE_IMAGE:-localhost/ql3-base:$SUITE}"
TAG="${QL3_IMAGE_TAG:-$(sed -n 's/^version = "\(.*\)"/\1/p' pyproject.toml | head -1)}"
# what the public python image gives the Dockerfile: python, pip and venv on PATH
PACKAGES="python3,python3-venv,python3-pip,python-is-python3,ca-certificates"

base_only=0
case "${1:-}" in
  "") ;;
  --base-only) base_only=1 ;;
  *) echo "usage: scripts/build_images.sh [--base-only]" >&2; exit 2 ;;
esac

for tool in buildah debootstrap; do
  command -v "$tool" >/dev/null || { echo "$tool not installed: apt-get install -y $tool" >&2; exit 2; }
done
mkdir -p "$CACHE" && chmod 0700 "$CACHE"

if ! buildah inspect --type image "$BASE" >/dev/null 2>&1; then
  tarball="$CACHE/$SUITE-rootfs.tar"
  if [ ! -s "$tarball" ]; then
    echo "== debootstrap $SUITE ($MIRROR) into $CACHE" >&2
    rm -rf "$CACHE/rootfs.tmp"
    debootstrap --variant=minbase --include="$PACKAGES" "$SUITE" "$CACHE/rootfs.tmp" "$MIRROR" >&2
    # Debian marks its Python externally managed (PEP 668); the public python image, which
    # this base stands in for, lets the Dockerfile's `pip wheel` use it as it is
    rm -f "$CACHE"/rootfs.tmp/usr/lib/python3*/EXTERNALLY-MANAGED
    # and pip from upstream (Debian's is unbundled and cannot `pip --python` into a venv,
    # which the Dockerfile does), put in place by this machine's pip
    python3 -m pip install --quiet --no-deps --only-binary=:all: --python-version \
      "$(chroot "$CACHE/rootfs.tmp" python3 -c 'import sys; print("%d.%d" % sys.version_info[:2])')" \
      --target "$(echo "$CACHE"/rootfs.tmp/usr/local/lib/python3.*/dist-packages)" 'pip>=24' >&2
    rm -rf "$CACHE"/rootfs.tmp/usr/local/lib/python3.*/dist-packages/bin
    # the mount point a runtime binds its hosts file onto (a sandbox's root is read-only)
    : > "$CACHE/rootfs.tmp/etc/hosts" && chmod 0644 "$CACHE/rootfs.tmp/etc/hosts"
    rm -rf "$CACHE"/rootfs.tmp/var/cache/apt/archives/*.deb "$CACHE"/rootfs.tmp/var/lib/apt/lists/*
    tar --numeric-owner -C "$CACHE/rootfs.tmp" -cf "$tarball.tmp" .
    mv "$tarball.tmp" "$tarball" && rm -rf "$CACHE/rootfs.tmp"
  fi
  echo "== import $tarball as $BASE" >&2
  ctr="$(buildah from scratch)"
  trap 'buildah rm "$ctr" >/dev/null 2>&1 || true' EXIT
  buildah add "$ctr" "$tarball" / >/dev/null
  buildah config --env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    --cmd /bin/bash "$ctr"
  buildah commit --quiet "$ctr" "$BASE" >/dev/null
fi
[ "$base_only" -eq 0 ] || exit 0

# The RUN steps fetch from PyPI and Debian's mirror: they trust what this machine trusts
# (its CA bundle bound in for the build only, never committed to a layer; a machine behind
# an inspecting proxy needs its CA)
trust=()
CA="${QL3_BUILD_CA_BUNDLE:-/etc/ssl/certs/ca-certificates.crt}"
[ ! -s "$CA" ] || trust=(--volume "$CA:/etc/ssl/certs/ca-certificates.crt:ro")

# What the build reads (the Dockerfile's COPY sources) and the base: an image labelled with
# the same digest is reused as it is. No --layers: buildah 1.28 does not mount a cached
# stage for `RUN --mount=type=bind,from=build` (the wheels would be missing); --no-cache
# says so explicitly, which buildah 1.28 requires beside --force-rm (a failed build leaves
# no working container).
context="$( { buildah inspect --type image --format '{{.FromImageID}}' "$BASE"
  git ls-files -z -- Dockerfile pyproject.toml README.md cluster shared local control \
    worker client migrations | xargs -0 sha256sum; } | sha256sum | cut -c1-32)"
for target in control worker; do
  image="localhost/qinglong-$target:$TAG"
  have="$(buildah inspect --type image --format \
    '{{index .OCIv1.Config.Labels "org.qinglong.context"}}' "$image" 2>/dev/null || true)"
  if [ "$have" != "$context" ]; then
    echo "== build --target $target" >&2
    buildah bud --isolation chroot --quiet --no-cache --force-rm "${trust[@]}" --build-arg "PYTHON_IMAGE=$BASE" \
      --label "org.qinglong.context=$context" --target "$target" -t "$image" . >&2
  else
    echo "== $image is up to date" >&2
  fi
  echo "$image"
done
