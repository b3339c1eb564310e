"""Park et al.'s released labels (``[data] source = "park"``): a local copy or the hub dataset
``{park}/{dataset}/{generator}/data.json``, turned into contract labels; only the PRM embedding
pass runs on them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from dprm.io import DataError
from dprm.recipe.bodies import unit_meta
from dprm.recipe.spec import Recipe


def park_file(source: str, dataset: str, policy: str) -> Path:
    """``{dataset}/{policy}/data.json`` of Park's released labels: a local copy or the hub."""
    local = Path(source)
    if local.is_dir():
        path = local / dataset / policy / "data.json"
        if not path.exists():
            raise DataError(
                path, f"not found (Park's layout {{dataset}}/{{generator}}/data.json under {local})"
            )
        return path
    from huggingface_hub import hf_hub_download

    return Path(hf_hub_download(source, f"{dataset}/{policy}/data.json", repo_type="dataset"))


def local_park_files(recipe: Recipe, generator: Any, split: str) -> list[Path]:
    """The files of a local copy of Park's labels a split reads (none for a hub id)."""
    root = Path(recipe.data.park)
    if not root.is_dir():
        return []
    policy = generator.park_name or generator.name
    return [root / d / policy / "data.json" for d in recipe.data.park_datasets(split)]


def park_labels(source: str, datasets: list[str], policy: str, rollouts: int, out: str) -> dict:
    """Park et al.'s released labels of one (generator, split) as contract labels."""
    import pandas as pd

    from dprm.data.contract import write_labels
    from dprm.data.park import park_to_labels, read_park_json
    from dprm.io import write_json
    from dprm.llm.shard import sidecar_path

    files = [park_file(source, d, policy) for d in datasets]
    frames = [park_to_labels(read_park_json(f), rollouts, source=f) for f in files]
    frame = pd.concat(frames, ignore_index=True)
    dup = frame.duplicated(["question_id", "response_id", "step"])
    if dup.any():
        raise DataError(
            out, f"a question appears in two of {datasets} (id {frame['question_id'][dup].iloc[0]})"
        )
    Path(out).parent.mkdir(parents=True, exist_ok=True)
    write_labels(out, frame)  # the data first, then the sidecar describing it
    write_json(
        sidecar_path(out),
        unit_meta()
        | {
            "source": "park",
            "files": [str(f) for f in files],
            "generator": policy,
            "n_rollouts": rollouts,
        },
    )
    return {"rows": len(frame), "questions": int(frame["question_id"].nunique())}
