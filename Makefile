# PromptManager
#   make run    install, migrate, make sure Redis runs, create the demo login, serve on HOST:PORT
#   make test   install with test and lint extras, then ruff, mypy, the unit tests that use
#               the database on PostgreSQL (make test-postgres), and pytest (what CI runs)
#   make test-fast   only the unit tests (no Claude CLI, no browser), in under a minute
#   make test-postgres   the unit tests that use the database, on a local PostgreSQL (installed
#               and started when missing), in a minute or two

SHELL := /bin/bash
.SHELLFLAGS := -euo pipefail -c

VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip install --quiet --disable-pip-version-check
HOST ?= 127.0.0.1
PORT ?= 8000
# pytest-xdist workers: one holds the 870-second question, the other takes the rest, then
# both; browser tests run one at a time (tests/conftest.py). A third made the 2 cores so
# busy (load 13) that page and CLI tests missed their waits.
TEST_WORKERS ?= 2
# The PostgreSQL that make test-postgres uses (scripts/ensure-postgres.sh sets up a local
# one); pytest-django creates and drops test_promptmanager_<checkout>_gwN in it. SQLite stays
# the default everywhere else.
POSTGRES_TEST_URL ?= postgres://promptmanager:promptmanager@127.0.0.1:5432/promptmanager

.PHONY: venv install run test test-fast test-postgres lint bench screenshots

venv: $(PY)

$(PY):
	scripts/ensure-venv.sh $(VENV)

# Stamp files: pip runs again only when pyproject.toml changes.
$(VENV)/.installed-app: pyproject.toml | $(PY)
	$(PIP) -e .
	touch $@

$(VENV)/.installed-dev: pyproject.toml | $(PY)
	$(PIP) -e '.[test,lint]'
	touch $@ $(VENV)/.installed-app

install: $(VENV)/.installed-dev

# The click channel's messages are a few hundred bytes: no compression (a zlib context per
# open page for nothing), and nothing much above the API's own body limit (2.5 MB, which the
# channel answers with 413; a larger message closes the socket, 1009).
UVICORN_WS = --ws-max-size 4194304 --ws-per-message-deflate false

# The MCP server Claude spawns reaches the app here; it must match where uvicorn listens.
# PYTHONMALLOC=malloc: what closed streams used goes back to the OS (README, "PostgreSQL and
# several workers").
run: export INTERNAL_BASE_URL ?= http://127.0.0.1:$(PORT)
run: $(VENV)/.installed-app
	$(PY) manage.py migrate --noinput -v 0
	scripts/ensure-redis.sh
	scripts/ensure-bubblewrap.sh
	$(PY) manage.py ensure_demo_user
	$(PY) manage.py sync_workspaces
	PYTHONMALLOC=malloc exec $(VENV)/bin/uvicorn promptmgr.asgi:application --host $(HOST) --port $(PORT) \
		--timeout-graceful-shutdown 5 $(UVICORN_WS)

lint: $(VENV)/.installed-dev
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy .

test: $(VENV)/.installed-dev
	scripts/ensure-chromium.sh
	scripts/ensure-redis.sh --binary
	scripts/ensure-bubblewrap.sh
	$(MAKE) --no-print-directory lint
	$(MAKE) --no-print-directory test-postgres
	$(VENV)/bin/pytest -n $(TEST_WORKERS) --dist loadgroup

test-fast: $(VENV)/.installed-dev
	scripts/ensure-redis.sh --binary
	$(VENV)/bin/pytest -m unit -n 2

# The unit tests that use the database (--database-tests: pytest-django's db fixtures or
# marker; about 270) call the services, the API and the pages' ORM code directly: queries,
# transactions, select_for_update, JSON fields, constraints. The e2e and browser tests reach
# the same code through the CLI, real ports and Chromium, which would add ten minutes for
# few other queries; tests/crash/conftest.py also hands its servers a SQLite URL.
# --create-db: a test database an interrupted run left behind is made afresh.
test-postgres: $(VENV)/.installed-dev
	scripts/ensure-redis.sh --binary
	scripts/ensure-postgres.sh "$(POSTGRES_TEST_URL)"
	DATABASE_URL="$(POSTGRES_TEST_URL)" $(VENV)/bin/pytest -m unit --database-tests -n 2 --create-db

# The pages in every look (desktop and a 390 px phone, light and dark) as PNGs in
# docs/screenshots/, driven through the real app, CLI and scripted model.
screenshots: $(VENV)/.installed-dev
	scripts/ensure-chromium.sh
	scripts/ensure-redis.sh --binary
	$(VENV)/bin/pytest tests/pages/looks/screenshots.py -p no:cacheprovider -n 0 -q

# Each benchmark starts its own stack (the app, the scripted model, a SQLite file; Redis at
# REDIS_URL, or a private redis-server), prints its figures and stops all it started.
bench: $(VENV)/.installed-app
	scripts/ensure-redis.sh --binary
	$(PY) bench/stream_overhead.py
	$(PY) bench/askuser_latency.py
	$(PY) bench/cli_startup.py
	$(PY) bench/approval_latency.py
	CLAUDE_SANDBOX_SCOPE=command $(PY) bench/approval_latency.py --question-rounds 0
	CLAUDE_SANDBOX=off $(PY) bench/approval_latency.py --question-rounds 0
	$(PY) bench/decision_path.py
	$(PY) bench/mcp_hop.py
	$(PY) bench/machinery.py
	$(PY) bench/line_reader.py
	$(PY) bench/streams_footprint.py
	$(PY) bench/scale.py
	$(PY) bench/workspace_git.py
	$(PY) bench/isolation_cost.py
