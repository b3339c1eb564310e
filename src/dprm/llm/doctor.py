"""``dprm doctor``: load each supported PRM and compare its outputs with published values.

The first thing to run on a new GPU machine. Each check (:data:`GOLDEN`) loads a checkpoint (a
hub id or a local directory) through :func:`dprm.llm.prm.load_prm` (the path every stage takes),
scores a published example and compares with the published numbers: pass/fail with the largest
difference. Without a GPU, or without the hub and no local copy, it says so and stops (it never
tries a 7B model on a CPU unless ``--device cpu`` asks for it).

Checks:

- ``qwen-prm``, ``math-shepherd``: the model cards' examples and printed step rewards.
- ``park-qwen-prm``: Park et al.'s demo (``prm-calibration``'s ``HuggingFace Demo.ipynb``):
  Qwen2.5-Math-PRM-7B in bf16 with Park's system prompt on record 38 of
  math500/Llama-3.2-1B-Instruct (an 8-step prefix), last-step reward 0.375. Bundled in
  ``dprm/llm/golden/park_demo.json`` with its provenance.
- ``park-adapter``: the same input through Park's adapter
  ``young-j-park/Qwen2.5-Math-PRM-7B-calibrated-Llama-3.2-1B-Instruct``: quantiles 7.486e-05 /
  0.002548 / 0.06445 at tau = 0.1 / 0.5 / 0.9, compared in logit space (they span three
  orders of magnitude; a fixed absolute tolerance would pass anything at 1e-4).
- ``reasoneval``: expected values listed, but its example input (GAIR's ``codes/examples.py``)
  is not bundled, so it is not run.
- ``skywork-prm``, ``rlhflow-prm``: no published step rewards are bundled (we could not read
  the cards' printed outputs), so the doctor loads the checkpoint, scores the Qwen card's
  example and reports the scores as RAN (the load path and the head's weights are exercised,
  not the numbers).

Tolerances fit bf16: a bf16 logit near 0.5 probability is exact to about 0.004 in probability,
but attention kernels and batching change low bits of every layer; 0.03 in probability (the
Qwen card check) and 0.35 in logit (about 40 % relative at small quantiles) leave room for that
and still catch a wrong prompt, step split or head (each moves these values by far more).
"""

from __future__ import annotations

import importlib.util
import json
import os
import socket
from dataclasses import dataclass, field
from functools import lru_cache
from importlib import resources
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # numpy is imported where used: `dprm doctor --help` loads none
    import numpy as np

SHEPHERD_QUESTION = (
    "Janet\u2019s ducks lay 16 eggs per day. She eats three for breakfast every morning and bakes "
    "muffins for her friends every day with four. She sells the remainder at the farmers' market "
    "daily for $2 per fresh duck egg. How much in dollars does she make every day at the "
    "farmers' market?"
)
_SHEPHERD_STEPS = [
    "Step 1: Janet's ducks lay 16 eggs per day.",
    "Step 2: She eats three for breakfast every morning, so she has 16 - 3 = 13 eggs left.",
    "Step 3: She bakes muffins for her friends every day with four eggs, so she has 13 - 4 = 9 "
    "eggs left.",
    "Step 4: She sells the remainder at the farmers' market daily for $2 per fresh duck egg, so "
    "she makes 9 * $2 = ${x} every day at the farmers' market. The answer is: {x}",
]
QWEN_QUERY = (
    "Sue lives in a fun neighborhood.  One weekend, the neighbors decided to play a prank on "
    "Sue.  On Friday morning, the neighbors placed 18 pink plastic flamingos out on Sue's front "
    "yard.  On Saturday morning, the neighbors took back one third of the flamingos, painted "
    "them white, and put these newly painted white flamingos back out on Sue's front yard.  "
    "Then, on Sunday morning, they added another 18 pink plastic flamingos to the collection. "
    "At noon on Sunday, how many more pink plastic flamingos were out than white plastic "
    "flamingos?"
)
QWEN_STEPS = [
    "To find out how many more pink plastic flamingos were out than white plastic flamingos at "
    "noon on Sunday, we can break down the problem into steps. First, on Friday, the neighbors "
    "start with 18 pink plastic flamingos.",
    "On Saturday, they take back one third of the flamingos. Since there were 18 flamingos, "
    "(1/3 \\times 18 = 6) flamingos are taken back. So, they have (18 - 6 = 12) flamingos left "
    "in their possession. Then, they paint these 6 flamingos white and put them back out on "
    "Sue's front yard. Now, Sue has the original 12 pink flamingos plus the 6 new white ones. "
    "Thus, by the end of Saturday, Sue has (12 + 6 = 18) pink flamingos and 6 white flamingos.",
    "On Sunday, the neighbors add another 18 pink plastic flamingos to Sue's front yard. By the "
    "end of Sunday morning, Sue has (18 + 18 = 36) pink flamingos and still 6 white flamingos.",
    "To find the difference, subtract the number of white flamingos from the number of pink "
    "flamingos: (36 - 6 = 30). Therefore, at noon on Sunday, there were 30 more pink plastic "
    "flamingos out than white plastic flamingos. The answer is (\\boxed{30}).",
]


