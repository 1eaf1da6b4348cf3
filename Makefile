# ctxrelay — see README.md.  `make demo` and `make test` set themselves up.
SHELL := /bin/bash
PY    := .venv/bin/python

.PHONY: setup demo test test-python test-prolog bench clean

setup:
	@bash scripts/setup.sh

demo: setup
	$(PY) examples/demo.py

test: setup
	$(PY) -m pytest -q

bench: setup
	$(PY) bench/run_all.py

clean:
	rm -rf .venv .deps .pytest_cache bench/results/*.tmp
