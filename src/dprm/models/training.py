"""The gradient training loop every trained calibrator reuses (docs/design.md §5).

:class:`Trainer` owns everything that is not the objective: the standardised hidden states
(one float32 copy in memory when it fits, else sorted row reads from the memory map), shuffled
batches with tau ~ U(0, 1) per record, Adam + StepLR + gradient clipping, the validation
calibration area every ``eval_every`` steps, patience / min-delta early stopping after a
warm-up, the best checkpoint and a history of dicts. Single-objective methods call
:meth:`Trainer.fit_loss` with ``loss_fn(model, batch)``; the OT min-max writes its own
alternating step and hands it to :meth:`Trainer.run`.

:class:`TrainedCalibrator` is the one ``fit_model`` template of the gradient-trained methods:
build the model, build its trainer, initialise, train, record the summary. A method writes only
its ``loss`` (or, for a min-max, :meth:`TrainedCalibrator.train_steps`), its
:meth:`TrainedCalibrator.initialise` and ``forward_standardized(hidden_std, prm_score)`` (so
validation skips re-standardising).

The loop's parts live in modules of their own and are importable from here too:
:mod:`~dprm.models.training_config` (:class:`TrainConfig`),
:mod:`~dprm.models.standardized_rows` (the standardised rows and their reuse in a search),
:mod:`~dprm.models.checkpoint_selection` (warm-up, best checkpoint, patience) and
:mod:`~dprm.models.weight_average` (Polyak averaging).
"""

from __future__ import annotations

import abc
import contextlib
import contextvars
import copy
import math
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
import torch
from torch import Tensor, nn
from tqdm.auto import tqdm

from dprm import metrics as M
from dprm.data.contract import CalibrationSet
from dprm.models.checkpoint_selection import CheckpointSelection, eligible_from
from dprm.models.interface import Calibrator, QuantileFunction
from dprm.models.standardized_rows import (
    ROWS_CACHE,
    StandardizedRows,
    reuse_standardized_rows,
    standardized_split,
)
from dprm.models.training_config import LR_SCHEDULES, TrainConfig
from dprm.models.weight_average import WeightAverage

__all__ = [
    "EVALUATION_HOOK",
    "LR_SCHEDULES",
    "ROWS_CACHE",
    "Batch",
    "CheckpointSelection",
    "StandardizedRows",
    "TrainConfig",
    "TrainedCalibrator",
    "Trainer",
    "WeightAverage",
    "eligible_from",
    "evaluation_hook",
    "reuse_standardized_rows",
    "standardized_split",
]

#: ``hook(step, metrics)`` called after every validation evaluation of :meth:`Trainer.run`
#: (step 0 included); set through :func:`evaluation_hook`. A tuning search reports the scores
#: to its pruner here, and stops a bad trial by raising from the hook.
EVALUATION_HOOK: contextvars.ContextVar[Callable[[int, dict[str, float]], None] | None] = (
    contextvars.ContextVar("dprm_evaluation_hook", default=None)
)


