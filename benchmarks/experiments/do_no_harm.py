"""Does the recommended calibrator ever leave a user worse off than the raw PRM? docs/results/do-no-harm.md

    python benchmarks/experiments/do_no_harm.py --part report --work runs/do-no-harm
    python benchmarks/experiments/do_no_harm.py --part dev --work runs/do-no-harm
    python benchmarks/experiments/do_no_harm.py --part trained --trained-run runs/arith
    python benchmarks/experiments/do_no_harm.py --part wait --work runs/do-no-harm
    python benchmarks/experiments/do_no_harm.py --render   # the page from the stored CSVs
    python benchmarks/experiments/do_no_harm.py --smoke --work /tmp/dnh  # tiny, into WORK

Worlds (every one the project reports, except the trained one, which is ``--part trained``):

- **twin**: the demo grid's presets (``qwen-2.5-7b__qwen-prm``, ``r1-qwen-7b__qwen-prm``) at
  demo size (160 training questions after the validation split);
- **small**: ``r1-qwen-7b__qwen-prm`` at tiny size (32 training questions: the small-data rule);
- **hidden-state**: twin v2 with its hidden-state knob ``linear_share`` lambda at 0.2 (h only
  partly linearly readable) and 0.96 (readable), 100 training questions, as in
  docs/results/regime-map.md (``benchmarks/experiments/regime_map.py``'s worlds, hidden 256);
- **trained** (``--part trained --trained-run DIR``): the arithmetic world's calibration sets
  from a ``dprm run`` of ``examples/arith.toml`` (``DIR/worlds/*/{train,id,ood}/calib``), as
  ``benchmarks/experiments/real_world.py`` makes them.

Each (world, draw) is a fresh world: the draw is the world's seed (and the training seed is the
draw's index), so the standard error over draws includes the data. ``--part report`` fits, on
the report draws, the recommended default exactly as ``dprm train --method binomial`` returns it
(early stopping, small-data defaults, the do-no-harm fallback to the raw score) and Platt, and
scores them with the raw PRM held out (ID and OOD). ``--part dev`` compares the training before
(patience off, the warm-up rule of the previous release, no small-data defaults) and after on
the development draws, for qr, mono and binomial. ``--part wait`` asks, on the development
draws, whether ``mono`` and ``ot`` could stop sooner after their kept step: the full wait
(``patience_fraction`` 1, a run stops by twice its kept step) against half and a quarter of it
(with ``--trained-run``, on the trained world too).
The two sets of draws never overlap; the defaults were chosen on the development draws only.
"""

from __future__ import annotations

import argparse
import csv
import hashlib
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import results_page as rp  # noqa: E402

PAGE = "do-no-harm"
TITLE = "Do no harm: the recommended calibrator against the raw PRM"
SCRIPT = "python benchmarks/experiments/do_no_harm.py"
#: world seeds the defaults and rules were chosen on (never on the page's main table)
DEV_DRAWS = (101, 102, 103)
#: world seeds of the page's main table (distinct from DEV_DRAWS)
REPORT_DRAWS = (201, 202, 203)
TWIN = ("qwen-2.5-7b__qwen-prm", "r1-qwen-7b__qwen-prm")
SMALL = "r1-qwen-7b__qwen-prm"
HIDDEN_PRESET, HIDDEN_LAMBDAS, HIDDEN_QUESTIONS, HIDDEN_DIM = (
    "qwen-2.5-7b__qwen-prm",
    (0.2, 0.96),
    125,
    256,
)
SPLITS = ("id", "ood")
#: the training before: patience off, warm-up min(400, cap/4) for every method, no small-data
#: defaults (the architecture and weight decay of the method's defaults then)
BEFORE = {"patience": 0, "warmup_steps": 400, "weight_decay": 0.0}
BEFORE_MAP = {"context_hidden": (64,), "context_dim": 16}
#: --part wait: the arms, patience_fraction (the wait after the kept step as a share of that
#: step, capped by ``patience``): the longest first, the one the others are paired against
WAITS = {"wait 1x": {"patience_fraction": 1.0}, "wait 0.5x": {"patience_fraction": 0.5},
         "wait 0.25x": {"patience_fraction": 0.25}}  # fmt: skip
FULL_WAIT = "wait 1x"
WAIT_METHODS = ("mono", "ot")
PARTS = ("report", "dev", "trained", "wait")
FIELDS = [
    "part", "world", "draw", "method", "arm", "split", "brier", "raw_brier", "brier_vs_raw",
    "brier_vs_raw_se", "fell_back", "best_step", "steps", "seconds", "n_train_questions", "data",
]  # fmt: skip


