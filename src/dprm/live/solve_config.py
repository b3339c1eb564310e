"""The settings of a ``dprm solve`` run (:class:`SolveConfig`), every field a flag.

Light on purpose (standard library only): ``dprm solve --help`` builds its flags from these
fields without importing pandas, the model libraries or the calibrators.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from dprm.config import ConfigError

DEFAULT_C = {"bon": 0.9, "beam": 0.99}
#: selection rules a live best-of-N run can answer by (``dprm.ias.selection.rules``): the ones that need
#: only what a live draw has, its final PRM score and its final answer
LIVE_RULES = ("highest-last", "weighted-last", "majority")


def _setting(default: Any = dataclasses.MISSING, *, help: str, fingerprint: bool = True, **flag):
    """A :class:`SolveConfig` field whose metadata describes its ``dprm solve`` flag.

    Args:
        default: the setting's default (also the flag's); MISSING for a required setting.
        help: the flag's help text.
        fingerprint: whether the setting decides a run's content (resuming with it changed is
            refused); see :data:`FINGERPRINT_KEYS`.
        **flag: ``flag`` (name, default ``--field-name``), ``choices``, ``metavar``,
            ``required``, ``group`` (help section) and ``type`` (``"unit_interval"``: a number
            in [0, 1]).
    """
    return dataclasses.field(
        default=default, metadata={"help": help, "fingerprint": fingerprint, **flag}
    )


@dataclass(frozen=True)
class SolveConfig:
    """Settings of a live run (every field is a ``dprm solve`` flag).

    Attributes:
        mode: ``bon`` (adaptive best-of-N) or ``beam`` (beam search with IAS-of-K / IAS-of-M).
        C: target probability of at least one correct candidate; None: 0.9 (bon), 0.99 (beam,
            Park's constant).
        n_max: N_max of the budget rules; in beam mode the samples N per pruning step.
        baseline_n: fixed-budget baseline (bon: N candidates; beam: N samples per pruning step
            at full width); None = ``n_max``; 0 = no baseline.
        beta: level of the point rule for fixed-level (QR) calibrators, as ``dprm ias --beta``.
        beam_width: M_MAX (K_MAX = N / M_MAX).
        freq: prune every ``freq`` steps.
        max_steps: stop a search after this many steps.
        max_beam_tokens: a beam is finished once its steps hold this many generated tokens (the
            reference stops a beam when its prompt reaches the 4096-token context).
        lower_level: the quantile level whose value sets the beam budget (K and M).
        rank_by: ``median`` (Q(0.5)) or ``mean`` (p_hat): how beams are ranked.
        adaptive: which beam rules adapt: ``km`` (both), ``k``, ``m`` or ``none``.
        auto_cost: bon: the mean cost (mean draws / n_max) of the ``auto`` / ``auto-seq``
            allocation over the shard's questions (None: the C rule).
        train_bon: the training BoN set those allocations learn on.
        auto_seq: bon: the sequential ``auto-seq`` allocation (:mod:`dprm.live.bon_seq`).
        round_size: auto-seq: draws chosen together before their estimates are read (the
            vote-lead peer: draws per round).
        peer: bon: allocate by a calibrator-free adaptive peer (:mod:`dprm.live.bon_peers`).
        peer_level: the peer's knob (threshold or most draws; None: its default).
        rule: bon: how a question's answer is picked from its draws (:data:`LIVE_RULES`); the
            ``auto`` / ``auto-seq`` allocations are learnt for this rule.
        batch_questions: questions generated together (one part of the log).
    """

    mode: str = _setting(
        help="adaptive best-of-N or beam search", choices=["bon", "beam"], required=True
    )
    questions: str = _setting(
        help="question file (.jsonl/.json/.parquet with problem|question and answer) or a set "
        "name (math500, math, math-park, aime24, aime25; names need the hub). No gold answer: "
        "not graded",
        metavar="FILE_OR_NAME",
        required=True,
    )
    generator: str = _setting(
        help="generator model directory or hub id", metavar="MODEL", required=True
    )
    prm: str = _setting(
        help="PRM directory or hub id (the one the calibrator was fitted on)", required=True
    )
    calibrator: str = _setting(
        help="calibrator directory (dprm train output)", metavar="DIR", required=True
    )
    C: float | None = _setting(
        None,
        help="target P(at least one correct); default 0.9 (bon), 0.99 (beam)",
        flag="--C",
    )
    n_max: int = _setting(64, help="largest budget N_max; beam: samples per pruning step N")
    baseline_n: int | None = _setting(
        None,
        help="fixed baseline: bon = best of this many samples, beam = full-width search with "
        "N = this; default: --n-max; 0 = no baseline (only the adaptive run is paid for)",
    )
    beta: float = _setting(
        0.1, help="QR calibrators: level of the point rule, as dprm ias", type="unit_interval"
    )
    auto_cost: float | None = _setting(
        None,
        help="bon: allocate by dprm ias's 'auto' rule instead of the C rule, at this mean cost "
        "(mean draws / n_max) over the shard's questions; needs --train-bon",
        type="unit_interval",
    )
    train_bon: str | None = _setting(
        None,
        help="bon with --auto-cost: a training BoN set scored by the same PRM, where auto "
        "learns its selection-accuracy model and uniform share",
    )
    auto_seq: bool = _setting(
        False,
        help="bon with --auto-cost: allocate by dprm ias's sequential 'auto-seq' instead, live: "
        "after the uniform floor, draw in rounds, each draw going to the question of largest "
        "posterior-expected gain, the posteriors updated by every drawn candidate's calibrated "
        "estimate and final answer (agreement among a question's draws is evidence of a large "
        "success probability); needs --train-bon with candidate hidden states, BoN contract "
        "v2, unless the calibrator reads only the score",
    )
    round_size: int = _setting(
        16,
        help="bon with --auto-seq: draws chosen and generated together before their estimates "
        "are read (1: fully sequential; larger keeps a GPU busy)",
    )
    peer: str | None = _setting(
        None,
        help="bon: allocate by a calibrator-free adaptive peer instead: adaptive-consistency "
        "(stop when P(leading answer beats the runner-up) >= --peer-level, default 0.95), "
        "esc-4 / esc-8 (stop after a window whose answers agree; --peer-level: most draws), "
        "score-raw / score-calibrated (stop when the best drawn score clears --peer-level), "
        "vote-lead (one draw each, then each draw to the closest vote until --peer-level "
        "draws per question on average are spent), beacon / pandora (stop when one more draw's "
        "expected gain in PRM score is at most the cost --peer-level, under a reward posterior "
        "or Weitzman's reservation value fitted on --train-bon)",
        choices=["adaptive-consistency", "esc-4", "esc-8", "score-raw", "score-calibrated",
                 "vote-lead", "beacon", "pandora"],
    )  # fmt: skip
    peer_level: float | None = _setting(
        None, help="bon with --peer: the peer's threshold or most draws (default: the peer's)"
    )
    rule: str = _setting(
        "highest-last",
        help="bon: how the answer is picked from a question's draws: the highest final PRM "
        "score (the paper's), weighted best-of-N (final scores summed per distinct final "
        "answer) or majority vote (ties: the answer holding the higher single score). --auto-cost "
        "learns its allocation for this rule; with majority, --auto-seq reads the vote's state "
        "(the race index of dprm ias). Voting needs --train-bon with final answers (BoN v2)",
        choices=list(LIVE_RULES),
    )
    temperature: float = _setting(0.7, help="sampling temperature", group="sampling")
    top_p: float = _setting(1.0, help="nucleus sampling", group="sampling")
    max_new_tokens: int = _setting(
        2048,
        help="token cap of one generation call: a response (bon) or a step (beam)",
        group="sampling",
    )
    seed: int = _setting(
        0, help="base seed; every prompt gets its own derived seed", group="sampling"
    )
    beam_width: int = _setting(
        8,
        help="M_MAX, samples per kept beam at full width (K_MAX = N / M_MAX)",
        group="beam search",
    )
    freq: int = _setting(5, help="prune and re-expand every this many steps", group="beam search")
    max_steps: int = _setting(100, help="stop a search after this many steps", group="beam search")
    max_beam_tokens: int = _setting(
        3072, help="a beam ends once its steps hold this many tokens", group="beam search"
    )
    lower_level: float = _setting(
        0.1,
        help="quantile level that sets K and M",
        group="beam search",
        type="unit_interval",
    )
    rank_by: str = _setting(
        "median", help="how beams are ranked", choices=["median", "mean"], group="beam search"
    )
    adaptive: str = _setting(
        "km",
        help="which rules adapt: IAS-of-K, IAS-of-M, both",
        choices=["km", "k", "m", "none"],
        group="beam search",
    )
    batch_questions: int = _setting(
        8,
        help="questions generated together (one resumable part)",
        group="sampling",
        fingerprint=False,
    )
    grade_timeout: float = _setting(
        5.0,
        help="seconds per math-verify grading call",
        group="models and grading",
        fingerprint=False,
    )
    grade_workers: int = _setting(
        2, help="grading worker processes", group="models and grading", fingerprint=False
    )
    limit: int | None = _setting(
        None, help="only the first K questions", metavar="K", fingerprint=False
    )
    shard: str = _setting(
        "0/1",
        help="run the i-th of n blocks of questions (0-based)",
        metavar="i/n",
        fingerprint=False,
    )

    def __post_init__(self) -> None:
        def fail(what: str) -> None:
            raise ConfigError(what)

        if self.mode not in ("bon", "beam"):
            fail(f"--mode {self.mode!r}: expected 'bon' or 'beam'")
        if self.C is None:
            object.__setattr__(self, "C", DEFAULT_C[self.mode])
        if not 0.0 < float(self.C) < 1.0:
            fail(f"--C {self.C}: expected a target in (0, 1)")
        if self.baseline_n is None:
            object.__setattr__(self, "baseline_n", self.n_max)
        if self.n_max < 1 or self.baseline_n < 0:
            fail(f"--n-max {self.n_max} / --baseline-n {self.baseline_n}: expected >= 1 / >= 0")
        fitted_peer = self.peer in ("beacon", "pandora")  # fitted on --train-bon's scores
        if (self.auto_cost is None) != (self.train_bon is None) and not (
            fitted_peer and self.auto_cost is None
        ):
            fail("--auto-cost and --train-bon go together (auto learns on the training set)")
        if self.auto_cost is not None and self.mode != "bon":
            fail("--auto-cost applies to --mode bon only")
        if self.auto_cost is not None and not 0.0 < float(self.auto_cost) <= 1.0:
            fail(f"--auto-cost {self.auto_cost}: expected a cost in (0, 1]")
        if self.auto_seq and self.auto_cost is None:
            fail("--auto-seq needs --auto-cost and --train-bon (its budget and training set)")
        if self.round_size < 1:
            fail(f"--round-size {self.round_size}: expected >= 1")
        if self.peer is not None:
            if self.mode != "bon" or self.auto_seq:
                fail(f"--peer {self.peer}: applies to --mode bon, without --auto-seq")
            if self.peer in (
                "vote-lead",
                "score-raw",
                "score-calibrated",
                "beacon",
                "pandora",
            ) and (self.peer_level is None):
                fail(f"--peer {self.peer} needs --peer-level (its threshold, mean draws or cost)")
            if fitted_peer and self.train_bon is None:
                fail(f"--peer {self.peer} needs --train-bon (its reward model is fitted there)")
            if self.peer == "vote-lead" and not 1 <= self.peer_level <= self.n_max:
                fail(f"--peer-level {self.peer_level}: vote-lead's mean draws, in [1, --n-max]")
        if self.rule not in LIVE_RULES:
            fail(f"--rule {self.rule!r}: expected one of {', '.join(LIVE_RULES)}")
        if self.mode == "beam" and self.rule != "highest-last":
            fail(f"--rule {self.rule}: applies to --mode bon only (beam search keeps its own "
                 "ranking, --rank-by)")  # fmt: skip
        if self.rank_by not in ("median", "mean"):
            fail(f"--rank-by {self.rank_by!r}: expected 'median' or 'mean'")
        if self.adaptive not in ("km", "k", "m", "none"):
            fail(f"--adaptive {self.adaptive!r}: expected km, k, m or none")
        if not 0.0 <= self.lower_level <= 1.0:
            fail(f"--lower-level {self.lower_level}: expected a level in [0, 1]")
        if self.mode == "beam":
            for name, n in (("--n-max", self.n_max), ("--baseline-n", self.baseline_n)):
                if n and n % self.beam_width:
                    fail(
                        f"{name} {n} must be a multiple of --beam-width {self.beam_width} (K_MAX = N / M_MAX)"
                    )
            if self.freq < 1 or self.max_steps < 1:
                fail(f"--freq {self.freq} / --max-steps {self.max_steps}: expected >= 1")

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


#: settings that decide a run's content; resuming with any of them changed is refused
FINGERPRINT_KEYS = tuple(
    f.name for f in dataclasses.fields(SolveConfig) if f.metadata["fingerprint"]
)
