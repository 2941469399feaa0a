# syntax=docker/dockerfile:1.7
# One image for every governor service (compose.yaml, deploy/k8s): the entry point is the
# service's console script (governor-collector, governor-cluster-collector, governor-aggregator,
# governor-decider, governor-actuator, governor-metrics-adapter). It installs the runtime library `governor` and the
# services alone; the `tools` target adds libs/governor-tools (the `governor` CLI, simulator,
# demo; matplotlib, rich, the trace datasets). Built with uv from the lock file; non-root.
#
#   docker build -t governor:latest .
#   docker build --target tools -t governor-tools:latest .

ARG PYTHON_IMAGE=python:3.11-slim-bookworm

# --- build: resolve the locked dependencies, then install the workspace (non-editable) --------
FROM ghcr.io/astral-sh/uv:0.13.9 AS uv
FROM ${PYTHON_IMAGE} AS build
COPY --from=uv /uv /uvx /bin/
ENV UV_COMPILE_BYTECODE=1 \
    UV_LINK_MODE=copy \
    UV_PYTHON_DOWNLOADS=never \
    UV_PROJECT_ENVIRONMENT=/opt/governor
WORKDIR /src
# Dependencies first (a layer that survives source edits): only the manifests and the lock.
COPY pyproject.toml uv.lock ./
COPY libs/governor/pyproject.toml libs/governor/pyproject.toml
COPY libs/governor-tools/pyproject.toml libs/governor-tools/pyproject.toml
COPY services/collector/pyproject.toml services/collector/pyproject.toml
COPY services/aggregator/pyproject.toml services/aggregator/pyproject.toml
COPY services/decider/pyproject.toml services/decider/pyproject.toml
COPY services/actuator/pyproject.toml services/actuator/pyproject.toml
COPY services/metrics-adapter/pyproject.toml services/metrics-adapter/pyproject.toml
ARG SERVICES="--package governor-collector --package governor-aggregator --package governor-decider --package governor-actuator --package governor-metrics-adapter"
RUN --mount=type=cache,target=/root/.cache/uv \
    uv sync --frozen --no-dev --no-install-workspace $SERVICES
# Then governor itself, as wheels into the environment (no source tree needed at run time).
COPY libs libs
COPY services services
RUN --mount=type=cache,target=/root/.cache/uv \
    uv sync --frozen --no-dev --no-editable $SERVICES
# faust's fetch wait made settable (deploy/patches; tools/patch_deps.py says why).
COPY deploy/patches deploy/patches
COPY tools/patch_deps.py tools/patch_deps.py
RUN apt-get update && apt-get install -y --no-install-recommends patch && rm -rf /var/lib/apt/lists/* \
    && /opt/governor/bin/python tools/patch_deps.py

# --- build-tools: everything, the `governor` CLI included, in an environment of its own -------
FROM build AS build-tools
ENV UV_PROJECT_ENVIRONMENT=/opt/governor-tools
RUN --mount=type=cache,target=/root/.cache/uv \
    uv sync --frozen --no-dev --no-editable

# --- tools: the CLI image (compose's one-shot `governor topics create`) -------------------------
FROM ${PYTHON_IMAGE} AS tools
RUN groupadd --gid 65532 governor \
    && useradd --uid 65532 --gid 65532 --no-create-home --shell /usr/sbin/nologin governor
COPY --from=build-tools /opt/governor-tools /opt/governor
ENV PATH=/opt/governor/bin:$PATH \
    PYTHONUNBUFFERED=1
WORKDIR /tmp
USER 65532:65532
CMD ["governor", "--help"]

# --- run (the default target): the services' environment only, as an unprivileged user ---------
FROM ${PYTHON_IMAGE} AS runtime
RUN groupadd --gid 65532 governor \
    && useradd --uid 65532 --gid 65532 --no-create-home --shell /usr/sbin/nologin governor
COPY --from=build /opt/governor /opt/governor
ENV PATH=/opt/governor/bin:$PATH \
    PYTHONUNBUFFERED=1
WORKDIR /tmp
USER 65532:65532
# Collector 8080, aggregator 8082, decider 8083, actuator 8084 in compose.yaml (each service's
# http_port); /metrics, /healthz and /readyz on each.
EXPOSE 8080 8082 8083 8084
CMD ["governor-decider", "--help"]
