"""The Markdown text of ``report.md`` (figures embedded by relative path, tables inlined)."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dprm.report.tables import caption, dataset_label, display, subset, to_markdown
from dprm.runner.config import REAL_DATA

SPLITS = ("train", "id", "ood")


@dataclass(frozen=True)
class RunNames:
    """What the report calls the run's data: the synthetic grid's words or the recipe's names.

    Attributes:
        real: a recipe's real data (``dprm run``), not synthetic worlds (``dprm reproduce``).
        recipe: the resolved recipe (``OUT/recipe.json``'s ``recipe``); empty for synthetic runs.
    """

    real: bool = False
    recipe: dict[str, Any] = field(default_factory=dict)

    @property
    def name(self) -> str:
        return str(self.recipe.get("run", {}).get("name", "")) or "recipe"

    def sets(self, split: str) -> list[str]:
        """The user's names of a split's sets (Park dataset folders, or question sets / files)."""
        data = self.recipe.get("data", {})
        if data.get("source") == "park":
            names = data.get(f"park_{split}", [])
        else:
            names = self.recipe.get("questions", {}).get(split, [])
        # a file is named by its file name, a packaged or hub set by its name
        return [Path(n).name if ("/" in n or os.sep in n) else n for n in map(str, names)]

    def set_text(self, split: str) -> str:
        return ", ".join(self.sets(split)) or split

    @property
    def labels(self) -> dict[str, str]:
        """Dataset labels of tables and figures (the defaults for synthetic runs)."""
        if not self.real:
            return {}
        return {
            "train": f"ID, in-sample ({self.set_text('train')}; training questions included)",
            "id": f"ID, held out ({self.set_text('id')})",
            "ood": f"OOD, held out ({self.set_text('ood')})",
        }

    def protocol_word(self, protocol: str) -> str:
        """``paper`` protocol = Park et al.'s; on real data it is named for what it is."""
        return "in-sample" if self.real and protocol == "paper" else protocol


def run_names(out: Path, size: str) -> RunNames:
    """The :class:`RunNames` of the run in ``out`` (its ``recipe.json`` when it holds real data)."""
    if size != REAL_DATA:
        return RunNames()
    path = Path(out) / "recipe.json"
    recipe = {}
    if path.exists():
        from dprm.io import read_json

        recipe = read_json(path).get("recipe", {})
    return RunNames(real=True, recipe=recipe)


def _rel(path: str, out: Path) -> str:
    """``path`` relative to the report's directory ``out`` (so the link renders wherever OUT is)."""
    return Path(os.path.relpath(Path(path).absolute(), Path(out).absolute())).as_posix()


def _check_lines(checks: dict[str, Any]) -> list[str]:
    lines = []
    if checks.get("frontier"):
        m = display(checks["frontier"][0]["method"])
        lines += [
            f"| world | dataset | {m} cost range | Base cost range | wider | {m} accuracy (C=0.5 → 0.999) | largest drop | rises | {m} − same-n-for-all at equal cost |",
            "|---|---|---|---|---|---|---|---|---|",
        ]
        for r in checks["frontier"]:
            lines.append(
                f"| {r['world']} | {dataset_label(r['dataset'])} | "
                f"{r['cost_range'][0]:.3f}–{r['cost_range'][1]:.3f} | {r['base_cost_range'][0]:.3f}–{r['base_cost_range'][1]:.3f} | "
                f"{'yes' if r['wider_than_base'] else 'NO'} | {r['accuracy_range'][0]:.3f} → {r['accuracy_range'][1]:.3f} | "
                f"{r['largest_drop']:.4f} | {'yes' if r['rises'] else 'NO'} | {r.get('minus_uniform', float('nan')):+.4f} |"
            )
        lines += [
            "",
            f"Last column: mean over the C points of {m}'s accuracy minus that of giving every question the "
            "same n at the same mean cost (interpolated); negative means adaptive allocation did not beat "
            "uniform allocation on this world.",
            "",
        ]
    if checks.get("greedy"):
        lines += [
            "Cost-aware allocation (beyond the paper): at each C, the C rule's total budget spent on the "
            "largest marginal gains of the same success curves (`dprm.ias.budget_greedy`, "
            "allocation `greedy`). Mean over the C points, accuracy differences at equal cost:",
            "",
            "| world | dataset | method | greedy − C rule | C rule − same-n-for-all | greedy − same-n-for-all |",
            "|---|---|---|---:|---:|---:|",
        ]
        for r in checks["greedy"]:
            lines.append(
                f"| {r['world']} | {dataset_label(r['dataset'])} | {display(r['method'])} | "
                f"{r['greedy_minus_rule']:+.4f} | {r['rule_minus_uniform']:+.4f} | {r['greedy_minus_uniform']:+.4f} |"
            )
        lines.append("")
    if checks.get("tables"):
        m = display(checks["tables"][0]["method"])
        lines += [
            f"| PRM | dataset | Brier {m} / Base | ECE {m} / Base | {m} ahead on both (generator mean) | ahead for every generator (Brier, ECE) |",
            "|---|---|---|---|---|---|",
        ]
        for r in checks["tables"]:
            lines.append(
                f"| {r['prm']} | {dataset_label(r['dataset'])} | {r['brier']:.4f} / {r['base_brier']:.4f} | "
                f"{r['ece']:.4f} / {r['base_ece']:.4f} | {'yes' if r['ahead_on_brier_and_ece'] else 'NO'} | "
                f"{'yes' if r['ahead_on_brier_every_generator'] else 'no'}, {'yes' if r['ahead_on_ece_every_generator'] else 'no'} |"
            )
        lines.append("")
    return lines


TWIN_NOTE = (
    "What the twin is and isn't: each synthetic world is fitted to the paper's *Base* statistics "
    "(Brier, PosBrier and ECE of the raw PRM score per generator, PRM and dataset), which depend "
    "only on the world, never on a calibrator. The OT and QR numbers are not fitted: they come "
    "out of training. So agreement with the paper on OT / QR is evidence, not proof, that a "
    "method behaves as it would on real PRM hidden states; disagreement can come from the world "
    "(how much of the success signal a synthetic hidden state carries) as well as from the method."
)


def _comparison_lines(comparison: dict, names: RunNames | None = None) -> list[str]:
    """The "paper vs dprm" section: reading, improvement rows, then every covered cell."""
    from dprm.report.paper import cells_markdown, improvements_markdown

    names = names or RunNames()
    cells, improvements = comparison["cells"], comparison["improvements"]
    if names.real:
        head = [
            "## Park et al.'s published numbers next to this run (in-sample protocol)",
            "",
            "The paper's Table 1 cells whose generator and PRM names this run shares, next to "
            f"this run's numbers on its own data (paper ID `math500` ↔ the train sets "
            f"{names.set_text('train')}, training questions included; paper OOD `aime24-25` ↔ "
            f"{names.set_text('ood')}); ours are seed means. This run covers {len(cells)} of the "
            "paper's table cells. Equal names do not make equal data: compare with care.",
            "",
        ]
    else:
        head = [
            "## Paper vs dprm (paper protocol)",
            "",
            "The paper's published numbers next to ours, evaluated as the paper did (ID = `math500` "
            "= our training split, training questions included; OOD = `aime24-25` = our held-out "
            f"OOD split); ours are seed means. This run covers {len(cells)} of the paper's table "
            "cells.",
            "",
            TWIN_NOTE,
            "",
        ]
    lines = [
        *head,
        "Reading (generated from the numbers below):",
        "",
        *comparison["reading"],
        "",
    ]
    if not improvements.empty:
        lines += [
            "### 'Avg. % improv.' rows",
            "",
            "Mean over generators of the per-generator relative improvement over Base (WQL: over "
            "QR); `n_generators` = how many of the paper's 6 generators this run averages.",
            "",
            improvements_markdown(improvements),
        ]
    if not cells.empty:
        lines += [
            "<details><summary>Every table cell: paper, dprm, difference</summary>",
            "",
            cells_markdown(cells),
            "</details>",
            "",
        ]
    lines += [
        "Standalone: `tables/paper_vs_dprm_cells.{md,csv}`, "
        "`tables/paper_vs_dprm_improvements.{md,csv}`.",
        "",
    ]
    return lines


def _data_lines(cfg, names: RunNames, ran: dict[str, list[int]], ias_ran: bool) -> list[str]:
    """The "Run" bullets that say what the data and the calibrators were."""
    methods = [m for m in cfg.methods if m in ran]
    missing = [m for m in cfg.methods if m not in ran]
    trained = ", ".join(f"{display(m)} (seeds {ran[m]})" for m in methods) or "none"
    calibrators = f"- Calibrators: Base (the raw PRM score) + {trained}" + (
        f"; requested but without results: {', '.join(display(m) for m in missing)} (see Failures)"
        if missing
        else ""
    )
    if not names.real:
        return [
            f"- Grid: generators {', '.join(cfg.generators)} × PRMs {', '.join(cfg.prms)} × datasets "
            f"ID, OOD (world size `{cfg.size}`).",
            calibrators
            + ". Calibrators are trained and early-stopped on the world's `train` split "
            "only (MATH-train-like, 80/20 question split inside, seed 42). Two evaluation "
            "protocols, each labelled: **held out** (the headline) = ID metrics on the `id` split "
            "(MATH500-like; no calibrator trained or early-stopped on its questions) and OOD on the "
            "`ood` split (AIME-like); **paper protocol** = ID metrics on the `train` split (training "
            "questions included, as the paper evaluated MATH; for the side-by-side with its "
            "tables) and the same OOD split. IAS runs on the held-out `id` and `ood` BoN sets. See "
            "docs/report.md.",
            f"- IAS: N_max = 64, QR at β = {cfg.beta}, mixture over 100 mid-point levels, accuracy "
            f"exact (Monte Carlo with {cfg.mc_trials} trials as a cross-check in `results.json`).",
        ]
    recipe = names.recipe

    def models(key: str) -> str:
        items = recipe.get(key, [])
        return ", ".join(
            f"`{g['name']}`" + (f" ({g['model']})" if g.get("model") else "") for g in items
        )

    train, id_, ood = (names.set_text(s) for s in SPLITS)
    lines = [
        f"- Generators: {models('generators') or ', '.join(cfg.generators)}; PRMs: "
        f"{models('prms') or ', '.join(cfg.prms)}.",
        f"- Sets: train = {train}; ID = {id_}; OOD = {ood}.",
        calibrators
        + f". Calibrators are trained and early-stopped on the train sets only ({train}; "
        "80/20 question split inside, seed 42). Two evaluation protocols, each labelled: **held "
        f"out** (the headline) = ID metrics on {id_} (no calibrator trained or early-stopped on "
        f"its questions) and OOD on {ood}; **in-sample** = ID metrics on the train sets {train} "
        "(training questions included: the protocol of Park et al.'s Table 1, optimistic for "
        "every calibrator) and the same OOD sets.",
    ]
    n_max = int(recipe.get("bon", {}).get("n", 0))
    if ias_ran:
        from dprm.ias.constants import N_MAX

        pool = (
            f"pools of {n_max} candidates per question (a budget above {n_max} draws the whole "
            "pool)"
            if n_max < N_MAX
            else f"pools of {n_max} candidates per question"
        )
        lines.append(
            f"- IAS on the held-out ID and OOD best-of-N {pool}: per-question budgets N_i up to "
            f"N_max = {N_MAX}, cost = mean drawn / N_max, β = {cfg.beta} for the β-quantile "
            f"rules, accuracy exact (Monte Carlo with {cfg.mc_trials} trials as a cross-check in "
            "`results.json`)."
        )
    else:
        lines.append(
            f"- IAS: not run (the recipe's `[bon] n = {n_max}`: no best-of-N pools)."
            if n_max == 0
            else "- IAS: no results (see Failures)."
        )
    return lines


def _intro(cfg, names: RunNames, ias_ran: bool) -> list[str]:
    budgets = " (per-question budgets in `ias/**/budgets.parquet`)" if ias_ran else ""
    if not names.real:
        return [
            f"# dprm reproduction: grid `{cfg.grid}`",
            "",
            "Synthetic worlds with a known truth stand in for the paper's data (MATH500 → `ID`, "
            "AIME24-25 → `OOD`); every number below is recomputed by `dprm reproduce` and listed "
            f"in `results.json`{budgets}.",
        ]
    data = names.recipe.get("data", {})
    if data.get("source") == "park":
        source = (
            f"Park et al.'s released Monte Carlo labels (`{data.get('park', '')}`), embedded with "
            "the recipe's PRMs"
        )
    else:
        sampling, rollout = names.recipe.get("sampling", {}), names.recipe.get("rollout", {})
        source = (
            f"labels generated by the recipe's generators ({sampling.get('n', '?')} responses per "
            f"question, {rollout.get('n', '?')} Monte Carlo rollouts per prefix), embedded with "
            "the recipe's PRMs"
        )
    return [
        f"# dprm run: recipe `{names.name}`",
        "",
        f"Real data from the recipe `{names.name}` (`dprm run`; the resolved recipe is in "
        f"`recipe.json`): {source}. Every number below is listed in `results.json`{budgets}.",
    ]


def render_report(
    cfg,
    run: dict,
    tables: dict,
    figs: list[dict],
    checks: dict,
    out: Path,
    failures: list[dict] | None = None,
    truth: dict[str, str] | None = None,
    comparison: dict | None = None,
    *,
    names: RunNames | None = None,
    ran: dict[str, list[int]] | None = None,
    ias_ran: bool = True,
    pays=None,
) -> str:
    """The report: data, calibrators, versions and timing; checks; Table 1 per PRM and protocol;
    paper vs dprm; figures; appendix. No heading is left without content.

    Args:
        tables: ``{protocol: {prm: CalibrationTable}}`` (protocols of
            :data:`dprm.report.tables.PROTOCOLS`), or ``{prm: table}`` for one unlabelled set.
        comparison: :func:`dprm.report.paper.write_comparison`'s result, if any.
        names: what the data is called (default: the synthetic grid's words).
        ran: the calibrators with results, ``{method: [seeds]}`` (default: all requested).
        ias_ran: whether any IAS result exists.
        pays: the "does it pay?" rows (:func:`dprm.report.pays.pays_rows` of every world and
            split), if any.
    """
    names = names or RunNames()
    ran = {m: list(cfg.seeds) for m in cfg.methods} if ran is None else ran
    if tables and not all(isinstance(t, dict) for t in tables.values()):
        tables = {"held-out": tables}
    v = run["versions"]
    lines = [*_intro(cfg, names, ias_ran), "", "## Run", ""]
    lines += _data_lines(cfg, names, ran, ias_ran)
    lines += [
        f"- Training overrides: {cfg.overrides if cfg.overrides else 'none (each method’s defaults)'}.",
        f"- Versions: dprm {v['dprm']}, torch {v['torch']}, numpy {v['numpy']}, pandas {v['pandas']}, "
        f"python {v['python']}"
        + (f", matplotlib {v['matplotlib']}" if "matplotlib" in v else "")
        + ".",
        f"- Wall time of this invocation, from its start to writing this report: "
        f"{run['wall_time_s']:.1f} s"
        + (" (resumed: finished units were skipped)" if run["resumed"] else "")
        + f"; total time of all units so far: {run['unit_seconds_total']:.1f} s.",
        "",
        "| stage | seconds (this invocation) | units run | units skipped | unit seconds (all invocations) |",
        "|---|---:|---:|---:|---:|",
    ]
    by_stage = run.get("unit_seconds_by_stage", {})
    for stage, t in run["stage_timing"].items():
        total = by_stage.get(stage)
        cell = f"{total:.1f}" if total is not None else "--"
        lines.append(f"| {stage} | {t['seconds']:.1f} | {t['units']} | {t['skipped']} | {cell} |")
    if failures:
        lines += [
            "",
            "## Failures",
            "",
            "These units failed in this invocation; their methods are missing from the results "
            "below (a rerun of the same command retries them):",
            "",
        ]
        lines += [f"- `{f['unit']}`: {f['error'].splitlines()[0][:300]}" for f in failures]
    reused = run.get("reused_units", [])
    if reused:
        lines += [
            "",
            f"Reused from an earlier invocation ({len(reused)} units whose recorded input "
            "fingerprint — settings, data, content hash of the model read — was unchanged):",
            "",
            "<details><summary>Reused units</summary>",
            "",
        ]
        lines += [f"- `{key}`" for key in reused] + ["", "</details>"]
    lines.append("")
    check_lines = _check_lines(checks)
    if check_lines:
        method = next(
            (r["method"] for key in ("frontier", "tables") for r in checks.get(key, [])), "ot"
        )
        where = [
            text
            for key, text in (
                ("frontier", "on the IAS frontier (C sweep)"),
                ("tables", "in the calibration tables"),
            )
            if checks.get(key)
        ]
        intro = f"{display(method)} against Base {' and '.join(where)}" if where else ""
        if checks.get("greedy"):
            intro += ("; " if intro else "") + "the cost-aware allocation against the C rule"
        lines += ["## Checks", "", intro[:1].upper() + intro[1:] + ":", ""]
        lines += check_lines
    if pays is not None and not pays.empty:
        lines += pays_lines(pays, cfg)
    for protocol, by_prm in tables.items():
        if not by_prm:
            continue
        word = names.protocol_word(protocol)
        lines += _table_lines(protocol, word, by_prm, names)
    if comparison is not None and not (names.real and comparison["cells"].empty):
        lines += _comparison_lines(comparison, names)
    if truth:
        lines += [
            "## Distance to the truth",
            "",
            "Held-out protocol. Mean absolute error, over 100 mid-point levels and all records, between each "
            "calibrator's quantiles and the true conditional quantile function of the latent "
            "success probability p (known in the synthetic worlds); lower is better, seed mean "
            "± std. ot, mono and qr fit the label y = k/n (p blurred by binomial noise), "
            "binomial fits p itself; point calibrators count as a point mass at their estimate.",
            "",
        ]
        for prm, text in truth.items():
            lines += [f"### PRM {prm}", "", text]
    sections = (
        ("main", "## Instance-adaptive best-of-N and flexibility"),
        ("calibration", "## Calibration figures"),
        ("training", "## Training curves"),
        ("appendix", "## Appendix: τ sweeps for the other generators"),
    )
    for section, heading in sections:
        chosen = [f for f in figs if f["section"] == section]
        if not chosen:
            continue
        if section == "main" and not any(f["name"].startswith("frontiers") for f in chosen):
            heading = "## Flexibility"
        lines += [heading, ""]
        for f in chosen:
            png = next(p for p in f["files"] if p.endswith(".png"))
            lines += [f"![{f['name']}]({_rel(png, out)})", "", f"*{f['caption']}*", ""]
    return "\n".join(lines) + "\n"


#: dprm's one answer to "which calibrator?" (docs/calibrators.md, "One recommendation")
RECOMMENDATION = (
    'Which calibrator for what (docs/calibrators.md, "One recommendation"): for calibration '
    "tables, the lowest validation WQL among the tuned methods (`dprm train --method auto`); "
    "for IAS (`dprm ias`, `dprm solve`), `binomial`. `conformal` is a lower bound by design "
    "(marked ‡ in the tables), never a winner."
)


def pays_lines(pays, cfg) -> list[str]:
    """The "Does adaptive compute pay?" section: how it is computed, a reading generated from
    the numbers, then a table per world (:func:`dprm.report.pays.pays_markdown`)."""
    from dprm.report.pays import LEVEL, pays_markdown, pays_reading

    allocations = set(pays["allocation"])
    seeds = int(pays["seed"].nunique()) if "seed" in pays.columns else 1
    rules = ", ".join(
        f"`{r}`" for r in dict.fromkeys(pays.loc[pays["allocation"] == "uniform", "rule"])
    )
    costs = ", ".join(f"{c:g}" for c in sorted(pays["cost"].unique()))
    vote = getattr(cfg, "vote_trials", None)
    lines = [
        "## Does adaptive compute pay?",
        "",
        f"Accuracy at equal mean cost ({costs}; cost = mean draws per question / N_max) on the "
        f"held-out best-of-N sets, per selection rule ({rules}). **uniform** gives every "
        "question the same number of draws. The **C rule** is the paper's allocation: its C "
        "sweep interpolated to the cost (`--` where the sweep does not reach it), selection by "
        "the highest last-step score. **auto** allocates on each question's predicted accuracy "
        "of the *selected* answer, learnt on the world's training best-of-N set (`train/bon`) "
        "only; it falls back to uniform when the test questions' states look unlike the "
        "training ones. "
        + (
            "**auto-seq** (`--sequential`, `[ias] sequential`) is `auto` drawn one candidate at "
            "a time: the next draw goes to the question whose posterior success probability, "
            "updated from its drawn candidates' calibrated estimates (and final answers, where "
            "the sets have them), promises the largest gain (for majority vote, read from the "
            "current answer counts: a settled vote gains nothing from a draw, a close one "
            "does); its accuracy is a Monte Carlo "
            "over random draw orders per question, paired with `auto` on the same orders. "
            if "auto-seq" in allocations
            else ""
        )
        + (
            "**oracle-p** is `auto`'s allocation on each question's true success probability "
            "(known in a synthetic world) but not its pool. "
            if "oracle-p" in allocations
            else ""
        )
        + "The **oracle** knows every question's accuracy-vs-n curve on its realised pool (so "
        "also the luck of that pool); oracle − uniform is the *headroom* (in brackets on the "
        "oracle row). "
        + (
            "**oracle-pop** knows each question's true curve, the expectation over fresh pools "
            "from the synthetic world, but not the realised pool; its gain over uniform (in "
            "brackets) is the *population headroom*. "
            if "oracle-pop" in allocations
            else ""
        )
        + "Other cells: accuracy, and in brackets the share of the headroom captured, "
        "(method − uniform) / headroom"
        + (
            "; then the same share of the population headroom (pop.)"
            if "oracle-pop" in allocations
            else ""
        )
        + (f"; ± is the std over {seeds} training seeds" if seeds > 1 else "")
        + ". `highest-*` rules are exact expectations"
        + (
            f"; voting rules are a Monte Carlo mean over {vote} random orders per question, the "
            "same orders for every row"
            if vote
            else ""
        )
        + ". See docs/adaptive-bon.md for the definitions.",
        "",
        RECOMMENDATION,
        "",
    ]
    if "auto" not in allocations:
        lines += [
            "No `auto` rows: this run has no training best-of-N set (`train/bon`) to learn "
            "the allocation on.",
            "",
        ]
    reading = pays_reading(pays)
    if reading:
        lines += [
            f"Reading (generated from the numbers below, seed means): 'above' / 'below' = by "
            f"more than {LEVEL} against uniform at the same cost and rule, 'level' = within it.",
            "",
            *reading,
            "",
        ]
    for world in dict.fromkeys(pays["world"]):
        lines += [f"### {world}", "", pays_markdown(pays, world)]
    lines += ["Standalone: `tables/pays.md`, every row and seed in `tables/pays.csv`.", ""]
    return lines


def _table_lines(protocol: str, word: str, by_prm: dict, names: RunNames) -> list[str]:
    """One protocol's calibration tables, a subsection per PRM."""
    stem = "calibration" if protocol == "held-out" else "calibration_paper_protocol"
    if names.real:
        heading = f"## Calibration, {word} protocol"
        note = {
            "held-out": "ID and OOD: questions no calibrator trained or early-stopped on.",
            "paper": f"ID = the train sets ({names.set_text('train')}), training questions "
            "included (the protocol of Park et al.'s Table 1); optimistic for every calibrator. "
            "OOD is the same held-out set as above.",
        }.get(protocol, "")
    else:
        heading = f"## Calibration (Table 1), {protocol} protocol"
        note = {
            "held-out": "ID = questions no calibrator trained or early-stopped on; OOD held out as well.",
            "paper": "ID = the training split, training questions included (as the paper did for "
            "MATH); optimistic for every calibrator. OOD is the same held-out split as above.",
        }.get(protocol, "")
    lines = [heading, ""] + ([note, ""] if note else [])
    for prm, table in by_prm.items():
        lines += [f"### PRM {prm} ({word} protocol)", "", caption(table), ""]
        paper = [m for m in table.methods if m in ("base", "ot", "qr")]
        if not names.real and len(paper) < len(table.methods) and "base" in paper:
            head = (
                "Base / OT / QR as in the paper:"
                if paper == ["base", "ot", "qr"]
                else f"{' / '.join(display(m) for m in paper)} (the paper's methods that ran):"
            )
            lines += [head, "", to_markdown(subset(table, paper))]
            lines += [
                "<details><summary>All methods (the paper's first, then the calibrators beyond "
                "it)</summary>",
                "",
            ]
            lines += [to_markdown(table), "</details>", ""]
        else:
            lines += [to_markdown(table)]
        lines += [
            f"LaTeX: `tables/{stem}_{prm}.tex`, CSV: `tables/{stem}_{prm}.csv` (all methods).",
            "",
        ]
    return lines