@contextlib.contextmanager
def evaluation_hook(hook: Callable[[int, dict[str, float]], None]) -> Iterator[None]:
    """Call ``hook(step, metrics)`` after each validation evaluation of trainings in this block."""
    token = EVALUATION_HOOK.set(hook)
    try:
        yield
    finally:
        EVALUATION_HOOK.reset(token)


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
        self.train_rows, self.val_rows = standardized_split(
            train.hidden, val.hidden, model.standardizer, max_bytes
        )
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
        self, params, lr: float | None = None, updates: int | None = None
    ) -> tuple[torch.optim.Optimizer, torch.optim.lr_scheduler.LRScheduler]:
        """Adam + the config's learning-rate schedule.

        Args:
            params: the parameters to optimise.
            lr: base learning rate (default ``config.lr``).
            updates: how many optimiser steps the run makes at most (default ``max_steps``; a
                network updated every k-th batch makes ``max_steps // k``): the schedule is
                stretched to it, so it decays at the same training steps.
        """
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
        return opt, self.scheduler(opt, cfg.max_steps if updates is None else updates)

    def scheduler(self, opt, total_updates: int) -> torch.optim.lr_scheduler.LRScheduler:
        """The learning-rate schedule of ``lr_schedule`` over ``total_updates`` optimiser steps."""
        cfg = self.config
        total = max(1, total_updates)
        if cfg.lr_schedule == "step":
            step_size = max(1, cfg.lr_step_size * total // max(1, cfg.max_steps))
            return torch.optim.lr_scheduler.StepLR(opt, step_size, cfg.lr_gamma)
        floor = cfg.lr_gamma

        def cosine(t: int) -> float:  # multiplier of every group's base rate: 1 -> lr_gamma
            return floor + (1.0 - floor) * 0.5 * (1.0 + math.cos(math.pi * min(t, total) / total))

        return torch.optim.lr_scheduler.LambdaLR(opt, cosine)

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
        """Validation calibration area and WQL (docs/design.md §3) at the trained levels."""
        return self.quantile_scores(self.validation_quantiles())

    def quantile_scores(self, q: np.ndarray) -> dict[str, float]:
        """Calibration area and WQL of validation quantiles ``q`` [N_val, L] at the levels."""
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

        The model is also evaluated before the first step (history entry 0). Checkpoints
        become eligible from :func:`eligible_from` on (the last step always is; with
        ``warmup_steps <= 0`` the initialisation is too). On return the best eligible
        checkpoint is loaded and ``self.summary`` holds best_step, best_score, eligible_from,
        validation_min_step / validation_min_score (the lowest score of any evaluation),
        steps, stopped_early, seconds.

        Raises:
            FloatingPointError: a logged loss or norm is NaN or infinite.
        """
        cfg, model = self.config, self.model
        started = time.perf_counter()
        history: list[dict] = []
        average = WeightAverage(model, cfg.ema_decay) if cfg.ema_decay > 0 else None

        def averaged():  # evaluation and checkpoints see the averaged weights, if any
            return average.swapped() if average is not None else contextlib.nullcontext()

        def snapshot() -> dict:  # the weights evaluated: the averaged ones, if any
            with averaged():
                return copy.deepcopy(model.state_dict())

        metrics = self.evaluate()
        if cfg.select_metric not in metrics:
            raise ValueError(f"select_metric {cfg.select_metric!r} is not one of {sorted(metrics)}")
        selection = CheckpointSelection(
            cfg, metrics[cfg.select_metric], copy.deepcopy(model.state_dict()), metrics
        )
        history.append({"step": 0, **metrics, "seconds": 0.0})
        hook = EVALUATION_HOOK.get()
        if hook is not None:
            hook(0, metrics)
        step = 0
        sums: dict[str, float] = {}
        counts: dict[str, int] = {}  # per key: some logs (e.g. f's loss) skip steps
        batches = self.batches()
        bar = tqdm(total=cfg.max_steps, desc=desc, disable=not self.progress, unit="step")
        model.train()
        for step in range(1, cfg.max_steps + 1):
            logs = step_fn(next(batches), step)
            if average is not None:
                average.update()
            for key, value in logs.items():
                if not math.isfinite(value):
                    raise FloatingPointError(f"{desc}: {key} = {value} at step {step}")
                sums[key] = sums.get(key, 0.0) + value
                counts[key] = counts.get(key, 0) + 1
            bar.update()
            if step % cfg.eval_every and step != cfg.max_steps:
                continue
            with averaged():
                metrics = self.evaluate()
            entry = {"step": step, **{k: v / counts[k] for k, v in sums.items()}, **metrics}
            entry["seconds"] = round(time.perf_counter() - started, 3)
            history.append(entry)
            if hook is not None:
                hook(step, metrics)
            sums, counts = {}, {}
            score = metrics[cfg.select_metric]
            if not selection.observe(step, score, snapshot, metrics):
                continue
            best = f"{selection.best_score:.4f}"
            bar.set_postfix({cfg.select_metric: f"{score:.4f}", "best": best})
            if selection.exhausted:
                break
        bar.close()
        model.load_state_dict(selection.best_state)
        model.eval()
        self.summary = {
            **selection.summary(),
            "steps": step,
            "stopped_early": selection.exhausted,
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


class TrainedCalibrator(Calibrator):
    """The ``fit_model`` template of the gradient-trained calibrators.

    ``fit_model`` builds the model from the config, builds ``trainer_class`` on the split,
    calls :meth:`initialise`, then :meth:`train_steps`, and records the trainer's summary in
    ``info["training"]``. Torch is seeded once by the caller (:func:`dprm.models.fit.fit_split`).
    A method writes ``loss`` (a static ``(model, batch) -> scalar``), usually
    :meth:`initialise`, and :meth:`forward_standardized`; a min-max (``ot``) writes
    :meth:`train_steps` instead of ``loss``.
    """

    trainer_class: ClassVar[type[Trainer]] = Trainer

    @abc.abstractmethod
    def forward_standardized(
        self, hidden_std: Tensor, prm_score: Tensor | None = None
    ) -> QuantileFunction:
        """:meth:`forward` on hidden states the standardiser has already applied ([n, D])."""

    def initialise(self, trainer: Trainer) -> None:
        """Set the starting point from the training rows (default: leave the random init)."""

    @staticmethod
    def loss(model: TrainedCalibrator, batch: Batch) -> Tensor:
        """The scalar training objective of one batch."""
        raise NotImplementedError(f"{model.method} defines neither loss nor train_steps")

    def train_steps(self, trainer: Trainer) -> list[dict]:
        """The optimisation loop (default: Adam on :meth:`loss`); returns the history."""
        return trainer.fit_loss(type(self).loss, desc=self.method)

    @classmethod
    def fit_model(
        cls,
        train: CalibrationSet,
        val: CalibrationSet,
        config: TrainConfig,
        seed: int,
        progress: bool,
    ) -> tuple[TrainedCalibrator, list[dict]]:
        model = cls(train.hidden_dim, vars(config))
        trainer = cls.trainer_class(model, train, val, config, seed=seed, progress=progress)
        model.initialise(trainer)
        history = model.train_steps(trainer)
        model.info["training"] = trainer.summary
        return model, history
