# pa-bridge: `make run` and `make test` are all a newcomer needs.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

.PHONY: run test lint typecheck imports pytest browser postgres prometheus bench clean

$(PY):
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip

$(STAMP): $(PY) pyproject.toml
	$(PY) -m pip install --quiet -e '.[test]'
	touch $(STAMP)

run: $(STAMP)
	$(VENV)/bin/pa-bridge serve

lint: $(STAMP)
	$(VENV)/bin/ruff check ncpdp src tests bench
	$(VENV)/bin/ruff format --check ncpdp src tests bench

typecheck: $(STAMP)
	$(VENV)/bin/mypy

# The arrows between the packages: the contracts are in pyproject.toml.
imports: $(STAMP)
	$(VENV)/bin/lint-imports --no-logo --no-cache

# Two workers (pytest-xdist): most tests wait on sockets and child processes, so two
# finish in a little over half the time even on 2 CPUs. PYTEST_WORKERS=0 runs serially.
PYTEST_WORKERS ?= 2

pytest: $(STAMP)
	$(VENV)/bin/pytest -q -n $(PYTEST_WORKERS)

test: lint typecheck imports browser postgres prometheus pytest

# The console's browser tests drive the system Chromium (Playwright cannot download its
# own here). Install it with apt-get when missing and we are root; otherwise say how.
browser:
	@if command -v chromium >/dev/null 2>&1; then \
		echo "browser: using $$(command -v chromium)"; \
	elif [ "$$(id -u)" = "0" ] && command -v apt-get >/dev/null 2>&1; then \
		echo "browser: installing chromium with apt-get"; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium; \
	else \
		echo "browser: chromium is not installed and this is not root with apt-get;"; \
		echo "browser: run 'sudo apt-get install chromium' (the console's browser tests are skipped without it)"; \
	fi

# The PostgreSQL engine's tests start Debian's server (initdb, pg_ctl) in a temporary
# directory, as nobody when run as root. Install it like chromium; without it those
# tests are skipped, saying why.
postgres:
	@if ls /usr/lib/postgresql/*/bin/pg_ctl >/dev/null 2>&1 || command -v pg_ctl >/dev/null 2>&1; then \
		echo "postgres: using $$(ls /usr/lib/postgresql/*/bin/pg_ctl 2>/dev/null | tail -1)"; \
	elif [ "$$(id -u)" = "0" ] && command -v apt-get >/dev/null 2>&1; then \
		echo "postgres: installing postgresql with apt-get"; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends postgresql; \
	else \
		echo "postgres: PostgreSQL is not installed and this is not root with apt-get;"; \
		echo "postgres: run 'sudo apt-get install postgresql' (the PostgreSQL tests are skipped without it)"; \
	fi

# A real Prometheus scrapes the daemon in one test (tests/test_prometheus.py): Debian's
# package (2.42). Installed like chromium; without it that test is skipped, saying why.
prometheus:
	@if command -v prometheus >/dev/null 2>&1; then \
		echo "prometheus: using $$(command -v prometheus)"; \
	elif [ "$$(id -u)" = "0" ] && command -v apt-get >/dev/null 2>&1; then \
		echo "prometheus: installing prometheus with apt-get"; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends prometheus; \
	else \
		echo "prometheus: prometheus is not installed and this is not root with apt-get;"; \
		echo "prometheus: run 'sudo apt-get install prometheus' (the Prometheus scrape test is skipped without it)"; \
	fi

bench: $(STAMP)
	@for b in bench/*_bench.py; do echo "== $$b"; $(PY) $$b || exit 1; done

clean:
	rm -rf $(VENV) .mypy_cache .pytest_cache .ruff_cache
