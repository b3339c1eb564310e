"""Collect a reproduction's unit outputs into tables, figures, ``results.json`` and ``report.md``.

Everything here reads only what the stages wrote under OUT (eval/*.json, ias/*.csv), never the
synthetic worlds, so it can run after they are deleted and again after a resume.
"""

from __future__ import annotations

import platform
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from dprm.io import atomic_path, read_json, write_json
from dprm.report.checks import RISE_TOL, frontier_checks, greedy_checks, table_checks
from dprm.report.tables import DATASET_LABELS, display

if TYPE_CHECKING:
    from dprm.report.reproduce import Pipeline

SHOWCASE = "r1-qwen-7b"  # the paper's Fig. 1 / Fig. 4 generator


def _split_world(world: str) -> tuple[str, str]:
    gen, _, prm = world.partition("__")
    return gen, prm


# ----------------------------------------------------------------------------- collect
def collect(out: Path, worlds: list[str], methods: list[str], seeds: list[int]) -> dict[str, Any]:
    """Tidy frames from the unit outputs of the requested grid."""
    metrics, coverage, reliability, flex = [], [], [], {}
    ias, uniform = [], []
    for world in worlds:
        gen, prm = _split_world(world)
        tag = {"world": world, "generator": gen, "prm": prm}
        for method, seed in [("base", 0)] + [(m, s) for m in methods for s in seeds]:
            path = out / "eval" / world / method / f"seed{seed}.json"
            if not path.exists():
                continue
            res = read_json(path)
            if "truth_flex" in res:
                flex.setdefault(world, {})["truth"] = res["truth_flex"]
            for split, block in res["splits"].items():
                row = tag | {"dataset": split, "method": method, "seed": seed}
                metrics.append(row | block["metrics"])
                if "coverage" in block:
                    c = block["coverage"]
                    coverage += [
                        row | {"level": t, "coverage": v}
                        for t, v in zip(c["levels"], c["values"], strict=True)
                    ]
                r = block["reliability"]
                reliability += [
                    row | {"bin": b, "p_mean": p, "y_mean": y, "count": n}
                    for b, (p, y, n) in enumerate(
                        zip(r["p_mean"], r["y_mean"], r["count"], strict=True)
                    )
                ]
                if "flex" in block:
                    flex.setdefault(world, {})[method] = block["flex"]
        for split in ("id", "ood"):
            base = out / "ias" / world / split
            for method, seed in [("_reference", 0)] + [(m, s) for m in methods for s in seeds]:
                path = base / method / f"seed{seed}.csv"
                if path.exists():
                    df = pd.read_csv(path)
                    ias.append(df.assign(**tag, dataset=split, seed=seed))
            if (base / "_reference" / "uniform.csv").exists():
                uniform.append(
                    pd.read_csv(base / "_reference" / "uniform.csv").assign(**tag, dataset=split)
                )
    frame = pd.DataFrame
    return {
        "metrics": frame(metrics),
        "coverage": frame(coverage),
        "reliability": frame(reliability),
        "ias": pd.concat(ias, ignore_index=True) if ias else frame(),
        "uniform": pd.concat(uniform, ignore_index=True) if uniform else frame(),
        "flex": flex,
    }


# ----------------------------------------------------------------------------- figures
def _flex_choice(flex: dict[str, Any]) -> tuple[str, int] | None:
    """(world, sample index) with the largest total QR crossing; the showcase world first."""
    worlds = sorted(flex, key=lambda w: (_split_world(w)[0] != SHOWCASE, w))
    best = None
    for world in worlds:
        if "ot" not in flex[world] or "qr" not in flex[world]:
            continue
        q = np.asarray(flex[world]["qr"]["values"])
        drop = np.clip(-np.diff(q, axis=1), 0, None).sum(axis=1)
        i = int(np.argmax(drop))
        if best is None or drop[i] > best[2]:
            best = (world, i, float(drop[i]))
        if _split_world(world)[0] == SHOWCASE and drop[i] > 0:
            break
    return None if best is None else best[:2]


