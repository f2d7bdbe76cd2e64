# The two commands a newcomer runs: `make demo` and `make test`. Both set up the pinned virtualenv first.
SHELL := /bin/bash
VENV := $(shell scripts/venv.sh)
PY := $(VENV)/bin/python

.PHONY: demo test bench venv
venv:
	@echo $(VENV)

demo:
	$(PY) -m edgeport convert samples/models/tiny_cnn.py:build --target litert --target tpu --target onnx \
		--quantize fp16 --quantize int8 --quantize bf16 --out dist/demo --force

test:
	bash scripts/web-deps.sh
	$(PY) -m pytest -q tests

bench:
	$(PY) bench/litert_overhead.py
	$(PY) bench/onnx_vs_eager.py
	$(PY) bench/tpu.py
	$(PY) bench/threads_auto.py
