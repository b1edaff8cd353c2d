# Everything a fresh Debian machine (as root) needs: `make test` or `make demo` alone is enough.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
APT_PACKAGES := iproute2 iptables iperf3 util-linux procps shellcheck

.PHONY: all install system test test-fast demo clean

all: install

install: system $(STAMP)

# apt packages, only those missing; skipped without root (namespace tests then skip, and
# `make demo` falls back to loopback).
system:
	@missing=$$(for p in $(APT_PACKAGES); do dpkg -s $$p >/dev/null 2>&1 || echo $$p; done); \
	if [ -n "$$missing" ]; then \
	  if [ "$$(id -u)" = 0 ]; then \
	    echo "installing $$missing"; \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing >/dev/null; \
	  else echo "not root: cannot install $$missing"; fi; \
	fi

$(STAMP): requirements-dev.txt setup.cfg
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --disable-pip-version-check -r requirements-dev.txt
	$(BIN)/pip install -q --disable-pip-version-check --no-build-isolation --no-deps -e .
	touch $@

# The whole suite: unit tests and the namespace-cluster integration tests, two at a time
# (most of a cluster test is waiting on deadlines, not computing).
test: install
	$(BIN)/python -m pytest -q -n 2

# Unit tests only: seconds, no root needed.
test-fast: install
	$(BIN)/python -m pytest -q -m "not root_required"

# A simulated 3-node cluster on this machine, each node running `netcheck`.
demo: install
	$(BIN)/python scripts/demo.py

clean:
	rm -rf $(VENV) *.egg-info
