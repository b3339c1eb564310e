"""Shards, resumable parts and merging for the real-data pipeline.

Every stage (``generate``, ``rollout``, ``embed``) works on a list of questions. ``--shard i/n``
takes the i-th of n contiguous blocks of questions (0-based, so a SLURM array
``--array=0-(n-1)`` passes ``$SLURM_ARRAY_TASK_ID/n``). Inside a shard, work is cut into *parts*
of a few questions; each finished part is written atomically into a hidden work directory, so a
killed run resumes at the first missing part. When all parts exist they are joined into the
shard's output, written atomically, and the work directory is removed.

Layout for ``--out OUT`` (a ``.parquet`` file or a set directory)::

    OUT                                   # unsharded run, or the result of `dprm merge OUT`
    OUT.shards/shard-00003-of-00008[.parquet]   # finished shard 3 of 8
    .OUT.parts/ or OUT.shards/.shard-00003-of-00008.parts/   # work in progress (parts)

A finished output records a *fingerprint* (the settings that decide its content). A rerun with
the same fingerprint skips it; a different fingerprint is an error unless ``overwrite`` is set,
so two configurations never mix in one output. The fingerprint's ``reads`` hold the content
digests of the input file and the models read (:mod:`dprm.digests`): an output whose inputs
changed since, with the same settings, is stale and made again (said in one line).
"""

from __future__ import annotations

import json
import re
import shutil
import sys
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from dprm.io import DataError, atomic_path, read_json, write_json

_SHARD_RE = re.compile(r"^shard-(\d{5})-of-(\d{5})(\.parquet)?$")
FINGERPRINT_FILE = "fingerprint.json"


@dataclass(frozen=True)
class Shard:
    """Shard ``index`` of ``count`` (0-based): a contiguous, balanced block of the items."""

    index: int = 0
    count: int = 1

    def __post_init__(self) -> None:
        if self.count < 1 or not 0 <= self.index < self.count:
            raise ValueError(f"shard {self.index}/{self.count}: expected 0 <= i < n and n >= 1")

    @property
    def is_whole(self) -> bool:
        return self.count == 1

    @property
    def tag(self) -> str:
        return f"shard-{self.index:05d}-of-{self.count:05d}"

    def select(self, n_items: int) -> range:
        """Indices of this shard's block among ``n_items`` items (sizes differ by at most one)."""
        base, extra = divmod(n_items, self.count)
        start = self.index * base + min(self.index, extra)
        return range(start, start + base + (1 if self.index < extra else 0))

    def __str__(self) -> str:
        return f"{self.index}/{self.count}"


def parse_shard(text: str | None) -> Shard:
    """``"3/8"`` -> ``Shard(3, 8)``; ``None`` or ``""`` -> the whole input."""
    if not text:
        return Shard()
    match = re.fullmatch(r"\s*(\d+)\s*/\s*(\d+)\s*", text)
    if not match:
        raise ValueError(f"--shard {text!r}: expected i/n, e.g. 0/8 (0-based index, shard count)")
    index, count = int(match.group(1)), int(match.group(2))
    if count < 1 or index >= count:
        raise ValueError(f"--shard {text!r}: expected 0 <= i < n (the index is 0-based)")
    return Shard(index, count)


def shards_dir(out: str | Path) -> Path:
    """The directory that holds the finished shards of ``out``."""
    out = Path(out)
    return out.parent / f"{out.name}.shards"


def output_path(out: str | Path, shard: Shard) -> Path:
    """Where ``shard`` of a run with ``--out out`` writes its finished output."""
    out = Path(out)
    if shard.is_whole:
        return out
    suffix = ".parquet" if out.suffix == ".parquet" else ""
    return shards_dir(out) / f"{shard.tag}{suffix}"


def sidecar_path(path: str | Path) -> Path:
    """Provenance of a parquet output: ``labels.parquet`` -> ``labels.parquet.meta.json``."""
    path = Path(path)
    return path.with_name(path.name + ".meta.json")


