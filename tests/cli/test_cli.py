"""Tests for the ``dprm`` command line: every subcommand's help, and errors as exit codes."""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from dprm import __version__
from dprm.cli import COMMANDS, build_parser, main


def _subcommands() -> list[str]:
    parser = build_parser()
    actions = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    assert len(actions) == 1
    return sorted(actions[0].choices)


SUBCOMMANDS = _subcommands()


def test_import_park_is_registered() -> None:
    assert "import-park" in SUBCOMMANDS


def test_top_level_help(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        main(["--help"])
    assert info.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith("usage: dprm")
    for name in SUBCOMMANDS:
        assert name in out


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        main(["--version"])
    assert info.value.code == 0
    assert capsys.readouterr().out.strip() == f"dprm {__version__}"


@pytest.mark.parametrize("command", SUBCOMMANDS)
def test_subcommand_help(command: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        main([command, "--help"])
    assert info.value.code == 0
    assert capsys.readouterr().out.startswith(f"usage: dprm {command}")


def test_every_subcommand_has_a_function() -> None:
    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    for name, subparser in sub.choices.items():
        if importlib.util.find_spec(COMMANDS[name].module) is None:
            continue  # a command whose module is not on this branch yet (listed in the table)
        assert callable(subparser.get_default("func")), f"{name} sets no func"


def test_top_level_help_imports_no_command_module() -> None:
    code = (
        "import sys\n"
        "from dprm.cli import main\n"
        "try:\n    main(['--help'])\nexcept SystemExit:\n    pass\n"
        "heavy = [m for m in sys.modules if m == 'torch' or m.startswith('dprm.models')]\n"
        "cli = [m for m in sys.modules if m.startswith('dprm.cli.') and m != 'dprm.cli._common']\n"
        "print(heavy, cli)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip().endswith("[] []"), out.stdout


def test_every_table_command_is_registered_by_its_module() -> None:
    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    assert list(sub.choices) == list(COMMANDS)


def test_no_command_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        main([])
    assert info.value.code == 2
    assert "usage: dprm" in capsys.readouterr().err


def test_import_park_missing_flag_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        main(["import-park", "--json", "x.json"])
    assert info.value.code == 2
    assert "--out" in capsys.readouterr().err


def test_data_error_exits_2_with_message(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = tmp_path / "park.json"
    bad.write_text(json.dumps([{"question": "q", "reasoning_prefix": "", "success_prob": 1.5}]))
    out = tmp_path / "labels.parquet"
    code = main(["import-park", "--json", str(bad), "--out", str(out)])
    assert code == 2
    err = capsys.readouterr().err
    assert err.startswith("dprm import-park: error: ")
    assert f"{bad}: record 0: field 'success_prob': expected a value in [0, 1], found 1.5" in err
    assert not out.exists()


def test_import_park_success(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    src = tmp_path / "park.jsonl"
    records = [
        {"question": "q", "reasoning_prefix": prefix, "success_prob": prob}
        for prefix, prob in [("", 0.5), ("a", 0.25), ("", 0.75), ("a\n\nb", 0.0)]
    ]
    src.write_text("".join(json.dumps(r) + "\n" for r in records))
    out = tmp_path / "labels.parquet"
    assert main(["import-park", "--json", str(src), "--out", str(out), "--n-rollouts", "4"]) == 0
    assert out.exists()
    assert "wrote 4 labelled prefixes (1 question(s), 2 response(s))" in capsys.readouterr().out
    with pytest.raises(SystemExit) as info:
        main(["import-park", "--json", str(src), "--out", str(out), "--n-rollouts", "0"])
    assert info.value.code == 2


@pytest.mark.parametrize(("env", "cores", "expected"), [("3", 16, 3), ("", 2, 1), ("", 16, 4)])
def test_default_threads_never_oversubscribes(monkeypatch, env, cores, expected) -> None:
    from dprm.cli import _common

    monkeypatch.setenv("OMP_NUM_THREADS", env)
    monkeypatch.setattr(_common.os, "sched_getaffinity", lambda pid: set(range(cores)))
    assert _common.default_threads() == expected


def test_help_defaults_survive_percent_signs() -> None:
    from dprm.cli._common import HelpFormatter

    parser = argparse.ArgumentParser(formatter_class=HelpFormatter)
    parser.add_argument("--share", default="50%", help="a share")
    assert "(default: 50%)" in parser.format_help()


def test_reproduce_tune_trials_and_seeds_reach_the_run_config(tmp_path, monkeypatch):
    """`reproduce --tune-trials N` asks the train stage to tune (RunConfig.tune_trials); --seeds
    is a count, and 0 is refused by the parser (it used to crash with an IndexError)."""
    import types

    import dprm.orchestrate.reproduce

    seen = {}

    def fake(out, config, **kwargs):
        seen["config"] = config
        return types.SimpleNamespace(failures=[], report=Path(out) / "report.md")

    monkeypatch.setattr(dprm.orchestrate.reproduce, "reproduce", fake)
    argv = ["reproduce", "--grid", "demo", "--out", str(tmp_path / "o"), "--quiet"]
    assert main([*argv, "--tune-trials", "4", "--seeds", "2"]) == 0
    assert seen["config"].tune_trials == 4 and list(seen["config"].seeds) == [0, 1]
    with pytest.raises(SystemExit) as exit_info:
        main([*argv, "--seeds", "0"])
    assert exit_info.value.code == 2


def test_reproduce_sequential_reaches_the_run_config(tmp_path, monkeypatch, capsys):
    """`reproduce --sequential` turns on the IAS stage's auto-seq rows (RunConfig.ias_sequential);
    without it they stay off, and --help says what it adds and that it is slower."""
    import types

    import dprm.orchestrate.reproduce

    seen = []

    def fake(out, config, **kwargs):
        seen.append(config)
        return types.SimpleNamespace(failures=[], report=Path(out) / "report.md")

    monkeypatch.setattr(dprm.orchestrate.reproduce, "reproduce", fake)
    argv = ["reproduce", "--grid", "demo", "--out", str(tmp_path / "o"), "--quiet"]
    assert main([*argv, "--sequential"]) == 0
    assert main(argv) == 0
    assert [c.ias_sequential for c in seen] == [True, False]
    assert seen[0].vote_trials == seen[1].vote_trials  # nothing else changed
    with pytest.raises(SystemExit):
        main(["reproduce", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "--sequential" in text and "auto-seq" in text and "Slower" in text


def test_quiet_silences_the_model_libraries_progress_bars(tmp_path, monkeypatch):
    """--quiet / --no-progress also silence transformers' "Loading weights" and the hub's bars
    (the environment variable for libraries not imported yet and worker processes)."""
    hf_logging = pytest.importorskip("transformers.utils.logging")
    from dprm.cli import main

    monkeypatch.delenv("HF_HUB_DISABLE_PROGRESS_BARS", raising=False)
    hf_logging.enable_progress_bar()
    try:
        argv = ["synth", "--preset", "demo", "--size", "tiny", "--out", str(tmp_path / "w")]
        assert main(argv) == 0
        assert hf_logging.is_progress_bar_enabled()  # without the flag nothing changes
        assert main([*argv[:-1], str(tmp_path / "w2"), "--quiet"]) == 0
        assert not hf_logging.is_progress_bar_enabled()
        assert os.environ["HF_HUB_DISABLE_PROGRESS_BARS"] == "1"
    finally:
        hf_logging.enable_progress_bar()
