"""``[[generators]]`` / ``[[prms]]`` tables: vLLM's context limit comes from the model by default."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from dprm.config import ConfigError
from dprm.recipe.spec import recipe_from_dict

#: the generator shipped for the arithmetic world: 512 positions in its config.json
ARITH_GENERATOR = Path(__file__).resolve().parents[2] / "src/dprm/llm/worlds/arith/generator"


def _recipe(**generator):
    tables = {
        "generators": [{"name": "g", "model": str(ARITH_GENERATOR), "backend": "vllm"} | generator],
        "prms": [{"name": "p", "model": "x"}],
    }
    return recipe_from_dict(tables, "r.toml")


def test_a_vllm_engine_without_max_model_len_gets_the_model_s_own_limit(monkeypatch):
    """The engine is asked for no limit, so vLLM gets ``default_context_limit``'s 512 for the
    arith generator rather than a 4096 it would refuse for a 512-position model."""
    pytest.importorskip("transformers")
    from dprm.llm import generate
    from dprm.runner import engines

    spec = _recipe().generators[0]
    assert spec.max_model_len is None
    made: dict = {}

    def fake_load(backend, model, **options):
        made.update(options, backend=backend, model=model)
        return object()

    monkeypatch.setattr(generate, "load_generator", fake_load)
    engines.release()
    try:
        engines.generator(dataclasses.asdict(spec))
    finally:
        engines.release()
    assert made["backend"] == "vllm" and made["model"] == str(ARITH_GENERATOR)
    assert made["max_model_len"] is None
    assert generate.default_context_limit(str(ARITH_GENERATOR), made["max_model_len"]) == 512


def test_an_explicit_max_model_len_is_kept_and_checked():
    assert _recipe(max_model_len=256).generators[0].max_model_len == 256
    with pytest.raises(ConfigError, match=r"r.toml \[generators\]\[0\]: max_model_len = 0"):
        _recipe(max_model_len=0)
    with pytest.raises(ConfigError, match=r"r.toml \[generators\]\[0\]: .*max_model_len"):
        _recipe(max_model_len="long")
