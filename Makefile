# chainlab: every target sets up what it needs itself (virtualenv, packages, Graphviz, Chromium).
SHELL := /bin/bash
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(VENV)/bin/pip
STAMP := $(VENV)/.installed-$(shell cat pyproject.toml | sha1sum | cut -c1-12)
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)

.PHONY: demo lab test test-fast bench lint system clean

## the main job: JupyterLab on the quick-start notebook
demo: $(STAMP) system
	$(VENV)/bin/jupyter lab notebooks/01-quickstart.ipynb --ip=127.0.0.1 --allow-root

## the terminal demo (no browser needed)
terminal-demo: $(STAMP)
	$(VENV)/bin/chainlab demo

## the whole test suite (unit, notebooks with nbval, the browser e2e)
test: $(STAMP) system
	$(PY) -m playwright --version >/dev/null
	$(PY) -m pytest -n 2 --dist loadgroup tests
	$(PY) -m pytest --nbval notebooks --nbval-sanitize-with notebooks/sanitize.cfg -p no:randomly

test-fast: $(STAMP)
	$(PY) -m pytest -x -q tests -m "not e2e and not slow"

bench: $(STAMP)
	$(PY) benchmarks/run_all.py

lint: $(STAMP)
	$(VENV)/bin/ruff check chainlab tests
	$(VENV)/bin/mypy

## Debian packages: Graphviz's dot and Chromium (for the browser test)
system:
	@command -v dot >/dev/null && command -v chromium >/dev/null || { \
	  if command -v apt-get >/dev/null; then \
	    $(SUDO) apt-get update -qq && $(SUDO) apt-get install -y -qq graphviz chromium >/dev/null; \
	  else echo "not Debian: install Graphviz and Chromium yourself (the e2e test skips without Chromium)"; fi; }

$(STAMP): pyproject.toml
	@test -x $(PY) || python3 -m venv $(VENV)
	$(PIP) install -q --upgrade pip
	$(PIP) install -q -e ".[dev]"
	@rm -f $(VENV)/.installed-*; touch $@

clean:
	rm -rf $(VENV) .chainlab build dist
