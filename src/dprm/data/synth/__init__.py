"""Synthetic worlds (the twin) with a known truth, fitted to the paper's published Base statistics.

A world is one generator x one PRM; every world has the splits ``train`` (MATH-train-like),
``id`` (MATH500-like) and ``ood`` (AIME24-25-like). The generative model, its realism choices
and what the fit does and does not promise are described in docs/synth.md. In short, for a
record (question q, response r, step t):

* **success logit** l = a_q + w_{q,r,t} + c_style sin(1.5 c_{q,r}) [t >= 1], with question
  difficulty a_q ~ N(skill, spread^2) (a wide spread: many questions a generator almost always
  or almost never solves), a trajectory walk w (w_0 = 0, w_t = w_{t-1} + N(0, walk^2): a
  trajectory commits as it goes on) and a visible response style c. The true success
  probability is p = sigmoid(l); labels are k ~ Binomial(n_rollouts, p), success_prob = k / n.
* **what the PRM sees**: noisy readings o_1 = a_q + delta + e_q and o_2 = w + e_{q,r,t},
  with noise sized so that a share ``visibility`` (kappa) of each component's variance is
  visible, plus the style, the step, the PRM's own score quirk and many nuisance features
  unrelated to success. delta = 0 in distribution; out of it the reading misses a share
  ``ood_blindness`` of the generator's drop in skill, delta = ood_blindness (skill_id -
  skill_ood): AIME questions look easier than they are.
* **hidden state (twin v2, format 2)**: h is a fixed embedding, per PRM, of a latent u
  (:func:`assemble_latent`, the one place latents are put together) that carries the
  readings z = (o_1 / 4, o_2 / 2, style) twice: through a linear channel masked by fresh noise,
  m = sqrt(lambda) z + sqrt(1 - lambda) xi, and raw through keyed units
  tanh(s (z . a_k + b_k)) with a visible random key s = +-1. The keyed units are odd in s, so a
  linear readout of them carries nothing about success, while products of two of them (a
  quadratic readout, a network) recover z. lambda = ``linear_share`` is fitted per cell so
  that a converged linear QR matches the paper's QR cells; most of h's variance comes from
  the nuisance features. h = (units B) * col_scale + col_shift, B [128, D].
* **truth**: the success distribution given the PRM's readings (o_1, o_2, style, step).
  Everything is jointly Gaussian in logit space, so l | readings is exactly
  N(true_mu, true_sigma^2) with true_mu = skill + kappa (o_1 - delta - skill) + kappa_t o_2 +
  c_style sin(1.5 c), true_sigma^2 = (1 - kappa) spread^2 + (1 - kappa_t) V_t,
  V_t = t walk^2, kappa_t = V_t / (V_t + tau^2); Q(tau | readings) = sigmoid(true_mu +
  true_sigma Phi^-1(tau)) in closed form. h determines the readings (the key is visible and
  the keyed units are injective in z for generic a_k), so this is also the truth given h; a
  linear calibrator of h reaches it only when lambda = 1.
* **PRM score** (the Base prediction), a readout of h that knows neither the generator's skill
  nor its own uncertainty: logit r = score_bias + score_gain (difficulty_weight o_1 + o_2) +
  score_noise n, n the PRM's quirk feature. (score_bias, score_gain, score_noise) are fitted
  per (generator, PRM, split kind) cell so that the Base Brier, PosBrier and ECE match the
  paper's tables (``tools/fit_twin.py``; the package data ``score_cells.csv``,
  :data:`SCORE_CELLS`). Nothing else is fitted; calibrators never see these parameters.

The three PRM worlds of one generator share the generator's draws (questions, trajectories,
labels): by default the seed is derived from the generator alone, as in the paper,
where three PRMs score the same rollouts. The PRM's own draws come from a separate stream.

Best-of-N pools: each question's true p_q = sigmoid(a_q) follows the question-only (step 0)
distribution of the calibration set; 64 candidates are correct ~ Bernoulli(p_q) and their
final PRM scores separate correct from wrong ones by the PRM's ``bon_separation``.

Truth goes into ``true_mu``, ``true_sigma`` (logit-normal parameters) and ``true_p`` (the
realised p). Nothing in dprm reads ``true_*`` except truth-based metrics.

The package, by job: :mod:`~dprm.data.synth.presets` (generators, PRMs, sizes, fitted cells),
:mod:`~dprm.data.synth.draws` (the generative model), :mod:`~dprm.data.synth.bon` (BoN
contract v2: answers, candidate states, step scores), :mod:`~dprm.data.synth.world` (writing
a world, replaying its BoN questions) and :mod:`~dprm.data.synth.population` (the twin's
population oracle). The names below are re-exported here.
"""

from dprm.data.synth.draws import (
    EMBED_WIDTH,
    KEY_COL,
    KEYED_WIDTH,
    LATENT_DIM,
    LENGTH_SPREAD,
    LINEAR_COLS,
    N_NUISANCE,
    N_SIGNAL,
    QUIRK_COL,
    RAW_COLS,
    REFERENCE_STEP,
    STEP_COL,
    STYLE_WEIGHT,
    TANH_WIDTH,
    Embedding,
    GeneratorDraws,
    PRMDraws,
    Records,
    assemble_latent,
    draw_generator,
    draw_pool,
    draw_prm,
    simulate,
    split_rngs,
)
from dprm.data.synth.presets import (
    DEFAULT_CELL,
    GENERATORS,
    PRMS,
    SCORE_CELLS,
    SIZES,
    ScoreCell,
    Split,
    SynthGenerator,
    SynthPRM,
    WorldSize,
    default_seed,
    preset_names,
    resolve_preset,
    score_cell,
)
from dprm.data.synth.world import SYNTH_FORMAT, BonQuestions, replay_bon_questions, write_world

__all__ = [
    "DEFAULT_CELL",
    "EMBED_WIDTH",
    "GENERATORS",
    "KEYED_WIDTH",
    "KEY_COL",
    "LATENT_DIM",
    "LENGTH_SPREAD",
    "LINEAR_COLS",
    "N_NUISANCE",
    "N_SIGNAL",
    "PRMS",
    "QUIRK_COL",
    "RAW_COLS",
    "REFERENCE_STEP",
    "SCORE_CELLS",
    "SIZES",
    "STEP_COL",
    "STYLE_WEIGHT",
    "SYNTH_FORMAT",
    "TANH_WIDTH",
    "BonQuestions",
    "Embedding",
    "GeneratorDraws",
    "PRMDraws",
    "Records",
    "ScoreCell",
    "Split",
    "SynthGenerator",
    "SynthPRM",
    "WorldSize",
    "assemble_latent",
    "default_seed",
    "draw_generator",
    "draw_pool",
    "draw_prm",
    "preset_names",
    "replay_bon_questions",
    "resolve_preset",
    "score_cell",
    "simulate",
    "split_rngs",
    "write_world",
]
