"""The calibrator protocol every method implements, its predict dispatch and verified save.

The registry is :mod:`dprm.models.registry`; loading a saved directory is
:mod:`dprm.models.storage`.

Like zuko: ``calibrator(hidden, prm_score)`` returns a :class:`QuantileFunction` you query at
levels. A calibrator is an ``nn.Module`` holding its fitted state, including the hidden-state
standardisation, so a saved directory (config.json + model.safetensors) loads back to identical
predictions. What every method declares is spelled out by the abstract :class:`Calibrator`:
``method``, ``kind``, ``config_class``, ``uses_hidden``, :meth:`Calibrator.forward` and
:meth:`Calibrator.fit_model`; nothing is probed with ``hasattr``.

Kinds (docs/design.md section 3), and the one place that branches on them (:func:`predict`):
    ``distribution``: Q(tau | h) at any level in [0, 1], monotone by construction. Point estimate
        = trapezoid over the 11 levels.
    ``levels``: fixed trained levels only (QR). Point estimate = Q(0.5).
    ``point``: a point estimate p_hat only; its "quantile function" is the point mass at p_hat.
"""

from __future__ import annotations

import abc
import hashlib
import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import torch
from torch import Tensor, nn
from torch.nn import functional as F

from dprm.io import DataError, atomic_dir, strict_jsonable
from dprm.metrics import LEVELS_11
from dprm.threads import torch_threads
from dprm.version import __version__

#: file names of a saved calibrator directory
CONFIG_FILE, WEIGHTS_FILE = "config.json", "model.safetensors"
#: the training history (one entry per evaluation; written when the model was fitted here)
HISTORY_FILE = "history.json"
#: trained levels are stored in float32 (0.1 -> 0.10000000149): levels match to this tolerance
LEVEL_TOLERANCE = 1e-6


class QuantileFunction:
    """Conditional quantile functions of p for a batch of records.

    Subclasses implement :meth:`quantile`. ``levels`` is a 1-D tensor [L] in [0, 1]; the result
    is [n, L], clipped to [0, 1].
    """

    kind: ClassVar[str] = "distribution"

    def quantile(self, levels: Tensor) -> Tensor:  # pragma: no cover - interface
        raise NotImplementedError

    def mean(self) -> Tensor:
        """Point estimate p_hat [n] per docs/design.md §3 (trapezoid on the 11 levels)."""
        levels = torch.as_tensor(LEVELS_11, dtype=torch.float32)
        q = self.quantile(levels)
        return torch.trapezoid(q, levels.to(q), dim=1)


class PointMass(QuantileFunction):
    """The degenerate distribution at p_hat [n]: every quantile equals the point estimate."""

    kind = "point"

    def __init__(self, p_hat: Tensor):
        self.p_hat = p_hat.clamp(0.0, 1.0)

    def quantile(self, levels: Tensor) -> Tensor:
        return self.p_hat[:, None].expand(-1, len(levels))

    def mean(self) -> Tensor:
        return self.p_hat


class FixedLevels(QuantileFunction):
    """Quantiles known only at trained levels (QR); asking for another level is an error."""

    kind = "levels"

    def __init__(self, values: Tensor, levels: Tensor):
        self.values = values  # [n, M]
        self.levels = levels  # [M]

    def _columns(self, levels: Tensor) -> Tensor:
        diff = (levels[:, None].double() - self.levels[None, :].double()).abs()
        best = diff.min(dim=1)
        if (best.values > 1e-6).any():
            bad = levels[best.values > 1e-6].tolist()
            raise ValueError(
                f"this calibrator only has quantiles at its trained levels {self.levels.tolist()}; "
                f"asked for {bad}"
            )
        return best.indices

    def quantile(self, levels: Tensor) -> Tensor:
        return self.values[:, self._columns(levels)]

    def mean(self) -> Tensor:
        return self.quantile(torch.tensor([0.5]))[:, 0]


