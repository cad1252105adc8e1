# One command each (docs/architecture.md, 'Testing'). Every target creates .venv and installs
# the project first.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: install demo demo-run test check lint typecheck bench clean

$(STAMP): pyproject.toml
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "SchemaBridge needs Python 3.11+")'
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV) || { echo "python3 -m venv failed: on Debian/Ubuntu run 'sudo apt-get install python3-venv'"; exit 1; }
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[dev]'
	@touch $(STAMP)

install: $(STAMP)

PORT ?= 8000

## The main job: `schemabridge serve --demo` on 127.0.0.1:$(PORT) with a fan-out (a few of
## its children failing) and a failed run to look at in the web monitor; prints the URL to
## open. Ctrl-C stops it. (demo/monitor.py)
demo: $(STAMP)
	$(BIN)/python -m demo.monitor --port $(PORT)

## The one-shot in-process run: validate the examples, then run one end to end against the
## shipped demo downstream (started in-process on 127.0.0.1).
demo-run: $(STAMP)
	$(BIN)/schemabridge validate examples/*.json
	$(BIN)/schemabridge run examples/subscription-renewals.json \
		--input @examples/subscription-renewals.input.json --demo-downstream \
		--database sqlite+aiosqlite:///$(CURDIR)/.demo.db

## Test files are spread over TEST_WORKERS processes (pytest-xdist; a file stays in one process,
## so its module fixtures start once). TEST_WORKERS=0 runs everything in this process. The
## slowest tests are listed at the end, to see where the suite's time goes. The project's
## bytecode is compiled first: where PYTHONDONTWRITEBYTECODE is set (CI's machine) every
## `schemabridge` process a test starts would otherwise compile the sources anew (~1 s each).
## Four on this 2-core machine: most tests wait on processes, sockets and timers, so three used
## 0.9 of the 2 cores; six finished sooner still but timing tests then failed under the load.
TEST_WORKERS ?= 4
SOURCES = schemas engine vertices admission api ui demo

test: $(STAMP)
	$(BIN)/python -m compileall -q $(SOURCES)
	$(BIN)/pytest -n $(TEST_WORKERS) --dist loadfile --durations=25

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

typecheck: $(STAMP)
	$(BIN)/mypy

check: lint typecheck

bench: $(STAMP)
	$(BIN)/python -m bench.engine

clean:
	rm -rf $(VENV) .demo.db* .demo-monitor.db* .demo-monitor.lock .pytest_cache .mypy_cache .ruff_cache \
		tests/e2e/screenshots
