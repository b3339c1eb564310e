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

.PHONY: demo demo-twin test test-floor check-llm-extra lint format bench clean

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

lint: $(BIN)/dprm
	$(BIN)/ruff check src tests benchmarks
	$(BIN)/ruff format --check src tests benchmarks
	$(BIN)/lint-imports

format: $(BIN)/dprm
	$(BIN)/ruff format src tests benchmarks
	$(BIN)/ruff check --fix src tests benchmarks

bench: $(BIN)/dprm
	for f in benchmarks/bench_*.py; do $(BIN)/python $$f || exit 1; done

clean:
	rm -rf $(VENV) $(FLOOR_VENV) $(LLM_VENV) runs .pytest_cache
