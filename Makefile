# screener — every install step lives here so a fresh machine needs nothing by hand.
# `make demo` and `make test` are the two commands the README promises.

SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
PIP := $(VENV)/bin/pip
# Debian packages the probes, the emulated cluster and the tests need.
APT_PKGS := fio sysstat nvme-cli openssh-server openssh-client slurm-wlm slurm-client munge \
            clustershell e2fsprogs util-linux iproute2 procps postgresql-client \
            chromium prometheus
APT_STAMP := $(VENV)/.apt-stamp
PIP_STAMP := $(VENV)/.pip-stamp
PG_VERSION_DIR := $(shell ls /etc/postgresql 2>/dev/null | head -n1)

.PHONY: deps apt venv pyslurm pyslurm-host pyslurm-root bytecode ior demo test test-slurms test-slurms-build test-slurms-run lint typecheck unit postgres bench bench-fleet cluster-down clean slurm-root

# pyslurm-host: the host's pyslurm (22.5.3 for 22.05), whatever SLURM= says (a root's is
# `make pyslurm SLURM=V`); a phony name, since PYSLURM_STAMP is defined further down
deps: apt venv pyslurm-host bytecode

# Compile screener's modules once: a hook is a fresh interpreter, and where
# PYTHONDONTWRITEBYTECODE is set (as on this machine kind) it would otherwise compile every
# module from source on every run (~0.17 s of a hook's CPU). compileall writes regardless
# of that variable, and only what changed. (A pip install outside a venv like this one
# compiles at install time.)
bytecode: venv
	@$(PY) -m compileall -q screener

apt: $(APT_STAMP)
$(APT_STAMP):
	@missing=""; for p in $(APT_PKGS); do dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	if [ -n "$$missing" ]; then \
	  echo "installing:$$missing"; \
	  apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends $$missing; \
	fi
	@mkdir -p $(VENV) && touch $@

venv: $(PIP_STAMP)
$(PIP_STAMP): pyproject.toml
	@[ -x $(PY) ] || $(PYTHON) -m venv $(VENV)
	$(PIP) install -q -U pip
	$(PIP) install -q -e '.[dev]'
	@touch $@

# pyslurm for `slurm.backend = pyslurm` (docs/slurm.md): it must match libslurm's release, so
# it comes from ../shared/vendor (22.5.3 for Debian 12's Slurm 22.05): the prebuilt wheel when
# its tags fit this Python, else built from the vendored source; skipped, said once, otherwise.
PYSLURM_VER := 22.5.3
PYSLURM_WHEEL ?= $(firstword $(wildcard ../shared/vendor/pyslurm-$(PYSLURM_VER)-*.whl ../../shared/vendor/pyslurm-$(PYSLURM_VER)-*.whl))
PYSLURM_SRC ?= $(firstword $(wildcard ../shared/vendor/pyslurm-$(PYSLURM_VER).tar.gz ../../shared/vendor/pyslurm-$(PYSLURM_VER).tar.gz))
PYSLURM_STAMP := $(VENV)/.pyslurm-stamp
# `make pyslurm SLURM=24.11`: pyslurm for that Slurm root instead (deploy/slurmroot/pyslurm.py):
# built once (~4 min on 2 cores) in a throw-away trixie build root against the root's own
# libslurm, installed in /var/cache/screener/pyslurm/$(SLURM)/site, and put first on sys.path
# by a .pth in .venv only inside that root (the host keeps 22.5.3). Fails, one line, for a
# release without a vendored pyslurm (26.05: PySlurm has none).
# The roots with a vendored pyslurm (deploy/slurmroot/pyslurm.py SOURCES): test-slurms builds it.
PYSLURM_SLURMS := 24.11
PYSLURM_SRC_DIR ?= $(firstword $(wildcard ../shared/vendor ../../shared/vendor))
pyslurm: $(if $(SLURM),pyslurm-root,$(PYSLURM_STAMP))
pyslurm-host: $(PYSLURM_STAMP)
pyslurm-root: slurm-root
	@$(PY) -m deploy.slurmroot pyslurm --version $(SLURM) --python $(PY) \
	  --vendor $(or $(PYSLURM_SRC_DIR),../shared/vendor)
