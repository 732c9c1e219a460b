# The one entry point for users and CI. `make help` lists the targets.
SHELL := /bin/bash
.DEFAULT_GOAL := help

# The interpreter for .venv: Python >= 3.12, which JAX 0.12 needs. `make html PYTHON=...`
# overrides the search; otherwise the first of python3.13, python3.12, python3 on PATH that
# really runs (a pyenv shim is on PATH even when it refuses to run), then pyenv's 3.13.x and
# 3.12.x installs. With none, the build stops and says what to install.
define FIND_PYTHON
works() { "$$1" -c 'import sys, venv; sys.exit(sys.version_info < (3, 12))' >/dev/null 2>&1; }; \
for name in python3.13 python3.12 python3; do \
  path=$$(command -v "$$name" 2>/dev/null) && works "$$path" && { echo "$$path"; exit 0; }; \
done; \
if command -v pyenv >/dev/null 2>&1; then \
  for dir in $$(ls -1d "$$(pyenv root)"/versions/3.13.* 2>/dev/null | sort -rV) \
             $$(ls -1d "$$(pyenv root)"/versions/3.12.* 2>/dev/null | sort -rV); do \
    works "$$dir/bin/python3" && { echo "$$dir/bin/python3"; exit 0; }; \
  done; \
fi; \
echo "No Python >= 3.12 found: JAX 0.12, which this site documents, needs Python 3.12 or 3.13." >&2; \
echo "Looked for python3.13, python3.12 and python3 on PATH, then 3.13.x/3.12.x under pyenv." >&2; \
echo "Install one (e.g. 'pyenv install 3.13' or your system's python3.13), or run: make html PYTHON=/path/to/python3.13" >&2; \
exit 1
endef
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
BUILD ?= _build
SPHINXOPTS ?= -n -W --keep-going
# pip gives up when the registry cuts a download off half-way (the connection reset by the
# peer), so each install is tried three times; a wheel that arrived whole stays in pip's cache.
RETRY := retry() { echo "$$*"; for n in 1 2 3; do "$$@" && return 0; [ $$n = 3 ] && return 1; \
  echo "pip failed (try $$n of 3); trying again in $$((10 * n)) s" >&2; sleep $$((10 * n)); done; }

# Notebooks run on the ipykernel installed inside .venv, never on a user-level kernel.
export JUPYTER_PATH := $(CURDIR)/$(VENV)/share/jupyter
export JUPYTER_PLATFORM_DIRS := 1
export PATH := $(CURDIR)/$(BIN):$(PATH)
# JAX runs on the CPU: with XLA's TPU and GPU compilers installed (requirements.txt) for
# compiling ahead of time, JAX would otherwise try to start those devices, print warnings on
# every page, and leave the CUDA plugin unregistered on a machine without an NVIDIA driver.
export JAX_PLATFORMS ?= cpu
# compare_policies, recommend_policy, plan_names and residual_shardings keep what each program
# compiled to (its FLOPs, memory, shardings) here, by its lowered text: the pages, the tests and
# the clean build of test-repro compile a program once. `make bench` and `make bench-build`
# time compiles, so they set their own.
export REMAT_GUIDE_CACHE_DIR := $(CURDIR)/$(BUILD)/.compiled
# The figure store (docs/_figures): what XLA's TPU, GPU and CPU compilers produced for every
# program the pages and tests measure, with each program's lowered text, kept in the
# repository so that no build compiles one again. A build reads it first and records in
# $(BUILD)/figures what it read and what it had to compile; `make figures` adds the latter.
# Before the pages run, entries of another compiler than the installed one (after an upgrade)
# are compiled again from their kept programs, one process per core.
STORE ?= docs/_figures
export REMAT_GUIDE_FIGURES := $(abspath $(STORE))
export REMAT_GUIDE_FIGURES_LOG := $(abspath $(BUILD))/figures
FIGURES := $(BIN)/python -m remat_guide.site.figure_store --store $(abspath $(STORE))
# The seed of the sample that `make test` recompiles; a random one (printed) when empty. The
# sample's compiles share the cores with pytest: after FIGURE_BUDGET seconds no further entry
# starts, but the first drawn of each compiler always runs (the rest wait for another draw).
FIGURE_SEED ?=
FIGURE_BUDGET ?= 60