def read_output_meta(path: str | Path) -> dict:
    """meta.json of a set directory, or the sidecar of a parquet file ({} if none)."""
    path = Path(path)
    meta_path = path / "meta.json" if path.is_dir() else sidecar_path(path)
    return read_json(meta_path) if meta_path.exists() else {}


#: the key of a stage's fingerprint holding what it read by content: name -> digest
#: (:func:`dprm.digests.digest`, :func:`dprm.digests.model_digest`); ``input_bytes`` is what
#: outputs made before held instead
READS_KEYS = ("reads", "input_bytes")

#: (output, its inputs' digests now) already said: one line per output and change
_REPORTED: set[str] = set()


def changed_reads(found: Any, expected: dict) -> list[str] | None:
    """What changed when a stage's stored fingerprint differs from ``expected`` only in content.

    Returns:
        the names of the inputs whose content changed, or None when a setting differs too (or
        nothing differs, or the stored one is an older dprm's: see :func:`_older_and_same`).
    """
    if not isinstance(found, dict) or not isinstance(found.get("reads"), dict):
        return None
    expected = _jsonable(expected)
    settings = {k for k in {*found, *expected} if k not in READS_KEYS}
    if any(found.get(k) != expected.get(k) for k in settings):
        return None
    before, now = found["reads"], expected.get("reads") or {}
    return sorted(k for k in {*before, *now} if before.get(k) != now.get(k)) or None


def _older_and_same(found: Any, expected: dict) -> bool:
    """An output an older dprm made (input by path and size, no digests) with these settings
    and an input of the size it recorded: trusted, as the run layer trusts its older records."""
    if not isinstance(found, dict) or "reads" in found or "input_bytes" not in found:
        return False
    expected = _jsonable(expected)
    settings = {k for k in {*found, *expected} if k not in READS_KEYS}
    if any(found.get(k) != expected.get(k) for k in settings):
        return False
    source = Path(str(expected.get("input", "")))
    return source.exists() and source.stat().st_size == found["input_bytes"]


def _say_changed(path: Path, names: list[str], fingerprint: dict) -> None:
    """One line per output and change: its inputs changed, so it is made again."""
    key = f"{path}\0{json.dumps(_jsonable(fingerprint).get('reads'), sort_keys=True)}"
    if key in _REPORTED:
        return
    _REPORTED.add(key)
    print(
        f"{path}: input {', '.join(names)} changed since it was made (content digest); redoing it",
        file=sys.stderr,
    )


def check_finished(path: str | Path, fingerprint: dict, overwrite: bool) -> bool:
    """True if ``path`` is a finished output with this fingerprint (so the run can skip it).

    An output made from inputs whose content changed since (same settings otherwise, see
    :func:`changed_reads`) is stale: it is made again, said in one line on stderr.

    Raises:
        DataError: the output exists but was made with other settings and ``overwrite`` is off.
    """
    path = Path(path)
    if not path.exists():
        return False
    if overwrite:
        return False
    found = read_output_meta(path).get("fingerprint")
    if found == _jsonable(fingerprint) or _older_and_same(found, fingerprint):
        return True
    if _unfinished_here(path, fingerprint):
        return False  # killed between publishing the data and its sidecar: finish it
    changed = changed_reads(found, fingerprint)
    if changed is not None:
        _say_changed(path, changed, fingerprint)
        return False
    raise DataError(
        path,
        "exists but was made with different settings "
        f"(found {found}, expected {_jsonable(fingerprint)}); pass --overwrite to replace it",
    )


def _unfinished_here(path: Path, fingerprint: dict) -> bool:
    """Whether the parts of ``path`` made with this fingerprint are still there: its data was
    published but not its sidecar (a kill or a full disk in between), so it is not finished."""
    parts = path.parent / f".{path.name}.parts" / FINGERPRINT_FILE
    try:
        return read_json(parts) == _jsonable(fingerprint)
    except (DataError, OSError):
        return False


def _jsonable(obj: Any) -> Any:
    import json

    from dprm.io import _json_default

    return json.loads(json.dumps(obj, default=_json_default))


