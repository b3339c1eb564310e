"""Fit the twin worlds' PRM-score readouts to the paper's Base Brier / PosBrier / ECE.

For every (generator, PRM, split kind) cell this fits the three numbers of
:class:`dprm.data.synth.ScoreCell` (score_bias, score_gain, score_noise) so that the Base
metrics of the world at paper size and its default seed match the paper's table
(src/dprm/report/paper_tables.csv: MATH500 rows for the ``id`` kind, AIME24-25 rows for
``ood``). An ``id`` cell is fitted on the ``train`` and ``id`` splits together (same
distribution), so that both hold. Only Base statistics are fitted: Base p is the raw
``prm_score``; nothing about OT or QR enters.

It is fast because it never builds hidden states: it draws each split's randomness once
(exactly as ``write_world`` does) and re-evaluates only the score readout per trial.

Twin v2 adds a second, separate fit (``--qr``): each cell's ``linear_share`` (lambda, how much
of the PRM's success reading reaches h through its linear channel) is searched so that a
converged linear quantile regression (the paper's QR: one linear layer on h, sigmoid outputs,
pinball loss; point estimate its median, tau = 0.5) trained on the ``train`` split lands on the
paper's QR Brier / PosBrier / ECE: the ``id`` cell on the ``id`` split, then, with that QR kept,
the ``ood`` cell on the ``ood`` split. The assumption behind it: the paper's QR was trained to
convergence. The QR here is fitted on the embedding's units (h is an affine, full-rank image of
them, so a linear model of h is the same model class) with full-batch Adam run to convergence;
``benchmarks/experiments/twin_residuals.py --qr`` checks the result with dprm's own QR trainer on h.

Usage:
    python tools/fit_twin.py            # fit the Base readouts and print the residuals
    python tools/fit_twin.py --write    # ... and write them to src/dprm/data/synth/score_cells.csv
    python tools/fit_twin.py --qr --size paper --write   # linear_share per cell (Base kept)
    python tools/fit_twin.py --ood-dprm --write   # ood shares again, with dprm's own QR
    python tools/fit_twin.py --park-budget        # the other assumption: Park et al.'s
                                                       # start, a limited budget (prints only)
"""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import dataclass, replace
from importlib.resources import files
from pathlib import Path

import numpy as np
import pandas as pd
from scipy.optimize import least_squares

from dprm import metrics as M
from dprm.data import synth as S
from dprm.data.synth.presets import SCORE_CELLS_FILE, write_score_cells
from dprm.io import atomic_path

#: tolerances of the match (Brier, PosBrier, ECE)
TOLERANCE = np.array([0.02, 0.02, 0.04])
#: tolerances of the QR match (Brier, PosBrier, ECE)
QR_TOLERANCE = np.array([0.03, 0.03, 0.05])
#: linear_share search: a coarse grid, then a finer one around the best coarse point
COARSE_SHARES = np.linspace(0.0, 1.0, 6)
FINE_STEP = 0.05
METRICS = ("brier", "posbrier", "ece")
#: full-batch Adam on the median head: steps and learning rate (converged: see docs/synth.md)
QR_STEPS, QR_LR = 300, 0.1
#: the median head is fitted on at most this many training records (a seeded subsample)
QR_ROWS = 20000
#: dprm's QR trained to convergence (``dprm.fit("qr", ...)``, the code behind ``dprm train
#: --method qr``): validation WQL is flat from about step 1000 on (llama-3.1-8b x Qwen-PRM at paper
#: size: 0.0823-0.0831 from step 1000 to 4000); checkpoint by validation WQL, the pinball
#: objective QR minimises, rather than calibration area
CONVERGED_QR = {
    "max_steps": 4000,
    "lr": 1e-2,
    "lr_step_size": 1500,
    "batch_size": 1024,
    "eval_every": 100,
    "warmup_steps": 0,
    "select_metric": "wql",
    "patience": 1000,  # steps (10 evaluations), a fixed wait
    "patience_fraction": 0.0,
}
#: hidden dimension of the worlds dprm's QR is trained on (any D >= EMBED_WIDTH is the same
#: linear model class as paper size's 3584, at a fraction of the memory and time)
DPRM_QR_DIM = 256
#: (synth split kind) -> the paper's dataset
PAPER_DATASET = {"id": "math500", "ood": "aime24-25"}
#: a weak pull of (score_gain, score_noise) towards typical values: among readouts that fit
#: equally well it picks an interior one (a residual of 1 costs as much as 1/PRIOR_WEIGHT
#: tolerances would)
PRIOR_CENTER = np.array([0.3, 1.0])
PRIOR_SCALE = np.array([0.5, 2.0])
PRIOR_WEIGHT = 0.1
#: the fitted cells (package data of dprm.data.synth, read at import)
CELLS_FILE = (
    Path(__file__).resolve().parents[1] / "src" / "dprm" / "data" / "synth" / SCORE_CELLS_FILE
)