$(PYSLURM_STAMP): $(PIP_STAMP) $(APT_STAMP)
	@slurm=$$(dpkg-query -W -f='$${Version}' slurm-client 2>/dev/null | cut -d- -f1); \
	if $(PY) -c 'import importlib.util as u, sys; sys.exit(u.find_spec("pyslurm") is None)'; then \
	  echo "pyslurm: already installed"; \
	elif [ "$${slurm%.*}" != "22.05" ]; then \
	  echo "pyslurm: skipped: Slurm '$$slurm' has no vendored pyslurm (22.5.x is for 22.05); the CLI backend is used"; \
	elif [ -z "$(PYSLURM_WHEEL)$(PYSLURM_SRC)" ]; then \
	  echo "pyslurm: skipped: ../shared/vendor/pyslurm-$(PYSLURM_VER)* not found; the CLI backend is used"; \
	else \
	  dpkg -s libslurm38 >/dev/null 2>&1 || { apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends libslurm38; } || exit 1; \
	  if [ -n "$(PYSLURM_WHEEL)" ] && $(PIP) install -q "$(PYSLURM_WHEEL)"; then echo "pyslurm: installed $(PYSLURM_WHEEL)"; \
	  elif [ -n "$(PYSLURM_SRC)" ]; then \
	    echo "pyslurm: the wheel does not fit this Python; building $(PYSLURM_SRC) (~5 min)"; \
	    DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends libslurm-dev build-essential || exit 1; \
	    b=$$(mktemp -d) && $(PYTHON) -m venv $$b/v && \
	    $$b/v/bin/pip install -q "setuptools==59.2.0" "wheel==0.37.0" "Cython>=0.29.30,<3" && \
	    tar xzf $(PYSLURM_SRC) -C $$b && cd $$b/pyslurm-$(PYSLURM_VER) && \
	    SLURM_INCLUDE_DIR=/usr/include SLURM_LIB_DIR=/usr/lib/x86_64-linux-gnu \
	      $$b/v/bin/pip wheel -q --no-build-isolation --no-deps -w $$b/wheels . && \
	    cd - >/dev/null && $(PIP) install -q $$b/wheels/pyslurm-*.whl && rm -rf $$b || exit 1; \
	  else echo "pyslurm: skipped: no wheel fits and no source; the CLI backend is used"; fi; \
	fi
	@touch $@

# PostgreSQL is part of this machine kind; start it if it is down (tests use it for real).
postgres:
	@if [ -n "$(PG_VERSION_DIR)" ] && ! pg_isready -q -h 127.0.0.1 -p 5432; then \
	  pg_ctlcluster --skip-systemctl-redirect $(PG_VERSION_DIR) main start; \
	fi
	@pg_isready -h 127.0.0.1 -p 5432

lint: venv
	$(VENV)/bin/ruff check screener tests bench deploy dashboards
	$(VENV)/bin/ruff format --check screener tests bench deploy dashboards

typecheck: venv
	$(VENV)/bin/mypy  # screener/ and deploy/, strict (pyproject.toml)

# Real IOR for the in-job attribution test (not packaged: built once from ../shared/vendor).
IOR_APT_PKGS := build-essential autoconf automake libtool pkg-config openmpi-bin libopenmpi-dev
IOR_TARBALL ?= $(firstword $(wildcard ../shared/vendor/ior-5fcf0ba.tar.gz ../../shared/vendor/ior-5fcf0ba.tar.gz))
ior:
	@if [ ! -x /opt/ior/bin/ior ]; then \
	  missing=""; for p in $(IOR_APT_PKGS); do dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	  if [ -n "$$missing" ]; then \
	    echo "installing:$$missing"; \
	    apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q $$missing || exit 1; \
	  fi; \
	  [ -n "$(IOR_TARBALL)" ] || { echo "ior: ../shared/vendor/ior-5fcf0ba.tar.gz not found"; exit 1; }; \
	  src=$$(mktemp -d) && tar xzf $(IOR_TARBALL) -C $$src && cd $$src/ior-5fcf0ba && \
	  ./bootstrap && ./configure --prefix=/opt/ior && $(MAKE) -j2 && $(MAKE) install && rm -rf $$src; \
	fi

# The suite in two runs: first the few tests marked `serial`, alone (they change machine-wide
# state: /run/sshd moved aside, /tmp/.screener replaced; or compare real I/O timings that
# another worker's load moves); then the rest on TEST_WORKERS pytest-xdist workers, a test
# file per worker at a time (--dist loadfile: a module's emulated cluster stays on one
# worker), longest first (tests/conftest.py orders them; --no-loadscope-reorder keeps that
# order, which xdist would otherwise replace by the files' test counts). Each worker's clusters live in their own slot (state dir, subnet, ports) and each
# test's databases are its own, so the workers share nothing else; most of the suite waits
# on Slurm, sshd and fio, not on the 2 cores. 46 min serial -> see README for today's time.
TEST_WORKERS ?= 3
# The other releases' files (test-slurms-run, below) run beside the parallel part, on their
# own clusters and ports: they wait on slurmctld and sshd far more than they use the cores,
# and in the parallel part's last minutes only the longest files are left. Their roots and
# pyslurm are built first (a compile beside the suite would slow it), and their output is
# printed after the parallel part's, whole.
test: deps postgres ior lint typecheck test-slurms-build
	@mkdir -p $(SLURM_JUNIT_DIR)
	$(PY) -m pytest -ra -m serial --junitxml=$(SLURM_JUNIT_DIR)/slurm-22.05-serial.xml
	@$(MAKE) --no-print-directory test-slurms-run > $(SLURM_JUNIT_DIR)/test-slurms.log 2>&1 & slurms=$$!; \
	$(PY) -m pytest -ra --durations=30 -n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder -m "not serial" \
	  --junitxml=$(SLURM_JUNIT_DIR)/slurm-22.05.xml; rc=$$?; \
	wait $$slurms; src=$$?; cat $(SLURM_JUNIT_DIR)/test-slurms.log; \
	[ $$rc -eq 0 ] && [ $$src -eq 0 ]

