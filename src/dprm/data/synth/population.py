"""The twin's question model behind a written test BoN set, for the population oracle.

:func:`twin_questions` replays the very questions of a set written by
:func:`dprm.data.synth.write_world`; :func:`dprm.data.synth.bon.draw_fresh_pool` draws fresh
pools for them and :func:`dprm.data.synth.bon.highest_last_population_curve` gives the contract
rule's exact population curve. The oracle built on them is :mod:`dprm.ias.curves.population`.
"""

from __future__ import annotations

import numpy as np

from dprm.data.synth.presets import SIZES
from dprm.data.synth.world import BonQuestions, replay_bon_questions


def twin_questions(bon) -> BonQuestions | None:
    """The replayed question model of a twin *test* BoN set, or None for any other set.

    A set written by :func:`dprm.data.synth.write_world` names its preset, size, seed and split
    in ``meta``; the replay is checked against the set's ``true_p`` (a mismatch, e.g. a world
    written by another version of the twin, gives None rather than a wrong oracle).
    """
    meta = getattr(bon, "meta", None) or {}
    if meta.get("source") != "dprm synth" or "true_p" not in bon.questions.columns:
        return None
    size, split = meta.get("size"), meta.get("split")
    if size not in SIZES or split not in [s.name for s in SIZES[size].splits]:
        return None
    if SIZES[size].splits[[s.name for s in SIZES[size].splits].index(split)].n_bon_questions == 0:
        return None  # a training split's pools come from other streams
    bq = replay_bon_questions(meta["preset"], split, size, int(meta["seed"]))
    stored = bon.questions["true_p"].to_numpy(np.float32)
    if len(stored) != len(bq.rec.true_p) or not np.array_equal(
        stored, bq.rec.true_p.astype(np.float32)
    ):
        return None
    return bq