def parts_dir(final: str | Path) -> Path:
    """The work directory of an output in progress: the hidden sibling ``.{name}.parts``."""
    final = Path(final)
    return final.parent / f".{final.name}.parts"


class PartStore:
    """A work directory of finished parts for one output (parquet parts or set directories).

    Args:
        final: the output this work builds (file or directory); the work directory is a hidden
            sibling ``.{final.name}.parts``.
        fingerprint: settings that decide the content; a work directory left by a run with other
            settings is discarded instead of mixed in.
    """

    def __init__(self, final: str | Path, fingerprint: dict, overwrite: bool = False):
        self.final = Path(final)
        self.dir = parts_dir(self.final)
        self.fingerprint = _jsonable(fingerprint)
        fp_path = self.dir / FINGERPRINT_FILE
        found = read_json(fp_path) if fp_path.exists() else None
        if self.dir.exists() and _older_and_same(found, fingerprint):
            self.fingerprint = found  # an older dprm's parts with these settings: kept
        elif self.dir.exists() and found != self.fingerprint:
            changed = changed_reads(found, fingerprint)
            if changed is not None:  # made from inputs since changed: stale, not to be mixed in
                _say_changed(self.final, changed, fingerprint)
            elif not overwrite:
                raise DataError(
                    self.dir,
                    "holds unfinished work of a run with different settings; rerun with those "
                    "settings to finish it, or pass --overwrite to discard it",
                )
            shutil.rmtree(self.dir)
        self.dir.mkdir(parents=True, exist_ok=True)
        if not fp_path.exists():
            write_json(fp_path, self.fingerprint)

    def path(self, index: int, suffix: str = ".parquet") -> Path:
        return self.dir / f"part-{index:06d}{suffix}"

    def done(self, index: int, suffix: str = ".parquet") -> bool:
        return self.path(index, suffix).exists()

    def write_frame(self, index: int, frame: pd.DataFrame) -> None:
        """Write one finished part atomically."""
        with atomic_path(self.path(index)) as tmp:
            pq.write_table(pa.Table.from_pandas(frame, preserve_index=False), tmp)

    def read_frames(self, n_parts: int) -> pd.DataFrame:
        """All parts 0..n_parts-1 concatenated in order."""
        tables = [pq.read_table(self.path(i)) for i in range(n_parts)]
        if not tables:
            return pd.DataFrame()
        return pa.concat_tables(tables, promote_options="default").to_pandas()

    def cleanup(self) -> None:
        shutil.rmtree(self.dir, ignore_errors=True)


def write_frame_output(path: str | Path, frame: pd.DataFrame, meta: dict) -> Path:
    """Write a finished parquet output, then its provenance sidecar (both atomic).

    The data first: a sidecar is only ever published for the table it describes, so a job killed
    (or a disk filled) between the two leaves the old sidecar, whose fingerprint then no longer
    vouches for the new table, or none (see :func:`check_finished`).
    """
    path = Path(path)
    with atomic_path(path) as tmp:
        pq.write_table(pa.Table.from_pandas(frame, preserve_index=False), tmp)
    write_json(sidecar_path(path), meta)
    return path


def chunked(items: list, size: int) -> list[list]:
    """``items`` cut into consecutive lists of at most ``size``."""
    size = max(1, int(size))
    return [items[i : i + size] for i in range(0, len(items), size)]


def sum_stats(stats: Iterable[dict]) -> dict:
    """Add up numeric counters of several ``stats`` dicts (non-numbers keep the first value)."""
    total: dict[str, Any] = {}
    for item in stats:
        for key, value in (item or {}).items():
            if isinstance(value, int | float) and not isinstance(value, bool) and key in total:
                total[key] += value
            elif key not in total:
                total[key] = value
    return total


