# parabench. Variables map onto `python -m bench run` (comma-separated lists):
#   make bench GPUS=0,1 STRATEGIES=single,ddp BATCH_SIZES=64,128 PRECISION=fp32,amp-bf16 MODEL=resnet18 RESULTS=results
# PY: the interpreter. The default is the project's virtual environment (made by `make setup`);
# on a machine that already has torch, pandas and matplotlib, pass PY=python3 to skip setup.
# A value given on the command line or in the environment is text, never make's own syntax nor the
# shell's: `make plot RESULTS='$(shell ...)'` or `STRATEGIES='x;cmd'` must not run it. Each such value
# is kept as written, once, and reaches the command quoted; ARGS and PYTEST_ARGS alone are split into
# words, as they carry flags: as a shell splits them (quotes hold a word together), by Python's shlex, each
# word then quoted, so that nothing in them runs (`ARGS='; touch x'` is the words `;`, `touch` and `x`).
GIVEN := GPUS STRATEGIES MODEL RESULTS PLOTS ARGS PRECISION BATCH_SIZES BUDGET REF_DIR CURRENT FIT FIT_STRATEGIES PYTEST_ARGS
$(foreach v,$(GIVEN),$(if $(filter command line environment environment override,$(origin $(v))),$(eval override $(v) := $$(value $(v)))))
PYTHON ?= python3
VENV ?= .venv
PY ?= $(VENV)/bin/python
# CPU-only hosts get the CPU build of torch; hosts with nvidia-smi the default (CUDA) build.
TORCH_SPEC ?= $(if $(shell command -v nvidia-smi 2>/dev/null),torch,torch==2.13.0)

GPUS ?= all
STRATEGIES ?=
MODEL ?= resnet18-small
RESULTS ?= results
PLOTS ?= plots
ARGS ?=
# What `make bench` measures is what `python -m bench run` measures with no flags on this host: the
# defaults are one table (bench/cases/defaults.py, `python -m bench run --help` says them). On GPUs:
# amp-bf16, channels_last for images, each model's own per-GPU batches, and a search within the
# default budget; on the CPU (GPUS= or no GPU): fp32, the small sweep. Each variable below passes
# only what it is set to: PRECISION=, BATCH_SIZES=, LAYOUT= (e.g. --channels-last off), BUDGET=
# (minutes), SEARCH=--no-search (or --search).
PRECISION ?=
BATCH_SIZES ?=
LAYOUT ?=
BUDGET ?=
SEARCH ?=
, := ,
# A value as one shell word, whatever it holds (`make plot RESULTS="my results"`).
sq = '$(subst ','\'',$(1))'
# A value as shell words (ARGS, PYTEST_ARGS): split as a shell splits them, each word quoted.
shell_words = $(shell $(PYTHON) scripts/shell_words.py $(call sq,$(1)))

# Setup only when PY is the project's own environment.
NEEDS_SETUP := $(if $(filter $(VENV)/bin/python,$(PY)),setup)

.PHONY: setup setup-models setup-mxnet bench list answer plot reference test test-slow slurm-test pytest-bench baseline-ci regress-ci regress fit-check clean

setup: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml
	@echo "setting up $(VENV): torch ($(TORCH_SPEC)) and the suite's packages, about a minute, once"
	$(PYTHON) -m venv $(VENV)
	$(VENV)/bin/python -m pip install -q --upgrade pip
	$(VENV)/bin/python -m pip install -q "$(TORCH_SPEC)"
	$(VENV)/bin/python -m pip install -q -e ".[test]"
	# Holistic Trace Analysis cross-checks the step anatomy in the tests. Its package declares
	# jupyterlab and pytest as needs; it imports only these.
	$(VENV)/bin/python -m pip install -q --no-deps HolisticTraceAnalysis==0.5.0 plotly==6.3.0 narwhals==2.29.0 \
		pydot==4.0.1 pyparsing==3.3.3 networkx==3.4.2 PyYAML==6.0.3
	touch $@

