"""One-shot GPU check of dprm's PRM wrappers and live loop: what the CPU test suite cannot show.

The test suite runs every PRM wrapper on CPU in float32 with tiny random models; no GPU was
available while dprm was written. This script builds random-weight PRMs with the *real*
checkpoints' widths, heads and vocabularies (the real tokenizers from ``tests/fixtures``), loads
them through dprm's own code paths on a CUDA device in bfloat16, and records what only a GPU run
can show: that loading, placement, dtypes and the one-pass extraction work there, how fast they
are, how much memory they take, and how far bfloat16 drifts from float32.

Sections (``--sections`` runs a subset, in this order):

- ``env``: torch / transformers / peft versions, GPU name and memory, TF32 and SDPA flags.
- ``qwen_prm_7b``: a random model with Qwen2.5-Math-PRM-7B's full config, built on the device,
  saved with ``save_pretrained`` and loaded with ``load_prm(path, device=, dtype="bfloat16")``
  (build, save and load timed separately); on N trajectories the one-pass ``PRM.forward`` (time,
  tokens/s, trajectories/s, peak memory) against the per-prefix batched path, the bf16
  difference between the two, and the dtype/finiteness of what the wrapper returns.
- ``bf16_vs_fp32``: the same saved weights loaded in float32; score and hidden-state drift of
  bf16 against fp32 (random weights: this bounds numerical drift, not a real model's), and the
  one-pass = per-prefix claim in fp32 on the device.
- ``other_prms``: Math-Shepherd, ReasonEval-7B, Skywork-o1-Open-PRM 1.5B / 7B and RLHFlow
  Llama3.1-8B-PRM at their real width, heads and vocabulary but 2 layers, through ``load_prm``
  in bf16; and Park et al.'s LoRA adapter on a 2-layer full-width Qwen PRM, attached the way
  ``dprm embed --adapter`` attaches it.
- ``embed_cli``: ``python -m dprm.cli embed`` end to end on the device (default dtype, then with
  ``--adapter``), read back with dprm's calibration-set reader.
- ``live``: :class:`dprm.live.CalibratedPRM` on the device with calibrators fitted on CPU (``mono``:
  a distribution, monotone by construction; ``qr``: fixed levels, may cross) on random states of
  the PRM's width, scoring a few solutions.
- ``solve``: ``python -m dprm.cli solve --mode bon --rule majority`` end to end on the device,
  the only check of generation + PRM + calibrator + allocation on a GPU: a random-weight
  generator with Qwen2.5-Math-1.5B-Instruct's full config (28 layers, tied embeddings; the real
  Qwen2 tokenizer and chat layout) built on the device in bf16 and saved, the 2-layer
  full-width Qwen PRM, ``mono`` fitted on CPU (as ``live``), on the first 8 MATH-500 questions:
  (a) the C rule, N_max 16, baseline 4; (b) ``--auto-cost 0.25 --auto-seq --round-size 8`` on
  a synthetic training BoN set (contract v2, 40 questions x 16 candidates on the PRM's own
  question states). Checks: exit 0, one ``bon.jsonl`` record per question, every pick =
  ``select_candidate("majority")`` over the paid candidates, (b) budgets summing to
  round(0.25 x 16 x 8), ``summary.json`` rule majority, every candidate graded by math-verify
  (a grading probe in a fresh interpreter first). Reports wall time and generated tokens/s per
  run, the time of every auto-seq round, a batch-1 / batch-16 decode probe of the generator
  (``--max-new-tokens`` is the most that fits about 75 s of generation: random weights write
  to the cap; ``--solve-max-new-tokens`` sets it). math-verify is not installed on the GPU
  machine: carry its wheels (``.whl/``, pip ``--target``) and put them on PYTHONPATH.
- ``imports``: none of math-verify, optuna, matplotlib, vllm (absent on the GPU machine) was
  imported along these paths (in this process; ``solve`` grades in its subprocesses).

Every section is isolated: an exception is recorded (type, message, traceback tail) and the run
goes on. The JSON report is rewritten after every section, so a run cut short keeps what it
measured. Exit code 0 only if every selected section passed. bf16 differences are reported, not
held to tight tolerances: their checks only guard against gross errors (a misplaced readout
gives relative errors near 1).

At full scale the sections up to ``live`` took 154 s on one H100 (most of it writing and reading
the 15 GB Qwen checkpoint) and ``solve`` is sized for about 2.5 minutes; sections not started
420 s into the run are skipped (``--deadline-s``; when ``solve`` is selected, the ones before it
are not started after 420 - 150 s, so ``solve`` keeps its time), so a run ends within about 8
minutes. ``--scale tiny`` shrinks every size (width 64, 2 layers, few trajectories; the real
vocabularies stay) so the whole script runs on CPU in about a minute, to
catch bugs before spending device time (there bf16 runs on the CPU).

Usage:
    PYTHONPATH=src:tests python3 tests/gpu/gpu_check.py [--scale full|tiny] [--device cuda]
        [--out gpu_check.json] [--sections env,qwen_prm_7b,...] [--workdir /tmp] [--keep]
        [--deadline-s 420] [--solve-max-new-tokens N]
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import importlib.metadata
import importlib.util
import json
import math
import os
import platform
import random
import shutil
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
# dprm is not pip-installed on the GPU machine: the source tree and the test fixtures are used
# in place (PYTHONPATH=src:tests does the same; this keeps a bare `python3` call working too).
for _path in (ROOT / "src", ROOT / "tests"):
    if str(_path) not in sys.path:
        sys.path.insert(0, str(_path))

# the GPU machine has no network: never let a hub lookup wait on a timeout (local dirs only)
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

SECTIONS = (
    "env", "qwen_prm_7b", "bf16_vs_fp32", "other_prms", "embed_cli", "live", "solve", "imports"
)  # fmt: skip
#: not installed on the GPU machine; nothing on the checked paths may import them (math-verify
#: is carried there as wheels for section solve, whose CLI subprocesses grade with it)
ABSENT_ON_DEVICE = ("math_verify", "optuna", "matplotlib", "vllm")
#: the math-verify wheels carried to the GPU machine (section solve): versions reported by env
GRADING_DISTRIBUTIONS = ("math-verify", "latex2sympy2_extended", "antlr4-python3-runtime", "sympy")
STARTED = time.perf_counter()


# -- architectures ------------------------------------------------------------------------


@dataclass(frozen=True)
class Arch:
    """The sizes of a released PRM checkpoint (what a config.json holds that matters here)."""

    checkpoint: str
    kind: str  # dprm wrapper kind
    family: str  # transformers config family: qwen2 | mistral | llama
    hidden_size: int
    intermediate_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    vocab_size: int
    max_position_embeddings: int
    rope_theta: float
    rms_norm_eps: float
    source: str
    extra: dict[str, Any] = field(default_factory=dict)

    def sized(self, tiny: bool, layers: int | None = None) -> Arch:
        """This architecture with ``layers`` layers; under ``tiny`` every width shrunk too
        (the vocabulary stays: the real tokenizers produce ids up to it)."""
        changes: dict[str, Any] = {}
        if layers is not None:
            changes["num_hidden_layers"] = layers
        if tiny:
            changes.update(hidden_size=64, intermediate_size=128, num_attention_heads=4,
                           num_key_value_heads=2, num_hidden_layers=2)  # fmt: skip
        return Arch(**{**asdict(self), **changes})

    def numbers(self) -> dict[str, Any]:
        return asdict(self)


_FROM_MEMORY = (
    "numbers of the public config.json, written from memory (no hub access here); "
    "layout as tests/fixtures/real_prms.py builds it"
)
QWEN_PRM_7B = Arch(
    "Qwen/Qwen2.5-Math-PRM-7B", "qwen-prm", "qwen2", 3584, 18944, 28, 28, 4, 152064, 4096,
    10000.0, 1e-6,
    "Qwen/Qwen2.5-Math-PRM-7B config.json (numbers given by the lead); layout: "
    "real_prms.build_qwen_prm (Qwen2ForProcessRewardModel, score.0/score.2, 2 labels)",
)  # fmt: skip
SHEPHERD = Arch(
    "peiyi9979/math-shepherd-mistral-7b-prm", "math-shepherd", "mistral", 4096, 14336, 32, 32,
    8, 32000, 32768, 10000.0, 1e-5,
    "Mistral-7B-v0.1 config.json (Math-Shepherd is a full fine-tune of it, MistralForCausalLM; "
    "vocab 32,000 as real_prms.build_shepherd); " + _FROM_MEMORY,
    {"sliding_window": 4096, "bos_token_id": 1, "eos_token_id": 2},
)  # fmt: skip
REASONEVAL = Arch(
    "GAIR/ReasonEval-7B", "reasoneval", "mistral", 4096, 14336, 32, 32, 8, 32000, 32768,
    10000.0, 1e-5,
    "Mistral-7B-v0.1 body (ReasonEval-7B is WizardMath-7B-V1.1 + score_head [3, 4096], "
    "score_dimension 3, no bias, as real_prms.build_reasoneval); " + _FROM_MEMORY,
    {"sliding_window": 4096, "score_dimension": 3, "use_bias": False},
)  # fmt: skip
SKYWORK_1_5B = Arch(
    "Skywork/Skywork-o1-Open-PRM-Qwen-2.5-1.5B", "skywork-prm", "qwen2", 1536, 8960, 28, 12, 2,
    151936, 4096, 10000.0, 1e-6,
    "Qwen2.5-Math-1.5B-Instruct config.json (its base; the real one ties embeddings, the "
    "fixture's layout stores lm_head separately, which the Skywork class ignores); "
    + _FROM_MEMORY,
)  # fmt: skip
SKYWORK_7B = Arch(
    "Skywork/Skywork-o1-Open-PRM-Qwen-2.5-7B", "skywork-prm", "qwen2", 3584, 18944, 28, 28, 4,
    152064, 4096, 10000.0, 1e-6,
    "Qwen2.5-Math-7B-Instruct config.json (its base); " + _FROM_MEMORY,
)  # fmt: skip
RLHFLOW = Arch(
    "RLHFlow/Llama3.1-8B-PRM-Deepseek-Data", "rlhflow-prm", "llama", 4096, 14336, 32, 32, 8,
    128256, 131072, 500000.0, 1e-5,
    "Llama-3.1-8B-Instruct config.json (its base, incl. llama3 rope scaling); " + _FROM_MEMORY,
    {"bos_token_id": 128000, "eos_token_id": 128009,
     "rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                      "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}},
)  # fmt: skip
OTHER_ARCHS = (SHEPHERD, REASONEVAL, SKYWORK_1_5B, SKYWORK_7B, RLHFLOW)
#: the generator of section ``solve`` (a causal LM, not a PRM: ``kind`` is only a label)
QWEN_MATH_1_5B = Arch(
    "Qwen/Qwen2.5-Math-1.5B-Instruct", "generator", "qwen2", 1536, 8960, 28, 12, 2, 151936,
    4096, 10000.0, 1e-6,
    "Qwen/Qwen2.5-Math-1.5B-Instruct config.json (numbers given by the lead; tied embeddings); "
    "tokenizer: the Qwen2 vocabulary and chat layout of real_prms.qwen_prm_tokenizer",
    {"tie_word_embeddings": True, "bos_token_id": 151643, "eos_token_id": 151645},
)  # fmt: skip


# -- run state ----------------------------------------------------------------------------


@dataclass
class Ctx:
    """What the sections share: settings, the report, built tokenizers and checkpoints."""

    args: argparse.Namespace
    device: str
    dtype: str  # the "bf16" dtype name (bfloat16 unless overridden)
    workdir: Path
    out: Path
    report: dict[str, Any]
    tokenizers: dict[str, Path] = field(default_factory=dict)
    checkpoints: dict[str, Path] = field(default_factory=dict)
    items: list[tuple[str, list[str]]] | None = None
    bf16_outputs: list[Any] | None = None
    selected: list[str] = field(default_factory=list)  # the sections this run was asked for

    @property
    def tiny(self) -> bool:
        return self.args.scale == "tiny"

    @property
    def cuda(self) -> bool:
        return self.device.startswith("cuda")

    def write(self) -> None:
        """Rewrite the JSON report (after every section: a run cut short keeps its numbers)."""
        self.out.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.out.with_suffix(self.out.suffix + ".tmp")
        tmp.write_text(json.dumps(self.report, indent=2, default=_json_default))
        tmp.replace(self.out)


class Checks:
    """Named pass/fail checks of one section, stored in its record as they are made."""

    def __init__(self, rec: dict[str, Any]):
        self.items: list[dict[str, Any]] = rec.setdefault("checks", [])

    def __call__(self, name: str, ok: Any, detail: Any = None) -> bool:
        ok = bool(ok)
        self.items.append({"name": name, "ok": ok, "detail": detail})
        log(f"  check {'ok  ' if ok else 'FAIL'} {name}" + (f": {detail}" if detail else ""))
        return ok


def log(message: str) -> None:
    print(f"[{time.perf_counter() - STARTED:7.1f}s] {message}", flush=True)


def _json_default(value: Any) -> Any:
    import numpy as np

    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, Path):
        return str(value)
    return str(value)


# -- device helpers -----------------------------------------------------------------------


def _sync(ctx: Ctx) -> None:
    import torch

    if ctx.cuda:
        torch.cuda.synchronize()


def _reset_peak(ctx: Ctx) -> None:
    import torch

    if ctx.cuda:
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()


def _memory(ctx: Ctx) -> dict[str, float | None]:
    """GPU memory now and at peak since the last reset (GiB); None on CPU."""
    import torch

    if not ctx.cuda:
        return {"allocated_gib": None, "peak_allocated_gib": None, "peak_reserved_gib": None}
    gib = 2.0**30
    return {
        "allocated_gib": round(torch.cuda.memory_allocated() / gib, 3),
        "peak_allocated_gib": round(torch.cuda.max_memory_allocated() / gib, 3),
        "peak_reserved_gib": round(torch.cuda.max_memory_reserved() / gib, 3),
    }


def _free(ctx: Ctx) -> None:
    import torch

    gc.collect()
    if ctx.cuda:
        torch.cuda.synchronize()
        torch.cuda.empty_cache()


def _timed(ctx: Ctx, fn: Callable[[], Any], repeats: int = 1) -> tuple[float, Any]:
    """(best wall time over ``repeats``, last result), synchronised around each call."""
    best, result = float("inf"), None
    for _ in range(repeats):
        _sync(ctx)
        start = time.perf_counter()
        result = fn()
        _sync(ctx)
        best = min(best, time.perf_counter() - start)
    return best, result


@contextlib.contextmanager
def _building(dtype: Any, device: str) -> Iterator[None]:
    """Create parameters directly on ``device`` in ``dtype``: a 7B model never exists in fp32
    on the host (what ``from_config(dtype=)`` does, plus the device)."""
    import torch

    old = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        with torch.device(device):
            yield
    finally:
        torch.set_default_dtype(old)


def _dir_bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


# -- models, tokenizers, trajectories ------------------------------------------------------


def tokenizer_dir(ctx: Ctx, kind: str) -> Path:
    """The real tokenizer layout of ``kind`` (built once per run from tests/fixtures)."""
    if kind not in ctx.tokenizers:
        from fixtures import real_prms

        builders = {
            "qwen-prm": real_prms.qwen_prm_tokenizer,
            "math-shepherd": real_prms.shepherd_tokenizer,
            "reasoneval": real_prms.reasoneval_tokenizer,
            "skywork-prm": real_prms.skywork_tokenizer,
            "rlhflow-prm": real_prms.llama31_tokenizer,
        }
        ctx.tokenizers[kind] = builders[kind](ctx.workdir / f"tok-{kind}")
    return ctx.tokenizers[kind]


def _config(arch: Arch, **extra: Any) -> Any:
    from transformers import LlamaConfig, MistralConfig, Qwen2Config

    cls = {"qwen2": Qwen2Config, "mistral": MistralConfig, "llama": LlamaConfig}[arch.family]
    return cls(
        vocab_size=arch.vocab_size,
        hidden_size=arch.hidden_size,
        intermediate_size=arch.intermediate_size,
        num_hidden_layers=arch.num_hidden_layers,
        num_attention_heads=arch.num_attention_heads,
        num_key_value_heads=arch.num_key_value_heads,
        max_position_embeddings=arch.max_position_embeddings,
        rope_theta=arch.rope_theta,
        rms_norm_eps=arch.rms_norm_eps,
        **{"tie_word_embeddings": False, **arch.extra, **extra},
    )


def build_checkpoint(ctx: Ctx, arch: Arch, out: Path, seed: int = 0) -> dict[str, Any]:
    """A seeded random model of ``arch`` in the fixtures' layout, built on the device in the
    bf16 dtype and saved (safetensors) with the real tokenizer files beside it.

    Returns timings: ``build_s`` (instantiate + init on the device), ``save_s``, ``bytes``.
    """
    import torch

    from dprm.llm.generate import default_device_dtype
    from dprm.llm.prm_models import qwen_prm_class, reasoneval_class

    _, dtype = default_device_dtype(ctx.device, ctx.dtype)
    tok = tokenizer_dir(ctx, arch.kind)
    _sync(ctx)
    start = time.perf_counter()
    torch.manual_seed(seed)
    v_head: dict[str, Any] = {}
    with _building(dtype, ctx.device), torch.no_grad():
        if arch.kind == "qwen-prm":
            model = qwen_prm_class()(_config(arch, num_labels=2))
            # the fixtures' x40 at width 16, scaled to the width: logits spread over a few
            # units instead of saturating every softmax at 0 or 1 (which would hide drift)
            model.score[2].weight.mul_(40.0 * math.sqrt(16 / arch.hidden_size))
        elif arch.kind == "reasoneval":
            model = reasoneval_class()(_config(arch))
        elif arch.kind == "math-shepherd":
            from transformers import MistralForCausalLM

            model = MistralForCausalLM(_config(arch))
        elif arch.kind == "rlhflow-prm":
            from transformers import LlamaForCausalLM

            model = LlamaForCausalLM(_config(arch))
        elif arch.kind == "skywork-prm":
            from transformers import Qwen2ForCausalLM

            model = Qwen2ForCausalLM(_config(arch))
            # real_prms.build_skywork's value head, scaled to the width for a spread of scores
            scale = 4.0 / math.sqrt(arch.hidden_size)
            v_head = {
                "v_head.summary.weight": torch.randn(1, arch.hidden_size) * scale,
                "v_head.summary.bias": torch.randn(1),
            }
        else:
            raise ValueError(f"no builder for kind {arch.kind!r}")
    _sync(ctx)
    build_s = time.perf_counter() - start
    built = _memory(ctx)  # the weights alone, before anything else is allocated
    # what the installed transformers made of rope_theta / rope_scaling (the key moved in v5)
    rope = getattr(model.config, "rope_parameters", None) or getattr(
        model.config, "rope_theta", None
    )
    start = time.perf_counter()
    if arch.kind == "skywork-prm":
        # one safetensors file holding the causal LM's weights plus v_head.summary.*, as the
        # released checkpoints (real_prms.build_skywork); written directly so that a sharded
        # save_pretrained can never leave an index that points past it
        from safetensors.torch import save_file

        out.mkdir(parents=True, exist_ok=True)
        model.config.architectures = ["Qwen2ForCausalLM"]
        model.config.save_pretrained(out)
        state = {k: v.detach().to("cpu").contiguous() for k, v in model.state_dict().items()}
        state.update({k: v.to("cpu").contiguous() for k, v in v_head.items()})
        save_file(state, str(out / "model.safetensors"), metadata={"format": "pt"})
        del state
    else:
        model.save_pretrained(out)
    for item in tok.iterdir():
        shutil.copy(item, out / item.name)
    save_s = time.perf_counter() - start
    del model, v_head
    _free(ctx)
    size = _dir_bytes(out)
    return {"build_s": round(build_s, 3), "save_s": round(save_s, 3), "bytes": size,
            "save_gb_per_s": round(size / 1e9 / max(save_s, 1e-9), 2),
            "weights_gib_on_device": built["allocated_gib"], "rope": rope}  # fmt: skip


def ensure_checkpoint(ctx: Ctx, key: str, arch: Arch, rec: dict[str, Any]) -> Path:
    """Build ``arch`` once per run (its build/save timings go to the section that built it)."""
    if key not in ctx.checkpoints:
        out = ctx.workdir / key
        log(f"  building {key}: {arch.checkpoint} sizes, {arch.num_hidden_layers} layers")
        info = build_checkpoint(ctx, arch, out)
        rec[f"{key}_checkpoint"] = info
        log(f"  built {key}: {info}")
        ctx.checkpoints[key] = out
    return ctx.checkpoints[key]


def qwen_7b(ctx: Ctx, rec: dict[str, Any]) -> Path:
    return ensure_checkpoint(ctx, "qwen-prm-7b", QWEN_PRM_7B.sized(ctx.tiny), rec)


def qwen_2layer(ctx: Ctx, rec: dict[str, Any]) -> Path:
    """Qwen2.5-Math-PRM-7B's width, heads and vocabulary with 2 layers (sections 4-6)."""
    return ensure_checkpoint(ctx, "qwen-prm-2layer", QWEN_PRM_7B.sized(ctx.tiny, layers=2), rec)