# ----------------------------------------------------------------------------- merge
def find_shards(out: str | Path) -> list[Path]:
    """The finished shard outputs of ``out``, in order; all n of them must be there."""
    folder = shards_dir(out)
    if not folder.is_dir():
        raise DataError(folder, "not found (expected the shard outputs of a --shard i/n run)")
    found: dict[int, Path] = {}
    counts = set()
    for entry in folder.iterdir():
        match = _SHARD_RE.match(entry.name)
        if match:
            found[int(match.group(1))] = entry
            counts.add(int(match.group(2)))
    if not found:
        raise DataError(folder, "holds no finished shard (expected shard-IIIII-of-NNNNN entries)")
    if len(counts) != 1:
        raise DataError(
            folder, f"mixes shard counts {sorted(counts)}; expected one n for all shards"
        )
    count = counts.pop()
    missing = [i for i in range(count) if i not in found]
    if missing:
        raise DataError(
            folder, f"shards {missing} of {count} are not finished yet; run them, then merge"
        )
    return [found[i] for i in range(count)]


def _check_same_fingerprint(paths: list[Path], metas: list[dict]) -> dict:
    def strip(fp: dict | None) -> dict:
        return {k: v for k, v in (fp or {}).items() if k != "shard"}

    first = strip(metas[0].get("fingerprint"))
    for path, meta in zip(paths[1:], metas[1:], strict=True):
        if strip(meta.get("fingerprint")) != first:
            raise DataError(
                path, f"was made with different settings than {paths[0].name}; cannot merge"
            )
    return first


def _check_unique(frame: pd.DataFrame, keys: list[str], path: Path) -> None:
    keys = [k for k in keys if k in frame.columns]
    if not keys:
        return
    dup = frame.duplicated(keys)
    if dup.any():
        row = int(np.flatnonzero(dup.to_numpy())[0])
        raise DataError(
            path, f"row {row}: duplicate key {frame.loc[row, keys].to_dict()} across shards"
        )


def _merged_meta(metas: list[dict], paths: list[Path], fingerprint: dict) -> dict:
    meta = {k: v for k, v in metas[0].items() if k not in ("fingerprint", "stats", "shard")}
    meta["stats"] = sum_stats(m.get("stats", {}) for m in metas)
    meta["fingerprint"] = {**fingerprint, "shard": "merged"}
    meta["merged_from"] = [p.name for p in paths]
    return meta


def merge_shards(out: str | Path, overwrite: bool = False) -> Path:
    """Join the finished shards of ``out`` into one output at ``out`` (atomically).

    Parquet shards are concatenated; calibration and BoN set shards are joined row-aligned
    with their hidden states (copied chunk by chunk through a memory map). Keys must be unique
    across shards (no question in two shards).
    """
    out = Path(out)
    if out.exists() and not overwrite:
        raise DataError(out, "exists; pass --overwrite to replace it with the merged shards")
    paths = find_shards(out)
    metas = [read_output_meta(p) for p in paths]
    fingerprint = _check_same_fingerprint(paths, metas)
    meta = _merged_meta(metas, paths, fingerprint)
    if paths[0].is_file():
        frame = pa.concat_tables(
            [pq.read_table(p) for p in paths], promote_options="default"
        ).to_pandas()
        _check_unique(frame, ["question_id", "response_id", "step"], out)
        return write_frame_output(out, frame, meta)
    return merge_sets(paths, out, meta)