# The tests run in as many processes as there are cores; a test file stays in one process, so
# that a module's fixture (the browser tour, the planner's sweeps) is built once. Files go out
# in the order tests/conftest.py sorts them, the slowest first, so that the processes finish
# together. The five slowest tests are listed at the end, to see where the time goes.
PYTEST := $(BIN)/python -m pytest -n auto --dist loadfile --no-loadscope-reorder --durations=5
# The browser tour saves each view's first screen; `make test WHOLE_PAGES=1` saves the whole
# page at 390 px in the light theme instead, to read a page as a phone shows it.
WHOLE_PAGES ?=

.PHONY: help venv jax-envs html lint test test-unit test-repro repro-check linkcheck chromium bench-build bench \
	figures verify-figures reproduce-figure rehearse-upgrade clean distclean

help:  ## List the targets.
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-10s %s\n", $$1, $$2}'

$(STAMP): requirements.txt pyproject.toml
	@if [ -x $(BIN)/python ] && ! $(BIN)/python -c 'import sys; sys.exit(sys.version_info < (3, 12))'; then \
	  echo "$(VENV) runs Python < 3.12: making it again"; rm -rf $(VENV); fi
	@if [ ! -x $(BIN)/python ]; then \
	  python='$(PYTHON)'; [ -n "$$python" ] || python=$$($(FIND_PYTHON)) || exit 1; \
	  echo "Creating $(VENV) with $$python ($$("$$python" --version))"; \
	  "$$python" -m venv $(VENV) || exit 1; \
	fi
	@$(RETRY); retry $(BIN)/python -m pip install --quiet --disable-pip-version-check -r requirements.txt
	@$(RETRY); retry $(BIN)/python -m pip install --quiet --disable-pip-version-check --no-build-isolation --no-deps -e .
	touch $@

venv: $(STAMP)  ## Create .venv (or refresh it after requirements.txt/pyproject.toml change).

# The versions page runs the same probe under each older JAX, each in an environment of its
# own, named for its version and made from its pinned requirements file: the files
# requirements-jax-<version>.txt are the one list of older releases (the page reads the
# environments' names). JAX 0.12.0.1 is the one in .venv. They are created side by side,
# with the interpreter of .venv.
OLD_JAX := $(patsubst requirements-jax-%.txt,%,$(wildcard requirements-jax-*.txt))
JAX_ENVS := .venv-jax
export REMAT_GUIDE_JAX_ENVS := $(CURDIR)/$(JAX_ENVS)
JAX_ENV_STAMP := $(JAX_ENVS)/.installed

# The environments are installed at once (pip waits mostly on downloads and unpacking).
$(JAX_ENV_STAMP): $(foreach v,$(OLD_JAX),requirements-jax-$(v).txt) $(STAMP)
	rm -rf $(JAX_ENVS)
	@$(RETRY); for v in $(OLD_JAX); do \
	  ( $(BIN)/python -m venv --without-pip $(JAX_ENVS)/$$v && \
	    retry $(BIN)/python -m pip --python $(JAX_ENVS)/$$v/bin/python install --quiet \
	      --disable-pip-version-check --no-deps -r requirements-jax-$$v.txt ) & \
	done; \
	for job in $$(jobs -p); do wait $$job || exit 1; done
	touch $@

jax-envs: $(JAX_ENV_STAMP)  ## Create the environments of the older JAX releases that the versions page compares.

# jupyter-cache keys a page on its own code only: when the package or the requirements
# change, drop the cache and the doctrees so that every page runs again on the new code.
PACKAGE_SOURCES := $(shell find src docs/_ext -name '*.py' -not -path '*/__pycache__/*')
$(BUILD)/.inputs: $(STAMP) $(PACKAGE_SOURCES)
	rm -rf $(BUILD)/.jupyter_cache $(BUILD)/doctrees
	mkdir -p $(BUILD) && touch $@

html: $(STAMP) $(JAX_ENV_STAMP) $(BUILD)/.inputs  ## Build the site strictly into _build/html, executing every page.
	$(FIGURES) refresh --log $(BUILD)/figures
	$(BIN)/sphinx-build $(SPHINXOPTS) -j auto -d $(BUILD)/doctrees -c . docs $(BUILD)/html
	@# Sphinx never deletes an image that no page shows any more (a plot a page stopped making),
	@# which a clean build, as test-repro makes, does not have.
	@for image in $(BUILD)/html/_images/*; do [ -f "$$image" ] || continue; \
	  grep -rqF --include='*.html' "_images/$${image##*/}" $(BUILD)/html || \
	    { echo "html: removing $$image, which no page shows"; rm -f "$$image"; }; done