# Then every other supported Slurm (issue 43): its root built if missing (a mirror that
# cannot be reached fails here, loudly: never a skip), and on real daemons of that release
# the Slurm contract (every backend that can serve it) and the end-to-end prolog and sweep
# (drain, requeue onto healthy nodes, second offence, sweep resume, only screener's drains).
# Each run's junit goes to $(SLURM_JUNIT_DIR); bench/slurm_versions.py turns them into
# docs/slurm.md's verified-versions table.
TEST_SLURMS ?= 24.11 26.05
SLURM_TESTS := tests/test_slurm_contract.py tests/test_slurm_rest_cluster.py tests/test_every_slurm.py \
               tests/test_slurm_resume.py
SLURM_JUNIT_DIR ?= /tmp/screener-slurm-junit
# The releases run at once, each on its own workers and clusters (slots keep them apart),
# each printed whole when done: a release's 4 files are two ~80 s ones, so two workers
# each finish as soon as three would, and the two releases take ~100 s instead of ~200.
SLURM_WORKERS ?= 2
test-slurms: deps postgres test-slurms-build
	@$(MAKE) --no-print-directory test-slurms-run

test-slurms-build: deps
	@for v in $(TEST_SLURMS); do $(MAKE) --no-print-directory slurm-root SLURM=$$v || exit 1; done
	@for v in $(filter $(PYSLURM_SLURMS),$(TEST_SLURMS)); do $(MAKE) --no-print-directory pyslurm SLURM=$$v || exit 1; done

test-slurms-run:
	@mkdir -p $(SLURM_JUNIT_DIR)
	@pids=""; for v in $(TEST_SLURMS); do \
	  SCREENER_TEST_SLURM=$$v $(PY) -m pytest -ra -p no:cacheprovider -n $(SLURM_WORKERS) \
	    --dist loadfile --no-loadscope-reorder --junitxml=$(SLURM_JUNIT_DIR)/slurm-$$v.xml \
	    $(SLURM_TESTS) > $(SLURM_JUNIT_DIR)/slurm-$$v.log 2>&1 & pids="$$pids $$!"; \
	done; \
	failed=""; set -- $$pids; for v in $(TEST_SLURMS); do \
	  wait $$1 || failed="$$failed $$v"; shift; \
	  echo "== Slurm $$v: $(SLURM_TESTS)"; cat $(SLURM_JUNIT_DIR)/slurm-$$v.log; \
	done; \
	[ -z "$$failed" ] || { echo "test-slurms: failed on Slurm$$failed" >&2; exit 1; }

unit: venv
	$(PY) -m pytest -ra -m "not cluster and not postgres"

# `make demo SLURM=26.05`: the demo cluster runs that Slurm (its root built first if needed).
demo: deps $(if $(SLURM),slurm-root)
	$(if $(SLURM),SCREENER_TEST_SLURM=$(SLURM) )$(PY) -m deploy.demo

# A newer Slurm beside the host's 22.05 (issue 43, deploy/slurmroot): its Debian root built
# once by mmdebstrap into /var/cache/screener/slurm-root/$(SLURM) (a no-op when built). The
# emulated cluster runs it with `up --slurm-version`, the tests with SCREENER_TEST_SLURM.
# SLURM=24.11 (trixie) or SLURM=26.05 (forky); test-slurms builds both (not deps: the demo
# and the 22.05 suite need neither).
SLURM ?=
slurm-root: venv
	@[ -n "$(SLURM)" ] || { echo "slurm-root: which release? make slurm-root SLURM=24.11 (or 26.05)" >&2; exit 2; }
	@command -v mmdebstrap >/dev/null 2>&1 || { \
	  echo "installing: mmdebstrap"; \
	  apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q -o DPkg::Lock::Timeout=300 --no-install-recommends mmdebstrap; }
	$(PY) -m deploy.slurmroot build --version $(SLURM)

bench: deps
	$(PY) bench/dispatch.py
	$(PY) bench/screen_overhead.py
	$(PY) bench/separation.py

# The store at fleet scale (docs/performance.md); NODES/DAYS shrink it for CI.
bench-fleet: deps postgres
	$(PY) bench/fleet_scale.py --nodes $(or $(NODES),10000) --days $(or $(DAYS),365)
	$(PY) bench/fleet_scale.py --backend sqlite --nodes 1000 --days $(or $(DAYS),365)
	$(PY) bench/exporter_scrape.py --nodes $(or $(NODES),10000)

cluster-down:
	$(PY) -m deploy.minicluster down

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