@dataclass
class SplitDraws:
    """One split's draws for one (generator, PRM) at paper size and the default seed."""

    name: str
    generator: S.GeneratorDraws
    prm: S.PRMDraws


def cell_draws(gen: S.SynthGenerator, prm: S.SynthPRM, kind: str, size: str = "paper"):
    """The calibration draws of every split of ``kind`` exactly as ``write_world`` makes them."""
    world = S.SIZES[size]
    seed = S.default_seed(f"{gen.name}__{prm.name}")
    out = []
    for index, split in enumerate(world.splits):
        if split.kind != kind:
            continue
        rng, prm_rng, mask_rng = S.split_rngs(seed, index, prm)
        draws = S.draw_generator(rng, gen, split, world, split.n_questions)
        out.append(SplitDraws(split.name, draws, S.draw_prm(prm_rng, draws, mask_rng)))
    return out


def base_metrics(gen, prm, cell: S.ScoreCell, kind: str, split: SplitDraws, max_steps: int):
    """(Brier, PosBrier, ECE) of the raw PRM score on one split [3]."""
    rec = S.simulate(gen, prm, cell, kind, split.generator, split.prm, max_steps)
    p = rec.prm_score.astype(np.float32).astype(np.float64)
    y = (rec.n_correct / S.SIZES["paper"].n_rollouts).astype(np.float32).astype(np.float64)
    return np.array([M.brier(p, y), M.pos_brier(p, y), M.ece(p, y)])


def paper_tables() -> pd.DataFrame:
    """The paper's calibration tables (prm, dataset, generator, method, metric, value)."""
    return pd.read_csv(files("dprm.report") / "paper_tables.csv")


def paper_base(prm: str, kind: str, gen: str) -> np.ndarray:
    """The paper's Base (Brier, PosBrier, ECE) of a cell [3]."""
    table = paper_tables()
    rows = table[
        (table["prm"] == prm)
        & (table["dataset"] == PAPER_DATASET[kind])
        & (table["generator"] == gen)
        & (table["method"] == "base")
    ].set_index("metric")["value"]
    return np.array([rows["brier"], rows["posbrier"], rows["ece"]], dtype=np.float64)


def paper_cell(prm: str, kind: str, gen: str, method: str) -> np.ndarray:
    """The paper's (Brier, PosBrier, ECE) of a cell for ``method`` [3]."""
    table = paper_tables()
    rows = table[
        (table["prm"] == prm)
        & (table["dataset"] == PAPER_DATASET[kind])
        & (table["generator"] == gen)
        & (table["method"] == method)
    ].set_index("metric")["value"]
    return np.array([rows["brier"], rows["posbrier"], rows["ece"]], dtype=np.float64)


