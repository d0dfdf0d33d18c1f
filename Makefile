# tirl — the two commands: `make run` and `make test`.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
# pytest-xdist workers for `make test` (2: the reference machine's cores; `make test PYTEST_WORKERS=0` runs in one process)
PYTEST_WORKERS ?= 2
APT_PKGS := bubblewrap chromium

.PHONY: install run test lint typecheck pytest clean sysdeps constraints test-verl install-vllm gpu-check

$(BIN)/python:
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip

sysdeps:
	@missing=""; \
	command -v bwrap >/dev/null 2>&1 || missing="$$missing bubblewrap"; \
	command -v chromium >/dev/null 2>&1 || missing="$$missing chromium"; \
	{ command -v setpriv && command -v prlimit; } >/dev/null 2>&1 || missing="$$missing util-linux"; \
	ldconfig -p 2>/dev/null | grep -q 'libseccomp\.so\.2' || missing="$$missing libseccomp2"; \
	if [ -n "$$missing" ]; then \
	  echo "installing Debian packages:$$missing"; \
	  SUDO=""; [ "$$(id -u)" = 0 ] || SUDO="sudo"; \
	  $$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq $$missing >/dev/null; \
	fi

# Idempotent: re-installs only when pyproject.toml or constraints.txt changed since the last install.
# Every version comes from constraints.txt (the set the suite last passed with; `make constraints` rewrites it).
$(STAMP): pyproject.toml constraints.txt | $(BIN)/python
	$(BIN)/pip install -q -c constraints.txt torch==2.13.0
	$(BIN)/pip install -q -c constraints.txt -e '.[dev,ray,lora,integrations,wandb]'
	touch $(STAMP)

# Rewrite constraints.txt from .venv after a deliberate upgrade (then run `make test`); torch without its +cpu label.
constraints: install
	{ sed -n '/^#/p' constraints.txt; $(BIN)/pip freeze --all --exclude-editable | grep -v '^pip==' | sed 's/+cpu$$//'; } \
	  > constraints.txt.new && mv constraints.txt.new constraints.txt

install: sysdeps $(STAMP)

run: install
	$(BIN)/tirl train

lint: install
	$(BIN)/ruff check src tests benchmarks examples
	$(BIN)/ruff format --check src tests benchmarks examples

typecheck: install
	$(BIN)/mypy

pytest: install
	TIRL_REQUIRE_PARTS=1 $(BIN)/python -m pytest -q -ra --tb=native --durations=20 -n $(PYTEST_WORKERS) --dist load

test: install lint typecheck pytest

# The verl plug-in against a real verl.DataProto, in its own venv (verl pins transformers<5.11, which the main
# venv cannot hold). Not part of `make test` or CI: it installs verl and its dependencies (a few minutes).
VERL_VENV := .venv-verl
test-verl:
	test -x $(VERL_VENV)/bin/python || $(PY) -m venv $(VERL_VENV)
	$(VERL_VENV)/bin/pip install -q torch==2.13.0 'verl==0.9.1' pytest
	PYTHONPATH=src $(VERL_VENV)/bin/python -m pytest -q -p no:cacheprovider tests/integrations/test_verl_plugin.py

# vLLM (generator=vllm) in its own venv: vLLM 0.33 pins torch==2.14.0 (CUDA 13.0) and transformers<5.21, which would
# replace .venv's torch. Needs a Linux x86_64 machine with an NVIDIA driver for CUDA 13; .venv is left alone.
VLLM_VENV := .venv-vllm
install-vllm:
	test -x $(VLLM_VENV)/bin/python || $(PY) -m venv $(VLLM_VENV)
	$(VLLM_VENV)/bin/pip install -q --upgrade pip
	$(VLLM_VENV)/bin/pip install -q -e '.[vllm,lora,dev]'
	$(VLLM_VENV)/bin/python -c "import torch, transformers, vllm; print('vllm', vllm.__version__, 'torch', torch.__version__, 'cuda', torch.version.cuda, 'transformers', transformers.__version__)"

# The GPU check (benchmarks/gpu_check.sh): Tier A with .venv, Tier B (vLLM) with .venv-vllm when it exists.
gpu-check:
	PYTHON=$(BIN)/python TIERS=A bash benchmarks/gpu_check.sh
	test ! -x $(VLLM_VENV)/bin/python || PYTHON=$(VLLM_VENV)/bin/python TIERS=B bash benchmarks/gpu_check.sh

clean:
	rm -rf $(VENV) $(VLLM_VENV) build dist src/*.egg-info .pytest_cache .mypy_cache .ruff_cache
