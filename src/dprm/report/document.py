"""Collect a reproduction's unit outputs into tables, figures, ``results.json`` and ``report.md``.

Everything here reads only what the stages wrote under OUT (eval/*.json, ias/*.csv), never the
synthetic worlds, so it can run after they are deleted and again after a resume.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from dprm.ias.outputs import read_ias_budgets, read_ias_rows
from dprm.io import atomic_path, read_json, write_json
from dprm.report.checks import frontier_checks, greedy_checks, table_checks
from dprm.report.pays import pays_rows
from dprm.report.tables import display
from dprm.runner.layout import IAS_SPLITS, REFERENCE, Layout

if TYPE_CHECKING:
    from dprm.runner.pipeline import Pipeline

SHOWCASE = "r1-qwen-7b"  # the paper's Fig. 1 / Fig. 4 generator
#: the target C of the per-question budget histogram (the C of the paper's τ sweep, Fig. 4)
BUDGET_C = 0.99


def _split_world(world: str) -> tuple[str, str]:
    gen, _, prm = world.partition("__")
    return gen, prm


# ----------------------------------------------------------------------------- collect
def collect(
    layout: Layout, worlds: list[str], methods: list[str], seeds: list[int]
) -> dict[str, Any]:
    """Tidy frames from the unit outputs of the requested grid."""
    metrics, coverage, reliability, flex = [], [], [], {}
    ias, uniform, budgets, history, pays = [], [], [], [], []
    for world in worlds:
        gen, prm = _split_world(world)
        tag = {"world": world, "generator": gen, "prm": prm}
        for method, seed in [(m, s) for m in methods for s in seeds]:
            history += _history_rows(layout.model_dir(world, method, seed), tag, method, seed)
        for method, seed in [("base", 0)] + [(m, s) for m in methods for s in seeds]:
            path = layout.eval_path(world, method, seed)
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
        for split in IAS_SPLITS:
            reference, by_seed = pd.DataFrame(), {}
            for method, seed in [(REFERENCE, 0)] + [(m, s) for m in methods for s in seeds]:
                path = layout.ias_dir(world, split, method, seed) / "ias_full.csv"
                if path.exists():
                    df = read_ias_rows(path)
                    ias.append(df.assign(**tag, dataset=split, seed=seed))
                    if method == REFERENCE:
                        reference = df
                    else:
                        by_seed.setdefault(seed, []).append(df)
                    b = _budgets_at(path.parent / "budgets.parquet", BUDGET_C)
                    if b is not None:
                        budgets.append(b.assign(**tag, dataset=split, seed=seed))
            path = layout.ias_dir(world, split, REFERENCE, 0) / "uniform.csv"
            if path.exists():
                uniform.append(pd.read_csv(path).assign(**tag, dataset=split))
            rows = pays_rows(
                reference, {s: pd.concat(f, ignore_index=True) for s, f in by_seed.items()}
            )
            if not rows.empty:
                pays.append(
                    pd.concat(
                        [pd.DataFrame({"world": world, "split": split}, index=rows.index), rows],
                        axis=1,
                    )
                )
    frame = pd.DataFrame
    return {
        "metrics": frame(metrics),
        "coverage": frame(coverage),
        "reliability": frame(reliability),
        "ias": pd.concat(ias, ignore_index=True) if ias else frame(),
        "uniform": pd.concat(uniform, ignore_index=True) if uniform else frame(),
        "budgets": pd.concat(budgets, ignore_index=True) if budgets else frame(),
        "pays": pd.concat(pays, ignore_index=True) if pays else frame(),
        "history": frame(history),
        "flex": flex,
    }


def _history_rows(model_dir: Path, tag: dict, method: str, seed: int) -> list[dict[str, Any]]:
    """The training curve of one saved calibrator (``history.json``), one row per evaluation.

    Rows: ``step``, ``validation`` (the early-stopping score named by ``metric``), ``loss``
    (the mean training loss since the last evaluation, ``loss_name``: ``loss`` or, for
    two-network objectives, the first ``loss_*``), ``best_step`` (the checkpoint kept),
    ``eligible_from`` (its warm-up) and ``min_step`` (the lowest validation score of any step).
    Calibrators fitted in closed form (no ``step`` in their history) give no rows.
    """
    path = model_dir / "history.json"
    if not path.exists():
        return []
    config = read_json(model_dir / "config.json") if (model_dir / "config.json").exists() else {}
    training = config.get("info", {}).get("training", {})
    metric = training.get("select_metric") or config.get("config", {}).get("select_metric")
    rows = []
    for entry in read_json(path):
        if not isinstance(entry, dict) or "step" not in entry:
            continue
        losses = [k for k in entry if k == "loss" or k.startswith("loss_")]
        loss_name = "loss" if "loss" in entry else (losses[0] if losses else None)
        rows.append(
            tag
            | {
                "method": method,
                "seed": seed,
                "step": int(entry["step"]),
                "metric": metric,
                "validation": entry.get(metric) if metric else None,
                "loss_name": loss_name,
                "loss": entry.get(loss_name) if loss_name else None,
                "best_step": training.get("best_step"),
                "eligible_from": training.get("eligible_from"),
                "min_step": training.get("validation_min_step"),
                # the proper score beside an improper one (the WQL beside the calibration
                # area) and its minimum: a run stops when neither improves
                "proper_score": training.get("proper_score"),
                "proper_min_step": training.get("proper_min_step"),
            }
        )
    return rows


def _budgets_at(path: Path, c: float) -> pd.DataFrame | None:
    """Per-question budgets of the C sweep at the grid's C nearest ``c`` (None: no file)."""
    if not path.exists():
        return None
    df = read_ias_budgets(path, "C")
    if df.empty:
        return None
    nearest = df["C"].unique()[np.argmin(np.abs(df["C"].unique() - c))]
    return df[df["C"] == nearest][["question_id", "method", "C", "n"]]


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
            if m in set(sub.loc[sub["allocation"] == "beta", "method"])
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
    budgets = data.get("budgets", pd.DataFrame())
    for prm in dict.fromkeys(budgets["prm"]) if not budgets.empty else []:
        sub = budgets[budgets["prm"] == prm]
        uni = uniform[uniform["prm"] == prm] if not uniform.empty else uniform
        n_max = int(uni["n"].max()) if not uni.empty else int(sub["n"].max())
        c = float(sub["C"].iloc[0])
        add(
            f"budgets_{prm}",
            "main",
            F.budget_figure(
                sub.drop(columns="C"),
                fig_dir / f"budgets_{prm}",
                n_max,
                c,
                title=f"Per-question budgets at C = {c:g}, PRM {prm}",
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
    history = data.get("history", pd.DataFrame())
    for world in dict.fromkeys(history["world"]) if not history.empty else []:
        gen, prm = _split_world(world)
        add(
            f"training_{world}",
            "training",
            F.training_figure(
                history[history["world"] == world],
                fig_dir / f"training_{world}",
                title=f"Training curves: generator {gen}, PRM {prm}",
            ),
        )
    return made


# ----------------------------------------------------------------------------- outputs
def write_pays_tables(pays: pd.DataFrame, directory: Path) -> list[Path]:
    """``tables/pays.csv`` (every row, every seed) and ``tables/pays.md`` (a table per world)."""
    from dprm.report.pays import pays_markdown

    directory.mkdir(parents=True, exist_ok=True)
    with atomic_path(directory / "pays.csv") as tmp:
        pays.to_csv(tmp, index=False)
    text = "".join(
        f"## {world}\n\n{pays_markdown(pays, world)}\n" for world in dict.fromkeys(pays["world"])
    )
    with atomic_path(directory / "pays.md") as tmp:
        tmp.write_text(text)
    return [directory / "pays.csv", directory / "pays.md"]


def _ran(metrics: pd.DataFrame) -> dict[str, list[int]]:
    """The calibrators with results: ``{method: [seeds]}`` (Base excluded)."""
    if metrics.empty:
        return {}
    rows = metrics[metrics["method"] != "base"]
    return {
        str(m): sorted(int(s) for s in set(g["seed"]))
        for m, g in rows.groupby("method", sort=False)
    }


def _check_method(ran: dict[str, list[int]], methods: list[str]) -> str | None:
    """The method the checks compare with Base: OT (the paper's) if it ran, else the first."""
    if "ot" in ran:
        return "ot"
    return next((m for m in methods if m in ran), None)


def write_outputs(pipe: Pipeline, run: dict[str, Any]) -> Path:
    """Tables, figures, results.json and report.md for the pipeline's grid.

    The report states the invocation's wall time up to the moment it is written (the time the
    command prints comes a few milliseconds later, after ``run.json``).

    Args:
        pipe: the finished pipeline (its config, layout, timing and failures).
        run: the run record (:func:`dprm.runner.record.run_record`, made just before this call);
            its ``stage_timing`` gains the tables, figures and report stages and its
            ``wall_time_s`` is brought up to the report's writing (the caller writes
            ``run.json``).
    """
    from dprm.report.document_md import run_names
    from dprm.report.tables import dataset_labels

    # run_record() was called just before: the invocation started wall_time_s ago
    started = time.perf_counter() - float(run["wall_time_s"])
    names = run_names(pipe.layout.out, pipe.config.size)
    with dataset_labels(names.labels):
        text, results = _render(pipe, run, names, started)
    layout = pipe.layout
    write_json(layout.results, results, allow_nan=False)
    with atomic_path(layout.report) as tmp:
        tmp.write_text(text)
    return layout.report


def _render(pipe: Pipeline, run: dict[str, Any], names, started: float) -> tuple[str, dict]:
    """(report.md's text, results.json's content); writes tables and figures on the way."""
    from dprm.report.document_md import render_report
    from dprm.report.paper import write_comparison
    from dprm.report.recommendation import recommendation_lines
    from dprm.report.sections.scope import read_pools, read_references
    from dprm.report.tables import PROTOCOLS, to_frame, truth_markdown, write_tables

    cfg, layout = pipe.config, pipe.layout
    t0 = time.perf_counter()
    data = collect(layout, cfg.worlds, cfg.methods, cfg.seeds)
    metrics = data["metrics"]
    ran = _ran(metrics)
    protocol_tables: dict[str, dict] = {}
    for protocol, datasets in PROTOCOLS.items():
        rows = metrics[metrics["dataset"].isin(datasets)] if not metrics.empty else metrics
        stem = "calibration" if protocol == "held-out" else "calibration_paper_protocol"
        protocol_tables[protocol] = (
            write_tables(rows, layout.tables, stem=stem) if not rows.empty else {}
        )
    tables = protocol_tables["held-out"]
    comparison = (
        write_comparison(metrics, layout.tables, synthetic=not names.real)
        if not metrics.empty
        else None
    )
    pays = data["pays"]
    if not pays.empty:
        write_pays_tables(pays, layout.tables)
    pipe.timing["tables"] = {
        "seconds": time.perf_counter() - t0,
        "units": sum(len(t) for t in protocol_tables.values()) + int(not pays.empty),
        "skipped": 0,
    }
    t0 = time.perf_counter()
    try:
        figs = make_figures(data, layout.figures, cfg.methods)
    except ImportError as err:  # matplotlib is the optional 'plots' extra
        figs = []
        pipe.failures.append({"unit": "figures", "error": str(err)})
        pipe.log(f"{pipe.command}: WARNING: no figures ({err})")
    pipe.timing["figures"] = {"seconds": time.perf_counter() - t0, "units": len(figs), "skipped": 0}
    t0 = time.perf_counter()
    method = _check_method(ran, cfg.methods)
    ias = data["ias"]
    checks: dict[str, list] = {"frontier": [], "tables": [], "greedy": []}
    if method is not None and not ias.empty:
        checks["frontier"] = frontier_checks(ias, method=method, uniform=data["uniform"])
    if method is not None and not metrics.empty:
        checks["tables"] = table_checks(metrics, method=method)
    if not ias.empty:
        checks["greedy"] = greedy_checks(ias, uniform=data["uniform"])
    pipe.timing["report"] = {"seconds": 0.0, "units": 1, "skipped": 0}  # filled in below
    # every evaluation failed: no metrics, the report lists the failures
    held_out = (
        metrics[metrics["dataset"].isin(PROTOCOLS["held-out"])] if not metrics.empty else metrics
    )
    truth = {
        prm: text
        for prm in tables
        if (text := truth_markdown(held_out, prm if "prm" in held_out else None))
    }
    recommendation = recommendation_lines(metrics, pays) if not metrics.empty else []
    pipe.timing["report"]["seconds"] = time.perf_counter() - t0
    run["wall_time_s"] = round(time.perf_counter() - started, 2)
    results = {
        "run": run,
        "metrics": metrics.to_dict("records"),
        "calibrators_ran": ran,
        "table_improvements": {
            protocol: {
                prm: to_frame(t).query("row == 'avg_pct_improvement'").to_dict("records")
                for prm, t in by_prm.items()
            }
            for protocol, by_prm in protocol_tables.items()
        },
        "paper_vs_dprm": None
        if comparison is None
        else {
            "cells": comparison["cells"].to_dict("records"),
            "improvements": comparison["improvements"].to_dict("records"),
            "reading": comparison["reading"],
        },
        "ias": ias.to_dict("records"),
        "uniform": data["uniform"].to_dict("records"),
        "pays": pays.to_dict("records"),
        "coverage": data["coverage"].to_dict("records"),
        "reliability": data["reliability"].to_dict("records"),
        "training_curves": data["history"].to_dict("records"),
        "checks": checks,
        "failures": pipe.failures,
        "figures": figs,
    }
    world_dirs = {world: layout.world_dir(world) for world in cfg.worlds}
    text = render_report(
        cfg,
        run,
        protocol_tables,
        figs,
        checks,
        layout.out,
        pipe.failures,
        truth,
        comparison,
        names=names,
        ran=ran,
        ias_ran=not ias.empty,
        pays=pays,
        recommendation=recommendation,
        scope=read_pools(world_dirs),
        references=read_references(world_dirs),
    )
    return text, results


__all__ = ["collect", "make_figures", "write_outputs"]