def point_metrics(p: np.ndarray, y: np.ndarray) -> np.ndarray:
    """(Brier, PosBrier, ECE) of point estimates p against success_prob y [3]."""
    return np.array([M.brier(p, y), M.pos_brier(p, y), M.ece(p, y)])


class LinearMedianQR:
    """The paper's QR reduced to what its point estimate needs: the tau = 0.5 head.

    QR's levels are trained independently (one linear layer, a sigmoid per output, the pinball
    loss summed over levels), so the median head is the same model alone: q = sigmoid(x w + b)
    on standardised inputs x [n, d], fitted by full-batch Adam on the pinball loss at 0.5 from
    the marginal median (dprm's ``init_marginal``) to convergence.
    """

    def __init__(
        self, inputs: np.ndarray, target: np.ndarray, steps=QR_STEPS, lr=QR_LR, max_rows=QR_ROWS
    ):
        import torch

        if len(inputs) > max_rows:  # a seeded subsample: records of a trajectory are redundant
            rows = np.sort(np.random.default_rng(0).choice(len(inputs), max_rows, replace=False))
            inputs, target = inputs[rows], target[rows]
        self.mean = inputs.mean(0)
        self.scale = inputs.std(0) + 1e-6
        x = torch.as_tensor((inputs - self.mean) / self.scale, dtype=torch.float32)
        y = torch.as_tensor(target, dtype=torch.float32)
        q0 = float(np.clip(np.median(target), 0.02, 0.98))
        w = torch.zeros(x.shape[1], requires_grad=True)
        b = torch.tensor(np.log(q0 / (1 - q0)), dtype=torch.float32, requires_grad=True)
        opt = torch.optim.Adam([w, b], lr=lr)
        for _ in range(steps):
            opt.zero_grad()
            u = y - torch.sigmoid(x @ w + b)
            loss = torch.maximum(0.5 * u, -0.5 * u).mean()
            loss.backward()
            opt.step()
        self.loss = float(loss.detach())
        self.weight = w.detach().numpy().astype(np.float64)
        self.bias = float(b.detach())

    def predict(self, inputs: np.ndarray) -> np.ndarray:
        """Median estimates [n] (float32-rounded like dprm's outputs)."""
        logit = ((inputs - self.mean) / self.scale) @ self.weight + self.bias
        return (1 / (1 + np.exp(-logit))).astype(np.float32).astype(np.float64)


def split_units(gen, prm, cell: S.ScoreCell, kind: str, split: SplitDraws, size: str):
    """(embedding units [n, EMBED_WIDTH], records) of one split under ``cell``."""
    world = S.SIZES[size]
    rec = S.simulate(gen, prm, cell, kind, split.generator, split.prm, world.max_steps)
    units = S.Embedding(prm, world.hidden_dim).features(rec.latent).astype(np.float64)
    return units, rec


def _labels(rec) -> np.ndarray:
    return (rec.n_correct / S.SIZES["paper"].n_rollouts).astype(np.float32).astype(np.float64)


def _search_share(evaluate, target: np.ndarray) -> tuple[float, np.ndarray]:
    """1-D search of linear_share: coarse grid, then a fine grid around the best point."""
    tried: dict[float, np.ndarray] = {}

    def cost(share: float) -> float:
        share = round(float(np.clip(share, 0.0, 1.0)), 4)
        if share not in tried:
            tried[share] = evaluate(share)
        scaled = np.abs(tried[share] - target) / QR_TOLERANCE
        # what the acceptance counts: the excess over the tolerances; then closeness
        return float(np.sum(np.maximum(scaled - 1, 0) ** 2) + 0.01 * np.sum(scaled**2))

    best = min(COARSE_SHARES, key=cost)
    for share in best + FINE_STEP * np.array([-2, -1, 1, 2]):
        cost(share)
    best = min(tried, key=cost)
    return best, tried[best]