@dataclass(frozen=True)
class Golden:
    """A published example: the hub id, PRM kind, dtype, expected values and tolerance.

    ``scale`` is ``"prob"`` (absolute difference) or ``"logit"`` (difference of logits);
    ``adapter`` is the hub id of a Park et al. adapter to attach; ``source`` says where the
    numbers come from.
    """

    hub_id: str
    kind: str
    dtype: str
    expected: list[list[float]]
    atol: float
    options: dict = field(default_factory=dict)
    scale: str = "prob"
    adapter: str | None = None
    source: str = ""


@lru_cache(maxsize=1)
def park_demo() -> dict:
    """Park et al.'s demo record and values (``dprm/llm/golden/park_demo.json``)."""
    text = resources.files("dprm.llm").joinpath("golden/park_demo.json").read_text("utf-8")
    return json.loads(text)


_PARK = "young-j-park/Qwen2.5-Math-PRM-7B-calibrated-Llama-3.2-1B-Instruct"
GOLDEN: dict[str, Golden] = {
    "qwen-prm": Golden("Qwen/Qwen2.5-Math-PRM-7B", "qwen-prm", "bfloat16",
                       [[1.0, 0.1904296875, 0.9765625, 1.0]], 0.03, {"prompt": "model-card"},
                       source="model card example, step rewards"),
    "math-shepherd": Golden("peiyi9979/math-shepherd-mistral-7b-prm", "math-shepherd", "float32",
                            [[0.9955, 0.9958, 0.9983, 0.9957], [0.9955, 0.9958, 0.9983, 0.0240]],
                            2e-3, source="model card example, step rewards"),
    "reasoneval": Golden("GAIR/ReasonEval-7B", "reasoneval", "float32",
                         [[0.9492, 0.7863, 0.2520, 0.7860, 0.9125, 0.5916, 0.4494, 0.8189,
                           0.8240, 0.2671]], 2e-3, source="GAIR codes/examples.py, validity"),
    "park-qwen-prm": Golden("Qwen/Qwen2.5-Math-PRM-7B", "qwen-prm", "bfloat16", [[0.375]], 0.03,
                            source="Park et al.'s demo, math500/Llama-3.2-1B-Instruct record 38, "
                            "last-step reward"),
    "park-adapter": Golden("Qwen/Qwen2.5-Math-PRM-7B", "qwen-prm", "bfloat16",
                           [[7.486343383789062e-05, 0.0025482177734375, 0.064453125]], 0.35,
                           scale="logit", adapter=_PARK,
                           source="Park et al.'s demo, the same record through the adapter, "
                           "quantiles at tau = 0.1/0.5/0.9"),
    "skywork-prm": Golden("Skywork/Skywork-o1-Open-PRM-Qwen-2.5-7B", "skywork-prm", "bfloat16",
                          [], 0.0, source="no published step rewards bundled"),
    "rlhflow-prm": Golden("RLHFlow/Llama3.1-8B-PRM-Deepseek-Data", "rlhflow-prm", "bfloat16",
                          [], 0.0, source="no published step rewards bundled"),
}  # fmt: skip


def _qwen_scores(prm: Any) -> list[np.ndarray]:
    return [prm.score_steps(QWEN_QUERY, [QWEN_STEPS])[0].scores]


def _shepherd_scores(prm: Any) -> list[np.ndarray]:
    """The card's exact text (steps joined by ``" ки\\n"``), read at every tag."""
    from dprm.llm.prm_interface import Encoded

    out = []
    for answer in ("18", "17"):
        text = " ки\n".join(s.replace("{x}", answer) for s in _SHEPHERD_STEPS) + " ки"
        ids = prm.tokenizer.encode(f"{SHEPHERD_QUESTION} {text}")
        positions = [i for i, t in enumerate(ids) if t == prm.tag_id]
        out.append(prm.forward([Encoded(ids, positions, len(positions))])[0].scores)
    return out


def _park_steps() -> tuple[str, list[str]]:
    demo = park_demo()
    return demo["question"], demo["reasoning_prefix"].split("\n\n")  # Park's score() split


def _park_raw(prm: Any) -> list[np.ndarray]:
    question, steps = _park_steps()
    return [prm.score_steps(question, [steps])[0].scores[-1:]]


def _park_quantiles(prm: Any) -> list[np.ndarray]:
    question, steps = _park_steps()
    return [prm.score_steps(question, [steps])[0].quantiles[-1]]


#: check -> its example's outputs (None: no example input bundled; "smoke": no values to
#: compare, the Qwen card's example is scored to exercise the load path)
EXAMPLES = {
    "qwen-prm": _qwen_scores,
    "math-shepherd": _shepherd_scores,
    "reasoneval": None,
    "park-qwen-prm": _park_raw,
    "park-adapter": _park_quantiles,
    "skywork-prm": "smoke",
    "rlhflow-prm": "smoke",
}


