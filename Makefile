# Quick start: `make demo` (set up and run the default job) and `make test` (set up and run
# the test suite). Both are idempotent: the virtual environment is rebuilt only when
# pyproject.toml changes, and system packages are installed only where missing.

PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-$(shell cat pyproject.toml tests/plugins/spu_example_plugin/pyproject.toml | sha1sum | cut -c1-12)
PYTEST_ARGS ?= -n 2 --dist loadfile --durations=40 -rfEs
# The quick tier: every test marked neither slow, docker nor cli (no agent sandbox, Docker
# engine, Ray, PostgreSQL or agent CLI; tests/quick_tier.py fails one that starts them).
# Three workers on two cores: its tests wait (subprocesses, servers) a third of their time.
QUICK_ARGS ?= -n 3 --dist loadfile --durations=20 -rfE
QUICK_MARKS := not slow and not docker and not cli
# The newest published agent CLIs the tests also run (npm view <package> version); the
# paper's versions are the defaults pinned in conf/harness/.
NEWEST_CLAUDE_CODE ?= 2.1.332
NEWEST_CODEX ?= 0.171.0

.PHONY: setup demo test test-quick check lint typecheck system-deps test-system-deps cli-tools \
	clean

$(STAMP): pyproject.toml tests/plugins/spu_example_plugin/pyproject.toml
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[all,test,dev]'
	$(PY) -m pip install -q --no-deps -e tests/plugins/spu_example_plugin
	@rm -f $(VENV)/.installed-*
	@touch $@

setup: $(STAMP) system-deps

system-deps:
	@scripts/ensure-debian-packages.sh bwrap:bubblewrap pasta:passt iptables:iptables \
		mkfs.ext4:e2fsprogs ip:iproute2

test-system-deps: system-deps
	@scripts/ensure-debian-packages.sh dockerd:docker.io debootstrap:debootstrap \
		chromium-headless-shell:chromium-headless-shell pg_ctlcluster:postgresql

# The agent CLIs (Claude Code, Codex; the paper's pins and the newest) from npm into
# ~/.cache/spu/tools, once.
# Never fails the caller: without npm or network the CLI tests skip and say why.
cli-tools: $(STAMP)
	@scripts/ensure-debian-packages.sh node:nodejs npm:npm
	-@$(PY) -m spu.harness.npm_tools spu/conf/harness/claude_code.yaml spu/conf/harness/codex.yaml \
		@anthropic-ai/claude-code@$(NEWEST_CLAUDE_CODE) @openai/codex@$(NEWEST_CODEX)

demo: setup
	$(PY) -m spu.main

test: setup test-system-deps cli-tools
	$(PY) -m pytest $(PYTEST_ARGS)

# Before every commit: the tests that need nothing but this checkout (under 5 minutes on
# two cores); `make test` (the README's and CI's) runs them all.
test-quick: $(STAMP)
	$(PY) -m pytest -p tests.quick_tier -m "$(QUICK_MARKS)" $(QUICK_ARGS)

lint: $(STAMP)
	$(VENV)/bin/ruff check spu tests launchers benchmarks

typecheck: $(STAMP)
	$(VENV)/bin/mypy

check: lint typecheck

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache .mypy_cache