def fit_qr_world(gen, prm, size: str = "demo"):
    """linear_share of the world's ``id`` and ``ood`` cells, fitted to the paper's QR cells.

    Returns ``({kind: share}, {split: (ours [3], paper [3])}, {kind: linear R2})``.
    """
    id_draws = {s.name: s for s in cell_draws(gen, prm, "id", size)}
    ood_draws = cell_draws(gen, prm, "ood", size)[0]
    base_id, base_ood = S.score_cell(gen, prm, "id"), S.score_cell(gen, prm, "ood")
    target_id = paper_cell(prm.name, "id", gen.name, "qr")
    target_ood = paper_cell(prm.name, "ood", gen.name, "qr")
    models: dict[float, LinearMedianQR] = {}

    def train_qr(share: float) -> LinearMedianQR:
        if share not in models:
            cell = replace(base_id, linear_share=share)
            units, rec = split_units(gen, prm, cell, "id", id_draws["train"], size)
            models[share] = LinearMedianQR(units, _labels(rec))
        return models[share]

    def evaluate_id(share: float) -> np.ndarray:
        cell = replace(base_id, linear_share=share)
        units, rec = split_units(gen, prm, cell, "id", id_draws["id"], size)
        return point_metrics(train_qr(share).predict(units), _labels(rec))

    share_id, ours_id = _search_share(evaluate_id, target_id)
    model = train_qr(share_id)

    def evaluate_ood(share: float) -> np.ndarray:
        cell = replace(base_ood, linear_share=share)
        units, rec = split_units(gen, prm, cell, "ood", ood_draws, size)
        return point_metrics(model.predict(units), _labels(rec))

    share_ood, ours_ood = _search_share(evaluate_ood, target_ood)
    cell = replace(base_id, linear_share=share_id)
    units_tr, rec_tr = split_units(gen, prm, cell, "id", id_draws["train"], size)
    train_fit = point_metrics(model.predict(units_tr), _labels(rec_tr))
    per_split = {
        "train": (train_fit, target_id),
        "id": (ours_id, target_id),
        "ood": (ours_ood, target_ood),
    }
    return {"id": share_id, "ood": share_ood}, per_split


def refit_ood_with_dprm(gen, prm, root: Path):
    """The ``ood`` cell's linear_share again, with dprm's own converged QR.

    In distribution the fit's median head and dprm's QR agree to about 0.01 Brier; out of
    distribution they do not (up to 0.08): there the prediction extrapolates along directions
    the training data barely constrain (the nuisance features shift), and where it lands
    depends on the optimiser. So the ``ood`` share is searched with the QR that
    ``dprm train --method qr`` produces: the world is written at paper size (hidden dim
    ``DPRM_QR_DIM``), dprm's QR trained once on its ``train`` split, and only the ``ood``
    split's latent varies with the share. Returns ``(share, ours [3], paper [3])``.
    """
    from dprm.data import read_calibration_set
    from dprm.models.fit import fit

    preset = f"{gen.name}__{prm.name}"
    paths = S.write_world(
        root / preset, preset, size="paper", hidden_dim=DPRM_QR_DIM, progress=False
    )
    model = fit("qr", read_calibration_set(paths["train/calib"]), overrides=CONVERGED_QR, seed=0,
                progress=False)  # fmt: skip
    ood = cell_draws(gen, prm, "ood", "paper")[0]
    embed = S.Embedding(prm, DPRM_QR_DIM)
    target = paper_cell(prm.name, "ood", gen.name, "qr")

    def evaluate(share: float) -> np.ndarray:
        cell = replace(S.score_cell(gen, prm, "ood"), linear_share=share)
        rec = S.simulate(gen, prm, cell, "ood", ood.generator, ood.prm, S.SIZES["paper"].max_steps)
        hidden = embed(rec.latent).astype(np.float16).astype(np.float32)  # as stored
        return point_metrics(model.point_estimate(hidden), _labels(rec))

    share, ours = _search_share(evaluate, target)
    return share, ours, target