class Standardizer(nn.Module):
    """Per-dimension standardisation of hidden states, fitted once and saved with the model."""

    def __init__(self, dim: int):
        super().__init__()
        self.register_buffer("mean", torch.zeros(dim))
        self.register_buffer("scale", torch.ones(dim))

    @torch.no_grad()
    def fit(self, hidden: np.ndarray, chunk_rows: int = 8192) -> Standardizer:
        """Fit on a (memory-mapped) array [N, D], in chunks with float64 accumulation."""
        n, dim = hidden.shape
        total = np.zeros(dim)
        total_sq = np.zeros(dim)
        for start in range(0, n, chunk_rows):
            block = np.asarray(hidden[start : start + chunk_rows], dtype=np.float64)
            total += block.sum(0)
            total_sq += (block**2).sum(0)
        mean = total / max(n, 1)
        var = np.maximum(total_sq / max(n, 1) - mean**2, 0.0)
        # Constant dimensions carry no information; a unit scale keeps them at zero, not inf.
        scale = np.where(var > 1e-12, np.sqrt(var), 1.0)
        self.mean.copy_(torch.as_tensor(mean, dtype=torch.float32))
        self.scale.copy_(torch.as_tensor(scale, dtype=torch.float32))
        return self

    def forward(self, hidden: Tensor) -> Tensor:
        return (hidden.float() - self.mean) / self.scale

    def linear(self, hidden: Tensor, layer: nn.Linear) -> Tensor:
        """``layer(self(hidden))`` without the standardised copy of ``hidden``.

        The standardisation is folded into the layer, W (h - mean) / scale + b =
        (W / scale) h + (b - (W / scale) mean), so raw rows [n, D] (float16 or float32) go
        through one cast and one matmul: at D = 3584 this halves the time to embed a
        memory-mapped set.
        """
        return self.linear_many(hidden, [layer])[0]

    def linear_many(self, hidden: Tensor, layers: list[nn.Linear]) -> list[Tensor]:
        """``[layer(self(hidden)) for layer in layers]`` in one cast and one matmul.

        An ensemble's members each read the same rows through their own first layer; stacking
        the folded weights [sum(out), D] reads and casts the rows [n, D] once instead of once
        per member (at D = 3584 the cast and the pass over the rows are most of the embedding).
        """
        weight = torch.cat([layer.weight for layer in layers]) / self.scale  # [sum(out), D]
        bias = weight @ -self.mean
        biases = [
            layer.bias if layer.bias is not None else weight.new_zeros(layer.out_features)
            for layer in layers
        ]
        out = F.linear(hidden.float(), weight, bias + torch.cat(biases))
        return list(out.split([layer.out_features for layer in layers], dim=1))