def worlds(work: Path, draw: int, size_twin: str, smoke: bool) -> dict[str, dict[str, Path]]:
    """world label -> {split: calibration set dir} of one draw (written once, reused)."""
    from dprm.data.synth import write_world

    out: dict[str, dict[str, Path]] = {}
    chosen = TWIN[:1] if smoke else TWIN
    for preset in chosen:
        folder = work / f"{preset}-{size_twin}-{draw}"
        if not (folder / "ood" / "calib").exists():
            write_world(folder, preset, size=size_twin, seed=draw, progress=False, overwrite=True)
        out[f"twin {preset.split('__')[0]}"] = _splits(folder)
    folder = work / f"small-{draw}"
    if not (folder / "ood" / "calib").exists():
        write_world(folder, SMALL, size="tiny", seed=draw, progress=False, overwrite=True)
    out["small (tiny r1-qwen-7b)"] = _splits(folder)
    if smoke:
        return out
    import regime_map

    for lam in HIDDEN_LAMBDAS:
        folder = work / f"hidden-{lam}-{draw}"
        if not (folder / "ood" / "calib").exists():
            regime_map.write_lambda_world(folder, HIDDEN_PRESET, lam, draw, HIDDEN_DIM)
        out[f"hidden-state lambda={lam}"] = _splits(folder) | {"questions": HIDDEN_QUESTIONS}
    return out


def _splits(folder: Path) -> dict:
    return {s: folder / s / "calib" for s in ("train", *SPLITS)}


def trained_worlds(run_dir: Path) -> dict[str, dict]:
    """The calibration sets of a ``dprm run`` (``RUN/worlds/NAME/{train,id,ood}/calib``), each
    world with ``data``: the content digest of its three sets (a rerun of the recipe with other
    settings makes other sets, and the rows fitted on the old ones are fitted again)."""
    from dprm.digests import digest

    found = {}
    for train in sorted(run_dir.glob("worlds/*/train/calib")):
        folder = train.parent.parent
        if all((folder / s / "calib").exists() for s in SPLITS):
            sets = _splits(folder)
            parts = "/".join(str(digest(sets[s])) for s in ("train", *SPLITS))
            data = hashlib.sha256(parts.encode()).hexdigest()[:16]
            found[f"trained {folder.name}"] = sets | {"data": data}
    if not found:
        raise SystemExit(f"{run_dir}: no worlds/*/{{train,id,ood}}/calib (a `dprm run` output)")
    return found


def fit_rows(part, label, draw, index, sets, method, arm, overrides, guard) -> list[dict]:
    """Fit one arm on the world's train split and score it on ID and OOD."""
    from dprm.data import read_calibration_set
    from dprm.evaluation import evaluate_calibrator
    from dprm.models.fit import fit

    train = read_calibration_set(sets["train"])
    if "questions" in sets:
        import regime_map

        train = regime_map.question_subset(train, sets["questions"], seed=draw)
    started = time.perf_counter()
    model = fit(method, train, overrides=overrides, seed=index, progress=False, do_no_harm=guard)
    seconds = time.perf_counter() - started
    training = model.info.get("do_no_harm", {}).get("fitted_training") or model.info.get(
        "training", {}
    )
    rows = []
    for split in SPLITS:
        held = read_calibration_set(sets[split])
        m = evaluate_calibrator(model, held)
        rows.append({
            "part": part, "world": label, "draw": draw, "method": method, "arm": arm,
            "split": split, "brier": m["brier"], "raw_brier": m["brier"] - m["brier_vs_raw"],
            "brier_vs_raw": m["brier_vs_raw"], "brier_vs_raw_se": m["brier_vs_raw_se"],
            "fell_back": model.method == "base" and method != "base",
            "best_step": training.get("best_step", ""), "steps": training.get("steps", ""),
            "seconds": round(seconds, 2), "n_train_questions": model.info.get("n_train_questions"),
            "data": sets.get("data", ""),
        })  # fmt: skip
    return rows


def before_overrides(method: str) -> dict:
    from dprm.models.registry import REGISTRY

    keys = {f for f in REGISTRY[method].config_class.__dataclass_fields__}
    wanted = BEFORE | (BEFORE_MAP if "context_dim" in keys else {})
    out = {k: v for k, v in wanted.items() if k in keys}
    if "warmup_fraction" in keys:
        out["warmup_fraction"] = 0.25
    return out


