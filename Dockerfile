# The two images of Tidewise's workloads in deploy/, both with `tidewise` as entry point. Build, push
# and pin by digest: README.md, "The container image".
# - the default target (the last stage): everything `pip install .` installs. Serve, training and the
#   scheduler extender run it.
# - `--target agent`: the node agent (`tidewise enforce`, deploy/enforcer-daemonset.yaml), on every
#   node. The same wheel with only the agent's dependencies (pyproject.toml's `agent` list): no numpy,
#   pandas, scikit-learn or LightGBM.
# Stage `source` copies the whole build context (what .dockerignore leaves: no virtualenvs, models,
# outputs or .git) and builds the project's wheel from it: whatever [tool.setuptools.packages.find] in
# pyproject.toml includes is in both images, with no list here to keep in step. Stages `build` and
# `agent-build` install that wheel into a virtualenv (wheels of dependencies that need a compiler are
# built there too); the final stages copy only that virtualenv onto a slim Python: no compiler, no pip,
# no sources, a non-root user.
# tests/integration/test_image.py replays both builds (no Docker engine needed) and runs every deploy/
# command line against the image it names.
FROM python:3.11-slim AS source
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
RUN apt-get update && apt-get install -y --no-install-recommends build-essential \
    && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY . .
RUN python -m pip wheel --no-deps --wheel-dir /src/dist .

FROM source AS build
RUN python -m venv /opt/tidewise \
    && /opt/tidewise/bin/pip install /src/dist/tidewise-*.whl \
    && /opt/tidewise/bin/pip uninstall -y pip setuptools wheel

# the wheel without its dependencies, then the agent's own (read from pyproject.toml, the one list)
FROM source AS agent-build
RUN python -c 'import tomllib; print("\n".join(tomllib.load(open("pyproject.toml", "rb"))["project"]["optional-dependencies"]["agent"]))' > agent-requirements.txt \
    && python -m venv /opt/tidewise \
    && /opt/tidewise/bin/pip install --no-deps /src/dist/tidewise-*.whl \
    && /opt/tidewise/bin/pip install -r agent-requirements.txt \
    && /opt/tidewise/bin/pip uninstall -y pip setuptools wheel

FROM python:3.11-slim AS agent
COPY --from=agent-build /opt/tidewise /opt/tidewise
RUN groupadd --system --gid 10001 tidewise \
    && useradd --system --uid 10001 --gid tidewise --no-create-home --shell /usr/sbin/nologin tidewise
ENV PATH=/opt/tidewise/bin:$PATH PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1
# the DaemonSet runs it as root (cgroup and /proc files are root's); anything else runs it as this user
USER 10001:10001
EXPOSE 9107
ENTRYPOINT ["tidewise"]
CMD ["enforce", "--help"]

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