class Calibrator(nn.Module, metaclass=abc.ABCMeta):
    """The protocol: maps (hidden [n, D], prm_score [n]) to a :class:`QuantileFunction`.

    Every method declares, as class attributes, ``kind`` (one of :data:`KINDS`), ``config_class``
    (its hyper-parameter dataclass, or None when it has none) and ``uses_hidden``, and
    implements :meth:`forward` and :meth:`fit_model`; ``method`` is set by :func:`register`.
    The gradient-trained methods inherit :meth:`fit_model` from
    :class:`dprm.models.training.TrainedCalibrator` and write only their loss and
    initialisation. Fitting goes through :func:`dprm.models.fit.fit` (split, config, seed).

    ``config`` is a JSON-ready dict of the resolved hyper-parameters; ``info`` holds fit
    metadata (seed, data path, history summary) saved beside the weights.
    """

    method: ClassVar[str] = "?"
    kind: ClassVar[str] = "distribution"
    #: the hyper-parameter dataclass ``dprm train --set key=value`` resolves; None: no settings
    config_class: ClassVar[type | None] = None
    #: whether the calibrator reads hidden states (point calibrators on the score alone do not)
    uses_hidden: ClassVar[bool] = True
    #: state-dict entries whose length is data-dependent (checked for rank and dtype on load)
    data_sized: ClassVar[tuple[str, ...]] = ()

    def __init__(self, hidden_dim: int, config: dict[str, Any] | None = None):
        super().__init__()
        self.hidden_dim = int(hidden_dim)
        self.config: dict[str, Any] = dict(config or {})
        self.info: dict[str, Any] = {}
        #: the directory it was loaded from (named in errors), None if built in memory
        self.source: str | None = None
        self.standardizer = Standardizer(self.hidden_dim)

    # -- the protocol ---------------------------------------------------------------------
    @abc.abstractmethod
    def forward(self, hidden: Tensor | None, prm_score: Tensor | None = None) -> QuantileFunction:
        """The conditional law of p for a batch.

        Args:
            hidden: raw hidden states [n, D] (float16 or float32; standardised inside), or None
                for calibrators with ``uses_hidden = False``.
            prm_score: PRM scores [n] (float32), or None for calibrators that do not read them.

        Returns:
            a :class:`QuantileFunction` of this calibrator's ``kind``: ``quantile(levels [L])``
            gives [n, L], ``mean()`` gives [n].
        """

    @classmethod
    @abc.abstractmethod
    def fit_model(
        cls, train, val, config: Any, seed: int, progress: bool
    ) -> tuple[Calibrator, list[dict]]:
        """Fit on a question-grouped split; the caller has seeded torch with ``seed``.

        Args:
            train: the :class:`~dprm.data.contract.CalibrationSet` the model is fitted on.
            val: held-out questions for early stopping / scoring.
            config: an instance of ``config_class`` (None when it is None).
            seed: seeds batch order and tau draws.
            progress: show a progress bar.

        Returns:
            (fitted calibrator, history: a list of JSON-ready dicts).
        """

    # -- batched numpy API -----------------------------------------------------------------
    def _batches(self, hidden, prm_score, batch_size: int):
        n = len(prm_score) if hidden is None else hidden.shape[0]
        if hidden is not None and hidden.shape[1] != self.hidden_dim:
            raise DataError(
                None,
                f"hidden states have dimension {hidden.shape[1]}, the calibrator expects {self.hidden_dim}",
            )
        for start in range(0, n, batch_size):
            stop = min(start + batch_size, n)
            h = None
            if hidden is not None and self.uses_hidden:
                # Stored dtype (float16 or float32): the model casts once, with torch's kernels.
                h = torch.from_numpy(np.array(hidden[start:stop]))
            s = None
            if prm_score is not None:
                s = torch.from_numpy(np.array(prm_score[start:stop], dtype=np.float32))
            yield start, stop, h, s

    def _finite(self, values: Tensor, start: int, what: str) -> Tensor:
        """``values`` if all finite, else a :class:`DataError` naming the model and the row."""
        bad = ~torch.isfinite(values)
        if bool(bad.any()):
            row = start + int(bad.nonzero()[0, 0])
            source = self.source or "in memory"
            raise DataError(
                None,
                f"calibrator {self.method!r} ({source}) produced a non-finite {what} at row {row}; "
                "its weights are corrupt or it diverged",
            )
        return values

    @torch.no_grad()
    def quantiles(
        self,
        hidden: np.ndarray | None,
        levels,
        prm_score: np.ndarray | None = None,
        batch_size: int = 8192,
        threads: int | None = None,
    ) -> np.ndarray:
        """Quantiles [N, L] (float32) at ``levels``; hidden states read in chunks of rows.

        Each chunk is embedded once and queried at all levels, so memory stays at one float32
        chunk whatever N is. ``threads``: torch threads for this call only (default: the CLI's
        policy, :mod:`dprm.threads`).

        Raises:
            DataError: an output is NaN or infinite (named by model and row).
        """
        self.eval()
        levels_t = torch.as_tensor(np.asarray(levels, dtype=np.float32))
        n = len(prm_score) if hidden is None else hidden.shape[0]
        out = np.empty((n, len(levels_t)), dtype=np.float32)
        with torch_threads(threads):
            for start, stop, h, s in self._batches(hidden, prm_score, batch_size):
                q = self._finite(self(h, s).quantile(levels_t), start, "quantile")
                out[start:stop] = q.clamp(0.0, 1.0).numpy()
        return out

    @torch.no_grad()
    def point_estimate(
        self, hidden, prm_score=None, batch_size: int = 8192, threads: int | None = None
    ) -> np.ndarray:
        """Point estimates p_hat [N] per docs/design.md §3 (``threads`` as in :meth:`quantiles`).

        Raises:
            DataError: an output is NaN or infinite (named by model and row).
        """
        self.eval()
        n = len(prm_score) if hidden is None else hidden.shape[0]
        out = np.empty(n, dtype=np.float32)
        with torch_threads(threads):
            for start, stop, h, s in self._batches(hidden, prm_score, batch_size):
                p = self._finite(self(h, s).mean(), start, "point estimate")
                out[start:stop] = p.clamp(0.0, 1.0).numpy()
        return out

    @property
    def fixed_levels(self) -> np.ndarray | None:
        """The trained levels of a ``levels`` calibrator, else None."""
        return None

    def beta_level(self, beta: float) -> float | None:
        """The level behind "the beta-quantile" of this calibrator (the one rule for it).

        ``distribution``: beta itself; ``levels``: the largest trained level <= beta (to
        :data:`LEVEL_TOLERANCE`), else the smallest trained level; ``point``: None (the point
        estimate stands in for every quantile).
        """
        return BETA_LEVEL_RULES[self.kind](self, float(beta))

    # -- persistence ---------------------------------------------------------------------------
    def save(
        self,
        directory: str | Path,
        extra_files: dict[str, Any] | None = None,
        *,
        overwrite: bool = False,
    ) -> Path:
        """Write config.json + model.safetensors (+ JSON extras) atomically.

        config.json records the SHA-256 of the weights file, which :func:`load` verifies. A
        model fitted by :func:`dprm.models.fit.fit` also gets its training history as
        ``history.json`` (strict JSON), unless ``extra_files`` names that file itself.

        Raises:
            FileExistsError: ``directory`` exists (and is not an empty folder) and
                ``overwrite`` is False, as ``dprm train`` refuses an existing ``--out``.
        """
        from safetensors.torch import save_file

        directory = Path(directory)
        occupied = directory.exists() and (not directory.is_dir() or any(directory.iterdir()))
        if occupied and not overwrite:
            raise FileExistsError(
                f"{directory} exists; pass overwrite=True to replace it (nothing written)"
            )
        history = getattr(self, "history", None)
        if history is not None:
            extra_files = {HISTORY_FILE: strict_jsonable(history)} | dict(extra_files or {})
        with atomic_dir(directory) as tmp:
            state = {k: v.detach().cpu().contiguous() for k, v in self.state_dict().items()}
            save_file(state, str(tmp / WEIGHTS_FILE), metadata={"method": self.method})
            config = {
                "method": self.method,
                "kind": self.kind,
                "hidden_dim": self.hidden_dim,
                "config": self.config,
                "info": self.info,
                "dprm_version": __version__,
                "weights_sha256": file_sha256(tmp / WEIGHTS_FILE),
            }
            (tmp / CONFIG_FILE).write_text(json.dumps(config, indent=2, default=str) + "\n")
            for name, obj in (extra_files or {}).items():
                (tmp / name).write_text(json.dumps(obj, indent=2, default=str) + "\n")
        return directory

    @classmethod
    def from_config(cls, hidden_dim: int, config: dict[str, Any]) -> Calibrator:
        """Build an unfitted instance with the architecture that ``config`` describes."""
        return cls(hidden_dim, config)