def run_part(args, part: str, out_csv: Path) -> int:
    """Fit the part's arms not yet in ``out_csv``; return how many were fitted."""
    import torch

    torch.set_num_threads(args.threads)
    done = {(*row_key(r), r.get("data") or "") for r in read(out_csv)}
    draws = DEV_DRAWS if part in ("dev", "wait") else REPORT_DRAWS
    draws = draws[:1] if args.smoke else draws
    fitted = 0
    for index, draw in enumerate(draws):
        if part == "trained":
            found = trained_worlds(Path(args.trained_run))
        else:
            found = worlds(Path(args.work), draw, "tiny" if args.smoke else "demo", args.smoke)
            if part == "wait" and args.trained_run:  # its data is fixed: the draw seeds training
                found |= trained_worlds(Path(args.trained_run))
        for label, sets in found.items():
            arms = []
            if part == "wait":
                arms = [(m, arm, o, False) for m in WAIT_METHODS for arm, o in WAITS.items()]
            elif part == "dev":
                methods = ("qr", "mono", "binomial") if label.startswith("twin") else ("binomial",)
                for method in methods:
                    arms += [(method, "after", None, False),
                             (method, "before", before_overrides(method), False)]  # fmt: skip
            else:
                arms = [("binomial", "recommended", None, True), ("platt", "platt", None, False)]
            for method, arm, overrides, guard in arms:
                key = (part, label, draw, method, arm)
                if (*key, sets.get("data", "")) in done:
                    continue
                drop(out_csv, key)  # rows of this arm fitted on other data
                if args.smoke and method != "platt":
                    overrides = dict(overrides or {}) | {"max_steps": 50}
                rows = fit_rows(part, label, draw, index, sets, method, arm, overrides, guard)
                append(out_csv, rows)
                fitted += 1
                print(*(f"{r['world']} {r['draw']} {r['method']}/{r['arm']} {r['split']}: "
                        f"{r['brier']:.4f} (raw {r['raw_brier']:.4f}) steps {r['steps']}"
                        for r in rows), sep="\n", flush=True)  # fmt: skip
    return fitted


def read(path: Path) -> list[dict]:
    if not path.exists():
        return []
    with path.open() as f:
        return list(csv.DictReader(f))


def row_key(row: dict) -> tuple:
    """(part, world, draw, method, arm): the arm a stored row belongs to."""
    return row["part"], row["world"], int(row["draw"]), row["method"], row["arm"]


def drop(path: Path, key: tuple) -> None:
    """Remove the rows of ``key`` (:func:`row_key`) from ``path``, if any."""
    rows = read(path)
    kept = [r for r in rows if row_key(r) != key]
    if len(kept) < len(rows):
        rewrite(path, kept)


def rewrite(path: Path, rows: list[dict]) -> None:
    """``path`` holds exactly ``rows`` under today's header (written aside, then renamed)."""
    from dprm.io import atomic_path

    with atomic_path(path) as part, part.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=FIELDS, lineterminator="\n", restval="")
        writer.writeheader()
        writer.writerows(rows)


def append(path: Path, rows: list[dict]) -> None:
    if path.exists():
        with path.open() as f:
            header = next(csv.reader(f), [])
        if header != FIELDS:  # rows of an older version of this script: carry them over
            rewrite(path, read(path))
    new = not path.exists()
    with path.open("a", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=FIELDS, lineterminator="\n")
        if new:
            writer.writeheader()
        writer.writerows(rows)


def _ms(values: list[float]) -> tuple[float, float]:
    """Mean and standard error over draws."""
    mean = statistics.fmean(values)
    se = statistics.stdev(values) / len(values) ** 0.5 if len(values) > 1 else float("nan")
    return mean, se


