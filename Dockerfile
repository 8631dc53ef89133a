# The image of every Tidewise workload in deploy/ (serve, enforce, extender, train): `tidewise` as
# entry point. Build, push and pin by digest: README.md, "The container image".
# Stage 1 copies the whole build context (what .dockerignore leaves: no virtualenvs, models, outputs
# or .git), builds the project's wheel from it and installs that wheel into a virtualenv: whatever
# [tool.setuptools.packages.find] in pyproject.toml includes is in the image, with no list here to
# keep in step (wheels of dependencies that need a compiler are built here too). Stage 2 copies only
# that virtualenv onto a slim Python: no compiler, no pip, no sources, a non-root user.
# tests/integration/test_image.py replays this build (no Docker engine needed) and runs every
# deploy/ command line against the result.
FROM python:3.11-slim AS build
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
RUN apt-get update && apt-get install -y --no-install-recommends build-essential \
    && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY . .
RUN python -m venv /opt/tidewise \
    && /opt/tidewise/bin/pip wheel --no-deps --wheel-dir /src/dist . \
    && /opt/tidewise/bin/pip install /src/dist/tidewise-*.whl \
    && /opt/tidewise/bin/pip uninstall -y pip setuptools wheel

FROM python:3.11-slim
# the one runtime library a wheel needs that the slim base lacks: LightGBM's OpenMP runtime (libgomp.so.1;
# scikit-learn and NumPy vendor theirs). tests/integration/test_image.py checks every shared object.
RUN apt-get update && apt-get install -y --no-install-recommends libgomp1 \
    && rm -rf /var/lib/apt/lists/*
COPY --from=build /opt/tidewise /opt/tidewise
RUN groupadd --system --gid 10001 tidewise \
    && useradd --system --uid 10001 --gid tidewise --no-create-home --shell /usr/sbin/nologin tidewise
ENV PATH=/opt/tidewise/bin:$PATH PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 MPLCONFIGDIR=/tmp
USER 10001:10001
EXPOSE 8080
ENTRYPOINT ["tidewise"]
CMD ["serve", "--help"]