def fit_cell(gen, prm, kind: str, start: S.ScoreCell | None = None) -> tuple[S.ScoreCell, list]:
    """Least squares on the tolerance-scaled residuals of all splits of ``kind``."""
    splits = cell_draws(gen, prm, kind)
    target = paper_base(prm.name, kind, gen.name)
    max_steps = S.SIZES["paper"].max_steps

    def residuals(x):
        cell = S.ScoreCell(*x, linear_share=start.linear_share if start else 1.0)
        fit = [
            (base_metrics(gen, prm, cell, kind, s, max_steps) - target) / TOLERANCE for s in splits
        ]
        return np.concatenate(fit + [PRIOR_WEIGHT * (x[1:] - PRIOR_CENTER) / PRIOR_SCALE])

    best = None
    starts = [start] if start else []
    starts += [S.ScoreCell(1.5, 0.4, 0.5), S.ScoreCell(0.0, 0.2, 1.0), S.ScoreCell(2.5, 0.8, 1.5)]
    for x0 in starts:
        res = least_squares(
            residuals,
            np.array([x0.score_bias, x0.score_gain, x0.score_noise]),
            bounds=([-8.0, 0.0, 0.0], [8.0, 3.0, 8.0]),
            diff_step=1e-3,
            x_scale=[1.0, 0.3, 0.5],
        )
        if best is None or res.cost < best.cost:
            best = res
        if np.max(np.abs(best.fun[:-2])) < 0.25:
            break
    share = start.linear_share if start else S.DEFAULT_CELL.linear_share
    cell = S.ScoreCell(*[round(float(v), 4) for v in best.x], linear_share=share)
    per_split = [(s.name, base_metrics(gen, prm, cell, kind, s, max_steps), target) for s in splits]
    return cell, per_split


def format_table(cells: dict[tuple[str, str, str], S.ScoreCell]) -> str:
    lines = [
        f"{'generator':14s} {'prm':11s} {'kind':4s}  score_bias  score_gain  score_noise"
        "  linear_share"
    ]
    for (g, p, k), c in cells.items():
        lines.append(
            f"{g:14s} {p:11s} {k:4s}  {c.score_bias:10.4f}  {c.score_gain:10.4f}  "
            f"{c.score_noise:11.4f}  {c.linear_share:12.4f}"
        )
    return "\n".join(lines)


def write_cells(cells: dict[tuple[str, str, str], S.ScoreCell]) -> None:
    """Write the fitted cells to the package's CSV (atomically); dprm reads it at import."""
    with atomic_path(CELLS_FILE) as tmp:
        tmp.write_text(write_score_cells(cells), encoding="utf-8")


#: ``--park-budget``: full-batch Adam steps at which the Park-start QR is scored, its rate, and
#: the linear shares tried per cell (the coarse grid of the --qr fit)
PARK_CHECKPOINTS = (10, 20, 50, 100, 200, 400, 1000)
PARK_LR = 0.01


def _logit(p: np.ndarray) -> np.ndarray:
    p = np.clip(np.asarray(p, dtype=np.float64), 1e-4, 1 - 1e-4)
    return np.log(p / (1 - p))


