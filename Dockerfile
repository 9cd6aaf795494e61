# syntax=docker/dockerfile:1
# The cluster profile's two images (README "Install on Kubernetes"; helm/qinglong uses them):
#
#   docker build --target control -t qinglong-control:3.0.0a1 .
#   docker build --target worker  -t qinglong-worker:3.0.0a1 .
#
# Both run as uid/gid 10001 (`ql3`), need no writable root filesystem (the chart mounts
# emptyDirs at /tmp and, for workers, /var/lib/qinglong/{work,spool}) and start `ql3`.
# The base is pinned to a patch release; pin it by digest too in your registry
# (--build-arg PYTHON_IMAGE=python:3.12.8-slim-bookworm@sha256:...).
#
# Extending the worker (the packages your scripts import): tasks run the base image's
# interpreters (/usr/local/bin/python3, /usr/bin/node, /bin/bash), not ql3's venv, so:
#
#   FROM qinglong-worker:3.0.0a1
#   USER root
#   RUN apt-get update && apt-get install -y --no-install-recommends jq npm \
#       && rm -rf /var/lib/apt/lists/* \
#       && python3 -m pip install --no-cache-dir requests==2.32.3 \
#       && npm install --global axios@1.7.9
#   USER 10001:10001

ARG PYTHON_IMAGE=python:3.12.8-slim-bookworm

# ---- build: the three wheels (packaging: `pip wheel --no-deps . ./cluster ./panel`; the
# panel's is installed by the control image only: `[control]` requires it)
FROM ${PYTHON_IMAGE} AS build
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /src
COPY pyproject.toml README.md ./
COPY cluster/ cluster/
COPY shared/ shared/
COPY local/ local/
COPY control/ control/
COPY worker/ worker/
COPY client/ client/
COPY migrations/ migrations/
COPY panel/ panel/
RUN python -m pip wheel --no-cache-dir --no-deps . ./cluster ./panel -w /dist

# ---- runtime: what both images share (no compiler, no build tree, no wheel left behind)
FROM ${PYTHON_IMAGE} AS runtime
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1
RUN groupadd --system --gid 10001 ql3 \
    && useradd --system --uid 10001 --gid 10001 --no-create-home \
       --home-dir /var/lib/qinglong/work --shell /usr/sbin/nologin ql3

# ---- worker: ql3 without the [control] extra (HTTP only: no database or bucket library),
# plus the interpreters Qinglong scripts use: bash and python3 (in the base) and node.
FROM runtime AS worker
# Debian's packages of the pinned base's release; DL3008: their versions follow its point
# releases (security fixes), pinning them would break the build at the next one.
# hadolint ignore=DL3008
RUN apt-get update \
    && apt-get install -y --no-install-recommends nodejs \
    && rm -rf /var/lib/apt/lists/*
RUN --mount=type=bind,from=build,source=/dist,target=/dist \
    python -m venv --without-pip /opt/ql3 \
    && python -m pip --python /opt/ql3/bin/python install --no-cache-dir \
       /dist/qinglong-*.whl /dist/qinglong_cluster-*.whl \
    && /opt/ql3/bin/ql3 --version && bash --version >/dev/null && node --version \
    && install -d -m 0755 /var/lib/qinglong /var/lib/qinglong/work /var/lib/qinglong/spool
# (made here, owned by root: WORKDIR after USER would give them to ql3; the chart mounts
# emptyDirs on both, so ql3 writes nothing of the image's own)
# ql3's venv first on PATH only now: while installing, `python` is the base's (with pip)
ENV PATH=/opt/ql3/bin:$PATH
USER 10001:10001
WORKDIR /var/lib/qinglong/work
ENTRYPOINT ["ql3"]
CMD ["worker", "run", "--help"]

# ---- control: ql3 with the [control] extra (PostgreSQL, S3, the HTTP API)
FROM runtime AS control
RUN --mount=type=bind,from=build,source=/dist,target=/dist \
    python -m venv --without-pip /opt/ql3 \
    && python -m pip --python /opt/ql3/bin/python install --no-cache-dir \
       /dist/qinglong-*.whl /dist/qinglong_panel-*.whl \
       "$(ls /dist/qinglong_cluster-*.whl)[control]" \
    && /opt/ql3/bin/ql3 control --help >/dev/null
ENV PATH=/opt/ql3/bin:$PATH
USER 10001:10001
EXPOSE 8080
ENTRYPOINT ["ql3"]
CMD ["control", "serve", "--help"]