# timm and torchvision (--models timm:NAME, torchvision:NAME) beside .venv's torch, never in its place:
# a plain `pip install timm` replaced torch 2.13.0+cpu with a 5.8 GB CUDA build. With a CUDA torch, the
# torchvision built for it (torch held at its version). With the CPU build, whose torchvision is not on
# PyPI (PyPI's 0.28.0 is built for CUDA torch: "operator torchvision::nms does not exist"), torchvision
# 0.16.2 without dependencies: the last release whose import stands without its compiled operators,
# and its model code runs on torch 2.13 (tests/test_models.py builds resnet18 from both packages).
# Their own imports come first; none of them needs torch.
MODEL_SOURCES ?= $(if $(shell command -v nvidia-smi 2>/dev/null),timm==1.0.29 torchvision 	"torch==$$($(VENV)/bin/python -c 'import torch; print(torch.__version__.split("+")[0])')",--no-deps timm==1.0.29 torchvision==0.16.2)

setup-models: $(VENV)/.models

$(VENV)/.models: $(VENV)/.installed
	$(VENV)/bin/python -m pip install -q requests==2.34.2 huggingface_hub==1.33.0 safetensors==0.8.0
	$(VENV)/bin/python -m pip install -q $(MODEL_SOURCES)
	# Hugging Face transformers for a language model of the user's own (docs/extending.md's GPT2LMHeadModel
	# recipe); pure Python, it needs no torch of its own. The version the GPU machines have.
	$(VENV)/bin/python -m pip install -q transformers==5.17.0
	touch $@

# MXNet 1.9.1 needs numpy < 1.24, hence Python <= 3.11 and an environment of its own.
# The CUDA wheel only where every GPU is sm_86 or older (mxnet-cu117 has no newer code).
MXNET_PYTHON ?= python3
MXNET_VENV ?= .venv-mxnet
MXNET_WHEEL ?= $(shell nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | \
	awk 'BEGIN{w="mxnet"} {if ($$1+0 <= 8.6) w="mxnet-cu117"; else {w="mxnet"; exit}} END{print w}')

setup-mxnet: $(MXNET_VENV)/parabench-wheel.txt

$(MXNET_VENV)/parabench-wheel.txt:
	@$(MXNET_PYTHON) -c 'import sys; sys.exit(0 if (3, 10) <= sys.version_info < (3, 12) else "MXNet 1.9.1 needs Python <= 3.11 (numpy < 1.24) and the suite 3.10 or later: make setup-mxnet MXNET_PYTHON=python3.11")'
	$(MXNET_PYTHON) -m venv $(MXNET_VENV)
	$(MXNET_VENV)/bin/python -m pip install -q "$(if $(MXNET_WHEEL),$(MXNET_WHEEL),mxnet)==1.9.1" "numpy<1.24"
	echo "$(if $(MXNET_WHEEL),$(MXNET_WHEEL),mxnet)" > $@

# One line, so that make echoes the command as it runs (no dangling `\`).
RUN_ARGS = --gpus $(call sq,$(GPUS)) --models $(call sq,$(MODEL)) --results-dir $(call \
	sq,$(RESULTS))$(if $(PRECISION), --precisions $(call sq,$(PRECISION)))$(if $(STRATEGIES), --strategies $(call sq,$(STRATEGIES)))$(if $(BATCH_SIZES), --batch-sizes $(call \
	sq,$(BATCH_SIZES)))$(if $(LAYOUT), $(LAYOUT))$(if \
	$(SEARCH), $(SEARCH))$(if $(BUDGET), --budget $(call sq,$(BUDGET)))$(if $(ARGS), $(call shell_words,$(ARGS)))

bench: $(NEEDS_SETUP)
	$(PY) -m bench run $(RUN_ARGS)

list: $(NEEDS_SETUP)
	$(PY) -m bench list --gpus $(call sq,$(GPUS))

# The answer of the newest run in $(RESULTS), in the terminal (ARGS=--json for scripts).
answer: $(NEEDS_SETUP)
	$(PY) -m bench answer --results-dir $(call sq,$(RESULTS)) $(call shell_words,$(ARGS))