def make_figures(data: dict[str, Any], fig_dir: Path, methods: list[str]) -> list[dict[str, Any]]:
    """Every figure of the report; returns [{name, files, caption, section}]."""
    from dprm.report import figures as F

    made = []

    def add(name: str, section: str, result) -> None:
        files, caption = result
        made.append(
            {"name": name, "section": section, "files": [str(p) for p in files], "caption": caption}
        )

    choice = _flex_choice(data["flex"])
    if choice is not None:
        world, i = choice
        fx = data["flex"][world]
        truth = fx.get("truth")
        gen, prm = _split_world(world)
        add(
            "flexibility",
            "main",
            F.flexibility_figure(
                fig_dir / "flexibility",
                np.asarray(fx["ot"]["levels"]),
                np.asarray(fx["ot"]["values"][i]),
                np.asarray(fx["qr"]["levels"]),
                np.asarray(fx["qr"]["values"][i]),
                None if truth is None else np.asarray(truth["values"][i]),
                title=f"One record ({gen}, {prm}, ID calibration set): OT vs QR quantiles",
            ),
        )
        made[-1]["caption"] += (
            " The record is the one with the largest QR crossing among 256 sampled ID records."
        )
    ias, uniform = data["ias"], data["uniform"]
    for prm in dict.fromkeys(ias["prm"]) if not ias.empty else []:
        sub, uni = (
            ias[ias["prm"] == prm],
            uniform[uniform["prm"] == prm] if not uniform.empty else None,
        )
        add(
            f"frontiers_{prm}",
            "main",
            F.frontier_figure(
                sub, fig_dir / f"frontiers_{prm}", uni, title=f"IAS best-of-N frontiers, PRM {prm}"
            ),
        )
        dist = [
            m
            for m in ("ot",) + tuple(methods)
            if m in set(sub.loc[sub["sweep"] == "beta", "method"])
        ]
        if dist:
            add(
                f"beta_{prm}",
                "main",
                F.beta_figure(
                    sub,
                    fig_dir / f"beta_{prm}",
                    methods=dist[:1],
                    title=f"β-threshold early stopping with {display(dist[0])} at C = 0.9, PRM {prm}",
                ),
            )
        gens = sorted(dict.fromkeys(sub["generator"]), key=lambda g: g != SHOWCASE)
        for j, gen in enumerate(gens):
            add(
                f"tau_{prm}_{gen}",
                "main" if j == 0 else "appendix",
                F.tau_figure(
                    sub[sub["generator"] == gen],
                    fig_dir / f"tau_{prm}_{gen}",
                    title=f"τ sweep at C = 0.99: {gen}, PRM {prm}",
                ),
            )
    for key, figure, title in (
        ("coverage", F.coverage_figure, "Quantile calibration curves"),
        ("reliability", F.reliability_figure, "Reliability diagram"),
    ):
        frame = data[key]
        for prm in dict.fromkeys(frame["prm"]) if not frame.empty else []:
            name = f"{key}_{prm}"
            add(
                name,
                "calibration",
                figure(frame[frame["prm"] == prm], fig_dir / name, title=f"{title}, PRM {prm}"),
            )
    return made


# ----------------------------------------------------------------------------- run record
def versions() -> dict[str, str]:
    import numpy
    import torch

    from dprm import __version__

    out = {
        "dprm": __version__,
        "torch": torch.__version__,
        "numpy": numpy.__version__,
        "pandas": pd.__version__,
        "python": platform.python_version(),
    }
    try:
        import matplotlib

        out["matplotlib"] = matplotlib.__version__
    except ImportError:  # pragma: no cover
        pass
    return out


def resolved_train_configs(
    out: Path, worlds: list[str], methods: list[str], seeds: list[int]
) -> dict[str, Any]:
    """The resolved hyper-parameters of each method, read back from its first saved model."""
    configs = {}
    for method in methods:
        for world in worlds:
            path = out / "models" / world / method / f"seed{seeds[0]}" / "config.json"
            if path.exists():
                configs[method] = read_json(path).get("config", {})
                break
    return configs