def park_budget_world(gen, prm, checkpoints=PARK_CHECKPOINTS, lr=PARK_LR, shares=COARSE_SHARES):
    """Cells of one world a *budget-limited QR from Park et al.'s start* can land on.

    The alternative to "the paper's QR converged": Park et al. convert the PRM's head so that
    every quantile starts at the PRM's own score (head rows w_pos - w_neg, bias copied) and train
    a rank-2 LoRA for 3 epochs at lr 1e-4, which need not converge. Modelled here as the median
    head q = sigmoid(logit(prm_score) + x w + b) on standardised embedding units x [n, 128],
    w = b = 0 at the start (q = Base exactly), full-batch Adam at ``lr`` on the pinball loss at
    0.5, scored after each of ``checkpoints`` steps: the step count is the one number (the
    budget) shared by every cell of the paper. For every ``id`` share the QR is trained on
    ``train`` and scored on ``id``; the ``ood`` cell counts as reachable when *any* ``ood`` share
    lands it with that QR. Returns ``{step: cells reachable (0-2) with the best id share}``: an
    upper bound of what a λ fit could reach under this assumption.
    """
    import torch

    id_draws = {s.name: s for s in cell_draws(gen, prm, "id", "paper")}
    ood_draws = cell_draws(gen, prm, "ood", "paper")[0]
    base_id, base_ood = S.score_cell(gen, prm, "id"), S.score_cell(gen, prm, "ood")
    target = {k: paper_cell(prm.name, k, gen.name, "qr") for k in ("id", "ood")}

    def split(cell, kind, draws):
        units, rec = split_units(gen, prm, cell, kind, draws, "paper")
        return units, _logit(rec.prm_score), _labels(rec)

    ood = [split(replace(base_ood, linear_share=s), "ood", ood_draws) for s in shares]
    reach: dict[int, list[int]] = {step: [] for step in checkpoints}
    for share in shares:
        cell = replace(base_id, linear_share=share)
        units, offset, y = split(cell, "id", id_draws["train"])
        if len(units) > QR_ROWS:  # the same seeded subsample as LinearMedianQR
            rows = np.sort(np.random.default_rng(0).choice(len(units), QR_ROWS, replace=False))
            units, offset, y = units[rows], offset[rows], y[rows]
        mean, scale = units.mean(0), units.std(0) + 1e-6

        def tensors(units, offset, mean=mean, scale=scale):
            x = torch.as_tensor((units - mean) / scale, dtype=torch.float32)
            return x, torch.as_tensor(offset, dtype=torch.float32)

        x, off = tensors(units, offset)
        target_y = torch.as_tensor(y, dtype=torch.float32)
        held_out = split(cell, "id", id_draws["id"])
        evaluated = [(tensors(u, o), labels) for u, o, labels in [held_out, *ood]]
        w = torch.zeros(x.shape[1], requires_grad=True)
        b = torch.zeros((), requires_grad=True)
        opt = torch.optim.Adam([w, b], lr=lr)
        for step in range(max(checkpoints) + 1):
            if step in reach:
                with torch.no_grad():
                    ok = []
                    for (xe, oe), labels in evaluated:
                        p = torch.sigmoid(xe @ w + b + oe).numpy().astype(np.float64)
                        kind = "id" if not ok else "ood"
                        resid = point_metrics(p, labels) - target[kind]
                        ok.append(bool(np.all(np.abs(resid) <= QR_TOLERANCE)))
                reach[step].append(int(ok[0]) + int(any(ok[1:])))
            opt.zero_grad()
            u = target_y - torch.sigmoid(x @ w + b + off)
            loss = torch.maximum(0.5 * u, -0.5 * u).mean()
            loss.backward()
            opt.step()
    return {step: max(counts) for step, counts in reach.items()}


def main_park_budget(args) -> int:
    """``--park-budget``: how many QR cells a budget-limited QR from Park's start can reach."""
    import torch

    torch.set_num_threads(1)
    t0 = time.perf_counter()
    totals = {step: 0 for step in PARK_CHECKPOINTS}
    n = 0
    print(f"QR from Park et al.'s start (q = Base), full-batch Adam lr {PARK_LR}; cells reachable "
          f"(0-2) per budget {list(PARK_CHECKPOINTS)} steps, best id share")  # fmt: skip
    for p in args.prms.split(","):
        for g in args.generators.split(","):
            reach = park_budget_world(S.GENERATORS[g], S.PRMS[p])
            n += 2
            for step, count in reach.items():
                totals[step] += count
            print(f"{g + '__' + p:28s} " + " ".join(f"{reach[s]}" for s in PARK_CHECKPOINTS),
                  f"{time.perf_counter() - t0:.0f}s", flush=True)  # fmt: skip
    best = max(totals, key=totals.get)
    print("\n".join(f"budget {s:5d} steps: {c}/{n} cells reachable" for s, c in totals.items()))
    print(f"best single budget: {best} steps, {totals[best]}/{n}")
    return 0