def _beta_level_of_levels(model: Calibrator, beta: float) -> float:
    levels = np.asarray(model.fixed_levels, dtype=np.float64)
    below = np.flatnonzero(levels <= beta + LEVEL_TOLERANCE)
    col = int(below[np.argmax(levels[below])]) if len(below) else int(np.argmin(levels))
    return float(levels[col])


#: kind -> how "the beta-quantile" is read (used by IAS, conformal and the report)
BETA_LEVEL_RULES: dict[str, Callable[[Calibrator, float], float | None]] = {
    "point": lambda model, beta: None,
    "levels": _beta_level_of_levels,
    "distribution": lambda model, beta: beta,
}


# ----------------------------------------------------------------------------- predictions
@dataclass
class Prediction:
    """A calibrator's predictions on N rows: the point estimate and, where it has them, quantiles.

    Attributes:
        kind: the calibrator's kind.
        p: point estimates [N] (float64), per docs/design.md §3.
        levels: levels [L] of ``q`` (None for ``point`` calibrators).
        q: quantiles [N, L] (float64), None for ``point`` calibrators.
    """

    kind: str
    p: np.ndarray
    levels: np.ndarray | None = None
    q: np.ndarray | None = None


def _column(levels: np.ndarray, level: float) -> int:
    return int(np.argmin(np.abs(levels - level)))


