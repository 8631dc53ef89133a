# Two commands on a fresh machine: `make demo` and `make test`.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-$(shell cat pyproject.toml | sha1sum | cut -c1-12)

.PHONY: demo test bench install system-deps lint clean

$(BIN)/python:
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip

$(STAMP): $(BIN)/python pyproject.toml
	$(BIN)/pip install -q -e '.[test,bench]'
	rm -f $(VENV)/.installed-*; touch $(STAMP)

install: $(STAMP)

# Debian packages the integration tests use: the real prometheus/promtool, and chromium for report tests.
system-deps:
	@if ! command -v prometheus >/dev/null || ! command -v promtool >/dev/null || ! command -v chromium >/dev/null; then \
		echo "installing Debian packages: prometheus chromium"; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq prometheus chromium >/dev/null; \
	fi

demo: install
	$(BIN)/tidewise demo --out demo-out

test: install system-deps
	$(BIN)/python -m pytest -q

bench: install
	$(BIN)/python -m benchmarks.run

lint: install
	$(BIN)/python -m mypy predictor

clean:
	rm -rf $(VENV) demo-out
