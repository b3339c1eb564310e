"""``dprm X --help`` stays fast: printing help imports no heavy library, and the names the
help pages list by hand (dprm.cli._names) are the library's."""

from __future__ import annotations

import subprocess
import sys

import pytest

from dprm.cli import COMMANDS

HEAVY = ("torch", "pandas", "numpy", "transformers", "pyarrow")


@pytest.mark.parametrize("command", [None, *COMMANDS])
def test_help_imports_no_heavy_library(command: str | None) -> None:
    argv = ["--help"] if command is None else [command, "--help"]
    code = (
        f"import sys\nfrom dprm.cli import main\ntry:\n    main({argv!r})\nexcept SystemExit:\n    pass\n"
        f"print('LOADED', *sorted(m for m in {HEAVY!r} if m in sys.modules))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout
    assert "usage: dprm" in out
    loaded = out.rsplit("LOADED", 1)[1].split()
    assert loaded == [], f"dprm {command or ''} --help imported {loaded}"


def test_listed_methods_are_the_registry() -> None:
    from dprm.cli._names import METHODS
    from dprm.models import REGISTRY

    assert list(METHODS) == sorted(REGISTRY)


def test_listed_backends_are_the_generator_registry() -> None:
    from dprm.cli._names import GENERATION_BACKENDS
    from dprm.llm.generate import GENERATORS

    assert list(GENERATION_BACKENDS) == list(GENERATORS)


def test_listed_presets_and_sizes_are_the_synthetic_worlds() -> None:
    from dprm.cli._names import SYNTH_SIZES, synth_fitted_presets, synth_presets
    from dprm.data.synth import SIZES, preset_names
    from dprm.data.synth.fitted_presets import fitted_preset_names

    assert synth_presets() == preset_names()
    assert synth_fitted_presets() == fitted_preset_names()
    assert list(SYNTH_SIZES) == sorted(SIZES)


def test_synth_help_names_the_training_split(capsys) -> None:
    from dprm.cli import main

    with pytest.raises(SystemExit):
        main(["synth", "--help"])
    text = capsys.readouterr().out
    assert "OUT/train/calib" in text and "OUT/train/bon" in text


def test_synth_writes_a_fitted_preset(tmp_path) -> None:
    """``dprm synth`` takes the fitted best-of-N twin's presets by name."""
    from dprm.cli import main
    from dprm.data import read_bon_set

    out = tmp_path / "w"
    preset = "qwen2.5-math-7b-instruct__rlhflow-prm-deepseek-8b"
    assert main(["synth", "--preset", preset, "--size", "tiny", "--out", str(out), "--quiet"]) == 0
    assert len(read_bon_set(out / "id" / "bon").questions) > 0