def park_adapter(ctx: Ctx, rec: dict[str, Any]) -> Path:
    """Park et al.'s LoRA adapter on the 2-layer Qwen PRM, made by the fixtures' builder."""
    key = "park-adapter"
    if key not in ctx.checkpoints:
        from fixtures import real_prms

        start = time.perf_counter()
        ctx.checkpoints[key] = real_prms.make_park_adapter(qwen_2layer(ctx, rec), ctx.workdir / key)
        rec["park_adapter_build_s"] = round(time.perf_counter() - start, 3)
    return ctx.checkpoints[key]


def _steps(rng: random.Random, n_steps: int) -> list[str]:
    """Synthetic steps as benchmarks/perf/bench_embed_onepass.py writes them (~30-40 tokens each)."""
    words = ["we", "add", "the", "terms", "then", "divide", "both", "sides", "by", "two", "so",
             "x", "equals", "the", "value"]  # fmt: skip
    out = []
    for k in range(1, n_steps + 1):
        body = " ".join(rng.choice(words) for _ in range(rng.randint(12, 24)))
        out.append(f"## Step {k}: {body}. So $x = {rng.randint(1, 99)}$.")
    return out


def trajectories(n: int, seed: int = 0, steps: tuple[int, int] = (6, 14)) -> list[tuple]:
    """``n`` (question, steps) pairs: MATH-500 problems (dprm's packaged copy) in order."""
    from dprm.llm.questions import packaged_path, read_records

    questions = [row["problem"] for row in read_records(packaged_path("math500"))]
    rng = random.Random(seed)
    return [(questions[i % len(questions)], _steps(rng, rng.randint(*steps))) for i in range(n)]