@dataclass
class Check:
    """One check's outcome: ``status`` is "pass", "fail", "ran" (loaded and scored, nothing to
    compare) or "skip" (not run); ``message`` says why."""

    name: str
    status: str
    message: str
    max_diff: float | None = None


def environment() -> dict[str, Any]:
    """Versions and what is available: GPU, packages the real tokenizers need."""
    import torch

    info: dict[str, Any] = {"torch": torch.__version__, "gpu": torch.cuda.is_available()}
    for name in ("transformers", "tokenizers", "sentencepiece", "google.protobuf"):
        found = importlib.util.find_spec(name.split(".")[0]) is not None
        if found and name == "google.protobuf":
            found = importlib.util.find_spec(name) is not None
        info[name] = found
    if info["transformers"]:
        import transformers

        info["transformers"] = transformers.__version__
    if info["gpu"]:
        info["gpu_name"] = torch.cuda.get_device_name(0)
    return info


def hub_reachable(timeout: float = 3.0) -> bool:
    """True when the Hugging Face hub (``HF_ENDPOINT``) answers a TCP connection and
    ``HF_HUB_OFFLINE`` is not set."""
    if os.environ.get("HF_HUB_OFFLINE", "0") not in ("", "0"):
        return False
    from urllib.parse import urlparse

    url = urlparse(os.environ.get("HF_ENDPOINT", "https://huggingface.co"))
    try:
        with socket.create_connection((url.hostname, url.port or 443), timeout=timeout):
            return True
    except OSError:
        return False


def _logit(x: np.ndarray) -> np.ndarray:
    import numpy as np

    x = np.clip(np.asarray(x, dtype=np.float64), 1e-12, 1 - 1e-12)
    return np.log(x) - np.log1p(-x)


def _first_line(err: BaseException) -> str:
    text = str(err).strip()
    return (text.splitlines()[0] if text else type(err).__name__)[:200]


def check_model(
    name: str,
    source: str | None = None,
    device: str | None = None,
    hub: bool | None = None,
    adapter: str | None = None,
) -> Check:
    """Run golden check ``name`` (a key of :data:`GOLDEN`).

    Args:
        name: the check.
        source: local directory or hub id of the PRM (default: the check's hub id).
        device: torch device.
        hub: whether the hub is reachable (default: checked with :func:`hub_reachable` when
            ``source`` is not a local directory).
        adapter: local directory or hub id of the adapter (``park-adapter``; default: its hub id).
    """
    import numpy as np

    from dprm.llm.prm import load_prm

    golden = GOLDEN[name]
    source = source or golden.hub_id
    example = EXAMPLES[name]
    if example is None:
        return Check(source, "skip", "no example input bundled for this model; expected "
                     f"values ({golden.source}): {golden.expected[0]}")  # fmt: skip
    adapter = adapter or golden.adapter
    remote = [s for s in (source, adapter) if s is not None and not os.path.isdir(s)]
    if remote and not (hub if hub is not None else hub_reachable()):
        return Check(source, "skip", f"no hub access and not a local directory: {remote[0]}; "
                     f"download it elsewhere and pass --prm {name}=DIR"
                     + (" / --adapter DIR" if golden.adapter else ""))  # fmt: skip
    if golden.adapter and importlib.util.find_spec("peft") is None:
        return Check(source, "skip", "peft is not installed (pip install 'dprm[llm]')")
    try:
        prm = load_prm(source, golden.kind, device=device, dtype=golden.dtype, **golden.options)
        if golden.adapter:
            from dprm.llm.park_adapter import attach_adapter

            attach_adapter(prm, adapter)
    except (OSError, ValueError, ImportError) as err:
        return Check(source, "skip", f"cannot load ({type(err).__name__}: {_first_line(err)}); "
                     "with no hub access, download it elsewhere and pass the directory")  # fmt: skip
    if example == "smoke":
        got = _qwen_scores(prm)[0]
        ok = len(got) == len(QWEN_STEPS) and bool(np.all((got >= 0) & (got <= 1)))
        shown = np.round(np.asarray(got, dtype=np.float64), 4).tolist()
        return Check(source, "ran" if ok else "fail", f"loaded and scored the Qwen card's example: "
                     f"{shown} ({golden.source}: nothing to compare)")  # fmt: skip
    got = example(prm)
    transform = _logit if golden.scale == "logit" else (lambda v: np.asarray(v, np.float64))
    diffs = [
        float(np.max(np.abs(transform(g) - transform(e)))) if len(g) == len(e) else float("inf")
        for g, e in zip(got, golden.expected, strict=True)
    ]  # fmt: skip
    worst = max(diffs)
    status = "pass" if worst <= golden.atol else "fail"
    shown = [np.asarray(g, dtype=np.float64).round(6).tolist() for g in got]
    unit = " in logit" if golden.scale == "logit" else ""
    return Check(source, status, f"{shown} vs {golden.expected} ({golden.source}; "
                 f"{golden.dtype}, tolerance {golden.atol}{unit})", worst)  # fmt: skip
