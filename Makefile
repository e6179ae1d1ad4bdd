PY ?= $(shell pyenv root 2>/dev/null)/versions/$(shell cat .python-version)/bin/python
VENV := .venv
BIN := $(VENV)/bin
export DO_NOT_TRACK := true
export PREFECT_SERVER_ANALYTICS_ENABLED := false
export MLFLOW_DISABLE_TELEMETRY := true
export HF_HUB_OFFLINE := 1
export TRANSFORMERS_OFFLINE := 1

.PHONY: setup demo test bench clean

setup: $(BIN)/sagegraph

$(BIN)/sagegraph: pyproject.toml
	@test -x "$(PY)" || { echo "Python 3.12 not found at $(PY); set PY=/path/to/python3.12"; exit 1; }
	test -d $(VENV) || $(PY) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[test]'
	touch $@

demo: setup
	$(BIN)/sagegraph build conf/ottqa.yaml --max-sources 2000

test: setup
	$(BIN)/python -m pytest -q

bench: setup
	$(BIN)/python -m benchmarks.build_ottqa

clean:
	rm -rf work/ .pytest_cache