def render(folder: Path, command: str) -> str:
    rows = read(folder / "rows.csv")
    lines = [
        f"Parts: {', '.join(sorted({r['part'] for r in rows}))}; "
        f"rows in `do-no-harm/rows.csv`. Report draws (world seeds) {list(REPORT_DRAWS)}, "
        f"development draws {list(DEV_DRAWS)} (the defaults and rules were chosen on these "
        "only); the training seed is the draw's index.",
        "",
        "Held-out Brier (lower is better; ID and OOD questions no calibrator trained or "
        "early-stopped on), mean ± standard error over draws. **recommended** = `binomial` as "
        "`dprm train --method binomial` returns it: early stopping, the small-data defaults "
        "(≤ 50 training questions), and the do-no-harm rule (the raw-score calibrator when the "
        "fit is worse than the raw score on its validation questions by more than one "
        "standard error). *Use the raw score here* is printed where the recommended "
        "calibrator's mean Brier is above the raw PRM's mean + one standard error over draws, "
        "where the report would flag it.",
        "",
    ]
    for part, heading in (("report", "Report draws"), ("trained", "The trained arithmetic world")):
        sub = [r for r in rows if r["part"] == part]
        if not sub:
            if part == "trained":
                lines += [f"## {heading}", "", "Not run yet: `" + SCRIPT + " --part trained "
                          "--trained-run DIR` (DIR: a `dprm run` of examples/arith.toml).", ""]  # fmt: skip
            continue
        lines += [f"## {heading}", "",
                  "| world | split | raw PRM | recommended | recommended − raw | Platt | fell back (draws) | verdict |",
                  "| --- | --- | ---: | ---: | ---: | ---: | ---: | --- |"]  # fmt: skip
        for world in dict.fromkeys(r["world"] for r in sub):
            for split in SPLITS:
                rec = [
                    r
                    for r in sub
                    if r["world"] == world and r["split"] == split and r["arm"] == "recommended"
                ]
                platt = [
                    r
                    for r in sub
                    if r["world"] == world and r["split"] == split and r["arm"] == "platt"
                ]
                if not rec:
                    continue
                raw = _ms([float(r["raw_brier"]) for r in rec])
                got = _ms([float(r["brier"]) for r in rec])
                delta = _ms([float(r["brier"]) - float(r["raw_brier"]) for r in rec])
                pl = _ms([float(r["brier"]) for r in platt]) if platt else (float("nan"),) * 2
                fell = sum(r["fell_back"] == "True" for r in rec)
                se = raw[1] if raw[1] == raw[1] else 0.0
                verdict = "use the raw score here" if got[0] > raw[0] + se else "not worse than raw"
                lines.append(
                    f"| {world} | {split.upper()} | {raw[0]:.4f} ± {raw[1]:.4f} | "
                    f"{got[0]:.4f} ± {got[1]:.4f} | {delta[0]:+.4f} ± {delta[1]:.4f} | "
                    f"{pl[0]:.4f} ± {pl[1]:.4f} | {fell} of {len(rec)} | {verdict} |"
                )
        lines.append("")
    dev = [r for r in rows if r["part"] == "dev"]
    if dev:
        lines += [
            "## Development draws: training before and after early stopping",
            "",
            "Before: patience off (every step to the 1,000-step cap), the warm-up min(400, "
            "cap/4) for every method, no small-data defaults. After: this release's defaults "
            "(patience in steps, binomial without a warm-up except on <= 50 training questions, the "
            "small-data defaults). No "
            "do-no-harm fallback in either arm. Held-out Brier and steps run, mean ± s.e. over "
            "the development draws.",
            "",
            "| world | method | split | Brier before | Brier after | after − before | steps before | steps after |",
            "| --- | --- | --- | ---: | ---: | ---: | ---: | ---: |",
        ]  # fmt: skip
        for world in dict.fromkeys(r["world"] for r in dev):
            for method in dict.fromkeys(r["method"] for r in dev if r["world"] == world):
                for split in SPLITS:
                    pick = [
                        r
                        for r in dev
                        if r["world"] == world and r["method"] == method and r["split"] == split
                    ]
                    before = sorted(
                        (r for r in pick if r["arm"] == "before"), key=lambda r: r["draw"]
                    )
                    after = sorted(
                        (r for r in pick if r["arm"] == "after"), key=lambda r: r["draw"]
                    )
                    if not before or len(before) != len(after):
                        continue
                    b = _ms([float(r["brier"]) for r in before])
                    a = _ms([float(r["brier"]) for r in after])
                    d = _ms(
                        [
                            float(x["brier"]) - float(y["brier"])
                            for x, y in zip(after, before, strict=True)
                        ]
                    )
                    sb = statistics.fmean(float(r["steps"]) for r in before)
                    sa = statistics.fmean(float(r["steps"]) for r in after)
                    lines.append(
                        f"| {world} | {method} | {split.upper()} | {b[0]:.4f} ± {b[1]:.4f} | "
                        f"{a[0]:.4f} ± {a[1]:.4f} | {d[0]:+.4f} ± {d[1]:.4f} | {sb:.0f} | {sa:.0f} |"
                    )
        lines.append("")
    lines += render_wait([r for r in rows if r["part"] == "wait"])
    return "\n".join(lines) + "\n"