def main_ood_dprm(args) -> int:
    """``--ood-dprm``: refit each world's ood linear_share with dprm's converged QR."""
    import shutil
    import tempfile

    cells = dict(S.SCORE_CELLS)
    cache = Path(args.cache) if args.cache else None
    rows = pd.read_csv(cache).to_dict("records") if cache and cache.exists() else []
    root = Path(tempfile.mkdtemp(prefix="dprm-fit-ood-"))
    t0 = time.perf_counter()
    try:
        for g in args.generators.split(","):
            for p in args.prms.split(","):
                gen, prm = S.GENERATORS[g], S.PRMS[p]
                mine = [r for r in rows if r["generator"] == g and r["prm"] == p]
                if not mine:
                    share, ours, target = refit_ood_with_dprm(gen, prm, root)
                    shutil.rmtree(root / f"{g}__{p}", ignore_errors=True)
                    mine = [dict(generator=g, prm=p, linear_share=share,
                                 **{f"ours_{m}": v for m, v in zip(METRICS, ours, strict=True)},
                                 **{f"paper_{m}": v for m, v in zip(METRICS, target, strict=True)})]  # fmt: skip
                    rows += mine
                    if cache:
                        pd.DataFrame(rows).to_csv(cache, index=False)
                r = mine[0]
                cells[(g, p, "ood")] = replace(cells[(g, p, "ood")], linear_share=r["linear_share"])
                ours = np.array([r[f"ours_{m}"] for m in METRICS])
                target = np.array([r[f"paper_{m}"] for m in METRICS])
                ok = bool(np.all(np.abs(ours - target) <= QR_TOLERANCE))
                cols = " ".join(f"{o:7.3f}/{t:6.3f}" for o, t in zip(ours, target, strict=True))
                print(f"{g + '__' + p:28s} ood    share {r['linear_share']:.3f} {cols}  "
                      f"{'ok' if ok else 'MISS'}", flush=True)  # fmt: skip
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return finish(cells, t0, args.write)


def finish(cells: dict, t0: float, write: bool) -> int:
    """Print the fitted cell table (grid order) and the time; write it to the package data if asked."""
    order = [(g, p, k) for g in S.GENERATORS for p in S.PRMS for k in ("id", "ood")]
    ordered = {key: cells[key] for key in order if key in cells}
    table = format_table(ordered)
    print()
    print(table)
    print(f"\n{time.perf_counter() - t0:.0f}s")
    if write:
        write_cells(ordered)
        print(f"wrote {CELLS_FILE}")
    return 0


