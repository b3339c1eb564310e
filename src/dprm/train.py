"""Fit calibrators (DESIGN.md section 5): split, trainer, early stopping, collapse check.

``fit(method, data)`` is the entry point behind ``dprm train`` and ``dprm.fit``. It splits the
calibration set 80/20 by question (seed 42, fixed), resolves the method's config dataclass and
calls the method's ``fit_model(train, val, config, seed, progress)``. Gradient methods build a
:class:`Trainer`, which owns everything that is not the objective: the standardised hidden
states, shuffled batches with tau ~ U(0, 1) per record, Adam + StepLR + gradient clipping, the
validation calibration area every ``eval_every`` steps, patience / min-delta early stopping and
the best checkpoint. Trainable calibrators implement ``forward_standardized(hidden_std,
prm_score)`` so validation skips re-standardising.
"""

from __future__ import annotations

import copy
import math
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from torch import Tensor, nn
from tqdm.auto import tqdm

from dprm import __version__
from dprm import metrics as M
from dprm.config import ConfigError, load_config, to_dict
from dprm.data.contract import CalibrationSet
from dprm.data.splits import split_by_question

if TYPE_CHECKING:  # the models import this module; import them lazily to avoid a cycle
    from dprm.models.base import Calibrator, Standardizer

#: Split fixed by the paper (GroupShuffleSplit, 20 % of questions, seed 42).
VAL_FRACTION, SPLIT_SEED = 0.2, 42
#: A map is collapsed when both its spread across tau (mean Q(0.9|h) - Q(0.1|h)) and across h
#: (std of the point estimate) are below this share of the validation targets' std.
COLLAPSE_RELATIVE_SPREAD = 0.1


class CollapseError(RuntimeError):
    """Training produced a map nearly constant in tau and h; it is never saved."""


@dataclass
class TrainConfig:
    """Optimisation settings shared by the gradient-trained calibrators.

    Early stopping follows the paper (patience 175 evaluations, min-delta 1e-4). One evaluation
    embeds every validation row, so it runs every ``eval_every`` = 25 steps; patience then spans
    4375 steps and the default ``max_steps`` = 1000 is the usual stop, with the best checkpoint
    (lowest validation calibration area after ``warmup_steps``) kept.
    """

    batch_size: int = 256
    lr: float = 1e-3
    lr_step_size: int = 500  # StepLR: multiply the learning rate by lr_gamma every this many steps
    lr_gamma: float = 0.5
    weight_decay: float = 0.0
    adam_betas: tuple[float, ...] = (0.9, 0.999)
    clip_norm: float = 1.0
    max_steps: int = 1000
    eval_every: int = 25
    patience: int = 175
    min_delta: float = 1e-4
    select_metric: str = "calibration_area"  # validation score for early stopping / checkpoint
    # Checkpoints before this step are not eligible and do not count towards patience: the
    # marginal initialisation is already marginally calibrated, and on the way from it to the
    # conditional map the calibration area first rises, so early on it prefers untrained maps.
    warmup_steps: int = 400
    # Learning-rate multiplier of weights that read the hidden state directly (fan-in D). Adam
    # moves every weight by ~lr whatever its gradient's size, so such a layer's output moves by
    # between lr * sqrt(D) and lr * D per step; <= 0 means auto: sqrt(256 / D), i.e. the rates
    # tuned at D = 256 (0.27x at D = 3584, 2.8x at D = 32).
    input_lr_scale: float = 0.0
    preload_max_gb: float = 4.0  # hold the standardised float32 rows in memory up to this size


@dataclass
class Batch:
    """One training batch; tensors are float32 [b] unless noted."""

    rows: np.ndarray  # [b] indices into the training set, sorted
    hidden: Tensor  # [b, D] standardised hidden states
    target: Tensor  # success_prob y
    tau: Tensor  # source levels ~ U(0, 1), one per record
    n_correct: Tensor
    n_rollouts: Tensor
    prm_score: Tensor