def _load(ctx: Ctx, path: Path, dtype: str, kind: str | None = None, **options: Any) -> Any:
    from dprm.llm.prm import load_prm

    return load_prm(str(path), kind=kind, device=ctx.device, dtype=dtype, **options)


def _padded_tokens(encoded: list[Any], batch_tokens: int) -> int:
    """Tokens the forward batches hold with padding (PRM.forward's length-sorted batching)."""
    lengths = sorted((len(e.input_ids) for e in encoded), reverse=True)
    total, start = 0, 0
    while start < len(lengths):
        longest = max(1, lengths[start])
        size = max(1, batch_tokens // longest)
        total += longest * len(lengths[start : start + size])
        start += size
    return total


def _output_types(outs: list[Any]) -> dict[str, Any]:
    """What the wrapper hands back: numpy arrays, their dtypes, finiteness."""
    import numpy as np

    def kinds(arrays: list[Any]) -> list[str]:
        return sorted({f"{type(a).__module__}.{type(a).__name__}:{getattr(a, 'dtype', '?')}"
                       for a in arrays})  # fmt: skip

    scores = [o.scores for o in outs]
    hidden = [o.hidden for o in outs]
    numpy_ok = all(isinstance(a, np.ndarray) for a in scores + hidden)
    return {
        "score_types": kinds(scores),
        "hidden_types": kinds(hidden),
        "numpy": numpy_ok,
        "float_dtypes": numpy_ok
        and all(a.dtype in (np.float32, np.float16) for a in scores + hidden),
        "finite": numpy_ok and all(np.isfinite(a).all() for a in scores + hidden),
        "in_unit_interval": numpy_ok and all(((a >= 0) & (a <= 1)).all() for a in scores if a.size),
    }


def _drift(a: list[Any], b: list[Any]) -> dict[str, float]:
    """Score and hidden-state differences of two runs over the same steps (b is the reference):
    max/mean |Δscore|, max |Δhidden|, and ‖Δh‖/‖h‖ per step (median, max)."""
    import numpy as np

    ds = np.concatenate(
        [np.abs(x.scores.astype(np.float64) - y.scores) for x, y in zip(a, b, strict=True)]
    )
    dh, rel = [], []
    for x, y in zip(a, b, strict=True):
        diff = x.hidden.astype(np.float64) - y.hidden.astype(np.float64)
        dh.append(np.abs(diff).max())
        rel.append(
            np.linalg.norm(diff, axis=1) / np.maximum(np.linalg.norm(y.hidden, axis=1), 1e-12)
        )
    rel_all = np.concatenate(rel)
    return {
        "steps": int(len(ds)),
        "score_abs_max": float(ds.max()),
        "score_abs_mean": float(ds.mean()),
        "hidden_abs_max": float(max(dh)),
        "hidden_rel_median": float(np.median(rel_all)),
        "hidden_rel_max": float(rel_all.max()),
    }  # fmt: skip


def _per_prefix_as_outputs(outs: list[Any], prefix_outs: list[Any], items: list[tuple]) -> list:
    """Per-prefix results regrouped as one-pass outputs: step t of trajectory i is the last
    readout of its t-step prefix (so :func:`_drift` compares like with like)."""
    import numpy as np

    from dprm.llm.prm_interface import StepOutput

    grouped, it = [], iter(prefix_outs)
    for _, steps in items[: len(outs)]:
        rows = [next(it) for _ in steps]
        grouped.append(StepOutput(np.array([r.scores[-1] for r in rows], np.float32),
                                  np.stack([r.hidden[-1] for r in rows]), False))  # fmt: skip
    return grouped


# -- sections -----------------------------------------------------------------------------


def section_env(ctx: Ctx, rec: dict[str, Any]) -> None:
    import torch
    import transformers

    check = Checks(rec)
    versions = {"python": platform.python_version(), "torch": torch.__version__,
                "transformers": transformers.__version__, "torch_cuda": torch.version.cuda}  # fmt: skip
    for name in ("peft", "accelerate", "safetensors", "tokenizers", "numpy", "pandas"):
        try:
            versions[name] = __import__(name).__version__
        except Exception as err:  # noqa: BLE001 - a missing package is a finding, not a crash
            versions[name] = f"unavailable: {type(err).__name__}"
    for name in GRADING_DISTRIBUTIONS:  # metadata only: nothing is imported
        try:
            versions[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            versions[name] = "not installed"
    rec["versions"] = versions
    rec["device"], rec["dtype"], rec["scale"] = ctx.device, ctx.dtype, ctx.args.scale
    rec["absent_on_device_installed_here"] = {
        m: importlib.util.find_spec(m) is not None for m in ABSENT_ON_DEVICE
    }
    rec["cuda_available"] = torch.cuda.is_available()
    if ctx.cuda:
        props = torch.cuda.get_device_properties(0)
        rec["gpu"] = {
            "name": props.name,
            "capability": f"{props.major}.{props.minor}",
            "total_memory_gib": round(props.total_memory / 2.0**30, 2),
            "count": torch.cuda.device_count(),
            "bf16_supported": torch.cuda.is_bf16_supported(),
            "tf32_matmul": torch.backends.cuda.matmul.allow_tf32,
            "tf32_cudnn": torch.backends.cudnn.allow_tf32,
            "float32_matmul_precision": torch.get_float32_matmul_precision(),
            "sdpa_flash": torch.backends.cuda.flash_sdp_enabled(),
            "sdpa_mem_efficient": torch.backends.cuda.mem_efficient_sdp_enabled(),
            "sdpa_math": torch.backends.cuda.math_sdp_enabled(),
        }
        check("cuda device visible", torch.cuda.device_count() >= 1, rec["gpu"]["name"])
        check("bf16 supported", rec["gpu"]["bf16_supported"])
    else:
        rec["gpu"] = None  # a CPU run (--scale tiny) checks the code paths, not the device
    free = shutil.disk_usage(ctx.workdir)
    rec["workdir"] = str(ctx.workdir)
    rec["workdir_free_gib"] = round(free.free / 2.0**30, 1)
    rec["summary"] = f"torch {torch.__version__}, transformers {transformers.__version__}" + (
        f", {rec['gpu']['name']}" if ctx.cuda else ", cpu"
    )


def section_qwen_prm_7b(ctx: Ctx, rec: dict[str, Any]) -> None:
    import numpy as np

    check = Checks(rec)
    rec["config"] = QWEN_PRM_7B.sized(ctx.tiny).numbers()
    path = qwen_7b(ctx, rec)
    _free(ctx)
    _reset_peak(ctx)
    # kind inferred from config.json, the path users hit with a local directory
    load_s, prm = _timed(ctx, lambda: _load(ctx, path, ctx.dtype))
    rec["load_s"] = round(load_s, 3)
    # read from the page cache (the file was just written): a cold disk would be slower
    rec["load_gb_per_s"] = round(_dir_bytes(path) / 1e9 / load_s, 2)
    rec["after_load"] = _memory(ctx)
    rec["wrapper"] = {"kind": prm.kind, "dtype": str(prm.dtype), "device": prm.device,
                      "param_dtype": str(next(prm.model.parameters()).dtype),
                      "param_device": str(next(prm.model.parameters()).device),
                      "attn_implementation": getattr(prm.model.config, "_attn_implementation", None),
                      "max_tokens": prm.max_tokens, "batch_tokens": prm.batch_tokens}  # fmt: skip
    log(f"  loaded in {load_s:.1f}s: {rec['wrapper']}")
    check("kind inferred as qwen-prm", prm.kind == "qwen-prm", prm.kind)
    check("weights on the device", rec["wrapper"]["param_device"].startswith(ctx.device))

    n = ctx.args.trajectories or (8 if ctx.tiny else 64)
    items = trajectories(n)
    one_pass = [prm.prepare(q, steps) for q, steps in items]
    prefixes = [prm.prepare(q, steps[:t]) for q, steps in items for t in range(1, len(steps) + 1)]
    tokens_one = sum(len(e.input_ids) for e in one_pass)
    tokens_prefix = sum(len(e.input_ids) for e in prefixes)
    rec["inputs"] = {
        "trajectories": len(items),
        "steps": sum(len(s) for _, s in items),
        "prefixes": len(prefixes),
        "tokens_one_pass": tokens_one,
        "tokens_per_prefix": tokens_prefix,
        "padded_tokens_one_pass": _padded_tokens(one_pass, prm.batch_tokens),
        "padded_tokens_per_prefix": _padded_tokens(prefixes, prm.batch_tokens),
        "longest": max(len(e.input_ids) for e in one_pass),
    }
    log(f"  inputs: {rec['inputs']}")
    check("no input truncated", not any(e.truncated for e in one_pass + prefixes))

    prm.forward(one_pass[:2])  # warm-up: kernel selection and allocator growth are not timed
    prm.forward(prefixes[:4])
    _reset_peak(ctx)
    t_one, outs = _timed(ctx, partial(prm.forward, one_pass), repeats=3)
    mem_one = _memory(ctx)
    _reset_peak(ctx)
    t_prefix, prefix_outs = _timed(ctx, partial(prm.forward, prefixes), repeats=1)
    mem_prefix = _memory(ctx)
    rec["one_pass"] = {
        "seconds": round(t_one, 4),
        "tokens_per_s": round(tokens_one / t_one, 1),
        "trajectories_per_s": round(len(items) / t_one, 2),
        **mem_one,
    }
    rec["per_prefix"] = {
        "seconds": round(t_prefix, 4),
        "tokens_per_s": round(tokens_prefix / t_prefix, 1),
        "trajectories_per_s": round(len(items) / t_prefix, 2),
        **mem_prefix,
    }
    rec["speedup_one_pass_vs_per_prefix"] = round(t_prefix / t_one, 2)
    rec["token_ratio_bound"] = round(tokens_prefix / tokens_one, 2)
    log(f"  one-pass {rec['one_pass']}")
    log(f"  per-prefix {rec['per_prefix']}")
    log(
        f"  speed-up {rec['speedup_one_pass_vs_per_prefix']}x (token bound {rec['token_ratio_bound']}x)"
    )

    rec["output_types"] = types = _output_types(outs + prefix_outs)
    check("outputs are float32/float16 numpy arrays", types["float_dtypes"], types)
    check("scores and hidden states finite", types["finite"])
    check("scores in [0, 1]", types["in_unit_interval"])
    check(
        "one score per step",
        all(len(o.scores) == len(s) for o, (_, s) in zip(outs, items, strict=True)),
    )
    check("hidden width", all(o.hidden.shape[1] == prm.hidden_dim for o in outs), prm.hidden_dim)
    drift = _drift(outs, _per_prefix_as_outputs(outs, prefix_outs, items))
    rec["one_pass_vs_per_prefix_bf16"] = drift
    log(f"  one-pass vs per-prefix ({ctx.dtype}): {drift}")
    # bf16: no tight tolerance; a misplaced readout would give relative errors near 1
    check("one-pass ~ per-prefix (gross-error guard: median rel < 0.2)",
          drift["hidden_rel_median"] < 0.2, drift["hidden_rel_median"])  # fmt: skip
    scores = np.concatenate([o.scores for o in outs])
    rec["score_spread"] = {"min": float(scores.min()), "median": float(np.median(scores)),
                           "max": float(scores.max()), "std": float(scores.std())}  # fmt: skip
    ctx.items, ctx.bf16_outputs = items, outs
    rec["summary"] = (
        f"load {load_s:.1f}s, one-pass {t_one:.2f}s ({rec['one_pass']['tokens_per_s']:.0f} tok/s), "
        f"x{rec['speedup_one_pass_vs_per_prefix']} vs per-prefix, "
        f"peak {mem_one['peak_allocated_gib']} GiB"
    )
    del prm, outs, prefix_outs


def section_bf16_vs_fp32(ctx: Ctx, rec: dict[str, Any]) -> None:
    check = Checks(rec)
    caveat = ("random weights: this bounds the numerical drift of bf16 against fp32 on these "
              "shapes, not the drift of the real model")  # fmt: skip
    rec["caveat"] = caveat
    log(f"  note: {caveat}")
    path = qwen_7b(ctx, rec)
    if ctx.bf16_outputs is None or ctx.items is None:  # run without section qwen_prm_7b
        n = ctx.args.trajectories or (8 if ctx.tiny else 64)
        ctx.items = trajectories(n)
        prm = _load(ctx, path, ctx.dtype)
        ctx.bf16_outputs = prm.forward([prm.prepare(q, s) for q, s in ctx.items])
        rec["bf16_recomputed"] = True
        del prm
    _free(ctx)  # the bf16 model is gone before the fp32 copy arrives
    rec["before_load"] = _memory(ctx)
    _reset_peak(ctx)
    load_s, prm = _timed(ctx, lambda: _load(ctx, path, "float32"))
    rec["load_s"] = round(load_s, 3)
    rec["after_load"] = _memory(ctx)
    rec["param_dtype"] = str(next(prm.model.parameters()).dtype)
    check("fp32 weights", rec["param_dtype"] == "torch.float32", rec["param_dtype"])
    items = ctx.items
    one_pass = [prm.prepare(q, s) for q, s in items]
    prm.forward(one_pass[:2])
    _reset_peak(ctx)
    t_fp32, outs = _timed(ctx, partial(prm.forward, one_pass))
    rec["fp32_one_pass"] = {"seconds": round(t_fp32, 4), **_memory(ctx),
                            "tokens_per_s": round(sum(len(e.input_ids) for e in one_pass) / t_fp32, 1)}  # fmt: skip
    types = _output_types(outs)
    check("fp32 outputs finite", types["finite"], types)
    drift = _drift(ctx.bf16_outputs, outs)
    rec["bf16_vs_fp32"] = drift
    log(f"  bf16 vs fp32: {drift}")
    check("bf16 ~ fp32 (gross-error guard: median rel < 0.2)", drift["hidden_rel_median"] < 0.2,
          drift["hidden_rel_median"])  # fmt: skip

    # the one-pass = per-prefix identity, claimed to 1e-4 in fp32 (tested on CPU only)
    k = min(len(items), 4 if ctx.tiny else 8)
    sub = items[:k]
    prefixes = [prm.prepare(q, s[:t]) for q, s in sub for t in range(1, len(s) + 1)]
    t_prefix, prefix_outs = _timed(ctx, partial(prm.forward, prefixes))
    identity = _drift(outs[:k], _per_prefix_as_outputs(outs[:k], prefix_outs, sub))
    identity["within_1e-4"] = identity["hidden_abs_max"] <= 1e-4
    identity["per_prefix_seconds"] = round(t_prefix, 3)
    rec["fp32_one_pass_vs_per_prefix"] = identity
    log(f"  fp32 one-pass vs per-prefix on {k} trajectories: {identity}")
    check("fp32 one-pass = per-prefix (guard 1e-3; the claim is 1e-4: see within_1e-4)",
          identity["hidden_abs_max"] <= 1e-3, identity["hidden_abs_max"])  # fmt: skip
    rec["summary"] = (
        f"|Δscore| max {drift['score_abs_max']:.2e} mean {drift['score_abs_mean']:.2e}, "
        f"hidden rel median {drift['hidden_rel_median']:.2e} max {drift['hidden_rel_max']:.2e}, "
        f"fp32 peak {rec['fp32_one_pass']['peak_allocated_gib']} GiB"
    )
    del prm, outs, prefix_outs
    _free(ctx)
    if not ctx.args.keep:  # 15 GB of disk back before the other checkpoints are written
        shutil.rmtree(ctx.checkpoints.pop("qwen-prm-7b"), ignore_errors=True)


def _check_prm_outputs(ctx: Ctx, prm: Any, items: list[tuple], hidden: int, sub: dict) -> bool:
    """Forward ``items`` through ``prm``; record time, memory, score range; True if all ok."""
    encoded = [prm.prepare(q, s) for q, s in items]
    prm.forward(encoded[:1])
    _reset_peak(ctx)
    seconds, outs = _timed(ctx, lambda: prm.forward(encoded))
    types = _output_types(outs)
    sub.update(forward_s=round(seconds, 4), tokens=sum(len(e.input_ids) for e in encoded),
               **_memory(ctx), output_types=types,
               hidden_width=int(outs[0].hidden.shape[1]),
               truncated=int(sum(e.truncated for e in encoded)),
               score_min=float(min(o.scores.min() for o in outs)),
               score_max=float(max(o.scores.max() for o in outs)))  # fmt: skip
    sub["ok"] = bool(
        types["float_dtypes"] and types["finite"] and types["in_unit_interval"]
        and sub["hidden_width"] == hidden and prm.hidden_dim == hidden
        and all(len(o.scores) == len(s) for o, (_, s) in zip(outs, items, strict=True))
    )  # fmt: skip
    return sub["ok"]


def section_other_prms(ctx: Ctx, rec: dict[str, Any]) -> None:
    import numpy as np

    check = Checks(rec)
    n = ctx.args.other_trajectories or (4 if ctx.tiny else 8)
    items = trajectories(n, seed=1, steps=(3, 8))
    rec["models"] = {}
    for real in OTHER_ARCHS:
        arch = real.sized(ctx.tiny, layers=2)
        sub: dict[str, Any] = {"real_config": real.numbers(), "built_config": arch.numbers()}
        rec["models"][real.checkpoint] = sub
        log(f"  {real.checkpoint} ({arch.kind}): width {arch.hidden_size}, vocab {arch.vocab_size}")
        out = ctx.workdir / f"other-{arch.kind}-{arch.hidden_size}"
        try:
            sub["checkpoint"] = build_checkpoint(ctx, arch, out)
            _reset_peak(ctx)
            load_s, prm = _timed(ctx, lambda a=arch, o=out: _load(ctx, o, ctx.dtype, kind=a.kind))
            sub["load_s"] = round(load_s, 3)
            sub["param_dtype"] = str(next(prm.model.parameters()).dtype)
            ok = _check_prm_outputs(ctx, prm, items, arch.hidden_size, sub)
            log(f"    build {sub['checkpoint']['build_s']}s save {sub['checkpoint']['save_s']}s "
                f"load {load_s:.1f}s forward {sub['forward_s']}s scores "
                f"[{sub['score_min']:.3f}, {sub['score_max']:.3f}]")  # fmt: skip
            check(f"{real.checkpoint}: finite scores in [0, 1], width {arch.hidden_size}", ok,
                  {k: sub[k] for k in ("hidden_width", "truncated", "score_min", "score_max")})  # fmt: skip
            del prm
        except Exception as err:  # noqa: BLE001 - one model failing must not hide the others
            sub["error"] = _error(err)
            check(f"{real.checkpoint}: loads and scores", False, sub["error"]["message"])
        finally:
            _free(ctx)
            shutil.rmtree(out, ignore_errors=True)

    # Park et al.'s adapter, attached the way `dprm embed --adapter` attaches it
    sub = {}
    rec["park_adapter"] = sub
    try:
        from dprm.llm.park_adapter import attach_adapter

        width = QWEN_PRM_7B.sized(ctx.tiny).hidden_size
        prm_dir, adapter = qwen_2layer(ctx, rec), park_adapter(ctx, rec)
        prm = _load(ctx, prm_dir, ctx.dtype, kind="qwen-prm")
        encoded = [prm.prepare(q, s) for q, s in items]
        plain = prm.forward(encoded)
        start = time.perf_counter()
        attach_adapter(prm, str(adapter))
        sub["attach_s"] = round(time.perf_counter() - start, 3)
        ok = _check_prm_outputs(ctx, prm, items, width, sub)
        outs = prm.forward(encoded)
        quantiles = [o.quantiles for o in outs]
        shaped = all(
            q is not None and q.shape == (len(o.scores), 3)
            for q, o in zip(quantiles, outs, strict=True)
        )
        sub["quantile_types"] = sorted({str(getattr(q, "dtype", None)) for q in quantiles})
        good = shaped and all(
            np.isfinite(q).all() and ((q >= 0) & (q <= 1)).all() for q in quantiles
        )
        stacked = np.concatenate(quantiles) if shaped else np.zeros((0, 3))
        sub["quantile_rows_monotone"] = (
            float((np.diff(stacked, axis=1) >= 0).all(1).mean()) if len(stacked) else None
        )
        sub["lora_dtypes"] = sorted(
            {str(p.dtype) for n_, p in prm.model.named_parameters() if "lora_" in n_}
        )
        sub["lora_devices"] = sorted(
            {str(p.device) for n_, p in prm.model.named_parameters() if "lora_" in n_}
        )
        base = _drift(outs, plain)  # the raw score and hidden state stay the base PRM's
        sub["adapter_off_vs_plain"] = base
        log(f"    adapter: quantiles {sub['quantile_types']} monotone rows "
            f"{sub['quantile_rows_monotone']}, lora {sub['lora_dtypes']} on {sub['lora_devices']}, "
            f"base drift {base['hidden_abs_max']:.2e}")  # fmt: skip
        check("park adapter: base outputs ok", ok)
        check("park adapter: quantiles [T, 3] finite in [0, 1]", good, sub["quantile_types"])
        check("park adapter: LoRA weights on the device",
              all(d.startswith(ctx.device) for d in sub["lora_devices"]), sub["lora_devices"])  # fmt: skip
        # the adapter-off pass must be the base PRM's computation: any difference is a bug
        check("park adapter: raw score / hidden state = the plain PRM's (≤ 1e-3)",
              base["hidden_abs_max"] <= 1e-3 and base["score_abs_max"] <= 1e-3,
              {"hidden": base["hidden_abs_max"], "score": base["score_abs_max"]})  # fmt: skip
        del prm, plain, outs
    except Exception as err:  # noqa: BLE001
        sub["error"] = _error(err)
        check("park adapter: loads and scores", False, sub["error"]["message"])
    finally:
        _free(ctx)
    ok = sum(1 for m in rec["models"].values() if m.get("ok"))
    park_ok = all(c["ok"] for c in check.items if c["name"].startswith("park adapter"))
    rec["summary"] = f"{ok}/{len(OTHER_ARCHS)} PRMs ok, adapter {'ok' if park_ok else 'FAIL'}"


def _labels(n_questions: int) -> Any:
    """Contract label rows for every prefix of 2 synthetic trajectories per MATH-500 question
    (tests/llm/tiny_models.label_rows, as tests/llm/test_embed.py builds them)."""
    import pandas as pd

    from dprm.llm.prompts import join_steps
    from llm import tiny_models

    rows = []
    for i, (question, steps) in enumerate(trajectories(2 * n_questions, seed=2, steps=(3, 6))):
        if i % 2 == 0:
            first = question  # both responses of a question answer the same question text
        rows.append({"question_id": f"math500/{i // 2}", "response_id": i % 2,
                     "question": first, "answer": "0", "response": join_steps(steps)})  # fmt: skip
    frame = pd.DataFrame(rows)
    return tiny_models.label_rows(frame)


def _run_cli(ctx: Ctx, args: list[str], sub: dict[str, Any]) -> int:
    """``python -m dprm.cli ARGS`` in a subprocess with the source tree on PYTHONPATH."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        [str(ROOT / "src"), str(ROOT / "tests"), *filter(None, [env.get("PYTHONPATH")])]
    )
    command = [sys.executable, "-m", "dprm.cli", *args]
    sub["command"] = " ".join(command)
    start = time.perf_counter()
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=300)
    sub["seconds"] = round(time.perf_counter() - start, 2)
    sub["returncode"] = done.returncode
    sub["stdout_tail"] = done.stdout[-2000:]
    sub["stderr_tail"] = done.stderr[-3000:]
    log(f"    exit {done.returncode} in {sub['seconds']}s; stdout: {done.stdout.strip()[-300:]}")
    if done.returncode:
        log(f"    stderr: {done.stderr.strip()[-1500:]}")
    return done.returncode


def section_embed_cli(ctx: Ctx, rec: dict[str, Any]) -> None:
    import numpy as np

    from dprm.data.contract import read_calibration_set

    check = Checks(rec)
    width = QWEN_PRM_7B.sized(ctx.tiny).hidden_size
    prm_dir = qwen_2layer(ctx, rec)
    adapter = park_adapter(ctx, rec)
    labels = _labels(3 if ctx.tiny else 16)
    root = ctx.workdir / "embed"
    root.mkdir(parents=True, exist_ok=True)
    labels.to_parquet(root / "labels.parquet")
    rec["label_rows"] = len(labels)
    # no --dtype: the CLI's default on a GPU (bf16 where supported) is part of what is checked
    common = ["embed", "--labels", str(root / "labels.parquet"), "--prm", str(prm_dir),
              "--device", ctx.device, "--no-progress"]  # fmt: skip
    runs = {"plain": [], "adapter": ["--adapter", str(adapter)]}
    stored: dict[str, Any] = {}
    for name, extra in runs.items():
        sub: dict[str, Any] = {}
        rec[name] = sub
        out = root / f"cal-{name}"
        log(f"  dprm embed ({name})")
        if _run_cli(ctx, [*common, *extra, "--out", str(out)], sub) != 0:
            check(f"{name}: dprm embed exits 0", False, sub["stderr_tail"][-500:])
            continue
        start = time.perf_counter()
        cal = read_calibration_set(out)
        hidden = np.asarray(cal.hidden)
        sub["read_s"] = round(time.perf_counter() - start, 3)
        sub.update(rows=len(cal), hidden_dim=cal.hidden_dim, hidden_dtype=str(hidden.dtype),
                   prm_dtype=cal.meta.get("prm_dtype"), stats=cal.meta.get("stats"))  # fmt: skip
        score = cal.records["prm_score"].to_numpy()
        check(f"{name}: every label row embedded", len(cal) == len(labels), (len(cal), len(labels)))
        check(f"{name}: hidden dim {width}", cal.hidden_dim == width, cal.hidden_dim)
        check(f"{name}: hidden states finite", bool(np.isfinite(hidden).all()))
        check(f"{name}: prm_score finite in [0, 1]",
              bool(np.isfinite(score).all() and ((score >= 0) & (score <= 1)).all()))  # fmt: skip
        if ctx.cuda:
            check(f"{name}: default dtype on the GPU is bf16", sub["prm_dtype"] == "bfloat16",
                  sub["prm_dtype"])  # fmt: skip
        stored[name] = (hidden.astype(np.float32), score)
        if name == "adapter" and "plain" in stored:
            # --adapter adds columns; the raw score and hidden state stay the base PRM's
            same = (
                stored["plain"][0].shape == hidden.shape
                and float(np.abs(stored["plain"][0] - stored[name][0]).max(initial=0.0)) <= 1e-3
                and float(np.abs(stored["plain"][1] - score).max(initial=0.0)) <= 1e-3
            )
            check("adapter: prm_score and hidden states = the plain run's (≤ 1e-3)", same)
        if name == "adapter":
            columns = ["park_q10", "park_q50", "park_q90"]
            present = all(c in cal.records.columns for c in columns)
            park = cal.records[columns].to_numpy() if present else np.zeros((0, 3))
            check("adapter: park_q10/q50/q90 written, finite, in [0, 1]",
                  present and bool(np.isfinite(park).all() and ((park >= 0) & (park <= 1)).all()))  # fmt: skip
    plain = rec.get("plain", {})
    rec["summary"] = (
        f"{plain.get('rows', '?')}/{len(labels)} rows, dim {plain.get('hidden_dim', '?')}, "
        f"{plain.get('prm_dtype', '?')}, cli {plain.get('seconds', '?')}s"
    )


def _random_calibration_set(width: int, n_questions: int = 48, per_question: int = 6) -> Any:
    """Random states of the PRM's width with labels that depend on them (tests/live/conftest's
    recipe), so the fitted maps vary with the state and pass the collapse check."""
    import numpy as np

    from fixtures.calibration import labelled_states

    rng = np.random.default_rng(0)
    hidden = rng.normal(size=(n_questions, width)).astype(np.float32)
    scores = rng.uniform(size=n_questions).astype(np.float32)
    mu = 2.0 * (hidden @ rng.normal(size=width)) / np.sqrt(width)
    return labelled_states(scores, hidden, mu, per_question, rng)


#: tests/live/conftest's fit settings of the calibrators of sections live and solve
CALIBRATOR_SETTINGS = {"mono": {"max_steps": 40, "eval_every": 20},
                       "qr": {"max_steps": 100, "eval_every": 50}}  # fmt: skip


def calibrator_dir(ctx: Ctx, method: str, rec: dict[str, Any]) -> Path:
    """A ``method`` calibrator fitted on CPU (dprm.models has no device) on random states of
    the Qwen PRM's width and saved with dprm's ``save``; once per run (the fit time goes to the
    section that fitted it, as ``fit_<method>_s``)."""
    key = f"calibrator-{method}"
    if key not in ctx.checkpoints:
        from dprm.models.fit import fit

        start = time.perf_counter()
        data = _random_calibration_set(QWEN_PRM_7B.sized(ctx.tiny).hidden_size)
        overrides = {"batch_size": 64, **CALIBRATOR_SETTINGS[method]}
        model = fit(method, data, overrides=overrides, seed=0, progress=False)
        ctx.checkpoints[key] = Path(model.save(ctx.workdir / key))
        rec[f"fit_{method}_s"] = round(time.perf_counter() - start, 2)
    return ctx.checkpoints[key]


def section_live(ctx: Ctx, rec: dict[str, Any]) -> None:
    import numpy as np

    from dprm.live.calibrated_prm import CalibratedPRM
    from dprm.models import load

    check = Checks(rec)
    prm_dir = qwen_2layer(ctx, rec)
    dirs = {method: calibrator_dir(ctx, method, rec) for method in CALIBRATOR_SETTINGS}
    log(f"  fitted on CPU: mono {rec.get('fit_mono_s')}s, qr {rec.get('fit_qr_s')}s")
    # from_dirs: how `dprm solve` loads a PRM and a calibrator
    load_s, cprm = _timed(
        ctx,
        lambda: CalibratedPRM.from_dirs(str(prm_dir), str(dirs["mono"]), device=ctx.device,
                                        dtype=ctx.dtype, prm_kind="qwen-prm"),
    )  # fmt: skip
    rec["load_s"] = round(load_s, 3)
    rec["prm_dtype"] = str(cprm.prm.dtype)
    calibrators = {"mono": cprm, "qr": CalibratedPRM(cprm.prm, load(dirs["qr"]))}
    items = trajectories(4 if ctx.tiny else 8, seed=3, steps=(3, 8))
    cprm.assess(items[0][0], items[0][1][:1])  # warm-up
    for name, model in calibrators.items():
        sub: dict[str, Any] = {"kind": model.kind}
        rec[name] = sub
        start = time.perf_counter()
        assessed = [model.assess(q, s, C=0.8) for q, s in items]
        _sync(ctx)
        sub["seconds_per_solution"] = round((time.perf_counter() - start) / len(items), 4)
        q = np.concatenate([np.stack([a.quantiles for a in steps]) for steps in assessed])
        budgets = np.array([a.budget for steps in assessed for a in steps])
        means = np.array([a.mean for steps in assessed for a in steps])
        monotone = np.diff(q, axis=1) >= -1e-9
        sub.update(steps=len(q), levels=list(assessed[0][0].levels),
                   monotone_rows=float(monotone.all(1).mean()),
                   budget_min=int(budgets.min()), budget_max=int(budgets.max()),
                   mean_min=float(means.min()), mean_max=float(means.max()))  # fmt: skip
        question_budgets = model.question_budget([q_ for q_, _ in items], 0.8)
        sub["question_budgets"] = question_budgets.tolist()
        log(f"  {name}: {sub}")
        check(f"{name}: one assessment per step",
              all(len(a) == len(s) for a, (_, s) in zip(assessed, items, strict=True)))  # fmt: skip
        check(f"{name}: quantiles finite in [0, 1]",
              bool(np.isfinite(q).all() and ((q >= 0) & (q <= 1)).all()))  # fmt: skip
        if model.kind == "distribution":  # monotone by construction; qr's levels may cross
            check(f"{name}: quantiles monotone in the level", bool(monotone.all()))
        check(f"{name}: budgets in [1, n_max]",
              bool((budgets >= 1).all() and (budgets <= model.n_max).all()
                   and (question_budgets >= 1).all()))  # fmt: skip
    rec["summary"] = (
        f"{rec['mono']['seconds_per_solution'] * 1e3:.1f} ms/solution (mono), "
        f"monotone {rec['mono']['monotone_rows']:.2f}, qr monotone rows {rec['qr']['monotone_rows']:.2f}"
    )
    del cprm, calibrators


# -- section solve: `dprm solve --mode bon` end to end ---------------------------------------

#: `dprm solve` settings of section solve: 8 MATH-500 questions, N_max 16, majority vote; the
#: C rule with a fixed baseline of 4, then auto-seq at cost 0.25 in rounds of 8 (32 draws)
SOLVE_QUESTIONS, SOLVE_N_MAX, SOLVE_BASELINE_N = 8, 16, 4
SOLVE_COST, SOLVE_ROUND = 0.25, 8
#: the training BoN set (contract v2) auto-seq learns on: questions x candidates
SOLVE_TRAIN_QUESTIONS, SOLVE_TRAIN_K = 40, 16
#: seconds section solve may spend generating at full scale (its --max-new-tokens is chosen from
#: the measured decode speed to fit) and the cap on --max-new-tokens (tiny: CPU)
SOLVE_GENERATION_S = {"full": 75.0, "tiny": 20.0}
SOLVE_TOKENS_CAP = {"full": 96, "tiny": 24}
#: seconds kept for section solve at full scale: the sections before it are not started later
#: than --deadline-s minus this (so solve, started by the deadline, still runs)
SOLVE_RESERVE_S = 150.0


def build_generator(ctx: Ctx, arch: Arch, out: Path, seed: int = 0) -> dict[str, Any]:
    """A seeded random ``Qwen2ForCausalLM`` of ``arch`` built on the device in the bf16 dtype,
    saved (safetensors) with the real Qwen2 tokenizer (fast ``tokenizer.json``, as the real
    repository ships it) and the Qwen chat template."""
    import torch
    from transformers import AutoTokenizer, Qwen2ForCausalLM

    from dprm.llm.generate import default_device_dtype

    _, dtype = default_device_dtype(ctx.device, ctx.dtype)
    tokenizer = AutoTokenizer.from_pretrained(tokenizer_dir(ctx, "qwen-prm"))
    _sync(ctx)
    start = time.perf_counter()
    torch.manual_seed(seed)
    with _building(dtype, ctx.device), torch.no_grad():
        model = Qwen2ForCausalLM(_config(arch))
    _sync(ctx)
    build_s = time.perf_counter() - start
    weights = _memory(ctx)["allocated_gib"]
    tied = model.lm_head.weight.data_ptr() == model.model.embed_tokens.weight.data_ptr()
    params = sum(p.numel() for p in model.parameters())  # tied weights counted once
    start = time.perf_counter()
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    save_s = time.perf_counter() - start
    del model
    _free(ctx)
    size = _dir_bytes(out)
    return {"build_s": round(build_s, 3), "save_s": round(save_s, 3), "bytes": size,
            "parameters": params, "tied_embeddings": tied, "weights_gib_on_device": weights,
            "tokenizer": type(tokenizer).__name__, "tokenizer_len": len(tokenizer)}  # fmt: skip


def _decode_probe(ctx: Ctx, path: Path) -> dict[str, Any]:
    """The generator through ``load_generator`` in this process: where its weights are, and the
    seconds per decoding step of one prompt with n = 1 (an auto-seq draw) and n = 16 (a C-rule
    question), what section solve sizes ``--max-new-tokens`` by."""
    from dprm.llm.generate import load_generator
    from dprm.llm.prompts import build_prompt

    load_s, gen = _timed(
        ctx, lambda: load_generator("transformers", str(path), device=ctx.device, dtype=ctx.dtype)
    )
    param = next(gen.model.parameters())
    probe: dict[str, Any] = {"load_s": round(load_s, 3), "param_dtype": str(param.dtype),
                             "param_device": str(param.device), "stop_ids": gen.stop_ids,
                             "pad_id": gen.pad_id}  # fmt: skip
    prompt = build_prompt(trajectories(1)[0][0], gen.model_name)
    probe["prompt_tokens"] = len(gen.tokenizer(prompt).input_ids)
    tokens = 8 if ctx.tiny else 32
    gen.generate([prompt], 1, max_new_tokens=4, seeds=[0])  # warm-up: kernels, allocator
    for n in (1, SOLVE_N_MAX):
        seconds, outs = _timed(
            ctx, lambda n=n, g=gen: g.generate([prompt], n, max_new_tokens=tokens, seeds=[1])
        )
        steps = max(c.n_tokens for c in outs[0])
        probe[f"n{n}"] = {"seconds": round(seconds, 4), "steps": steps,
                          "s_per_step": seconds / max(steps, 1),
                          "tokens_per_s": round(n * steps / seconds, 1)}  # fmt: skip
    probe["sample_text"] = outs[0][0].text[:200]
    del gen
    _free(ctx)
    return probe


def _cli_env() -> dict[str, str]:
    """The environment of a ``python -m dprm.cli`` subprocess: the source tree on PYTHONPATH
    (before whatever PYTHONPATH holds, e.g. the math-verify wheels' --target directory)."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        [str(ROOT / "src"), str(ROOT / "tests"), *filter(None, [env.get("PYTHONPATH")])]
    )
    return env


def _count_lines(path: Path) -> int:
    try:
        return path.read_bytes().count(b"\n")
    except OSError:
        return 0


def _run_cli_watched(
    ctx: Ctx, args: list[str], sub: dict[str, Any], timeout: float, watch: Path | None = None
) -> tuple[int, list[float]]:
    """``python -m dprm.cli ARGS`` in a subprocess, polled every 0.25 s: the seconds (since the
    start) at which each line of ``watch`` was first seen, and on a GPU the device's least free
    memory while it ran (this process holds a context too). Killed after ``timeout`` (code 124).
    """
    import torch

    command = [sys.executable, "-m", "dprm.cli", *args]
    sub["command"] = " ".join(command)
    logs = Path(tempfile.mkdtemp(prefix="cli-", dir=ctx.workdir))
    seen: list[float] = []
    least_free = None
    start = time.perf_counter()
    with open(logs / "stdout", "w") as out, open(logs / "stderr", "w") as err:
        proc = subprocess.Popen(command, env=_cli_env(), stdout=out, stderr=err, text=True)
        while proc.poll() is None:
            now = time.perf_counter() - start
            if now > timeout:
                proc.kill()
                proc.wait()
                break
            if watch is not None:
                seen.extend([now] * (_count_lines(watch) - len(seen)))
            if ctx.cuda:
                free = torch.cuda.mem_get_info()[0]
                least_free = free if least_free is None else min(least_free, free)
            time.sleep(0.25)
    seconds = time.perf_counter() - start
    if watch is not None:  # lines written after the last poll: dated at the exit
        seen.extend([seconds] * (_count_lines(watch) - len(seen)))
    timed_out = seconds > timeout
    code = 124 if timed_out else proc.returncode
    stdout = (logs / "stdout").read_text(errors="replace")
    stderr = (logs / "stderr").read_text(errors="replace")
    sub.update(seconds=round(seconds, 2), returncode=code, timed_out=timed_out,
               stdout_tail=stdout[-2000:], stderr_tail=stderr[-3000:])  # fmt: skip
    if ctx.cuda and least_free is not None:
        total = torch.cuda.mem_get_info()[1]
        sub["device_used_gib_peak_sampled"] = round((total - least_free) / 2.0**30, 2)
    log(f"    exit {code} in {sub['seconds']}s" + (" (timed out)" if timed_out else ""))
    if code:
        log(f"    stderr: {stderr.strip()[-1500:]}")
    return code, seen


def _grading_probe(ctx: Ctx, sub: dict[str, Any]) -> bool:
    """dprm's grading pool (math-verify in a worker process) from a fresh interpreter with the
    CLI's environment: a right and a wrong answer graded, nothing timed out or failed."""
    code = (
        "import json, time; t = time.perf_counter()\n"
        "from dprm.llm.grading import GradingPool, grader_info\n"
        "with GradingPool(workers=1, timeout=20.0) as pool:\n"
        "    r = pool.grade(['7', '\\\\frac{1}{2}'], ['So $\\\\boxed{7}$.', '$\\\\boxed{3}$'])\n"
        "print(json.dumps({'correct': r.correct.tolist(), 'error': r.error.tolist(),\n"
        "    'timed_out': r.timed_out.tolist(), **grader_info(),\n"
        "    'seconds': round(time.perf_counter() - t, 2)}))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], env=_cli_env(), capture_output=True,
                          text=True, timeout=120)  # fmt: skip
    sub["returncode"] = done.returncode
    if done.returncode:
        sub["stderr_tail"] = done.stderr[-2000:]
        return False
    sub.update(json.loads(done.stdout.strip().splitlines()[-1]))
    return sub["correct"] == [True, False] and not any(sub["error"] + sub["timed_out"])


def _solve_questions(root: Path) -> tuple[Path, Any, Any]:
    """The first SOLVE_QUESTIONS MATH-500 rows verbatim (packaged copy) as a question file
    (tests/live/conftest's ``questions_file`` layout), those questions, and the training
    questions: the first SOLVE_TRAIN_QUESTIONS with the live ones (one population, as
    tests/live/test_solve_auto_seq's ``train_bon``)."""
    import gzip

    import pandas as pd

    from dprm.llm.questions import load_questions, packaged_path

    math500 = packaged_path("math500")
    lines = gzip.decompress(math500.read_bytes()).decode("utf-8").splitlines()
    path = root / "math500_first.jsonl"
    path.write_text("".join(line + "\n" for line in lines[:SOLVE_QUESTIONS]), encoding="utf-8")
    live = load_questions(path)
    train = pd.concat([load_questions(math500, limit=SOLVE_TRAIN_QUESTIONS), live])
    return path, live, train.drop_duplicates("question_id").reset_index(drop=True)


def _write_train_bon(cprm: Any, questions: Any, out: Path, seed: int = 0) -> dict[str, Any]:
    """A BoN contract v2 training set on this PRM's question states (tests/live/
    test_solve_auto_seq's ``train_bon`` recipe): K candidates per question, correct with
    probability p_q (the calibrator's estimate on the state, sharpened), answers "7" / "6",
    candidate states moved along the calibrator's low-to-high direction (up when correct) and
    scores higher when correct, so that the candidates' estimates and best-of-n carry signal."""
    import numpy as np
    import pandas as pd

    from dprm.data.contract import write_bon_set

    states = cprm.question_states(questions["question"].tolist())
    scores, hidden = states.scores, states.hidden.astype(np.float64)
    q_count, k = len(questions), SOLVE_TRAIN_K
    mean = np.clip(cprm.calibrator.point_estimate(hidden, scores).astype(np.float64), 0.02, 0.98)
    p = 1 / (1 + np.exp(-4 * np.log(mean / (1 - mean))))
    rng = np.random.default_rng(seed)
    correct = rng.random((q_count, k)) < p[:, None]
    direction = hidden[np.argmax(mean)] - hidden[np.argmin(mean)]
    noise = rng.normal(0, 0.3, (q_count, k, hidden.shape[1])) * hidden.std(0)
    cand_hidden = hidden[:, None, :] + noise + 0.3 * (2 * correct[..., None] - 1) * direction
    cand_hidden = cand_hidden.reshape(q_count * k, -1).astype(np.float32)
    cand_score = np.clip(0.5 + 0.2 * (2 * correct - 1) + rng.normal(0, 0.2, correct.shape), 0, 1)
    responses = pd.DataFrame(
        {
            "question_id": np.repeat(questions["question_id"].to_numpy(), k),
            "response_id": np.tile(np.arange(k), q_count).astype(np.int32),
            "prm_score": cand_score.ravel().astype(np.float32),
            "correct": correct.ravel(),
            "answer": np.where(correct.ravel(), "7", "6"),
        }
    )
    table = pd.DataFrame(
        {"question_id": questions["question_id"], "prm_score": scores.astype(np.float32)}
    )
    write_bon_set(out, table, hidden.astype(np.float32), responses, {"source": "gpu_check"},
                  dtype="float32", response_hidden=cand_hidden)  # fmt: skip
    return {"questions": q_count, "candidates": int(correct.size), "hidden_dim": hidden.shape[1],
            "p_hat_min": float(mean.min()), "p_hat_max": float(mean.max()),
            "accuracy": float(correct.mean()),
            "question_state_rel_spread": float(hidden.std(0).mean() / (np.abs(hidden).mean() + 1e-12))}  # fmt: skip


def _read_jsonl(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line]


def _check_solve_run(
    check: Checks, name: str, out: Path, sub: dict[str, Any], live_ids: list[str],
    base_n: int, allocation: str, line_times: list[float],
) -> None:  # fmt: skip
    """What a finished ``dprm solve --mode bon --rule majority`` run must hold, and its speed."""
    import numpy as np

    from dprm.ias.selection.rules import select_candidate
    from dprm.llm.answers import canonical_answer

    records = _read_jsonl(out / "bon.jsonl")
    summary = json.loads((out / "summary.json").read_text())
    provenance = json.loads((out / "run.json").read_text()).get("provenance", {})
    ids = [r["question_id"] for r in records]
    check(f"{name}: one bon.jsonl record per question",
          len(records) == len(live_ids) and set(ids) == set(live_ids), (len(records), len(live_ids)))  # fmt: skip
    picks, base_picks, counts, answers = [], [], [], []
    for r in records:
        cands, n = r["candidates"], int(r["budget"])
        scores = [c["prm_score"] for c in cands]
        said = [c["answer"] for c in cands]
        picks.append(r["chosen"]["index"] == select_candidate("majority", scores[:n], said[:n]))
        if base_n:
            pick = select_candidate("majority", scores[:base_n], said[:base_n])
            base_picks.append(r["baseline"]["chosen"]["index"] == pick)
        counts.append(len(cands) == max(n, base_n) and 1 <= n <= SOLVE_N_MAX)
        answers.append(said == [canonical_answer(c["text"]) for c in cands])
    cands = [c for r in records for c in r["candidates"]]
    prm = np.array([c["prm_score"] for c in cands], dtype=np.float64)
    check(f"{name}: chosen.index = select_candidate('majority') over the paid candidates",
          all(picks), picks)  # fmt: skip
    if base_n:
        check(f"{name}: baseline pick = select_candidate('majority') over the first {base_n}",
              all(base_picks), base_picks)  # fmt: skip
    check(f"{name}: budgets in [1, {SOLVE_N_MAX}], max(budget, baseline) candidates",
          all(counts), [r["budget"] for r in records])  # fmt: skip
    check(f"{name}: candidates' answers = canonical_answer(text)", all(answers))
    check(f"{name}: candidate PRM scores finite in [0, 1]",
          bool(len(prm) and np.isfinite(prm).all() and ((prm >= 0) & (prm <= 1)).all()))  # fmt: skip
    check(f"{name}: every candidate graded (correct is a bool)",
          all(isinstance(c.get("correct"), bool) for c in cands))  # fmt: skip
    check(f"{name}: summary rule majority, allocation {allocation}",
          summary.get("rule") == "majority" and summary.get("allocation") == allocation,
          {k: summary.get(k) for k in ("rule", "allocation")})  # fmt: skip
    check(f"{name}: grader recorded (math-verify importable in the CLI)",
          provenance.get("grader_version") is not None, provenance.get("grader_version"))  # fmt: skip
    check(f"{name}: bon_set exported", (out / "bon_set").is_dir())
    tokens = int(sum(c["n_tokens"] for c in cands))
    sub.update(questions=len(records), budgets=[int(r["budget"]) for r in records],
               candidates=len(cands), generated_tokens=tokens,
               tokens_per_s_wall=round(tokens / max(sub["seconds"], 1e-9), 1),
               mean_tokens=round(tokens / max(len(cands), 1), 1),
               finish_reasons={r: sum(c["finish_reason"] == r for c in cands)
                               for r in sorted({str(c["finish_reason"]) for c in cands})},
               correct=int(sum(bool(c["correct"]) for c in cands)),
               distinct_answers=len({c["answer"] for c in cands}),
               prm_score_range=[float(prm.min()), float(prm.max())] if len(prm) else None,
               prm_dtype=provenance.get("prm_dtype"), grader_version=provenance.get("grader_version"),
               summary={k: summary.get(k) for k in ("allocation", "rule", "adaptive", "baseline")})  # fmt: skip
    if allocation != "auto-seq":
        return
    total = round(SOLVE_COST * SOLVE_N_MAX * len(live_ids))
    check(f"{name}: budgets sum to round({SOLVE_COST} x {SOLVE_N_MAX} x {len(live_ids)}) = {total}",
          sum(sub["budgets"]) == total, sum(sub["budgets"]))  # fmt: skip
    draws = _read_jsonl(out / "seq_draws.jsonl")
    check(f"{name}: seq_draws.jsonl logs every drawn candidate", len(draws) == len(cands),
          (len(draws), len(cands)))  # fmt: skip
    sub["floor_share"] = sorted({r.get("floor_share") for r in records})
    sub["floors"] = [r.get("floor") for r in records]
    # when each round's lines appeared (the process's clock): a round's time is the gap to the
    # previous round's last line (the floor's includes the start-up: loading, question states)
    rounds: dict[Any, dict[str, Any]] = {}
    for d, at in zip(draws, line_times, strict=False):
        row = rounds.setdefault(d["round"], {"round": d["round"], "draws": 0, "tokens": 0})
        row["draws"] += 1
        row["tokens"] += int(d["n_tokens"])
        row["done_at_s"] = round(at, 2)
    previous = None
    for row in rounds.values():
        if previous is not None:
            row["seconds"] = round(row["done_at_s"] - previous, 2)
            row["tokens_per_s"] = round(row["tokens"] / max(row["seconds"], 1e-9), 1)
        previous = row["done_at_s"]
    sub["rounds"] = list(rounds.values())
    later = [r for r in sub["rounds"] if "seconds" in r]
    if later:
        sub["round_tokens_per_s"] = round(
            sum(r["tokens"] for r in later) / max(sum(r["seconds"] for r in later), 1e-9), 1
        )


def section_solve(ctx: Ctx, rec: dict[str, Any]) -> None:
    from dprm.live.calibrated_prm import CalibratedPRM
    from dprm.llm.prompts import template_for

    check = Checks(rec)
    root = ctx.workdir / "solve"
    root.mkdir(parents=True, exist_ok=True)
    prm_dir = qwen_2layer(ctx, rec)
    mono = calibrator_dir(ctx, "mono", rec)
    # the generator: its directory name holds "Qwen" (dprm picks the prompt format by name)
    arch = QWEN_MATH_1_5B.sized(ctx.tiny)
    rec["generator_config"] = arch.numbers()
    gen_dir = ctx.workdir / "Qwen2.5-Math-1.5B-Instruct-random"
    log(f"  building the generator: {arch.checkpoint} sizes, {arch.num_hidden_layers} layers")
    rec["generator"] = build_generator(ctx, arch, gen_dir)
    log(f"  built: {rec['generator']}")
    check("generator: tied embeddings", rec["generator"]["tied_embeddings"])
    check("generator: Qwen prompt format", template_for(str(gen_dir)) == "qwen")
    rec["decode_probe"] = probe = _decode_probe(ctx, gen_dir)
    log(f"  decode probe: {probe}")
    check("generator loads on the device",
          probe["param_device"].startswith(ctx.device), probe["param_device"])  # fmt: skip
    if ctx.cuda:
        check("generator loads in bf16", probe["param_dtype"] == "torch.bfloat16",
              probe["param_dtype"])  # fmt: skip
    # --max-new-tokens: random weights write to the cap; 8 C-rule calls (one per question, n up
    # to 16) and 32 auto-seq draws (one call each, n = 1) decode one step per token
    per_token = (
        SOLVE_QUESTIONS * probe[f"n{SOLVE_N_MAX}"]["s_per_step"]
        + round(SOLVE_COST * SOLVE_N_MAX * SOLVE_QUESTIONS) * probe["n1"]["s_per_step"]
    )
    cap = SOLVE_TOKENS_CAP[ctx.args.scale]
    fit_tokens = int(SOLVE_GENERATION_S[ctx.args.scale] / max(per_token, 1e-9))
    max_new = ctx.args.solve_max_new_tokens or max(16, min(cap, fit_tokens))
    rec["max_new_tokens"] = max_new
    rec["predicted_generation_s"] = round(per_token * max_new, 1)
    log(f"  --max-new-tokens {max_new} (predicted generation {rec['predicted_generation_s']}s)")
    ctx.write()  # the section is long: a run cut short keeps what it measured

    questions, live, train = _solve_questions(root)
    live_ids = live["question_id"].astype(str).tolist()
    rec["question_ids"] = live_ids
    # the training BoN set on the PRM's own question states (as the CLI computes them): random
    # states would be unlike the live ones, and auto-seq would fall back to uniform best-of-N
    dtype = ctx.dtype if ctx.cuda else "float32"  # the CLI's default dtype on this device
    start = time.perf_counter()
    cprm = CalibratedPRM.from_dirs(str(prm_dir), str(mono), device=ctx.device, dtype=dtype,
                                   n_max=SOLVE_N_MAX)  # fmt: skip
    train_dir = root / "train_bon"
    rec["train_bon"] = _write_train_bon(cprm, train, train_dir)
    rec["train_bon"]["seconds"] = round(time.perf_counter() - start, 2)
    del cprm
    _free(ctx)
    log(f"  training BoN set: {rec['train_bon']}")
    ctx.write()

    rec["grading_probe"] = {}
    check("grading: math-verify grades in a worker (right True, wrong False)",
          _grading_probe(ctx, rec["grading_probe"]), rec["grading_probe"])  # fmt: skip

    common = ["solve", "--mode", "bon", "--questions", str(questions), "--generator",
              str(gen_dir), "--prm", str(prm_dir), "--calibrator", str(mono), "--device",
              ctx.device, "--prm-device", ctx.device, "--grade-workers", "1", "--quiet",
              "--rule", "majority", "--n-max", str(SOLVE_N_MAX), "--max-new-tokens",
              str(max_new)]  # fmt: skip
    if not ctx.cuda:
        common += ["--threads", "1"]
    runs = {
        "c_rule": (["--baseline-n", str(SOLVE_BASELINE_N)], SOLVE_BASELINE_N, "C"),
        "auto_seq": (["--auto-cost", str(SOLVE_COST), "--train-bon", str(train_dir),
                      "--auto-seq", "--round-size", str(SOLVE_ROUND), "--baseline-n", "0"],
                     0, "auto-seq"),
    }  # fmt: skip
    for name, (extra, base_n, allocation) in runs.items():
        sub: dict[str, Any] = {}
        rec[name] = sub
        out = root / f"run-{name}"
        log(f"  dprm solve ({name})")
        timeout = 300.0 if ctx.tiny else (120.0 if name == "c_rule" else 180.0)
        watch = out / "seq_draws.jsonl" if allocation == "auto-seq" else None
        code, seen = _run_cli_watched(ctx, [*common, *extra, "--out", str(out)], sub, timeout,
                                      watch)  # fmt: skip
        if not check(f"{name}: dprm solve exits 0", code == 0,
                     code if code == 0 else sub["stderr_tail"][-500:] or code):  # fmt: skip
            ctx.write()
            continue
        try:
            _check_solve_run(check, name, out, sub, live_ids, base_n, allocation, seen)
        except Exception as err:  # noqa: BLE001 - a malformed output is a finding, not a crash
            sub["error"] = _error(err)
            check(f"{name}: outputs readable", False, sub["error"]["message"])
        if ctx.cuda:  # no --prm-dtype: the CLI's default on a GPU is part of what is checked
            check(f"{name}: PRM in bf16 (the default on a GPU)", sub.get("prm_dtype") == "bfloat16",
                  sub.get("prm_dtype"))  # fmt: skip
        ctx.write()
        log(f"    {name}: " + json.dumps({k: sub.get(k) for k in (
            "budgets", "generated_tokens", "tokens_per_s_wall", "round_tokens_per_s",
            "finish_reasons", "floor_share", "prm_dtype", "device_used_gib_peak_sampled")}))  # fmt: skip
    parts = [f"{n} {rec[n].get('seconds', '?')}s {rec[n].get('tokens_per_s_wall', '?')} tok/s"
             for n in runs if n in rec]  # fmt: skip
    rec["summary"] = (
        f"decode n=1 {probe['n1']['tokens_per_s']} tok/s, n={SOLVE_N_MAX} "
        f"{probe[f'n{SOLVE_N_MAX}']['tokens_per_s']} tok/s; max_new_tokens {max_new}; "
        + ", ".join(parts)
    )


def section_imports(ctx: Ctx, rec: dict[str, Any]) -> None:
    check = Checks(rec)
    imported = [m for m in ABSENT_ON_DEVICE if m in sys.modules]
    rec["imported"] = imported
    # section solve grades with math-verify (carried to the GPU machine as wheels); it does so
    # in its CLI subprocesses only, so this process should still not have imported it
    solve = ctx.report["sections"].get("solve", {}).get("status") not in (None, "skipped")
    tolerated = ["math_verify"] if solve and "math_verify" in imported else []
    rec["tolerated"] = tolerated
    rec["summary"] = f"imported: {imported or 'none'} of {list(ABSENT_ON_DEVICE)}" + (
        f" (tolerated after solve: {tolerated})" if tolerated else ""
    )
    bad = [m for m in imported if m not in tolerated]
    check("no module absent on the GPU machine was imported", not bad, bad)


RUNNERS: dict[str, Callable[[Ctx, dict[str, Any]], None]] = {
    "env": section_env,
    "qwen_prm_7b": section_qwen_prm_7b,
    "bf16_vs_fp32": section_bf16_vs_fp32,
    "other_prms": section_other_prms,
    "embed_cli": section_embed_cli,
    "live": section_live,
    "solve": section_solve,
    "imports": section_imports,
}


# -- driver -------------------------------------------------------------------------------


def _error(err: BaseException) -> dict[str, str]:
    lines = traceback.format_exception(type(err), err, err.__traceback__)
    # frames hold the models: clear them so the memory can be given back
    traceback.clear_frames(err.__traceback__)
    return {"type": type(err).__name__, "message": str(err)[:2000],
            "traceback_tail": "".join(lines)[-4000:]}  # fmt: skip


def run_section(ctx: Ctx, name: str) -> None:
    rec: dict[str, Any] = {"status": "running"}
    ctx.report["sections"][name] = rec
    ctx.write()
    log(f"== {name}")
    start = time.perf_counter()
    deadline = ctx.args.deadline_s
    reason = f"past --deadline-s {deadline}"
    if deadline and name not in ("env", "solve", "imports") and "solve" in ctx.selected:
        deadline = max(deadline - SOLVE_RESERVE_S, 1.0)  # leave section solve its time
        reason = f"past {deadline:g} s (--deadline-s less {SOLVE_RESERVE_S:g} s kept for solve)"
    if deadline and time.perf_counter() - STARTED > deadline:
        rec.update(status="skipped", reason=reason)
        log(f"  skipped: {reason}")
    else:
        try:
            RUNNERS[name](ctx, rec)
            failed = [c["name"] for c in rec.get("checks", []) if not c["ok"]]
            rec["status"] = "failed" if failed else "passed"
            if failed:
                rec["failed_checks"] = failed
        except Exception as err:  # noqa: BLE001 - record it and go on to the next section
            rec["status"] = "error"
            rec["error"] = _error(err)
            log(f"  ERROR {rec['error']['type']}: {rec['error']['message'][:500]}")
            log(rec["error"]["traceback_tail"][-1500:])
    with contextlib.suppress(Exception):
        _free(ctx)
    rec["seconds"] = round(time.perf_counter() - start, 2)
    log(f"== {name}: {rec['status']} in {rec['seconds']}s")
    ctx.write()


def _summary_table(report: dict[str, Any]) -> str:
    rows = [("section", "status", "seconds", "summary")]
    for name, rec in report["sections"].items():
        text = rec.get("summary") or rec.get("error", {}).get("message", "")[:100]
        if rec.get("failed_checks"):
            text = f"FAILED {rec['failed_checks']} | {text}"
        rows.append((name, rec["status"], str(rec.get("seconds", "")), str(text)))
    widths = [max(len(r[i]) for r in rows) for i in range(3)]
    return "\n".join("  ".join(r[i].ljust(widths[i]) for i in range(3)) + "  " + r[3] for r in rows)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--scale", choices=["full", "tiny"], default="full")
    parser.add_argument("--device", default=None, help="default: cuda if available, else cpu")
    parser.add_argument("--dtype", default="bfloat16", help="the low-precision dtype checked")
    parser.add_argument("--out", type=Path, default=Path("gpu_check.json"))
    parser.add_argument("--sections", default=",".join(SECTIONS),
                        help=f"comma-separated subset of {','.join(SECTIONS)}")  # fmt: skip
    parser.add_argument("--trajectories", type=int, default=None,
                        help="trajectories of qwen_prm_7b / bf16_vs_fp32 (64 full, 8 tiny)")  # fmt: skip
    parser.add_argument("--other-trajectories", type=int, default=None,
                        help="trajectories per model in other_prms (8 full, 4 tiny)")  # fmt: skip
    parser.add_argument("--workdir", type=Path, default=Path(tempfile.gettempdir()),
                        help="where checkpoints are written (~16 GB at full scale)")  # fmt: skip
    parser.add_argument("--keep", action="store_true", help="keep the checkpoints")
    parser.add_argument("--solve-max-new-tokens", type=int, default=0,
                        help="section solve's --max-new-tokens (0: the most that fits its time, "
                        "from the measured decode speed; at most 96 full, 24 tiny)")  # fmt: skip
    parser.add_argument("--deadline-s", type=float, default=None,
                        help="skip sections not started this many seconds into the run "
                        "(default 420 at full scale, so one run ends within ~8 minutes; 0: off)")  # fmt: skip
    args = parser.parse_args(argv)
    if args.deadline_s is None:
        args.deadline_s = 420.0 if args.scale == "full" else 0.0
    chosen = [s.strip() for s in args.sections.split(",") if s.strip()]
    unknown = sorted(set(chosen) - set(SECTIONS))
    if unknown:
        parser.error(f"unknown sections {unknown}; choose from {list(SECTIONS)}")

    import torch
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()  # the log is read as text: no carriage-return bars
    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    args.workdir.mkdir(parents=True, exist_ok=True)
    workdir = Path(tempfile.mkdtemp(prefix="dprm-gpu-check-", dir=args.workdir))
    report: dict[str, Any] = {
        "script": "tests/gpu/gpu_check.py",
        "argv": sys.argv[1:] if argv is None else argv,
        "scale": args.scale,
        "device": device,
        "dtype": args.dtype,
        "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "sections": {},
    }
    ctx = Ctx(args, device, args.dtype, workdir, args.out, report, selected=chosen)
    log(f"gpu_check: scale {args.scale}, device {device}, dtype {args.dtype}, workdir {workdir}")
    try:
        for name in [s for s in SECTIONS if s in chosen]:  # always in dependency order
            run_section(ctx, name)
    finally:
        if not args.keep:
            shutil.rmtree(workdir, ignore_errors=True)
    passed = all(rec["status"] == "passed" for rec in report["sections"].values())
    report["passed"] = passed
    report["total_seconds"] = round(time.perf_counter() - STARTED, 1)
    ctx.write()
    print("\n" + _summary_table(report), flush=True)
    print(f"\n{'ALL PASSED' if passed else 'NOT ALL PASSED'} in {report['total_seconds']}s; "
          f"report: {args.out}", flush=True)  # fmt: skip
    return 0 if passed else 1


if __name__ == "__main__":
    sys.exit(main())