def main_qr(args) -> int:
    """``--qr``: fit each world's linear_share (id and ood) to the paper's QR cells."""
    cells = dict(S.SCORE_CELLS)
    cache = Path(args.cache) if args.cache else None
    done = pd.read_csv(cache) if cache and cache.exists() else pd.DataFrame()
    rows = [] if done.empty else done.to_dict("records")
    t0 = time.perf_counter()
    print(f"QR fit at size {args.size}: ours / paper; tolerance {QR_TOLERANCE.tolist()}")
    for g in args.generators.split(","):
        for p in args.prms.split(","):
            gen, prm = S.GENERATORS[g], S.PRMS[p]
            mine = [r for r in rows if r["generator"] == g and r["prm"] == p]
            if not mine:
                shares, per_split = fit_qr_world(gen, prm, args.size)
                for split, (ours, target) in per_split.items():
                    kind = "ood" if split == "ood" else "id"
                    mine.append(
                        dict(
                            generator=g, prm=p, split=split, linear_share=shares[kind],
                            **{f"ours_{m}": v for m, v in zip(METRICS, ours, strict=True)},
                            **{f"paper_{m}": v for m, v in zip(METRICS, target, strict=True)},
                        )
                    )  # fmt: skip
                rows += mine
                if cache:
                    pd.DataFrame(rows).to_csv(cache, index=False)
            for r in mine:
                kind = "ood" if r["split"] == "ood" else "id"
                cells[(g, p, kind)] = replace(cells[(g, p, kind)], linear_share=r["linear_share"])
                ours = np.array([r[f"ours_{m}"] for m in METRICS])
                target = np.array([r[f"paper_{m}"] for m in METRICS])
                ok = bool(np.all(np.abs(ours - target) <= QR_TOLERANCE))
                cols = " ".join(f"{o:7.3f}/{t:6.3f}" for o, t in zip(ours, target, strict=True))
                print(
                    f"{g + '__' + p:28s} {r['split']:6s} share {r['linear_share']:.3f} {cols}  "
                    f"{'ok' if ok else 'MISS'}",
                    flush=True,
                )
    return finish(cells, t0, args.write)


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--write",
        action="store_true",
        help="write the table to src/dprm/data/synth/score_cells.csv",
    )
    parser.add_argument("--generators", default=",".join(S.GENERATORS))
    parser.add_argument("--prms", default=",".join(S.PRMS))
    parser.add_argument("--kinds", default="id,ood")
    parser.add_argument(
        "--qr", action="store_true", help="fit linear_share to the paper's QR cells instead"
    )
    parser.add_argument(
        "--size", default="demo", choices=sorted(S.SIZES), help="world size of the --qr fit"
    )
    parser.add_argument(
        "--cache", default=None, help="--qr: CSV of finished worlds (resumes; one row per cell)"
    )
    parser.add_argument(
        "--ood-dprm",
        action="store_true",
        help="refit only the ood cells' linear_share with dprm's own converged QR",
    )
    parser.add_argument(
        "--park-budget",
        action="store_true",
        help="count the QR cells a budget-limited QR started at the PRM's score can reach",
    )
    args = parser.parse_args()
    if args.park_budget:
        return main_park_budget(args)
    if args.ood_dprm:
        return main_ood_dprm(args)
    if args.qr:
        return main_qr(args)
    cells = dict(S.SCORE_CELLS)
    worst = 0.0
    t0 = time.perf_counter()
    print(f"{'cell':40s} {'split':6s} {'Brier':>15s} {'PosBrier':>15s} {'ECE':>15s}  (ours/paper)")
    for g in args.generators.split(","):
        for p in args.prms.split(","):
            for kind in args.kinds.split(","):
                gen, prm = S.GENERATORS[g], S.PRMS[p]
                cell, per_split = fit_cell(gen, prm, kind, S.SCORE_CELLS.get((g, p, kind)))
                cells[(g, p, kind)] = cell
                for name, ours, target in per_split:
                    scaled = np.max(np.abs(ours - target) / TOLERANCE)
                    worst = max(worst, scaled)
                    cols = " ".join(f"{o:7.3f}/{t:6.3f}" for o, t in zip(ours, target, strict=True))
                    flag = "ok" if scaled <= 1 else "MISS"
                    print(f"{g + '__' + p + ' ' + kind:40s} {name:6s} {cols}  {flag}", flush=True)
    order = [(g, p, k) for g in S.GENERATORS for p in S.PRMS for k in ("id", "ood")]
    ordered = {key: cells[key] for key in order if key in cells}
    table = format_table(ordered)
    print()
    print(table)
    print(
        f"\nworst |residual| / tolerance = {worst:.2f} (<= 1 passes); {time.perf_counter() - t0:.0f}s"
    )
    if args.write:
        write_cells(ordered)
        print(f"wrote {CELLS_FILE}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
