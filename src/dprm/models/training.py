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
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np
import torch
from torch import Tensor, nn
from tqdm.auto import tqdm

from dprm import metrics as M
from dprm.config import ConfigError, in_range
from dprm.data.contract import CalibrationSet
from dprm.models.interface import Calibrator, QuantileFunction

if TYPE_CHECKING:
    from dprm.models.interface import Standardizer

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


#: set through :func:`reuse_standardized_rows`: trainers built while it is set share the
#: standardised copies of the arrays they were given (key: the arrays' ids and the size limit).
ROWS_CACHE: contextvars.ContextVar[dict | None] = contextvars.ContextVar(
    "dprm_rows_cache", default=None
)


@contextlib.contextmanager
def reuse_standardized_rows() -> Iterator[None]:
    """Trainers built in this block on the same (train, val) arrays share their standardised rows.

    A hyper-parameter search trains one model after another on one split; alone, each trainer
    fits the same standardiser and copies the same [N, D] rows again (at D = 3584 and 24k
    training rows, 3.7 s of a 7.4 s qr trial, measured). In this block the first trainer's
    float32 copies and standardiser statistics are reused read-only, so each trial computes
    exactly what it computes alone. The cache (and the arrays it keeps alive) is dropped on exit.
    """
    token = ROWS_CACHE.set({})
    try:
        yield
    finally:
        ROWS_CACHE.reset(token)


#: the learning-rate schedules of ``TrainConfig.lr_schedule``
LR_SCHEDULES = ("step", "cosine")


@dataclass
class TrainConfig:
    """Optimisation settings shared by the gradient-trained calibrators.

    Early stopping follows the paper (patience 175 evaluations, min-delta 1e-4). One evaluation
    embeds every validation row, so it runs every ``eval_every`` = 25 steps; patience then spans
    4375 steps and the default ``max_steps`` = 1000 is the usual stop, with the best checkpoint
    (lowest validation calibration area after ``warmup_steps``) kept. ``ot`` overrides this
    (``OTConfig``: patience 16 evaluations under a 2000-step cap, so that patience acts).
    """

    batch_size: int = in_range(256, ge=1)
    lr: float = in_range(1e-3, gt=0)
    # StepLR: multiply the learning rate by lr_gamma every this many steps
    lr_step_size: int = in_range(500, ge=1)
    lr_gamma: float = in_range(0.5, gt=0)
    weight_decay: float = in_range(0.0, ge=0)
    adam_betas: tuple[float, ...] = in_range((0.9, 0.999), ge=0, lt=1)
    clip_norm: float = in_range(1.0, gt=0)
    max_steps: int = in_range(1000, ge=1)
    eval_every: int = in_range(25, ge=1)
    patience: int = in_range(175, ge=1)
    min_delta: float = in_range(1e-4, ge=0)
    select_metric: str = "calibration_area"  # validation score for early stopping / checkpoint
    # Checkpoints before the warm-up are not eligible and do not count towards patience: the
    # marginal initialisation is already marginally calibrated, and on the way from it to the
    # conditional map the calibration area first rises, so early on it prefers untrained maps.
    # The warm-up is min(warmup_steps, warmup_fraction x max_steps) (:func:`eligible_from`):
    # scaled to the step cap, so a short run is not denied its better early checkpoints
    # (docs/calibrators.md, "Checkpoint selection that fits the run").
    warmup_steps: int = 400
    warmup_fraction: float = in_range(0.25, gt=0, le=1)
    # Learning-rate multiplier of weights that read the hidden state directly (fan-in D). Adam
    # moves every weight by ~lr whatever its gradient's size, so such a layer's output moves by
    # between lr * sqrt(D) and lr * D per step; <= 0 means auto: sqrt(256 / D), i.e. the rates
    # tuned at D = 256 (0.27x at D = 3584, 2.8x at D = 32).
    input_lr_scale: float = 0.0
    # hold the standardised float32 rows in memory up to this size
    preload_max_gb: float = in_range(4.0, ge=0)
    # Exponential moving average of the weights (Polyak averaging), 0 = off: the averaged
    # weights are the ones evaluated, checkpointed and returned; the optimiser keeps stepping
    # the raw ones. Decay d averages over ~1 / (1 - d) steps (debiased, see WeightAverage).
    ema_decay: float = in_range(0.0, ge=0, lt=1)
    # Learning-rate schedule: "step" (StepLR, lr_step_size / lr_gamma) or "cosine" (cosine
    # decay from lr to lr * lr_gamma over max_steps).
    lr_schedule: str = "step"

    def __post_init__(self) -> None:
        if self.lr_schedule not in LR_SCHEDULES:
            raise ConfigError(
                f"lr_schedule must be one of {list(LR_SCHEDULES)}, got {self.lr_schedule!r}"
            )