# The newest run in $(RESULTS) (ARGS=--all: every run, each run's answer apart).
plot: $(NEEDS_SETUP)
	$(PY) -m bench report --results-dir $(call sq,$(RESULTS)) --out $(call sq,$(PLOTS)) $(call shell_words,$(ARGS))

# The tests need the MXNet environment too, where this Python can hold MXNet 1.9.1 (<= 3.11);
# elsewhere the MXNet tests skip and say why.
MXNET_FITS := $(shell $(MXNET_PYTHON) -c 'import sys; print("yes" if (3, 10) <= sys.version_info < (3, 12) else "")' 2>/dev/null)

# Every seed row in one reference (scripts/reference.sh): `make reference GPUS=0,1,2,3` writes
# results/reference/<gpu>x<n>/ (the run, its answer, the GPU tests' log) and
# plots/reference/<gpu>x<n>/; `make reference GPUS=` a small CPU version into
# results/reference-cpu/. REF_DIR= puts the results elsewhere.
REF_DIR ?=
reference: $(NEEDS_SETUP) $(if $(NEEDS_SETUP),$(if $(MXNET_FITS),setup-mxnet))
	PY=$(PY) bash scripts/reference.sh $(call sq,$(if $(filter-out cpu none,$(GPUS)),$(GPUS))) $(if $(REF_DIR),$(call sq,$(REF_DIR)))

# `make test`: everything but the tests marked slow (minutes of CPU each: Callgrind, compiled
# parity, fault, multi-node and regression sweeps), which `make test-slow` runs; CI runs both.
# The tests run one per usable core (nproc: this process's CPUs, at most 4) where pytest-xdist is
# there (.venv has it), each taken by the first free worker: nearly all their time is subprocesses
# starting torch. OpenMP threads sleep while they wait (OMP_WAIT_POLICY=PASSIVE) instead of
# spinning on the core the other worker needs. With xdist, PYTEST_ARGS=-n0 runs them one at a time.
test: $(NEEDS_SETUP) $(if $(NEEDS_SETUP),setup-models $(if $(MXNET_FITS),setup-mxnet))
	@echo "make test: about 6 minutes on an idle 2-core machine, one dot per test (the README says so too)"
	$(PY) -m ruff check --quiet .  # the linter first: pyproject.toml's [tool.ruff], a second
	workers=; $(PY) -c "import xdist" 2>/dev/null && workers="-n $$(n=$$(nproc); echo $$((n < 4 ? n : 4))) --dist worksteal"; \
	OMP_WAIT_POLICY=PASSIVE $(PY) -m pytest -q -m "not slow" tests $$workers $(call shell_words,$(PYTEST_ARGS))

test-slow: $(NEEDS_SETUP) $(if $(NEEDS_SETUP),setup-models $(if $(MXNET_FITS),setup-mxnet))
	$(PY) -m pytest -q -m slow tests $(call shell_words,$(PYTEST_ARGS))

# A one-host Slurm cluster (slurm-wlm and munge, installed if missing; root) runs the batch
# script with 2 tasks acting as 2 nodes.
slurm-test: $(NEEDS_SETUP)
	PY=$(PY) bash scripts/slurm/local_cluster_test.sh

pytest-bench: $(NEEDS_SETUP)
	$(PY) -m pytest benchmarks -q --benchmark-autosave $(call shell_words,$(ARGS))

# Regression tracking. The CI sweep: small, CPU, seconds.
CI_SWEEP = --gpus "" --strategies single,allreduce-scratch,ddp --batch-sizes 2,4 --warmup 3 --steps 6 --trials 3
CI_BASELINE = results/reference/baselines/cpu-ci.json
# Instructions per step under Callgrind (bench/checks/instructions.py): exact, but only within the
# Python and torch builds that recorded them (this one: Debian 12's Python, torch 2.13.0 CPU).
CI_INSTRUCTIONS = results/reference/baselines/cpu-ci-instructions.json
CI_CURRENT ?= /tmp/parabench-ci-current.json
CI_REPEAT ?= /tmp/parabench-ci-repeat.json
# A shared CI machine's speed drifts between runs: judge the deterministic work counters,
# show timing (in-run ratios) without judging it, and confirm a regression with a second sweep.
CI_THRESHOLDS ?= --max-slowdown 0.25 --noise-factor 1.5 --ratios-only --judge counters