def merge_sets(paths: list[Path], out: Path, meta: dict) -> Path:
    """Join calibration or BoN set directories (same kind and hidden_dim) into ``out``."""
    from dprm.data.contract import SetWriter, read_bon_set, read_calibration_set

    kind = read_json(paths[0] / "meta.json").get("kind")
    reader = read_calibration_set if kind == "calibration" else read_bon_set
    if kind not in ("calibration", "bon"):
        raise DataError(
            paths[0] / "meta.json", f"key 'kind': expected 'calibration' or 'bon', found {kind!r}"
        )
    sets = [reader(p, check_hidden=False) for p in paths]
    dims = {s.hidden_dim for s in sets}
    if len(dims) != 1:
        raise DataError(out, f"shards have different hidden_dim {sorted(dims)}; cannot merge")
    dtypes = {np.dtype(s.hidden.dtype) for s in sets}
    dtype = np.float32 if np.dtype(np.float32) in dtypes else np.float16
    first_rows = [s.records if kind == "calibration" else s.questions for s in sets]
    rows = pd.concat(first_rows, ignore_index=True)
    keys = ["question_id", "response_id", "step"] if kind == "calibration" else ["question_id"]
    _check_unique(rows, keys, out)
    with SetWriter(out, kind, len(rows), dims.pop(), dtype) as writer:
        start = 0
        for item in sets:
            for lo in range(0, len(item), 8192):
                block = np.asarray(item.hidden[lo : lo + 8192])
                writer.hidden[start + lo : start + lo + len(block)] = block
            start += len(item)
        writer.records = rows
        if kind == "bon":
            responses = pd.concat([s.responses for s in sets], ignore_index=True)
            _check_unique(responses, ["question_id", "response_id"], out)
            writer.responses = responses
            if all(s.response_hidden is not None for s in sets):  # BoN v2: candidate states
                target = writer.open_response_hidden(len(responses))
                start = 0
                for item in sets:
                    for lo in range(0, len(item.responses), 8192):
                        block = np.asarray(item.response_hidden[lo : lo + 8192])
                        target[start + lo : start + lo + len(block)] = block
                    start += len(item.responses)
        writer.meta.update(
            {k: v for k, v in meta.items() if k not in ("kind", "hidden_dim", "hidden_dtype")}
        )
    return out


def run_frame_stage(
    keys: list,
    out: str | Path,
    shard: Shard,
    fingerprint: dict,
    process_part: Callable[[list], pd.DataFrame],
    finish: Callable[[pd.DataFrame], dict],
    *,
    per_part: int,
    overwrite: bool = False,
    writer: Callable[[Path, pd.DataFrame], Any] | None = None,
    on_part_done: Callable[[int], None] | None = None,
    progress: bool = True,
    desc: str = "parts",
) -> tuple[Path, bool]:
    """Run a stage whose output is one parquet table, resumably, for one shard.

    Args:
        keys: all work keys (e.g. question ids) in order; the shard takes its block.
        out: the ``--out`` path; the shard writes to :func:`output_path`.
        shard: which block to do.
        fingerprint: settings that decide the output (see :func:`check_finished`).
        process_part: keys of one part -> its rows (deterministic, so a rerun is identical).
        finish: the finished table -> provenance dict (stats) for the sidecar.
        per_part: keys per part (the unit of resume).
        overwrite: replace an output made with other settings.
        writer: ``(path, frame)`` writing the table atomically (default: plain parquet).
        on_part_done: called with the part index after each part is stored (tests use it to
            simulate a kill).
        progress: show a tqdm bar.
        desc: bar label.

    Returns:
        (output path, True if it was already finished and skipped).
    """
    from tqdm.auto import tqdm

    fingerprint = {**fingerprint, "shard": str(shard)}
    final = output_path(out, shard)
    if check_finished(final, fingerprint, overwrite):
        return final, True
    selected = [keys[i] for i in shard.select(len(keys))]
    if not selected:
        raise DataError(
            final, f"shard {shard} holds none of the {len(keys)} questions; use fewer shards"
        )
    parts = chunked(selected, per_part)
    store = PartStore(final, fingerprint, overwrite)
    for index, part in enumerate(tqdm(parts, desc=desc, disable=not progress)):
        if store.done(index):
            continue
        store.write_frame(index, process_part(part))
        if on_part_done is not None:
            on_part_done(index)
    frame = store.read_frames(len(parts))
    meta = {**finish(frame), "fingerprint": _jsonable(fingerprint), "shard": str(shard)}
    # the table first, then the sidecar that vouches for it; the parts stay until both are
    # published, so a crash in between is finished from them (see check_finished)
    if writer is None:
        write_frame_output(final, frame, meta)
    else:
        writer(final, frame)
        write_json(sidecar_path(final), meta)
    store.cleanup()
    return final, False
