# Two commands do everything on a fresh machine: `make demo` and `make test`.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.edgekit-installed

.PHONY: setup demo test test-fast bench samples clean

setup: $(STAMP)

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[all,test]'
	touch $(STAMP)

demo: setup
	$(BIN)/edgekit demo

test: setup
	$(BIN)/python -m pytest

test-fast: setup
	$(BIN)/python -m pytest -m "not slow"

bench: setup
	$(BIN)/python bench/bench_convert.py

samples: setup
	$(BIN)/python sample_models/train_digits_cnn.py
	$(BIN)/python sample_models/train_digits_mobilenet.py
	$(BIN)/python sample_models/train_digits_keras.py

clean:
	rm -rf $(VENV) demo-out edgekit-out .pytest_cache
