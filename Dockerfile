# The image of deploy/serve.yaml (and of the other Tidewise workloads): `tidewise` as entry point.
# Build: docker build -t ghcr.io/tidewise/tidewise:0.1.0 .
# Stage 1 builds a virtualenv (wheels that need a compiler are built here); stage 2 copies only
# that virtualenv onto a slim Python: no compiler, no pip cache, no sources, a non-root user.
FROM python:3.11-slim AS build
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
RUN apt-get update && apt-get install -y --no-install-recommends build-essential \
    && rm -rf /var/lib/apt/lists/*
RUN python -m venv /opt/tidewise
WORKDIR /src
COPY pyproject.toml README.md ./
COPY predictor predictor
COPY training training
COPY autoscaler autoscaler
COPY node_enforcer node_enforcer
COPY tidewise tidewise
RUN /opt/tidewise/bin/pip install . \
    && /opt/tidewise/bin/pip uninstall -y pip setuptools wheel

FROM python:3.11-slim
COPY --from=build /opt/tidewise /opt/tidewise
RUN groupadd --system --gid 10001 tidewise \
    && useradd --system --uid 10001 --gid tidewise --no-create-home --shell /usr/sbin/nologin tidewise
ENV PATH=/opt/tidewise/bin:$PATH PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 MPLCONFIGDIR=/tmp
USER 10001:10001
EXPOSE 8080
ENTRYPOINT ["tidewise"]
CMD ["serve", "--help"]
