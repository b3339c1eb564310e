# Two entry points: `make demo` (the main job) and `make test`. Both set up .venv first.
# TORCH selects the torch requirement: the default pins the offline CPU build our machines
# carry; GPU users run e.g. `make demo TORCH=torch` or install their own torch into .venv.
PYTHON ?= python3
VENV   ?= .venv
TORCH  ?= torch==2.13.0
BIN     = $(VENV)/bin
OUT    ?= runs/demo

.PHONY: demo test lint format bench clean

$(BIN)/dprm: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -c "import torch" 2>/dev/null || $(BIN)/pip install -q "$(TORCH)"
	$(BIN)/pip install -q -e ".[dev]"
	touch $(BIN)/dprm

demo: $(BIN)/dprm
	$(BIN)/dprm reproduce --preset demo --out $(OUT)

test: $(BIN)/dprm
	$(BIN)/python -m pytest -n 2 --dist loadfile

lint: $(BIN)/dprm
	$(BIN)/ruff check src tests benchmarks
	$(BIN)/ruff format --check src tests benchmarks

format: $(BIN)/dprm
	$(BIN)/ruff format src tests benchmarks
	$(BIN)/ruff check --fix src tests benchmarks

bench: $(BIN)/dprm
	for f in benchmarks/bench_*.py; do $(BIN)/python $$f || exit 1; done

clean:
	rm -rf $(VENV) runs .pytest_cache