class StandardizedRows:
    """Standardised float32 rows of a (memory-mapped) hidden-state array.

    If the rows fit in ``max_bytes`` they are read once into one float32 matrix (one copy, then
    batches are cheap index selects); otherwise each batch reads its sorted rows from the map.
    """

    def __init__(
        self,
        hidden,
        standardizer: Standardizer,
        max_bytes: float,
        fit: bool = False,
        chunk: int = 8192,
    ):
        self.hidden, self.standardizer = hidden, standardizer
        n, dim = hidden.shape
        self.matrix: Tensor | None = None
        if n * dim * 4 <= max_bytes:
            matrix = np.empty((n, dim), dtype=np.float32)
            for start in range(0, n, chunk):
                matrix[start : start + chunk] = hidden[np.arange(start, min(start + chunk, n))]
            if fit:  # statistics from the in-memory copy: the map is read once
                standardizer.fit(matrix, chunk)
            self.matrix = torch.from_numpy(matrix)
            with torch.no_grad():
                for block in self.matrix.split(chunk):
                    block.copy_(standardizer(block))
        elif fit:
            standardizer.fit(hidden, chunk)

    def __len__(self) -> int:
        return self.hidden.shape[0]

    @torch.no_grad()
    def __getitem__(self, rows: np.ndarray) -> Tensor:
        if self.matrix is not None:
            return self.matrix[torch.from_numpy(rows)]
        block = np.asarray(self.hidden[rows], dtype=np.float32)
        return self.standardizer(torch.from_numpy(block))

    def chunks(self, size: int = 4096) -> Iterator[tuple[int, Tensor]]:
        for start in range(0, len(self), size):
            yield start, self[np.arange(start, min(start + size, len(self)))]


def _column(data: CalibrationSet, name: str) -> Tensor:
    return torch.from_numpy(data.records[name].to_numpy(np.float32, copy=True))


