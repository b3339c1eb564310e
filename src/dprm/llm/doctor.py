"""``dprm doctor``: load each supported PRM and compare its step rewards with published values.

The first thing to run on a new GPU machine. For each PRM (a hub id or a local directory) it
loads the checkpoint through :func:`dprm.llm.prm.load_prm` (the path every stage takes), scores
the example of the model's own card, and compares the step rewards with the card's printed
values (:data:`GOLDEN`): pass/fail per model with the largest difference. Without a GPU, or
without the hub and no local copy, it says so and stops (it never tries a 7B model on a CPU
unless ``--device cpu`` asks for it).

The example inputs are transcribed from the model cards; ReasonEval's example (GAIR's
``codes/examples.py``) is not bundled, so its expected values are listed but not checked.
"""

from __future__ import annotations

import importlib.util
import os
import socket
from dataclasses import dataclass, field
from typing import Any

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
    """A model card's example: the hub id, the kind, dtype, and expected step rewards."""

    hub_id: str
    kind: str
    dtype: str
    expected: list[list[float]]
    atol: float
    options: dict = field(default_factory=dict)


GOLDEN: dict[str, Golden] = {
    "qwen-prm": Golden("Qwen/Qwen2.5-Math-PRM-7B", "qwen-prm", "bfloat16",
                       [[1.0, 0.1904296875, 0.9765625, 1.0]], 0.03, {"prompt": "model-card"}),
    "math-shepherd": Golden("peiyi9979/math-shepherd-mistral-7b-prm", "math-shepherd", "float32",
                            [[0.9955, 0.9958, 0.9983, 0.9957], [0.9955, 0.9958, 0.9983, 0.0240]],
                            2e-3),
    "reasoneval": Golden("GAIR/ReasonEval-7B", "reasoneval", "float32",
                         [[0.9492, 0.7863, 0.2520, 0.7860, 0.9125, 0.5916, 0.4494, 0.8189,
                           0.8240, 0.2671]], 2e-3),
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


#: kind -> the card example's scores (None: no example input bundled)
EXAMPLES = {"qwen-prm": _qwen_scores, "math-shepherd": _shepherd_scores, "reasoneval": None}


@dataclass
class Check:
    """One model's outcome: ``status`` is "pass", "fail" or "skip"; ``message`` says why."""

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


def check_model(
    kind: str, source: str | None = None, device: str | None = None, hub: bool | None = None
) -> Check:
    """Load ``kind``'s PRM from ``source`` (default: its hub id) and compare with the card.

    Args:
        kind: a key of :data:`GOLDEN`.
        source: local directory or hub id (default: the card's hub id).
        device: torch device.
        hub: whether the hub is reachable (default: checked with :func:`hub_reachable` when
            ``source`` is not a local directory).
    """
    from dprm.llm.prm import load_prm

    golden = GOLDEN[kind]
    source = source or golden.hub_id
    example = EXAMPLES[kind]
    if example is None:
        return Check(source, "skip", "no example input bundled for this model; expected "
                     f"values (card): {golden.expected[0]}")  # fmt: skip
    if not os.path.isdir(source) and not (hub if hub is not None else hub_reachable()):
        return Check(source, "skip", "no hub access and not a local directory: download the "
                     f"checkpoint elsewhere and pass --prm {kind}=DIR")  # fmt: skip
    try:
        prm = load_prm(source, kind, device=device, dtype=golden.dtype, **golden.options)
    except (OSError, ValueError, ImportError) as err:
        first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        return Check(source, "skip", f"cannot load ({type(err).__name__}: {first[:200]}); with "
                     "no hub access, download it elsewhere and pass the directory")  # fmt: skip
    got = example(prm)
    diffs = [
        float(np.max(np.abs(np.asarray(g, dtype=np.float64) - np.asarray(e))))
        if len(g) == len(e) else float("inf")
        for g, e in zip(got, golden.expected, strict=True)
    ]  # fmt: skip
    worst = max(diffs)
    status = "pass" if worst <= golden.atol else "fail"
    shown = [np.round(np.asarray(g, dtype=np.float64), 4).tolist() for g in got]
    return Check(source, status, f"scores {shown} vs card {golden.expected} ({golden.dtype}, "
                 f"tolerance {golden.atol})", worst)  # fmt: skip