def render_wait(rows: list[dict]) -> list[str]:
    """The ``--part wait`` section: each shorter wait against the default, paired by run."""
    if not rows:
        return []
    from dprm.models.registry import REGISTRY

    base = {
        (r["world"], r["draw"], r["method"], r["split"]): r for r in rows if r["arm"] == FULL_WAIT
    }
    defaults = ", ".join(
        f"{m} {REGISTRY[m].config_class.__dataclass_fields__['patience_fraction'].default:g}x"
        for m in WAIT_METHODS
    )
    lines = [
        "## Development draws: how long a run waits after its kept step",
        "",
        "`mono` and `ot` (calibration-area selection) stop once their wait after the kept step "
        "passes without a better validation score. The wait is `patience_fraction` x the kept "
        "step, capped by `patience`: at 1x a run stops by twice its kept step. Shorter waits "
        f"stop sooner but can miss a later, better checkpoint. This release's defaults: "
        f"{defaults}. Each row pairs the same run (world, draw, seed) under a shorter wait and "
        "1x: held-out Brier difference (mean ± s.e. over runs, and the worst run), "
        "runs whose kept checkpoint changed, steps run relative to the 1x run. No do-no-harm "
        "fallback.",
        "",
        "| method | wait | split | runs | kept changed | Brier − 1x | worst run | steps / 1x |",
        "| --- | --- | --- | ---: | ---: | ---: | ---: | ---: |",
    ]  # fmt: skip
    for method in WAIT_METHODS:
        for arm in [a for a in WAITS if a != FULL_WAIT]:
            for split in SPLITS:
                pairs = [
                    (r, base[(r["world"], r["draw"], method, split)])
                    for r in rows
                    if r["method"] == method and r["arm"] == arm and r["split"] == split
                    and (r["world"], r["draw"], method, split) in base
                ]  # fmt: skip
                if not pairs:
                    continue
                diff = [float(a["brier"]) - float(b["brier"]) for a, b in pairs]
                mean, se = _ms(diff)
                changed = sum(a["best_step"] != b["best_step"] for a, b in pairs)
                steps = sum(float(a["steps"]) for a, _ in pairs) / sum(
                    float(b["steps"]) for _, b in pairs
                )
                lines.append(
                    f"| {method} | {arm} | {split.upper()} | {len(pairs)} | {changed} | "
                    f"{mean:+.4f} ± {se:.4f} | {max(diff):+.4f} | {steps:.2f} |"
                )
    return [*lines, ""]


def previous_source() -> dict:
    """The page's stored ``source.json`` (empty before the first computation)."""
    try:
        return rp.read_source(PAGE)
    except FileNotFoundError:
        return {}


def part_commits(computed: list[str]) -> tuple[dict, str]:
    """Each part's commit (the earlier ones from ``source.json``, ``computed`` now) and the
    page's note saying so."""
    commits = dict(previous_source().get("part_commits", {}))
    commits.update(dict.fromkeys(computed, rp.STARTED_AT_COMMIT))
    note = "Parts computed at: " + ", ".join(f"{p} {c}" for p, c in sorted(commits.items())) + "."
    return commits, note


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--part", choices=PARTS, action="append")
    parser.add_argument("--work", default="runs/do-no-harm", help="folder for the worlds")
    parser.add_argument("--trained-run", help="with --part trained: a `dprm run` output folder")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--render", action="store_true", help="only re-render the page")
    parser.add_argument("--smoke", action="store_true", help="tiny worlds, 1 draw, 50 steps")
    args = parser.parse_args()
    folder = Path(args.work) / "results" if args.smoke else rp.folder(PAGE)
    folder.mkdir(parents=True, exist_ok=True)
    computed = []
    if not args.render:
        for part in args.part or ["report"]:
            if part == "trained" and not args.trained_run:
                parser.error("--part trained needs --trained-run DIR")
            if run_part(args, part, folder / "rows.csv"):
                computed.append(part)
    command = SCRIPT + (" --smoke" if args.smoke else " --part report --part dev")
    if args.smoke:  # never into docs/results
        target = folder / f"{PAGE}.md"
        target.write_text(f"# {TITLE}\n\n" + render(folder, command))
    else:
        if computed:
            # the command that recomputes every part the page shows, each part's commit
            commits, note = part_commits(computed)
            parts = " ".join(f"--part {p}" for p in PARTS if p in commits)
            trained_run = args.trained_run or previous_source().get("trained_run")
            trained = f" --trained-run {trained_run}" if "trained" in commits else ""
            extra = {"part_commits": commits, "trained_run": trained_run}
            rp.record_source(PAGE, f"{SCRIPT} {parts}{trained}", note, extra)
        target = rp.write_page(PAGE, TITLE, f"{SCRIPT} --render", render(folder, command))
    print(f"wrote {target}")


if __name__ == "__main__":
    main()
