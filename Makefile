# The one entry point for users and CI. `make help` lists the targets.
SHELL := /bin/bash
.DEFAULT_GOAL := help

PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
BUILD ?= _build
SPHINXOPTS ?= -n -W --keep-going

# Notebooks run on the ipykernel installed inside .venv, never on a user-level kernel.
export JUPYTER_PATH := $(CURDIR)/$(VENV)/share/jupyter
export JUPYTER_PLATFORM_DIRS := 1
export PATH := $(CURDIR)/$(BIN):$(PATH)

.PHONY: help venv html test clean distclean

help:  ## List the targets.
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-10s %s\n", $$1, $$2}'

$(STAMP): requirements.txt pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --disable-pip-version-check -r requirements.txt
	$(BIN)/python -m pip install --quiet --disable-pip-version-check --no-build-isolation --no-deps -e .
	touch $@

venv: $(STAMP)  ## Create .venv (or refresh it after requirements.txt/pyproject.toml change).

html: $(STAMP)  ## Build the site strictly into _build/html, executing every page.
	$(BIN)/sphinx-build $(SPHINXOPTS) -c . docs $(BUILD)/html

test: html  ## Build the site, then run the unit tests, the doctests of src/ and the site checks.
	REMAT_GUIDE_SITE=$(BUILD)/html $(BIN)/python -m pytest

clean:  ## Remove build outputs and caches (keeps .venv).
	rm -rf $(BUILD) .pytest_cache src/*.egg-info
	find src tests -name __pycache__ -type d -prune -exec rm -rf {} +

distclean: clean  ## Also remove .venv.
	rm -rf $(VENV)
