"""Kill part-way, restart, and get exactly the uninterrupted result; shards merge to the same."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from dprm.data.contract import read_calibration_set, read_labels
from dprm.io import DataError
from dprm.llm.embed import EmbedConfig, run_embed
from dprm.llm.rollout import RolloutConfig, SamplingConfig, run_rollout_stage
from dprm.llm.shard import Shard, find_shards, merge_shards, parse_shard, shards_dir

SAMPLING = SamplingConfig(n=2, max_new_tokens=16, seed=3)
CONFIG = RolloutConfig(max_steps=2)


class Killed(RuntimeError):
    pass


def _kill_after(n_parts: int):
    def callback(index: int) -> None:
        if index + 1 >= n_parts:
            raise Killed(f"simulated kill after part {index}")

    return callback


def _rollout(trajectories, generator, pool, out, **kw):
    return run_rollout_stage(
        trajectories, generator, pool, out, CONFIG, SAMPLING, per_part=1, progress=False, **kw
    )


def test_rollout_kill_and_resume_matches_uninterrupted(
    toy_trajectories, generator, grading_pool, tmp_path
):
    reference, _ = _rollout(toy_trajectories, generator, grading_pool, tmp_path / "ref.parquet")
    out = tmp_path / "labels.parquet"
    with pytest.raises(Killed):
        _rollout(toy_trajectories, generator, grading_pool, out, on_part_done=_kill_after(2))
    assert not out.exists()  # nothing under the final name yet
    parts = sorted((tmp_path / ".labels.parquet.parts").glob("part-*.parquet"))
    assert len(parts) == 2
    done = []
    _rollout(toy_trajectories, generator, grading_pool, out, on_part_done=done.append)
    assert done == [2]  # only the missing part was computed
    resumed, expected = read_labels(out), read_labels(reference)
    pd.testing.assert_frame_equal(resumed, expected)
    assert not resumed.duplicated(["question_id", "response_id", "step"]).any()
    assert not (tmp_path / ".labels.parquet.parts").exists()
    # a finished output is skipped
    assert _rollout(toy_trajectories, generator, grading_pool, out)[1]


def test_rollout_shards_merge_to_the_whole(toy_trajectories, generator, grading_pool, tmp_path):
    whole, _ = _rollout(toy_trajectories, generator, grading_pool, tmp_path / "whole.parquet")
    out = tmp_path / "labels.parquet"
    _rollout(toy_trajectories, generator, grading_pool, out, shard=Shard(1, 2))
    with pytest.raises(DataError, match=r"shards \[0\] of 2 are not finished"):
        merge_shards(out)
    _rollout(toy_trajectories, generator, grading_pool, out, shard=Shard(0, 2))
    assert [p.name for p in find_shards(out)] == [
        "shard-00000-of-00002.parquet",
        "shard-00001-of-00002.parquet",
    ]
    merge_shards(out)
    pd.testing.assert_frame_equal(read_labels(out), read_labels(whole))
    with pytest.raises(DataError, match="exists"):
        merge_shards(out)


def _labels(grading_pool, generator, toy_trajectories, tmp_path):
    path, _ = _rollout(
        toy_trajectories, generator, grading_pool, tmp_path / "labels-for-embed.parquet"
    )
    return read_labels(path)


def test_embed_kill_and_resume_matches_uninterrupted(
    toy_trajectories, generator, grading_pool, qwen_prm, tmp_path
):
    labels = _labels(grading_pool, generator, toy_trajectories, tmp_path)
    config = EmbedConfig(questions_per_part=1, hidden_dtype="float32")
    ref, _ = run_embed(
        labels, qwen_prm, tmp_path / "ref", kind="calibration", config=config, progress=False
    )
    out = tmp_path / "cal"
    with pytest.raises(Killed):
        run_embed(
            labels,
            qwen_prm,
            out,
            kind="calibration",
            config=config,
            progress=False,
            on_part_done=_kill_after(1),
        )
    assert not out.exists()
    done = []
    run_embed(
        labels,
        qwen_prm,
        out,
        kind="calibration",
        config=config,
        progress=False,
        on_part_done=done.append,
    )
    assert done == [1, 2]
    a, b = read_calibration_set(out), read_calibration_set(ref)
    pd.testing.assert_frame_equal(a.records, b.records)
    np.testing.assert_array_equal(np.asarray(a.hidden), np.asarray(b.hidden))
    assert not a.records.duplicated(["question_id", "response_id", "step"]).any()
    assert a.meta["stats"] == b.meta["stats"]


def test_embed_shards_merge_to_the_whole(
    toy_trajectories, generator, grading_pool, qwen_prm, tmp_path
):
    labels = _labels(grading_pool, generator, toy_trajectories, tmp_path)
    config = EmbedConfig(questions_per_part=2, hidden_dtype="float32")
    whole, _ = run_embed(
        labels, qwen_prm, tmp_path / "whole", kind="calibration", config=config, progress=False
    )
    out = tmp_path / "cal"
    for i in range(3):
        run_embed(
            labels,
            qwen_prm,
            out,
            kind="calibration",
            shard=Shard(i, 3),
            config=config,
            progress=False,
        )
    assert len(list(shards_dir(out).iterdir())) == 3
    merge_shards(out)
    a, b = read_calibration_set(out), read_calibration_set(whole)
    pd.testing.assert_frame_equal(a.records, b.records)
    np.testing.assert_allclose(np.asarray(a.hidden), np.asarray(b.hidden), atol=1e-5)
    assert a.meta["stats"]["rows"] == len(labels)


def test_shard_parsing_and_blocks():
    assert parse_shard("3/8") == Shard(3, 8) and parse_shard(None) == Shard()
    for bad in ("8/8", "1", "-1/2", "a/b"):
        with pytest.raises(ValueError):
            parse_shard(bad)
    blocks = [list(Shard(i, 3).select(10)) for i in range(3)]
    assert blocks == [[0, 1, 2, 3], [4, 5, 6], [7, 8, 9]]
    assert list(Shard(4, 5).select(3)) == []


def test_unfinished_work_with_other_settings_is_not_mixed(
    toy_trajectories, generator, grading_pool, tmp_path
):
    out = tmp_path / "labels.parquet"
    with pytest.raises(Killed):
        _rollout(toy_trajectories, generator, grading_pool, out, on_part_done=_kill_after(1))
    other = SamplingConfig(n=2, max_new_tokens=16, seed=4)
    with pytest.raises(DataError, match="different settings"):
        run_rollout_stage(
            toy_trajectories,
            generator,
            grading_pool,
            out,
            CONFIG,
            other,
            per_part=1,
            progress=False,
        )
    done = []
    run_rollout_stage(toy_trajectories, generator, grading_pool, out, CONFIG, other, per_part=1,
                      progress=False, overwrite=True, on_part_done=done.append)  # fmt: skip
    assert done == [0, 1, 2]  # the old parts were discarded, not reused


def test_a_finished_stage_output_is_judged_by_the_content_of_what_it_read(tmp_path, capsys):
    """Same settings, other input content: stale, redone (one line); an older dprm's output
    (input by path and size) is trusted while the size matches; other settings: refused."""
    from dprm.io import write_json
    from dprm.llm.shard import check_finished, sidecar_path

    source = (tmp_path / "labels.parquet").resolve()
    source.write_bytes(b"x" * 10)
    out = tmp_path / "cal.parquet"
    out.write_bytes(b"")
    settings = {"input": str(source), "stage": "embed-calibration", "prm": "p", "shard": "0/1"}
    made = settings | {"reads": {str(source): "aaaa", "p": "bbbb"}}
    write_json(sidecar_path(out), {"fingerprint": made})
    assert check_finished(out, made, overwrite=False)
    changed = settings | {"reads": {str(source): "cccc", "p": "bbbb"}}
    assert not check_finished(out, changed, overwrite=False)
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and str(source) in err[0] and "changed since it was made" in err[0]
    with pytest.raises(DataError, match="different settings"):
        check_finished(out, changed | {"prm": "q"}, overwrite=False)

    write_json(sidecar_path(out), {"fingerprint": settings | {"input_bytes": 10}})
    assert check_finished(out, changed, overwrite=False)
    source.write_bytes(b"x" * 11)
    with pytest.raises(DataError, match="different settings"):
        check_finished(out, changed, overwrite=False)
