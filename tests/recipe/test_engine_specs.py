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


# ----------------------------------------------------------------------------- served generator
def test_a_served_generator_is_validated(tmp_path):
    served = {"backend": "openai", "model": "served-name", "base_url": "http://127.0.0.1:8000/v1"}
    spec = _recipe(**served, api_key_env="KEY", max_in_flight=4).generators[0]
    assert (spec.backend, spec.base_url, spec.max_in_flight) == ("openai", served["base_url"], 4)
    with pytest.raises(
        ConfigError, match=r'\[generators\]\[0\]: backend = "openai" needs base_url'
    ):
        _recipe(backend="openai")
    with pytest.raises(ConfigError, match=r"\[generators\]\[0\]: base_url 'x:1': expected an http"):
        _recipe(backend="openai", base_url="x:1")
    with pytest.raises(ConfigError, match=r"base_url and api_key_env are for backend = \"openai\""):
        _recipe(backend="vllm", base_url="http://127.0.0.1:8000/v1")
    with pytest.raises(ConfigError, match=r"backend = 'tgi'; expected one of \['transformers'"):
        _recipe(backend="tgi")
    with pytest.raises(ConfigError, match="max_in_flight"):
        _recipe(**served, max_in_flight=0)
    with pytest.raises(ConfigError, match="base_urls"):
        _recipe(**served, base_urls="http://x")  # unknown keys are refused


def test_a_served_generators_address_does_not_change_fingerprints():
    from dprm.recipe.fingerprints import engine_settings

    served = {"backend": "openai", "model": "m", "base_url": "http://127.0.0.1:8000/v1"}
    one = engine_settings(_recipe(**served).generators[0])
    moved = {**served, "base_url": "http://10.0.0.2:9000/v1", "max_in_flight": 64}
    assert engine_settings(_recipe(**moved, api_key_env="K").generators[0]) == one
    assert engine_settings(_recipe(**served | {"model": "m2"}).generators[0]) != one


def test_a_served_generator_engine_gets_the_server_options(monkeypatch):
    from dprm.llm import generate
    from dprm.runner import engines

    spec = _recipe(
        backend="openai", model="m", base_url="http://127.0.0.1:8000/v1", api_key_env="K"
    ).generators[0]
    made: dict = {}

    def fake_load(backend, model, **options):
        made.update(options, backend=backend, model=model)
        return object()

    monkeypatch.setattr(generate, "load_generator", fake_load)
    engines.release()
    engines.generator(dataclasses.asdict(spec) | {"seed": 1})
    engines.release()
    assert made == {
        "backend": "openai", "model": "m", "base_url": "http://127.0.0.1:8000/v1",
        "api_key_env": "K", "max_in_flight": 16, "max_model_len": None,
    }  # fmt: skip
