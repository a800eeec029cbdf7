# parabench. Variables map onto `python -m bench run` (comma-separated lists):
#   make bench GPUS=0,1 STRATEGIES=single,ddp BATCH_SIZES=64,128 PRECISION=fp32,amp-bf16 MODEL=resnet18 RESULTS=results
# PY: the interpreter. The default is the project's virtual environment (made by `make setup`);
# on a machine that already has torch, pandas and matplotlib, pass PY=python3 to skip setup.
PYTHON ?= python3
VENV ?= .venv
PY ?= $(VENV)/bin/python
# CPU-only hosts get the CPU build of torch; hosts with nvidia-smi the default (CUDA) build.
TORCH_SPEC ?= $(if $(shell command -v nvidia-smi 2>/dev/null),torch,torch==2.13.0)

GPUS ?= all
STRATEGIES ?=
BATCH_SIZES ?=
PRECISION ?= fp32
MODEL ?= resnet18-small
RESULTS ?= results
ARGS ?=

# Setup only when PY is the project's own environment.
NEEDS_SETUP := $(if $(filter $(VENV)/bin/python,$(PY)),setup)

.PHONY: setup bench list plot test regress baseline clean

setup: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(VENV)/bin/python -m pip install -q --upgrade pip
	$(VENV)/bin/python -m pip install -q "$(TORCH_SPEC)"
	$(VENV)/bin/python -m pip install -q -e ".[test]"
	touch $@

bench: $(NEEDS_SETUP)
	$(PY) -m bench run --gpus "$(GPUS)" --precisions $(PRECISION) --models $(MODEL) --results-dir $(RESULTS) \
		$(if $(STRATEGIES),--strategies $(STRATEGIES)) $(if $(BATCH_SIZES),--batch-sizes $(BATCH_SIZES)) $(ARGS)

list: $(NEEDS_SETUP)
	$(PY) -m bench list --gpus "$(GPUS)"

plot: $(NEEDS_SETUP)
	$(PY) -m bench report --results-dir $(RESULTS) --out plots

test: $(NEEDS_SETUP)
	$(PY) -m pytest -q tests

clean:
	rm -rf $(VENV) .pytest_cache .benchmarks