baseline-ci: $(NEEDS_SETUP)
	rm -f $(CI_BASELINE) $(CI_BASELINE:.json=.csv)
	$(PY) -m bench run $(CI_SWEEP) --out $(CI_BASELINE)
	$(PY) -m bench instructions --out $(CI_INSTRUCTIONS)

regress-ci: $(NEEDS_SETUP)
	rm -f $(CI_CURRENT) $(CI_CURRENT:.json=.csv) $(CI_REPEAT) $(CI_REPEAT:.json=.csv)
	$(PY) -m bench run $(CI_SWEEP) --out $(CI_CURRENT)
	$(PY) -m bench compare $(CI_BASELINE) $(CI_CURRENT) $(CI_THRESHOLDS) || { status=$$?; \
		[ $$status -eq 1 ] || exit $$status; echo "regression seen: measuring again to confirm it"; \
		$(PY) -m bench run $(CI_SWEEP) --out $(CI_REPEAT) && \
		$(PY) -m bench compare $(CI_BASELINE) $(CI_CURRENT) $(CI_REPEAT) $(CI_THRESHOLDS); }
	# A machine whose Python or torch build differs from the baseline's cannot judge
	# instructions (it says so); the counters above are judged everywhere.
	$(PY) -m bench instructions --compare $(CI_INSTRUCTIONS) --other-environment skip

# A GPU sweep against the baseline of the same GPU model (results/reference/baselines/<gpu>.json):
#   make regress CURRENT=results/run-....json
CURRENT ?= $(lastword $(sort $(wildcard $(RESULTS)/run-*.json)))
regress: $(NEEDS_SETUP)
	$(if $(CURRENT),,$(error no $(RESULTS)/run-*.json to compare: run `make bench` first, or pass CURRENT=FILE))
	$(PY) -m bench compare auto $(call sq,$(CURRENT)) $(call shell_words,$(ARGS))

# The fit held against real runs, in one call (GPUs only: on the CPU a fit runs against a budget
# that no real run has): the fit of MODEL on the first of GPUS at 1 and n = all of GPUS (FIT=file
# takes a fit made before instead), then real runs on GPUS at the batches its search at n probed
# that tell most, then `bench fit-check`'s agreement table, all in $(RESULTS)/fit-check-<time>/.
#   make fit-check GPUS=0,1,2,3 MODEL=vit-large
FIT ?=
FIT_STRATEGIES ?= ddp,zero1,fsdp2
FIT_DIR = $(RESULTS)/fit-check-$(shell date +%Y%m%d-%H%M%S)
fit-check: $(NEEDS_SETUP)
	$(if $(findstring $(,),$(GPUS)),,$(error fit-check needs two or more GPUs: GPUS=0,1[,...]))
	set -e; dir=$(call sq,$(FIT_DIR)); mkdir -p "$$dir"; n=$(words $(subst $(,), ,$(GPUS))); \
	fit=$(if $(FIT),$(call sq,$(FIT)),"$$dir/fit.fit.json"); \
	$(if $(FIT),,$(PY) -m bench fit --gpus $(call sq,$(firstword $(subst $(,), ,$(GPUS)))) --models $(call sq,$(MODEL)) \
		--strategies $(call sq,$(FIT_STRATEGIES))$(if $(PRECISION), --precisions $(call sq,$(PRECISION))) $(LAYOUT) --devices 1,$$n \
		--out "$$fit";) \
	PY=$(PY) bash scripts/fit_check.sh "$$fit" $(call sq,$(MODEL)) $(call sq,$(FIT_STRATEGIES)) $(call sq,$(GPUS)) "$$dir"

clean:
	rm -rf $(VENV) $(MXNET_VENV) .pytest_cache .benchmarks
