# Two commands on a fresh machine: `make demo` and `make test`.
#
# Test what users install. Four virtualenvs, each with its own dependency resolution:
#   .venv          pip install -e '.[test]'           today's releases of every dependency (pandas 3 today)
#   .venv-pandas2  the same with pandas<3              the previous major, still in the supported range
#   .venv-user     pip install . (no extras)           exactly what a user gets; runs the installed-package test
#   .venv-bench    pip install -e '.[test,bench]'      the benchmarks' extra (statsforecast pins pandas<3)
# `make test` runs the whole suite under .venv (on $(WORKERS) pytest workers), the data-path tests
# (marker data_paths, listed in tests/conftest.py) under .venv-pandas2, then the installed-package test
# (tests/integration/test_installed.py) against .venv-user's `tidewise`, the image test
# (tests/integration/test_image.py: the Dockerfile's builds replayed into bare virtualenvs of their own,
# so it runs once, here, and not under each suite virtualenv) and mypy on every package (typecheck).
# Those last steps, and building .venv-pandas2 and .venv-user, keep one core busy each: they run one
# after the other in the background while the suite keeps both cores busy (SIDE below).
PY ?= python3
HASH := $(shell cat pyproject.toml | sha1sum | cut -c1-12)
VENV := .venv
BIN := $(VENV)/bin
PD2 := .venv-pandas2
USER_VENV := .venv-user
BENCH := .venv-bench
IMAGE_TEST := tests/integration/test_image.py
# run by test-installed against the pip-installed package; under .venv it would test the checkout again (~40 CPU s)
INSTALLED_TEST := tests/integration/test_installed.py
PIP_Q := pip install -q --disable-pip-version-check

.PHONY: demo test test-main test-pandas2 test-installed typecheck user-install bench soak install system-deps lint clean

# never deleted as an intermediate file
.PRECIOUS: %/bin/python
%/bin/python:
	$(PY) -m venv $*
	$*/bin/$(PIP_Q) --upgrade pip

$(VENV)/.installed-$(HASH): $(BIN)/python pyproject.toml
	$(BIN)/$(PIP_Q) --upgrade --upgrade-strategy eager -e '.[test]'
	rm -f $(VENV)/.installed-*; touch $@

$(PD2)/.installed-$(HASH): $(PD2)/bin/python pyproject.toml
	$(PD2)/bin/$(PIP_Q) --upgrade -e '.[test]' 'pandas>=2.2,<3'
	rm -f $(PD2)/.installed-*; touch $@

$(BENCH)/.installed-$(HASH): $(BENCH)/bin/python pyproject.toml
	$(BENCH)/bin/$(PIP_Q) --upgrade -e '.[test,bench]'
	rm -f $(BENCH)/.installed-*; touch $@

# Not editable: reinstalled on every run so that it holds the current sources.
user-install: $(USER_VENV)/bin/python
	rm -rf build  # setuptools builds in-tree: a stale build/lib would ship modules the sources no longer have
	$(USER_VENV)/bin/$(PIP_Q) --upgrade --upgrade-strategy eager .
	$(USER_VENV)/bin/$(PIP_Q) --no-deps --force-reinstall .

install: $(VENV)/.installed-$(HASH)

# Debian packages the integration tests use: the real prometheus/promtool, and chromium for report tests;
# kubectl (kubernetes-client) renders the kustomize install (tests/test_kustomize.py), only when no kubectl
# is there: bookworm's is 1.20, whose kustomize v2 is too old for deploy/kustomization.yaml (the test says so).
system-deps:
	@if ! command -v prometheus >/dev/null || ! command -v promtool >/dev/null || ! command -v chromium >/dev/null; then \
		echo "installing Debian packages: prometheus chromium"; \
		apt-get -o DPkg::Lock::Timeout=300 update -qq && DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=300 install -y -qq prometheus chromium >/dev/null; \
	fi
	@if ! command -v kubectl >/dev/null; then \
		echo "installing Debian package: kubernetes-client"; \
		apt-get -o DPkg::Lock::Timeout=300 update -qq && DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=300 install -y -qq kubernetes-client >/dev/null; \
	fi

