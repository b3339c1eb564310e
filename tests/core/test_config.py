"""Tests for :mod:`dprm.config`: defaults < base < TOML file < ``--set`` overrides, strict keys."""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path

import pytest

from dprm.config import ConfigError, from_dict, load_config, parse_overrides, to_dict


@dataclasses.dataclass(frozen=True)
class TrainConfig:
    """A config dataclass shaped like the real ones (numbers, tuples, optionals, flags)."""

    lr: float = 1e-3
    epochs: int = 10
    hidden: tuple[int, ...] = (64, 64)
    levels: list[float] = dataclasses.field(default_factory=lambda: [0.1, 0.5, 0.9])
    use_bias: bool = True
    name: str = "ot"
    patience: int | None = None
    min_delta: float | None = 1e-4
    seed: int = 42


def write_toml(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


def test_defaults_without_file_or_overrides() -> None:
    assert load_config(TrainConfig) == TrainConfig()


def test_toml_file_then_overrides(tmp_path: Path) -> None:
    path = write_toml(
        tmp_path / "c.toml",
        'lr = 0.01\nepochs = 3\nhidden = [8, 16]\nname = "qr"\nuse_bias = false\npatience = 5\n',
    )
    cfg = load_config(TrainConfig, path)
    assert cfg == TrainConfig(
        lr=0.01, epochs=3, hidden=(8, 16), name="qr", use_bias=False, patience=5
    )
    assert isinstance(cfg.hidden, tuple)
    over = load_config(
        TrainConfig,
        path,
        parse_overrides(
            ["epochs=7", "lr=1e-4", "hidden=32,32,32", "use_bias=yes", "patience=none"]
        ),
    )
    assert over.epochs == 7 and isinstance(over.epochs, int)
    assert over.lr == pytest.approx(1e-4)
    assert over.hidden == (32, 32, 32)
    assert over.use_bias is True
    assert over.patience is None
    assert over.name == "qr"  # from the file, untouched by overrides


def test_override_coercion_of_each_type() -> None:
    cfg = load_config(
        TrainConfig,
        overrides={
            "epochs": "1e2",
            "levels": "0.25, 0.75",
            "use_bias": "0",
            "min_delta": "null",
            "patience": "12",
            "name": "base",
        },
    )
    assert cfg.epochs == 100 and isinstance(cfg.epochs, int)
    assert cfg.levels == [0.25, 0.75] and isinstance(cfg.levels, list)
    assert cfg.use_bias is False
    assert cfg.min_delta is None
    assert cfg.patience == 12
    assert cfg.name == "base"


def test_large_integers_stay_exact(tmp_path: Path) -> None:
    big = 2**62 + 1  # not representable as a float64
    path = write_toml(tmp_path / "c.toml", f"seed = {big}\n")
    assert load_config(TrainConfig, path).seed == big
    assert load_config(TrainConfig, overrides={"seed": str(big)}).seed == big
    assert load_config(TrainConfig, overrides={"seed": " 7 "}).seed == 7


def test_toml_table_selects_one_concern(tmp_path: Path) -> None:
    path = write_toml(tmp_path / "all.toml", "[train]\nepochs = 2\n\n[ias]\nn_max = 64\n")
    assert load_config(TrainConfig, path, table="train").epochs == 2
    # without the table name the other concern's keys are unknown
    with pytest.raises(ConfigError, match=r"unknown key\(s\) \['ias', 'train'\]"):
        load_config(TrainConfig, path)


def test_base_is_applied_before_the_file(tmp_path: Path) -> None:
    path = write_toml(tmp_path / "c.toml", "epochs = 4\n")
    cfg = load_config(TrainConfig, path, base={"epochs": 99, "lr": 0.5})
    assert cfg.epochs == 4 and cfg.lr == 0.5
    assert load_config(TrainConfig, path, {"epochs": "6"}, base={"epochs": 99}).epochs == 6


def test_unknown_key_in_file_names_key_and_file(tmp_path: Path) -> None:
    path = write_toml(tmp_path / "typo.toml", "lr = 0.1\nlearning_rate = 0.1\n")
    with pytest.raises(ConfigError) as info:
        load_config(TrainConfig, path)
    message = str(info.value)
    assert message.startswith(str(path))
    assert "unknown key(s) ['learning_rate']" in message
    assert "TrainConfig" in message
    assert "known keys:" in message and "'lr'" in message


def test_unknown_override_key_is_rejected(tmp_path: Path) -> None:
    path = write_toml(tmp_path / "c.toml", "lr = 0.1\n")
    with pytest.raises(ConfigError, match=re.escape(f"{path} + --set: unknown key(s) ['epoch']")):
        load_config(TrainConfig, path, parse_overrides(["epoch=3"]))
    with pytest.raises(ConfigError, match=re.escape("defaults + --set: unknown key(s) ['foo']")):
        load_config(TrainConfig, overrides={"foo": "1"})


@pytest.mark.parametrize(
    ("toml", "message"),
    [
        ('epochs = "ten"', "epochs: expected an integer, got 'ten'"),
        ("epochs = 2.5", "epochs: expected an integer, got 2.5"),
        ("epochs = true", "epochs: expected an integer, got True"),
        ('lr = "fast"', "lr: expected a number, got 'fast'"),
        ("lr = false", "lr: expected a number, got False"),
        ('use_bias = "maybe"', "use_bias: expected true/false, got 'maybe'"),
        ("use_bias = 2", "use_bias: expected true/false, got 2"),
        ("hidden = 64", "hidden: expected a list, got 64"),
        ('hidden = ["a", 2]', "hidden: expected an integer, got 'a'"),
        ('patience = "soon"', "patience: expected an integer, got 'soon'"),
        ("lr = { a = 1 }", "lr: expected a number, got {'a': 1}"),
    ],
)
def test_type_errors_in_file_name_file_and_key(tmp_path: Path, toml: str, message: str) -> None:
    path = write_toml(tmp_path / "bad.toml", toml + "\n")
    with pytest.raises(ConfigError, match=re.escape(f"{path}: {message}")):
        load_config(TrainConfig, path)


@pytest.mark.parametrize(
    ("item", "message"),
    [
        ("epochs=many", "epochs: expected an integer, got 'many'"),
        ("epochs=3.5", "epochs: expected an integer, got '3.5'"),
        ("epochs=inf", "epochs: expected an integer, got 'inf'"),
        ("epochs=nan", "epochs: expected an integer, got 'nan'"),
        ("hidden=8,x", "hidden: expected an integer, got 'x'"),
        ("use_bias=2", "use_bias: expected true/false, got '2'"),
        ("min_delta=small", "min_delta: expected a number, got 'small'"),
    ],
)
def test_type_errors_in_overrides(item: str, message: str) -> None:
    with pytest.raises(ConfigError, match=re.escape(f"defaults + --set: {message}")):
        load_config(TrainConfig, overrides=parse_overrides([item]))


def test_missing_and_invalid_files(tmp_path: Path) -> None:
    with pytest.raises(
        ConfigError, match=re.escape(f"{tmp_path / 'none.toml'}: config file not found")
    ):
        load_config(TrainConfig, tmp_path / "none.toml")
    path = write_toml(tmp_path / "broken.toml", "lr = = 1\n")
    with pytest.raises(ConfigError, match=re.escape(f"{path}: not valid TOML")):
        load_config(TrainConfig, path)


def test_parse_overrides() -> None:
    assert parse_overrides(None) == {}
    assert parse_overrides([" lr = 1e-3 ", "expr=a=b"]) == {"lr": "1e-3", "expr": "a=b"}
    assert parse_overrides(["x=1", "x=2"]) == {"x": "2"}  # the last one wins
    with pytest.raises(ConfigError, match=re.escape("--set 'lr': expected key=value")):
        parse_overrides(["lr"])


def test_to_dict_round_trips_through_json() -> None:
    cfg = TrainConfig(hidden=(4, 8), patience=3, min_delta=None)
    as_dict = to_dict(cfg)
    assert as_dict["hidden"] == [4, 8]
    text = json.dumps(as_dict)
    assert from_dict(TrainConfig, json.loads(text)) == cfg


def test_config_is_frozen() -> None:
    cfg = load_config(TrainConfig)
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.lr = 1.0  # type: ignore[misc]