def eligible_from(config: TrainConfig) -> int:
    """The first step whose checkpoint may be kept: the warm-up scaled to the step cap,
    ``min(warmup_steps, ceil(warmup_fraction x max_steps))`` (0: the initialisation too)."""
    if config.warmup_steps <= 0:
        return 0
    return min(config.warmup_steps, math.ceil(config.warmup_fraction * config.max_steps))


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
                matrix[start : start + chunk] = hidden[start : start + chunk]
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
        """Consecutive blocks of rows (read-only views of the in-memory copy when there is one)."""
        for start in range(0, len(self), size):
            stop = min(start + size, len(self))
            if self.matrix is not None:  # a view: no [size, D] copy per validation pass
                yield start, self.matrix[start:stop]
            else:
                yield start, self[np.arange(start, stop)]

    def bound_to(self, standardizer: Standardizer) -> StandardizedRows:
        """The same rows (shared, not copied) for a model whose standardiser has equal statistics."""
        twin = copy.copy(self)
        twin.standardizer = standardizer
        return twin


def standardized_split(
    train_hidden, val_hidden, standardizer: Standardizer, max_bytes: float
) -> tuple[StandardizedRows, StandardizedRows]:
    """Fit ``standardizer`` on the training rows; both parts' standardised rows.

    Inside :func:`reuse_standardized_rows` a second call on the same arrays loads the first
    call's statistics into ``standardizer`` and shares its rows instead of recomputing them.
    """
    cache = ROWS_CACHE.get()
    key = (id(train_hidden), id(val_hidden), max_bytes)
    if cache is not None and key in cache:
        _, _, stats, train_rows, val_rows = cache[key]
        standardizer.load_state_dict(stats)
        return train_rows.bound_to(standardizer), val_rows.bound_to(standardizer)
    train_rows = StandardizedRows(train_hidden, standardizer, max_bytes, fit=True)
    val_rows = StandardizedRows(val_hidden, standardizer, max_bytes)
    if cache is not None:  # the arrays are kept too, so their ids stay theirs
        stats = {k: v.clone() for k, v in standardizer.state_dict().items()}
        cache[key] = (train_hidden, val_hidden, stats, train_rows, val_rows)
    return train_rows, val_rows


class WeightAverage:
    """Exponential moving average of a module's floating-point parameters (Polyak averaging).

    For a game such as the OT min-max, the iterates of alternating gradient steps circle and
    jitter around the saddle point instead of settling on it; their running average converges
    where the last iterate keeps oscillating (Polyak and Juditsky 1992; for GANs, Yazici et al.,
    ICLR 2019). The average is debiased as Adam's moments are: after t updates it is
    sum_s d^(t-s) (1 - d) theta_s / (1 - d^t), so it spans ~1 / (1 - d) updates from the start.

    Args:
        module: whose parameters are averaged (shadows are kept here, not in the module).
        decay: d in (0, 1).
    """

    def __init__(self, module: nn.Module, decay: float):
        self.decay, self.updates = float(decay), 0
        self.params = [p for p in module.parameters() if p.is_floating_point()]
        self.biased = [torch.zeros_like(p) for p in self.params]

    @torch.no_grad()
    def update(self) -> None:
        """Fold the current parameters into the average."""
        self.updates += 1
        torch._foreach_lerp_(self.biased, [p.detach() for p in self.params], 1.0 - self.decay)

    @contextlib.contextmanager
    def swapped(self) -> Iterator[None]:
        """Within the block the module holds the averaged weights; the live ones come back after.

        Before the first update the average is the current weights (nothing to swap).
        """
        if not self.updates:
            yield
            return
        correction = 1.0 - self.decay**self.updates
        with torch.no_grad():
            live = [p.detach().clone() for p in self.params]
            for p, biased in zip(self.params, self.biased, strict=True):
                p.copy_(biased / correction)
        try:
            yield
        finally:
            with torch.no_grad():
                for p, value in zip(self.params, live, strict=True):
                    p.copy_(value)


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

        metrics = self.evaluate()
        if cfg.select_metric not in metrics:
            raise ValueError(f"select_metric {cfg.select_metric!r} is not one of {sorted(metrics)}")
        best_score, best_step = math.inf, 0
        best_state = copy.deepcopy(model.state_dict())
        warmup = eligible_from(cfg)
        if warmup <= 0:
            best_score = metrics[cfg.select_metric]
        low_score, low_step = metrics[cfg.select_metric], 0  # the minimum, eligible or not
        history.append({"step": 0, **metrics, "seconds": 0.0})
        hook = EVALUATION_HOOK.get()
        if hook is not None:
            hook(0, metrics)
        stale, step = 0, 0
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
            if score < low_score:
                low_score, low_step = score, step
            if step < warmup and step != cfg.max_steps:
                continue
            if score < best_score - cfg.min_delta:
                best_score, best_step, stale = score, step, 0
                with averaged():
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
            # which rule kept it, and the minimum it may have passed over (figures say so)
            "eligible_from": warmup,
            "validation_min_step": low_step,
            "validation_min_score": low_score,
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
