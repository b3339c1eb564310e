"""The files of one IAS run, written the same way by ``dprm ias`` and ``dprm reproduce``.

A directory holds ``ias.csv`` (:data:`SUMMARY_COLUMNS`), ``ias_full.csv`` (every column of
:func:`dprm.ias.run_sweeps`), ``budgets.parquet`` (:data:`BUDGET_COLUMNS`), optionally
``uniform.csv`` (plain best-of-n, the same n for every question) and ``ias_meta.json``
(the caller's settings plus a description of every column and file). Every file is written
atomically.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pandas as pd

from dprm.ias.constants import BUDGET_COLUMNS, SUMMARY_COLUMNS

COLUMN_DOC = {
    "method": "calibrator display name (base = the raw PRM score; names as in dprm evaluate)",
    "allocation": "C (target sweep), tau (quantile-level sweep at C=0.99), beta (beta-threshold early "
    "stopping on the raw prm_score, cap at C=0.9), beta-cal (the paper's reading: on each "
    "candidate's calibrated estimate), greedy, auto (allocation on predicted selection accuracy), "
    "auto-seq (sequential auto: draws one candidate at a time, updating each question's posterior "
    "from the drawn candidates' calibrated estimates; Monte Carlo over draw orders), "
    "uniform or oracle (the same mean budget: evenly, or knowing every question's realised pool "
    "curve), oracle-pop (twin sets: knowing every question's population curve, the expectation "
    "over fresh pools), oracle-p (twin sets: auto's allocation on the true p)",
    "C": "target probability of at least one correct candidate",
    "level": "tau (tau sweep) or beta (beta sweep); empty for the C sweep and the equal-cost rows",
    "cost": "exact expected mean number of candidates drawn per question / n_max",
    "accuracy": "exact expectation over draws of the share of questions whose pick (highest uncalibrated PRM score among the drawn candidates) is correct",
    "accuracy_mc": "seeded Monte Carlo estimate of the same (mc_trials trials, common random draws across rows)",
    "rule": "selection rule (dprm.ias.selection.rules.RULES; the contract sweeps use highest-last). Rows with "
    "allocation uniform / oracle / auto have a target_cost; accuracy "
    "exact for highest-* rules, a seeded Monte Carlo mean (standard error in ias_full.csv's "
    "accuracy_se) for voting rules",
    "target_cost": "the target mean draws / n_max of an equal-cost row (allocation uniform, oracle, "
    "oracle-pop, oracle-p, auto, auto-seq); empty for the sweeps",
}
#: every file of an IAS run directory and what it holds (``dprm ias --help`` lists them)
FILE_DOC = {
    "ias.csv": "method, allocation, C, level, cost, accuracy, accuracy_mc, rule, target_cost (one row "
    "per point)",
    "ias_full.csv": "ias.csv plus accuracy_mc_se, cost_mc (Monte Carlo mean draws / n_max), "
    "n_questions",
    "budgets.parquet": "per-question budget n (question_id, method, allocation, C, level, n); for the "
    "beta sweep n is the cap N_i",
    "uniform.csv": "reference: the same n for every question (plain best-of-n), exact",
    "pays.csv": "does it pay? accuracy at cost 0.05 / 0.1 / 0.25 of uniform, oracle, auto and "
    "the C rule per selection rule, with headroom (oracle - uniform), gain over uniform and "
    "share of the headroom; on twin sets also oracle-pop with headroom_pop (oracle-pop - uniform) "
    "and share_pop (written when the run has uniform / oracle rows)",
    "peers.csv": "with --peers: per rule and method (the calibrator-free peers, auto-seq with "
    "each prior), draws to reach uniform best-of-64 / -16's accuracy, accuracy at cost 0.05 / "
    "0.1 / 0.25 (read along the method's curve), bootstrap standard errors, falls_back_to (the "
    "peer a shifted auto-seq ran), labelled_samples and prm_passes_q500 / _q5000 (PRM passes "
    "per test question, training passes spread over 500 / 5,000 test questions, at the draws "
    "to uniform-64). Its auto-seq figures are a separate Monte Carlo from pays.csv's: 4 draw "
    "orders per question (pays.csv's auto-seq rows: 32), the raw mean over them (pays.csv's "
    "accuracy adds auto's exact accuracy to the paired difference auto-seq - auto, a control "
    "variate; its raw mean is ias_full.csv's accuracy_orders), and the policy run at the 8 "
    "mean budgets of its curve (1 to 32 draws, then 64) and read at the target cost, where "
    "pays.csv runs it at the target budgets only. The two estimate the same policy's accuracy; "
    "compare them with their standard errors",
    "peer_curves.csv": "with --peers: every method's cost-accuracy curve (rule, method, knob, "
    "draws, accuracy: means over the questions and draw orders)",
    "ias_meta.json": "settings, inputs, column meanings, version",
}


#: columns renamed since earlier versions wrote them (old -> new); readers of run directories
#: apply it, so a run folder written before the rename still reads
RENAMED_COLUMNS = {"sweep": "allocation"}
#: the same for ``pays.csv``
RENAMED_PAYS_COLUMNS = {"kind": "allocation"}
#: the same for ``peer_curves.csv`` (``dprm ias --peers``): a point's knob setting, which for
#: ``auto-seq`` is a target mean number of draws, not a quantile level
RENAMED_PEER_CURVE_COLUMNS = {"level": "knob"}


def read_ias_rows(path: str | Path) -> pd.DataFrame:
    """``ias.csv`` / ``ias_full.csv`` rows of a run directory, old column names renamed
    (:data:`RENAMED_COLUMNS`)."""
    import pandas as pd

    frame = pd.read_csv(path)
    return frame.rename(columns={k: v for k, v in RENAMED_COLUMNS.items() if v not in frame})


def read_ias_budgets(path: str | Path, allocation: str | None = None) -> pd.DataFrame:
    """``budgets.parquet`` of a run directory (:data:`BUDGET_COLUMNS`, old column names renamed),
    only the rows of ``allocation`` when given (read with a filter: the file can be large)."""
    import pyarrow.parquet as pq

    names = pq.read_schema(path).names
    column = "allocation" if "allocation" in names else "sweep"
    filters = None if allocation is None else [(column, "==", allocation)]
    frame = pq.read_table(path, filters=filters).to_pandas()
    return frame.rename(columns={k: v for k, v in RENAMED_COLUMNS.items() if v not in frame})


def write_ias_outputs(
    directory: str | Path,
    summary: pd.DataFrame,
    budgets: pd.DataFrame,
    *,
    uniform: pd.DataFrame | None = None,
    meta: dict[str, Any] | None = None,
) -> list[Path]:
    """Write one IAS run's files into ``directory`` (created); returns the paths written.

    Args:
        directory: output directory.
        summary: rows of :func:`dprm.ias.run_sweeps` (``SUMMARY_COLUMNS`` + extra columns).
        budgets: per-question budgets (``BUDGET_COLUMNS``).
        uniform: optional plain best-of-n curve (:func:`dprm.ias.uniform_curve`).
        meta: settings to record in ``ias_meta.json`` (column and file descriptions are added).
    """
    import pyarrow as pa
    import pyarrow.parquet as pq

    from dprm.io import atomic_path, write_json
    from dprm.version import __version__

    out = Path(directory)
    out.mkdir(parents=True, exist_ok=True)
    summary = summary.reindex(
        columns=[*summary.columns, *(c for c in SUMMARY_COLUMNS if c not in summary.columns)]
    )
    frames = {"ias.csv": summary[SUMMARY_COLUMNS], "ias_full.csv": summary}
    if uniform is not None:
        frames["uniform.csv"] = uniform
    if "allocation" in summary.columns and summary["allocation"].isin(["uniform", "oracle"]).any():
        from dprm.ias.curves.pays import pays_table

        frames["pays.csv"] = pays_table(summary)
    for name, frame in frames.items():
        with atomic_path(out / name) as tmp:
            frame.to_csv(tmp, index=False)
    with atomic_path(out / "budgets.parquet") as tmp:
        pq.write_table(pa.Table.from_pandas(budgets[BUDGET_COLUMNS], preserve_index=False), tmp)
    files = {
        k: v
        for k, v in FILE_DOC.items()
        if k not in ("ias.csv", "ias_meta.json")
        and (k != "uniform.csv" or uniform is not None)
        and (k != "pays.csv" or "pays.csv" in frames)
        and (k not in ("peers.csv", "peer_curves.csv") or (out / k).exists())
    }
    write_json(
        out / "ias_meta.json",
        {
            **(meta or {}),
            "columns": COLUMN_DOC,
            "extra_files": files,
            "dprm_version": __version__,
        },
    )
    return [out / n for n in (*frames, "budgets.parquet", "ias_meta.json")]