class Trainer:
    """Batches, optimisers, validation, early stopping and checkpointing for one model.

    Args:
        model: a calibrator with ``forward_standardized``; its standardizer is fitted here on the
            training rows (chunked).
        train, val: the question-grouped split.
        config: a :class:`TrainConfig` (or subclass).
        seed: seeds batch order and tau draws (model init is seeded by the caller).
    """

    def __init__(
        self,
        model: Calibrator,
        train: CalibrationSet,
        val: CalibrationSet,
        config: TrainConfig,
        *,
        seed: int,
        progress: bool = True,
    ):
        self.model, self.config, self.progress = model, config, progress
        max_bytes = config.preload_max_gb * 2**30
        self.train_rows = StandardizedRows(train.hidden, model.standardizer, max_bytes, fit=True)
        self.val_rows = StandardizedRows(val.hidden, model.standardizer, max_bytes)
        self.target, self.score = _column(train, "success_prob"), _column(train, "prm_score")
        self.n_rollouts = _column(train, "n_rollouts")
        self.n_correct = torch.as_tensor(train.n_correct, dtype=torch.float32)
        self.val_target = val.records["success_prob"].to_numpy(np.float64)
        self.val_score = _column(val, "prm_score")
        self.levels = np.asarray(
            model.fixed_levels if model.fixed_levels is not None else M.LEVELS_11, np.float64
        )
        self.rng = np.random.default_rng(seed)
        self.tau_generator = torch.Generator().manual_seed(seed)
        self.summary: dict[str, Any] = {}

    # -- pieces ---------------------------------------------------------------------------------
    def batches(self) -> Iterator[Batch]:
        """Endless shuffled batches, a fresh permutation per epoch (paper appendix)."""
        n, size = len(self.train_rows), min(self.config.batch_size, len(self.train_rows))
        while True:
            order = self.rng.permutation(n)
            for start in range(0, n - size + 1, size):  # drop the ragged tail: fixed batch size
                rows = np.sort(order[start : start + size])
                idx = torch.from_numpy(rows)
                yield Batch(
                    rows=rows,
                    hidden=self.train_rows[rows],
                    target=self.target[idx],
                    tau=torch.rand(len(rows), generator=self.tau_generator),
                    n_correct=self.n_correct[idx],
                    n_rollouts=self.n_rollouts[idx],
                    prm_score=self.score[idx],
                )

    def optimizer(
        self, params, lr: float | None = None
    ) -> tuple[torch.optim.Optimizer, torch.optim.lr_scheduler.LRScheduler]:
        """Adam + StepLR with the config's settings."""
        cfg = self.config
        lr = cfg.lr if lr is None else lr
        dim = self.model.hidden_dim
        scale = cfg.input_lr_scale if cfg.input_lr_scale > 0 else math.sqrt(256 / dim)
        params = list(params)
        reads_hidden = [p for p in params if p.dim() == 2 and p.shape[1] == dim]
        ids = {id(p) for p in reads_hidden}
        groups = [{"params": [p for p in params if id(p) not in ids], "lr": lr}]
        groups.append({"params": reads_hidden, "lr": lr * scale})
        groups = [g for g in groups if g["params"]]
        # foreach, not fused: the fused CPU kernel opens a parallel region per tensor, which is
        # ~10x slower for these small models when the cores are shared.
        betas = tuple(cfg.adam_betas)
        if len(betas) != 2:
            raise ValueError(f"adam_betas must be two numbers, got {cfg.adam_betas}")
        opt = torch.optim.Adam(groups, betas=betas, foreach=True, weight_decay=cfg.weight_decay)
        return opt, torch.optim.lr_scheduler.StepLR(opt, cfg.lr_step_size, cfg.lr_gamma)

    def update(self, loss: Tensor, opt, scheduler, params) -> float:
        """zero_grad, backward, clip at ``clip_norm``, step; returns the pre-clip grad norm."""
        opt.zero_grad(set_to_none=True)
        loss.backward()
        norm = nn.utils.clip_grad_norm_(params, self.config.clip_norm)
        opt.step()
        scheduler.step()
        return float(norm)

    @torch.no_grad()
    def validation_quantiles(self) -> np.ndarray:
        """Quantiles [N_val, L] at the trained levels (clipped to [0, 1])."""
        self.model.eval()
        levels = torch.as_tensor(self.levels, dtype=torch.float32)
        out = np.empty((len(self.val_rows), len(levels)), dtype=np.float64)
        for start, block in self.val_rows.chunks():
            stop = start + block.shape[0]
            qf = self.model.forward_standardized(block, self.val_score[start:stop])
            out[start:stop] = qf.quantile(levels).clamp(0.0, 1.0).numpy()
        self.model.train()
        return out

    def evaluate(self) -> dict[str, float]:
        """Validation calibration area and WQL (DESIGN.md section 3) at the trained levels."""
        q = self.validation_quantiles()
        y = self.val_target
        return {
            "calibration_area": M.calibration_area(q, y, self.levels),
            "wql": M.wql(q, y, self.levels),
        }

    # -- loops ----------------------------------------------------------------------------------
    def run(
        self, step_fn: Callable[[Batch, int], dict[str, float]], desc: str = "train"
    ) -> list[dict]:
        """Call ``step_fn(batch, step)`` for steps 1..max_steps with evaluation and early stopping.

        The model is evaluated before the first step too, so the best checkpoint is never worse
        on the validation score than the initialisation. On return the best checkpoint is
        loaded and ``self.summary`` holds best_step, best_score, steps, stopped_early, seconds.
        """
        cfg, model = self.config, self.model
        started = time.perf_counter()
        history: list[dict] = []
        metrics = self.evaluate()
        best_score, best_step = math.inf, 0
        best_state = copy.deepcopy(model.state_dict())
        if cfg.warmup_steps <= 0:
            best_score = metrics[cfg.select_metric]
        history.append({"step": 0, **metrics, "seconds": 0.0})
        stale, step = 0, 0
        sums: dict[str, float] = {}
        counts: dict[str, int] = {}  # per key: some logs (e.g. f's loss) skip steps
        batches = self.batches()
        bar = tqdm(total=cfg.max_steps, desc=desc, disable=not self.progress, unit="step")
        model.train()
        for step in range(1, cfg.max_steps + 1):
            logs = step_fn(next(batches), step)
            for key, value in logs.items():
                if not math.isfinite(value):
                    raise FloatingPointError(f"{desc}: {key} = {value} at step {step}")
                sums[key] = sums.get(key, 0.0) + value
                counts[key] = counts.get(key, 0) + 1
            bar.update()
            if step % cfg.eval_every and step != cfg.max_steps:
                continue
            metrics = self.evaluate()
            entry = {"step": step, **{k: v / counts[k] for k, v in sums.items()}, **metrics}
            entry["seconds"] = round(time.perf_counter() - started, 3)
            history.append(entry)
            sums, counts = {}, {}
            score = metrics[cfg.select_metric]
            if step < cfg.warmup_steps and step != cfg.max_steps:
                continue
            if score < best_score - cfg.min_delta:
                best_score, best_step, stale = score, step, 0
                best_state = copy.deepcopy(model.state_dict())
            else:
                stale += 1
            bar.set_postfix({cfg.select_metric: f"{score:.4f}", "best": f"{best_score:.4f}"})
            if stale >= cfg.patience:
                break
        bar.close()
        model.load_state_dict(best_state)
        model.eval()
        self.summary = {
            "best_step": best_step,
            "best_score": best_score,
            "select_metric": cfg.select_metric,
            "steps": step,
            "stopped_early": stale >= cfg.patience,
            "seconds": round(time.perf_counter() - started, 3),
        }
        return history

    def fit_loss(
        self, loss_fn: Callable[[nn.Module, Batch], Tensor], params=None, desc: str = "train"
    ) -> list[dict]:
        """Single-objective training: minimise ``loss_fn(model, batch)`` with Adam."""
        params = [p for p in (params or self.model.parameters()) if p.requires_grad]
        opt, scheduler = self.optimizer(params)

        def step(batch: Batch, _: int) -> dict[str, float]:
            loss = loss_fn(self.model, batch)
            norm = self.update(loss, opt, scheduler, params)
            return {"loss": loss.item(), "grad_norm": norm}

        return self.run(step, desc)