demo: install
	$(BIN)/tidewise demo --out demo-out

# Every shipped package is type-checked (STYLE.md: mypy clean); tests/test_layout.py holds this list
# against pyproject's packages.
TYPED := contracts predictor training autoscaler extender node_enforcer tidewise studies reports
# pytest workers: the suite is mostly subprocesses and servers, so one per core pays (measured in README);
# --dist loadgroup keeps the tests of one xdist_group (the session's demo output) on one worker
WORKERS ?= 2

# Run one after the other, the one-core steps left the second core idle for ~5 of the 18 minutes of a
# fresh clone's `make test`. Their output (.venv/test-side.log) is printed when the suite ends.
SIDE := $(PD2)/.installed-$(HASH) test-installed typecheck
SIDE_LOG := $(VENV)/test-side.log

test: install system-deps
	@echo "== in the background while the suite runs: building $(PD2) and $(USER_VENV), test-installed, typecheck"
	@$(MAKE) --no-print-directory -k $(SIDE) > $(SIDE_LOG) 2>&1 & side=$$!; \
	$(MAKE) --no-print-directory test-main; main=$$?; \
	wait $$side; status=$$?; cat $(SIDE_LOG); echo "== the background steps: exit $$status"; \
	$(MAKE) --no-print-directory test-pandas2; pd2=$$?; \
	echo "== make test: suite exit $$main, background steps exit $$status, pandas 2 pass exit $$pd2"; \
	test $$main -eq 0 && test $$status -eq 0 && test $$pd2 -eq 0

test-main: install system-deps
	@echo "== the suite under today's releases: $$($(BIN)/python -c 'import pandas; print("pandas", pandas.__version__)')"
	$(BIN)/python -m pytest -q -n $(WORKERS) --dist loadgroup --ignore=$(IMAGE_TEST) --ignore=$(INSTALLED_TEST)

test-pandas2: $(PD2)/.installed-$(HASH) system-deps
	@echo "== the data-path tests under the previous pandas major: $$($(PD2)/bin/python -c 'import pandas; print("pandas", pandas.__version__)')"
	$(PD2)/bin/python -m pytest -q -p no:cacheprovider -n $(WORKERS) --dist loadgroup -m data_paths --ignore=$(IMAGE_TEST)

test-installed: install user-install system-deps
	@echo "== the installed package (pip install ., no extras): $$($(USER_VENV)/bin/python -c 'import pandas; print("pandas", pandas.__version__)')"
	TIDEWISE_INSTALLED=$(abspath $(USER_VENV))/bin $(BIN)/python -m pytest -q -p no:cacheprovider $(INSTALLED_TEST)
	@echo "== the images: the Dockerfile's two builds replayed into bare virtualenvs, every deploy/ command line run in its image"
	$(BIN)/python -m pytest -q -p no:cacheprovider $(IMAGE_TEST)

bench: $(BENCH)/.installed-$(HASH)
	$(BENCH)/bin/python -m benchmarks.run

# Not part of `make test`: serve for a simulated day (10,000 workloads / 500 nodes / 1,440 runs; ~2 h of
# CPU on 2 cores) against a real Prometheus and a faulty API fake. Smaller: make soak SOAK_ARGS='--workloads 2000 --nodes 100'
SOAK_ARGS ?=
soak: install system-deps
	$(BIN)/python -m benchmarks.soak $(SOAK_ARGS)

typecheck: install
	@echo "== mypy on every shipped package"
	$(BIN)/python -m mypy $(TYPED)

lint: typecheck

clean:
	rm -rf $(VENV) $(PD2) $(USER_VENV) $(BENCH) demo-out