def _predict_point(model, hidden, score, levels, batch_size) -> Prediction:
    return Prediction("point", model.point_estimate(hidden, score, batch_size).astype(np.float64))


def _predict_levels(model, hidden, score, levels, batch_size) -> Prediction:
    levels = np.asarray(model.fixed_levels, dtype=np.float64)
    q = model.quantiles(hidden, levels, score, batch_size).astype(np.float64)
    return Prediction("levels", q[:, _column(levels, 0.5)], levels, q)


def _predict_distribution(model, hidden, score, levels, batch_size) -> Prediction:
    from dprm.metrics import trapezoid_mean

    levels = np.asarray(levels, dtype=np.float64)
    q = model.quantiles(hidden, levels, score, batch_size).astype(np.float64)
    columns = [_column(levels, t) for t in LEVELS_11]
    if np.abs(levels[columns] - LEVELS_11).max() > LEVEL_TOLERANCE:
        raise ValueError(f"levels must include the 11 levels {LEVELS_11.tolist()}")
    return Prediction("distribution", trapezoid_mean(q[:, columns]), levels, q)


#: kind -> (model, hidden, prm_score, levels, batch_size) -> Prediction
PREDICT_RULES: dict[str, Callable[..., Prediction]] = {
    "point": _predict_point,
    "levels": _predict_levels,
    "distribution": _predict_distribution,
}


def predict(
    model: Calibrator,
    hidden: np.ndarray | None,
    prm_score: np.ndarray,
    levels=LEVELS_11,
    batch_size: int = 8192,
    threads: int | None = None,
) -> Prediction:
    """The point / levels / distribution branching, once (docs/design.md §3).

    ``point``: p = the calibrator's point estimate, no quantiles. ``levels``: quantiles at the
    trained levels ([N, M]), p = Q(0.5). ``distribution``: quantiles at ``levels`` (which must
    include the 11 levels {0, 0.1, ..., 1}), p = their trapezoid mean over the 11 levels.

    Args:
        model: any calibrator.
        hidden: hidden states [N, D] (ignored when ``model.uses_hidden`` is False).
        prm_score: PRM scores [N].
        levels: levels [L] for ``distribution`` calibrators.
        batch_size: rows per chunk.
        threads: torch threads for this call only (default: the CLI's policy,
            :mod:`dprm.threads`).
    """
    hidden = hidden if model.uses_hidden else None
    with torch_threads(threads):
        return PREDICT_RULES[model.kind](model, hidden, prm_score, levels, batch_size)


def file_sha256(path: Path, chunk: int = 1 << 20) -> str:
    """Hex SHA-256 of a file's bytes."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while block := handle.read(chunk):
            digest.update(block)
    return digest.hexdigest()
