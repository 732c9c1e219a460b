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

.PHONY: help venv html test test-unit test-repro linkcheck chromium bench-build bench clean distclean

help:  ## List the targets.
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-10s %s\n", $$1, $$2}'

$(STAMP): requirements.txt pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --disable-pip-version-check -r requirements.txt
	$(BIN)/python -m pip install --quiet --disable-pip-version-check --no-build-isolation --no-deps -e .
	touch $@

venv: $(STAMP)  ## Create .venv (or refresh it after requirements.txt/pyproject.toml change).

# jupyter-cache keys a page on its own code only: when the package or the requirements
# change, drop the cache and the doctrees so that every page runs again on the new code.
$(BUILD)/.inputs: $(STAMP) $(wildcard src/remat_guide/*.py)
	rm -rf $(BUILD)/.jupyter_cache $(BUILD)/doctrees
	mkdir -p $(BUILD) && touch $@

html: $(STAMP) $(BUILD)/.inputs  ## Build the site strictly into _build/html, executing every page.
	$(BIN)/sphinx-build $(SPHINXOPTS) -j auto -d $(BUILD)/doctrees -c . docs $(BUILD)/html

test: html chromium  ## Build the site; run unit tests, doctests, site, link and browser checks; check reproducibility.
	REMAT_GUIDE_SITE=$(BUILD)/html $(BIN)/python -m pytest
	$(MAKE) --no-print-directory test-repro

test-unit: $(STAMP)  ## Only the unit tests and doctests that need no built site.
	$(BIN)/python -m pytest -m "not site"

linkcheck: html  ## Check every internal link and anchor of the built site (external links are not followed).
	REMAT_GUIDE_SITE=$(BUILD)/html $(BIN)/python -m pytest -q tests/test_links.py

# Two clean builds of the working tree, in two folders of different names, must be identical.
REPRO := $(BUILD)/repro
test-repro: $(STAMP)  ## Build the site twice from clean copies in two folders and compare them byte for byte.
	rm -rf $(REPRO)
	for copy in $(REPRO)/one/site $(REPRO)/two/another-site; do \
	  mkdir -p $$copy && git ls-files -z --cached --others --exclude-standard \
	    | xargs -0 cp --parents -t $$copy || exit 1; \
	done
	build='$(CURDIR)/$(BIN)/sphinx-build -q $(SPHINXOPTS) -d _build/doctrees -c . docs _build/html'; \
	offline=''; \
	if command -v ip >/dev/null && unshare -rn true 2>/dev/null; then \
	  offline='unshare -rn sh -c "ip link set lo up && exec \"\$$@\"" sh'; \
	  echo "test-repro: the second build runs in a network namespace with only the loopback"; \
	else echo "test-repro: unshare -rn is not available here, so both builds may reach the network"; fi; \
	(cd $(REPRO)/one/site && $$build) & one=$$!; \
	(cd $(REPRO)/two/another-site && eval "$$offline $$build") & two=$$!; \
	wait $$one; first=$$?; wait $$two; second=$$?; [ $$first = 0 ] && [ $$second = 0 ]
	diff -r $(REPRO)/one/site/_build/html $(REPRO)/two/another-site/_build/html
	@echo "test-repro: two clean builds are byte-identical ($$(find $(REPRO)/one/site/_build/html -type f | wc -l) files)"

chromium:  ## Make sure a Chromium is installed for the browser tests (Debian/Ubuntu as root: apt-get).
	@if command -v chromium >/dev/null || command -v chromium-browser >/dev/null || command -v google-chrome >/dev/null; then \
	  true; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; \
	else \
	  echo "The browser tests need Chromium. Install it (Debian/Ubuntu: sudo apt-get install chromium)" \
	       "or put one on PATH as chromium, then run make test again." >&2; \
	  exit 1; \
	fi

bench-build: $(STAMP)  ## Measure cold, no-change and one-page builds against running the pages as scripts.
	$(BIN)/python benchmarks/bench_build.py --out $(BUILD)/bench

bench: $(STAMP)  ## Time jit(grad) per policy and compare_policies on the reference transformer; JSON + Markdown in $(BUILD)/bench.
	$(BIN)/python benchmarks/bench_policies.py --out $(BUILD)/bench

clean:  ## Remove build outputs and caches (keeps .venv).
	rm -rf $(BUILD) .pytest_cache src/*.egg-info
	find src tests -name __pycache__ -type d -prune -exec rm -rf {} +

distclean: clean  ## Also remove .venv.
	rm -rf $(VENV)
