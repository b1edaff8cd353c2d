# Everything a fresh Debian machine (as root) needs: `make test` or `make demo` alone is enough.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
# The demo needs namespaces, veth pairs and a firewall; the tests also a real Slurm (with munge),
# Prometheus and its node exporter, iperf3 beside the bandwidth phase, shellcheck for scripts/,
# and headless Chromium for the --html page.
DEMO_APT := iproute2 iptables util-linux procps
TEST_APT := $(DEMO_APT) iperf3 shellcheck prometheus prometheus-node-exporter slurm-wlm munge chromium

.PHONY: all install system demo-system test test-fast demo demo-fault compat chaos clean

all: install

install: system $(STAMP)

# apt packages, only those missing; skipped without root (namespace tests then skip, and
# `make demo` falls back to loopback).
define apt_install
	@missing=$$(for p in $(1); do dpkg -s $$p >/dev/null 2>&1 || echo $$p; done); \
	if [ -n "$$missing" ]; then \
	  if [ "$$(id -u)" = 0 ]; then \
	    echo "installing $$missing"; \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing >/dev/null; \
	  else echo "not root: cannot install $$missing"; fi; \
	fi
endef

system:
	$(call apt_install,$(TEST_APT))

demo-system:
	$(call apt_install,$(DEMO_APT))

$(STAMP): requirements-dev.txt setup.cfg
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	@# netifaces-plus replaces netifaces: both install the module `netifaces`.
	$(BIN)/pip uninstall -q -y netifaces 2>/dev/null || true
	$(BIN)/pip install -q --disable-pip-version-check -r requirements-dev.txt
	$(BIN)/pip install -q --disable-pip-version-check --no-build-isolation --no-deps -e .
	touch $@

# The whole suite: unit tests and the namespace-cluster integration tests, three at a time on
# 2 cores. Its nodes are forked with torch loaded (tests/forked.py: the suite's CPU time fell
# from about 1,350 s to 690 s). Three at a time take 505-640 s where two took 620-700; the
# tests wait on events, not on guesses, so a loaded machine keeps them in their bounds.
# A worker that runs out of tests takes some of the other's (worksteal), so a 45 s Slurm test
# does not end the run alone. The 25 slowest tests are named at the end. Before them, ruff and
# mypy (setup.cfg's [mypy]: the netcheck package, strict optional): a lint or type error fails it.
test: install
	$(BIN)/ruff check .
	$(BIN)/python -m mypy
	$(BIN)/python -m pytest -q -n 3 --dist worksteal --durations=25

# Unit tests only: a few minutes on 2 cores, no root needed.
test-fast: install
	$(BIN)/ruff check .
	$(BIN)/python -m mypy
	$(BIN)/python -m pytest -q -m "not root_required"

# The torch compatibility matrix: the `compat` tests under each release setup.cfg admits
# (the declared minimum, 2.4 where the libuv store became the default, one between, the
# pin, the newest). One cached environment each in $(COMPAT_DIR), about 5 GB apiece.
COMPAT_TORCH ?= 2.1.2 2.4.1 2.8.0 2.13.0 2.15.0
COMPAT_DIR   ?= .compat
compat: system $(STAMP)
	$(BIN)/python scripts/compat.py --dir $(COMPAT_DIR) $(COMPAT_TORCH)

# The randomized fault campaign (tests/chaos): N schedules drawn from SEED, each judged by
# the oracle; a failing schedule is printed with the command that replays it alone.
# FATE=1 adds the second oracle: the real job (torchrun, gloo) launched after netcheck on each
# schedule's cluster, its fate judged against the verdict, the agreement table printed at the
# end (tests/chaos/fate.py; 20-60 s more a schedule, up to two job bounds where the job hangs).
N    ?= 20
SEED ?= 1
FATE ?=
chaos: install
	$(BIN)/python tests/chaos --n $(N) --seed $(SEED) $(if $(FATE),--fate)

# A simulated 3-node cluster on this machine, each node running `netcheck`.
demo: demo-system $(STAMP)
	$(BIN)/python scripts/demo.py

# The same cluster with one planted fault (node2's firewall drops inbound connections): what a
# failure looks like and what it tells you to do. Root only. The failure is the demo's, not the
# build's: the host's exit (2) is shown in a line and the demo exits 0 when the fault was found.
demo-fault: demo-system $(STAMP)
	$(BIN)/python scripts/demo.py --fault

clean:
	rm -rf $(VENV) *.egg-info   # $(COMPAT_DIR) is kept: rebuilding it downloads 25 GB
