# ctxrelay — see README.md.  `make demo` and `make test` set themselves up.
SHELL := /bin/bash
PY    := .venv/bin/python

.PHONY: setup services services-stop demo test bench clean install check

setup:
	@bash scripts/setup.sh

demo: setup
	$(PY) examples/demo.py

# PostgreSQL(+pgvector) and Redis on private loopback ports, for the postgresql:// and
# redis:// back ends (scripts/services.sh; idempotent; installs as root on Debian 12).
services:
	@bash scripts/services.sh start

services-stop:
	@bash scripts/services.sh stop

# The back-end suites need the servers: here they fail, not skip, when absent.
test: setup services
	CTXRELAY_REQUIRE_SERVICES=1 $(PY) -m pytest -q

bench: setup
	$(PY) bench/run_all.py

clean:
	rm -rf .venv .deps .pytest_cache bench/results/*.tmp

# SWI-Prolog's pack_install runs `make`, `make check` and `make install` in a pack
# that has a Makefile; the pack itself is pure Prolog (prolog/), so these do nothing
# and `make` alone (the first target below setup) is not what a pack install wants.
install check:
	@true
