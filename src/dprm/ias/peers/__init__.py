"""The calibrator-free peers of ``auto-seq``: what users would pick instead of a calibrator.

* :mod:`~dprm.ias.peers.methods` -- the peers (per-question stopping rules and matched-budget
  allocations, :data:`PEERS`) and the view of the draws they read (:class:`DrawView`);
* :mod:`~dprm.ias.peers.curves` -- the cost-accuracy curves of the peers and of ``auto-seq`` on
  the same pools and draw orders, and the figures users quote from them;
* :mod:`~dprm.ias.peers.fallback` -- what ``auto-seq`` runs under a detected shift (the peer
  chosen on the training pools and the level of its knob).

The names of :mod:`~dprm.ias.peers.methods` are importable from ``dprm.ias.peers`` too (their
module before the package existed).
"""

from dprm.ias.peers.methods import (
    AC_THRESHOLDS,
    CALIBRATOR_FREE,
    MEAN_BUDGETS,
    PEERS,
    SCORE_PEERS,
    SCORE_QUANTILES,
    SWEEP_LEVELS,
    DrawView,
    Peer,
    TrainingScores,
    ac_signal,
    best_score_signal,
    beta_stop_probability,
    esc_budgets,
    esc_levels,
    esc_signal,
    first_stop,
    matched_budgets,
    mean_budget_levels,
    peers_for_rule,
    running_top2,
    score_levels,
    uniform_peer_budgets,
    vote_lead_budgets,
    vote_lead_sequence,
)

__all__ = [
    "AC_THRESHOLDS",
    "CALIBRATOR_FREE",
    "DrawView",
    "MEAN_BUDGETS",
    "PEERS",
    "Peer",
    "SCORE_PEERS",
    "SCORE_QUANTILES",
    "SWEEP_LEVELS",
    "TrainingScores",
    "ac_signal",
    "best_score_signal",
    "beta_stop_probability",
    "esc_budgets",
    "esc_levels",
    "esc_signal",
    "first_stop",
    "matched_budgets",
    "mean_budget_levels",
    "peers_for_rule",
    "running_top2",
    "score_levels",
    "uniform_peer_budgets",
    "vote_lead_budgets",
    "vote_lead_sequence",
]