@torch.no_grad()
def check_collapse(model: Calibrator, val: CalibrationSet, max_rows: int = 20000) -> dict[str, Any]:
    """Is the map nearly constant in tau and in h on validation rows?

    tau_spread = mean_j [Q(0.9 | h_j) - Q(0.1 | h_j)], h_spread = std_j of the point estimate
    (trapezoid over the 11 levels), target_std = std of the validation success_prob. The map is
    collapsed when both spreads are below ``COLLAPSE_RELATIVE_SPREAD * target_std`` (targets with
    no spread cannot collapse), or when any quantile is not finite.
    """
    rows = np.arange(len(val))
    if len(rows) > max_rows:
        rows = np.sort(np.random.default_rng(0).choice(len(rows), max_rows, replace=False))
    part = val.subset(rows)
    score = part.records["prm_score"].to_numpy(np.float32)
    q = model.quantiles(part.hidden, M.LEVELS_11, score).astype(np.float64)
    y = part.records["success_prob"].to_numpy(np.float64)
    finite = bool(np.isfinite(q).all())
    tau_spread = float(np.mean(q[:, 9] - q[:, 1])) if finite else float("nan")
    h_spread = float(np.std(M.trapezoid_mean(q))) if finite else float("nan")
    target_std = float(np.std(y))
    threshold = COLLAPSE_RELATIVE_SPREAD * target_std
    collapsed = (not finite) or (
        target_std > 1e-6 and tau_spread < threshold and h_spread < threshold
    )
    return {
        "collapsed": bool(collapsed),
        "finite": finite,
        "tau_spread": tau_spread,
        "h_spread": h_spread,
        "target_std": target_std,
        "threshold": threshold,
    }


def resolve_config(method: str, config_path=None, overrides: dict | None = None):
    """The method's config dataclass from defaults < TOML (table ``[method]``) < overrides."""
    from dprm.models import REGISTRY

    cls = REGISTRY[method]
    config_class = getattr(cls, "config_class", None)
    if config_class is None:
        if overrides:
            raise ConfigError(f"method {method!r} has no hyper-parameters; got {sorted(overrides)}")
        return None
    return load_config(config_class, config_path, overrides, table=method)


def fit(
    method: str,
    data: CalibrationSet,
    *,
    config_path: str | Path | None = None,
    overrides: dict[str, Any] | None = None,
    seed: int = 0,
    progress: bool = True,
) -> Calibrator:
    """Train calibrator ``method`` on ``data``; deterministic given ``seed``.

    Returns the fitted calibrator (best checkpoint) with ``info`` (seed, resolved config,
    version, data path, sizes, timing, best step, collapse check) and ``history`` set.

    Raises:
        CollapseError: a distribution calibrator collapsed to a map constant in tau and h.
    """
    from dprm.models import REGISTRY

    if method not in REGISTRY:
        raise ConfigError(f"unknown method {method!r}; known: {sorted(REGISTRY)}")
    config = resolve_config(method, config_path, overrides)
    train_rows, val_rows = split_by_question(
        data.records["question_id"].to_numpy(), VAL_FRACTION, SPLIT_SEED
    )
    train, val = data.subset(train_rows), data.subset(val_rows)
    cls = REGISTRY[method]
    started = time.perf_counter()
    torch.manual_seed(seed)
    if hasattr(cls, "fit_model"):
        model, history = cls.fit_model(train, val, config, seed, progress)
    else:  # nothing to fit (e.g. ``base``)
        model, history = cls(data.hidden_dim, {}), []
    model.info.update(
        method=method,
        seed=seed,
        config=to_dict(config) if config is not None else {},
        dprm_version=__version__,
        data_path=str(data.path) if data.path is not None else None,
        n_train=len(train),
        n_val=len(val),
        n_train_questions=int(train.records["question_id"].nunique()),
        n_val_questions=int(val.records["question_id"].nunique()),
        fit_seconds=round(time.perf_counter() - started, 3),
    )
    model.history = history
    if model.kind == "distribution":
        report = check_collapse(model, val)
        model.info["collapse"] = report
        if report["collapsed"]:
            raise CollapseError(
                f"{method} (seed {seed}) collapsed to a map nearly constant in tau and h: "
                f"tau spread {report['tau_spread']:.4g}, h spread {report['h_spread']:.4g} "
                f"< {report['threshold']:.4g} (= {COLLAPSE_RELATIVE_SPREAD} x target std); "
                "refusing to return or save it"
            )
    return model