lint: $(STAMP)  ## Lint and check the import order of all Python code with ruff (configured in pyproject.toml).
	$(BIN)/ruff check src tests benchmarks docs/_ext conf.py

test: lint html chromium  ## Lint; build the site; run unit tests, doctests, site, link and browser checks; check reproducibility and the figure store.
	@# The clean build of test-repro and the recompile of a sample of the figure store's
	@# entries run while pytest does; then no page or test may have compiled a program the
	@# store lacks, and every sampled entry must have compiled to its stored figures.
	@mkdir -p $(BUILD)
	@$(FIGURES) sample --log $(BUILD)/figures --sample $(BUILD)/figure-sample.txt $(if $(FIGURE_SEED),--seed $(FIGURE_SEED))
	@$(FIGURES) verify --sample $(BUILD)/figure-sample.txt --jobs 1 --budget $(FIGURE_BUDGET) > $(BUILD)/figure-sample.log 2>&1 & sample=$$!; \
	$(MAKE) --no-print-directory repro-check REPRO_SAMPLE=$(REPRO_BUDGET) \
	  REMAT_GUIDE_FIGURES_LOG=$(CURDIR)/$(REPRO)/_build/figures > $(BUILD)/test-repro.log 2>&1 & repro=$$!; \
	REMAT_GUIDE_SITE=$(BUILD)/html REMAT_GUIDE_WHOLE_PAGES=$(WHOLE_PAGES) $(PYTEST); tests=$$?; \
	wait $$repro; same=$$?; cat $(BUILD)/test-repro.log; \
	wait $$sample; sampled=$$?; cat $(BUILD)/figure-sample.log; \
	$(FIGURES) check --log $(BUILD)/figures --log $(REPRO)/_build/figures; \
	stored=$$?; [ $$tests = 0 ] && [ $$same = 0 ] && [ $$sampled = 0 ] && [ $$stored = 0 ]

figures: $(STAMP)  ## Add to docs/_figures what the last build compiled because the store lacked it; drop what no page or test read.
	$(FIGURES) update --log $(BUILD)/figures

# Every entry compiled again from its kept program, in one process per core, and compared;
# no page runs. `make reproduce-figure KEY=<start of a key>` compiles one entry.
verify-figures: $(STAMP)  ## Compile every entry of the figure store again from its kept program and compare it with what is stored.
	$(FIGURES) verify

reproduce-figure: $(STAMP)  ## Compile one entry of the figure store again (KEY=<the start of its key>) and compare.
	$(FIGURES) reproduce $(KEY)

# An upgrade of the compilers, rehearsed without changing a pin: REMAT_GUIDE_FIGURES_REHEARSAL
# adds a word to every compiler's version, so every entry's key misses as after a new jaxlib,
# libtpu or CUDA plugin. On a copy of the store, in $(BUILD)/rehearsal, it times the upgrade's
# steps: make html (the refresh compiles every entry again; the pages run on an empty CPU
# cache), make figures, make verify-figures. docs/_figures is left alone.
REHEARSAL := $(BUILD)/rehearsal
rehearse-upgrade: $(STAMP) $(JAX_ENV_STAMP)  ## Rehearse a compiler upgrade on a copy of the figure store: make html, figures and verify-figures, timed.
	rm -rf $(REHEARSAL) && mkdir -p $(REHEARSAL) && cp -r $(STORE) $(REHEARSAL)/store
	@set -e; export REMAT_GUIDE_FIGURES_REHEARSAL=upgrade; \
	for step in html figures verify-figures; do \
	  start=$$(date +%s); \
	  $(MAKE) --no-print-directory $$step BUILD=$(REHEARSAL)/build STORE=$(REHEARSAL)/store; \
	  echo "rehearse-upgrade: make $$step took $$(( $$(date +%s) - start )) s" | tee -a $(REHEARSAL)/times.txt; \
	done; cat $(REHEARSAL)/times.txt

test-unit: lint $(JAX_ENV_STAMP)  ## Lint, then only the unit tests (tests/unit) and doctests, which need no built site.
	$(PYTEST) tests/unit src docs/_ext

linkcheck: html  ## Check every internal link and anchor of the built site (external links are not followed).
	REMAT_GUIDE_SITE=$(BUILD)/html $(BIN)/python -m pytest -q tests/site/test_links.py

