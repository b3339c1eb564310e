"""The calibrator interface every method implements, its registry, and save / load.

Like zuko: ``calibrator(hidden, prm_score)`` returns a :class:`QuantileFunction` you query at
levels. A calibrator is an ``nn.Module`` holding its fitted state, including the hidden-state
standardisation, so a saved directory (config.json + model.safetensors) loads back to identical
predictions.

Kinds:
    ``distribution``: Q(tau | h) at any level in [0, 1], monotone by construction. Point estimate
        = trapezoid over the 11 levels (DESIGN.md section 3).
    ``levels``: fixed trained levels only (QR). Point estimate = Q(0.5).
    ``point``: a point estimate p_hat only; its "quantile function" is the point mass at p_hat.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import torch
from torch import Tensor, nn
from torch.nn import functional as F

from dprm import __version__
from dprm.io import DataError, atomic_dir, read_json
from dprm.metrics import LEVELS_11

#: name -> calibrator class; filled by the ``@register`` decorator of each method module.
REGISTRY: dict[str, type[Calibrator]] = {}


def register(name: str):
    """Class decorator adding a calibrator to :data:`REGISTRY` under ``name``."""

    def deco(cls: type[Calibrator]) -> type[Calibrator]:
        if name in REGISTRY and REGISTRY[name] is not cls:
            raise ValueError(f"calibrator {name!r} registered twice")
        cls.method = name
        REGISTRY[name] = cls
        return cls

    return deco


class QuantileFunction:
    """Conditional quantile functions of p for a batch of records.

    Subclasses implement :meth:`quantile`. ``levels`` is a 1-D tensor [L] in [0, 1]; the result
    is [n, L], clipped to [0, 1].
    """

    kind: ClassVar[str] = "distribution"

    def quantile(self, levels: Tensor) -> Tensor:  # pragma: no cover - interface
        raise NotImplementedError

    def mean(self) -> Tensor:
        """Point estimate p_hat [n] per DESIGN.md section 3 (trapezoid on the 11 levels)."""
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
        weight = layer.weight / self.scale  # [out, D]
        bias = weight @ -self.mean
        if layer.bias is not None:
            bias = bias + layer.bias
        return F.linear(hidden.float(), weight, bias)


class Calibrator(nn.Module):
    """Base class: maps (hidden [n, D], prm_score [n]) to a :class:`QuantileFunction`.

    Subclasses set ``kind``, implement :meth:`forward` and are fitted by ``dprm.train.fit``.
    ``config`` is a JSON-ready dict of the resolved hyper-parameters; ``info`` holds fit
    metadata (seed, data path, history summary) saved beside the weights.
    """

    method: ClassVar[str] = "?"
    kind: ClassVar[str] = "distribution"
    #: whether the calibrator reads hidden states (point calibrators on the score alone do not)
    uses_hidden: ClassVar[bool] = True

    def __init__(self, hidden_dim: int, config: dict[str, Any] | None = None):
        super().__init__()
        self.hidden_dim = int(hidden_dim)
        self.config: dict[str, Any] = dict(config or {})
        self.info: dict[str, Any] = {}
        self.standardizer = Standardizer(self.hidden_dim)

    # -- to implement --------------------------------------------------------------------
    def forward(self, hidden: Tensor, prm_score: Tensor | None = None) -> QuantileFunction:
        raise NotImplementedError

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

    @torch.no_grad()
    def quantiles(
        self,
        hidden: np.ndarray | None,
        levels,
        prm_score: np.ndarray | None = None,
        batch_size: int = 8192,
    ) -> np.ndarray:
        """Quantiles [N, L] (float32) at ``levels``; hidden states read in chunks of rows.

        Each chunk is embedded once and queried at all levels, so memory stays at one float32
        chunk whatever N is.
        """
        self.eval()
        levels_t = torch.as_tensor(np.asarray(levels, dtype=np.float32))
        n = len(prm_score) if hidden is None else hidden.shape[0]
        out = np.empty((n, len(levels_t)), dtype=np.float32)
        for start, stop, h, s in self._batches(hidden, prm_score, batch_size):
            out[start:stop] = self(h, s).quantile(levels_t).clamp(0.0, 1.0).numpy()
        return out

    @torch.no_grad()
    def point_estimate(self, hidden, prm_score=None, batch_size: int = 8192) -> np.ndarray:
        """Point estimates p_hat [N] per DESIGN.md section 3."""
        self.eval()
        n = len(prm_score) if hidden is None else hidden.shape[0]
        out = np.empty(n, dtype=np.float32)
        for start, stop, h, s in self._batches(hidden, prm_score, batch_size):
            out[start:stop] = self(h, s).mean().clamp(0.0, 1.0).numpy()
        return out

    @property
    def fixed_levels(self) -> np.ndarray | None:
        """The trained levels of a ``levels`` calibrator, else None."""
        return None

    # -- persistence ---------------------------------------------------------------------------
    def save(self, directory: str | Path, extra_files: dict[str, Any] | None = None) -> Path:
        """Write config.json + model.safetensors (+ JSON extras) atomically."""
        from safetensors.torch import save_file

        directory = Path(directory)
        with atomic_dir(directory) as tmp:
            state = {k: v.detach().cpu().contiguous() for k, v in self.state_dict().items()}
            save_file(state, str(tmp / "model.safetensors"), metadata={"method": self.method})
            config = {
                "method": self.method,
                "kind": self.kind,
                "hidden_dim": self.hidden_dim,
                "config": self.config,
                "info": self.info,
                "dprm_version": __version__,
            }
            (tmp / "config.json").write_text(json.dumps(config, indent=2, default=str) + "\n")
            for name, obj in (extra_files or {}).items():
                (tmp / name).write_text(json.dumps(obj, indent=2, default=str) + "\n")
        return directory

    @classmethod
    def from_config(cls, hidden_dim: int, config: dict[str, Any]) -> Calibrator:
        """Build an unfitted instance with the architecture that ``config`` describes."""
        return cls(hidden_dim, config)


def load(directory: str | Path) -> Calibrator:
    """Load a calibrator directory written by :meth:`Calibrator.save` (no pickle involved)."""
    from safetensors.torch import load_file

    import dprm.models  # noqa: F401  (fills REGISTRY)

    directory = Path(directory)
    cfg_path = directory / "config.json"
    cfg = read_json(cfg_path)
    method = cfg.get("method")
    if method not in REGISTRY:
        raise DataError(
            cfg_path, f"key 'method': unknown calibrator {method!r}; known: {sorted(REGISTRY)}"
        )
    model = REGISTRY[method].from_config(int(cfg["hidden_dim"]), cfg.get("config", {}))
    weights = directory / "model.safetensors"
    if not weights.exists():
        raise DataError(weights, "file not found")
    state = load_file(str(weights))
    missing, unexpected = model.load_state_dict(state, strict=False)
    if missing or unexpected:
        raise DataError(
            weights, f"weights do not match {method!r}: missing {missing}, unexpected {unexpected}"
        )
    model.info = cfg.get("info", {})
    model.eval()
    return model