def _by_stage(unit_seconds: dict[str, float]) -> dict[str, float]:
    """Seconds of all recorded units per stage (the key's first component), all invocations."""
    out: dict[str, float] = {}
    for key, seconds in unit_seconds.items():
        stage = key.split("/", 1)[0]
        out[stage] = round(out.get(stage, 0.0) + float(seconds), 2)
    return out


def write_outputs(pipe: Pipeline, *, started_at: float, previous_run: dict | None = None) -> Path:
    """Tables, figures, results.json, run.json and report.md for the pipeline's grid."""
    from dprm.report.document_md import render_report
    from dprm.report.reproduce import config_dict
    from dprm.report.tables import to_frame, truth_markdown, write_tables

    cfg, out = pipe.config, pipe.out
    t0 = time.perf_counter()
    data = collect(out, cfg.worlds, cfg.methods, cfg.seeds)
    tables = write_tables(data["metrics"], out / "tables") if not data["metrics"].empty else {}
    pipe.timing["tables"] = {
        "seconds": time.perf_counter() - t0,
        "units": len(tables),
        "skipped": 0,
    }
    t0 = time.perf_counter()
    try:
        figs = make_figures(data, out / "figures", cfg.methods)
    except ImportError as err:  # matplotlib is the optional 'plots' extra
        figs = []
        pipe.failures.append({"unit": "figures", "error": str(err)})
        pipe.log(f"dprm reproduce: WARNING: no figures ({err})")
    pipe.timing["figures"] = {"seconds": time.perf_counter() - t0, "units": len(figs), "skipped": 0}
    t0 = time.perf_counter()
    checks = {
        "frontier": frontier_checks(data["ias"], uniform=data["uniform"])
        if not data["ias"].empty
        else [],
        "tables": table_checks(data["metrics"]) if not data["metrics"].empty else [],
        "greedy": greedy_checks(data["ias"], uniform=data["uniform"])
        if not data["ias"].empty
        else [],
    }
    pipe.timing["report"] = {"seconds": 0.0, "units": 1, "skipped": 0}  # filled in below
    unit_seconds = {k: v["seconds"] for k, v in pipe.state.data["done"].items()}
    run = {
        "config": config_dict(cfg),
        "versions": versions(),
        "train_configs": resolved_train_configs(out, cfg.worlds, cfg.methods, cfg.seeds),
        "wall_time_s": round(time.perf_counter() - started_at, 2),
        "stage_timing": pipe.timing,
        "unit_seconds_total": round(sum(unit_seconds.values()), 2),
        "unit_seconds_by_stage": _by_stage(unit_seconds),
        "finished_at": time.strftime("%Y-%m-%dT%H:%M:%S"),
        "resumed": previous_run is not None,
    }
    results = {
        "run": run,
        "metrics": data["metrics"].to_dict("records"),
        "table_improvements": {
            prm: to_frame(t).query("row == 'avg_pct_improvement'").to_dict("records")
            for prm, t in tables.items()
        },
        "ias": data["ias"].to_dict("records"),
        "uniform": data["uniform"].to_dict("records"),
        "coverage": data["coverage"].to_dict("records"),
        "reliability": data["reliability"].to_dict("records"),
        "checks": checks,
        "failures": pipe.failures,
        "figures": figs,
    }
    pipe.timing["report"]["seconds"] = time.perf_counter() - t0
    run["wall_time_s"] = round(time.perf_counter() - started_at, 2)
    write_json(out / "run.json", run, allow_nan=False)
    write_json(out / "results.json", results, allow_nan=False)
    truth = {
        prm: text
        for prm in tables
        if (text := truth_markdown(data["metrics"], prm if "prm" in data["metrics"] else None))
    }
    text = render_report(cfg, run, tables, figs, checks, out, pipe.failures, truth)
    with atomic_path(out / "report.md") as tmp:
        tmp.write_text(text)
    return out / "report.md"


__all__ = [
    "DATASET_LABELS",
    "RISE_TOL",
    "collect",
    "frontier_checks",
    "greedy_checks",
    "make_figures",
    "table_checks",
    "write_outputs",
]
