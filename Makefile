# The two commands a newcomer runs: `make demo` and `make test`. Both set up the pinned virtualenv first.
# PYTHON picks the interpreter (3.11, 3.12 or 3.13), each with its own venv: `make demo PYTHON=python3.12`.
# OUT is where the demo writes.
SHELL := /bin/bash
PYTHON ?= python3.11
OUT ?= dist/demo
VENV := $(shell scripts/venv.sh $(PYTHON))
ifeq ($(VENV),)
$(error scripts/venv.sh $(PYTHON) failed (its output is above))
endif
PY := $(VENV)/bin/python

.PHONY: demo test test-slow bench venv lint
venv:
	@echo $(VENV)

demo:
	$(PY) -m edgeport convert samples/models/tiny_cnn.py:build --target litert --target tpu --target onnx \
		--quantize fp16 --quantize int8 --quantize bf16 --out $(OUT) --force

# Test files run side by side on up to 4 cores (each worker holds torch and the converters: ~1-2 GB).
JOBS ?= $(shell python3 -c "import os; print(min(4, len(os.sched_getaffinity(0))))")

# One torch/OpenMP thread per test process (unless OMP_NUM_THREADS is set): the JOBS workers already fill the
# cores, and each process's own pool of one thread per core made them spin against each other
# (bench/TEST_TIME.md). Runtimes edgeport times keep their explicit --threads.
# pyflakes' checks through ruff (pyproject.toml [tool.ruff]): an undefined name or unused import fails the build
lint:
	$(PY) -m ruff check edgeport tests bench scripts samples

test: lint
	bash scripts/web-deps.sh
	PY=$(PY) bash scripts/kotlin-deps.sh >/dev/null
	OMP_NUM_THREADS=$${OMP_NUM_THREADS:-1} $(PY) -m pytest -q -m "not slow" -n $(JOBS) --dist loadfile --no-loadscope-reorder --durations=25 tests

test-slow:
	bash scripts/web-deps.sh
	$(PY) -m pytest -q -m slow -n $(JOBS) --dist loadfile --durations=25 tests || [ $$? -eq 5 ]  # 5: nothing marked slow

bench:
	$(PY) bench/litert_overhead.py
	$(PY) bench/onnx_vs_eager.py
	$(PY) bench/tpu.py
	$(PY) bench/threads_auto.py