# The site that `make html` built (reusing executed pages, maybe over an earlier build) must be
# byte-identical to a clean build: a copy of the working tree in a folder of another name,
# every page executed afresh, offline, with an empty cache (REMAT_GUIDE_CACHE_DIR) of compiled
# figures and answers: its pages compute what they show from the figure store, as in a fresh clone.
# `make test` runs it beside pytest on the same cores with REPRO_SAMPLE set: every page is
# still read, rendered and written from scratch, but only a seeded sample of pages is executed
# afresh, drawn in random order while their execution in `make html` adds up to at most
# REPRO_BUDGET seconds (the first drawn always runs, so the slowest page can lead a sample);
# the others' outputs come from a copy of _build/.jupyter_cache. REPRO_SEED replays a draw.
REPRO := $(BUILD)/repro/another-site
REPRO_BUDGET ?= 90
REPRO_SEED ?=
test-repro: html  ## Build the site once more from a clean copy, offline, and compare it byte for byte with _build/html.
	@$(MAKE) --no-print-directory repro-check

repro-check: $(STAMP) $(JAX_ENV_STAMP)
	rm -rf $(BUILD)/repro
	mkdir -p $(REPRO) && git ls-files -z --cached --others --exclude-standard \
	  | xargs -0 cp --parents -t $(REPRO)
	$(if $(REPRO_SAMPLE),mkdir -p $(REPRO)/_build && cp -r $(BUILD)/.jupyter_cache $(REPRO)/_build/ && \
	  $(BIN)/python -m remat_guide.site.repro_sample --cache $(REPRO)/_build/.jupyter_cache \
	    --docs $(CURDIR)/docs --budget $(REPRO_SAMPLE) $(if $(REPRO_SEED),--seed $(REPRO_SEED)))
	export REMAT_GUIDE_CACHE_DIR=$(CURDIR)/$(REPRO)/_build/.compiled; \
	build='$(CURDIR)/$(BIN)/sphinx-build -q $(SPHINXOPTS) -j auto -d _build/doctrees -c . docs _build/html'; \
	if command -v ip >/dev/null && unshare -rn true 2>/dev/null; then \
	  echo "test-repro: the clean build runs in a network namespace with only the loopback"; \
	  cd $(REPRO) && unshare -rn sh -c "ip link set lo up && exec $$build"; \
	else \
	  echo "test-repro: unshare -rn is not available here, so the clean build may reach the network"; \
	  cd $(REPRO) && $$build; \
	fi
	diff -r $(BUILD)/html $(REPRO)/_build/html
	@echo "test-repro: the clean build is byte-identical to $(BUILD)/html ($$(find $(BUILD)/html -type f | wc -l) files)"

chromium:  ## Make sure a Chromium is installed for the browser tests (Debian/Ubuntu as root: apt-get).
	@if command -v chromium >/dev/null || command -v chromium-browser >/dev/null || command -v google-chrome >/dev/null; then \
	  true; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	  apt-get update -qq -o Acquire::Retries=3 && \
	    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq -o Acquire::Retries=3 chromium >/dev/null; \
	else \
	  echo "The browser tests need Chromium. Install it (Debian/Ubuntu: sudo apt-get install chromium)" \
	       "or put one on PATH as chromium, then run make test again." >&2; \
	  exit 1; \
	fi

# `make bench-build CI_ONLY=1` times only what CI runs: make html, then make test, in a fresh clone.
bench-build: $(STAMP) chromium  ## Measure cold, no-change and one-page builds against running the pages as scripts, and `make test` after `make html`.
	$(BIN)/python benchmarks/bench_build.py --out $(BUILD)/bench $(if $(CI_ONLY),--fresh-clone-only)

bench: $(STAMP)  ## Time jit(grad) per policy, compare_policies (also per target), the sharded page, and plan_names per budget and target against all 243 plans of a small model; JSON + Markdown in $(BUILD)/bench.
	REMAT_GUIDE_CACHE_DIR= REMAT_GUIDE_FIGURES= $(BIN)/python benchmarks/bench_policies.py --out $(BUILD)/bench
	REMAT_GUIDE_CACHE_DIR= REMAT_GUIDE_FIGURES= $(BIN)/python benchmarks/bench_planner.py --out $(BUILD)/bench

clean:  ## Remove build outputs and caches (keeps .venv).
	rm -rf $(BUILD) .pytest_cache src/*.egg-info
	find src tests docs/_ext -name __pycache__ -type d -prune -exec rm -rf {} +

distclean: clean  ## Also remove .venv and the environments of older JAX releases.
	rm -rf $(VENV) $(JAX_ENVS)
