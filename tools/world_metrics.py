"""The arithmetic world's statistics from graded, scored draws (``tools/world_stats.py``).

Input per split: one record per question with its ``n`` draws' answers, correctness, whether
each correct draw also followed the true path (``genuine``), the kind of each draw's first
error and the PRM's step scores. Output: plain dicts of numbers (curves with paired bootstrap
intervals over questions, AUROC, calibration, error taxonomy, targets).
"""

from __future__ import annotations

import math
from collections import Counter

import numpy as np

from dprm.llm.tasks.arith import check_steps, parse_step, step_values

NS = (1, 2, 4, 8, 16, 32, 64)
#: the first-error kinds, in the page's order
KINDS = (
    "carry/borrow slip",
    "other arithmetic slip",
    "wrong operand copied",
    "wrong operation",
    "malformed step",
    "truncated",
    "wrong number of steps",
    "final answer miscopied",
)
BOOTSTRAP = 1000


def error_kind(row: dict, steps: list[str]) -> str:
    """The kind of a draw's first off-path step (``"none"`` when it is on the path throughout).

    carry/borrow slip: the right operands, a result off by a power of ten (>= 10); other
    arithmetic slip: any other wrong result; wrong operand copied: the running value or the
    question's operand misread; wrong operation: ``+`` for ``-`` or back; malformed step: a
    step that is not ``## Step k: a op x = r`` in the middle of the draw; truncated: the draw
    ends without a boxed answer; wrong number of steps: an answer line in place of an operation
    or an operation after the last; final answer miscopied: all operations right, a different
    number boxed.
    """
    ops = tuple((op, x) for op, x in row["ops"])
    flags = check_steps(row["start"], ops, steps)
    if all(flags):
        return "none"
    first = flags.index(False)
    values = [row["start"], *step_values(row["start"], ops)]
    has_answer = "\\boxed{" in steps[-1]
    if first > len(ops):
        return "wrong number of steps"
    if first == len(ops):
        if "\\boxed{" in steps[first]:
            return "final answer miscopied"
        return "wrong number of steps" if parse_step(steps[first]) else "truncated"
    parsed = parse_step(steps[first])
    if parsed is None:
        if "\\boxed{" in steps[first]:
            return "wrong number of steps"
        return "truncated" if first == len(steps) - 1 and not has_answer else "malformed step"
    a, op, x, result = parsed
    if op != ops[first][0]:
        return "wrong operation"
    if (a, x) != (values[first], ops[first][1]):
        return "wrong operand copied"
    diff = abs(result - values[first + 1])
    if diff >= 10 and math.log10(diff).is_integer():
        return "carry/borrow slip"
    return "other arithmetic slip"


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k from ``c`` correct of ``n`` draws (Chen et al. 2021)."""
    if n - c < k:
        return 1.0
    return 1.0 - math.prod((n - c - i) / (n - i) for i in range(k))


def auroc(pos: list[float], neg: list[float]) -> float:
    """P(score of a positive > score of a negative), ties half."""
    if not pos or not neg:
        return float("nan")
    p, q = np.asarray(pos)[:, None], np.asarray(neg)[None, :]
    return float(((p > q).sum() + 0.5 * (p == q).sum()) / (p.size * q.size))


def _per_question_curves(record: dict, n_draws: int, rng: np.random.Generator, trials: int):
    """[3, len(NS)]: pass@k, majority@n, PRM best-of-n (expected over random n-subsets)."""
    correct = np.asarray(record["correct"], dtype=bool)
    answers = record["answers"]
    last = np.array([s[-1] if s else 0.0 for s in record.get("scores", [[0.0]] * n_draws)])
    ns = [n for n in NS if n <= n_draws]
    out = np.zeros((3, len(ns)))
    for j, n in enumerate(ns):
        out[0, j] = pass_at_k(n_draws, int(correct.sum()), n)
        reps = 1 if n == n_draws else trials
        maj = bon = 0.0
        for _ in range(reps):
            pick = rng.permutation(n_draws)[:n]
            votes = Counter(answers[i] for i in pick if answers[i] is not None)
            if votes:
                top = max(votes.values())
                winners = [a for a, v in votes.items() if v == top]
                right = [a for a in winners if a == record["gold"]]
                maj += len(right) / len(winners)
            best = last[pick].max()
            tied = pick[last[pick] == best]
            bon += correct[tied].mean()
        out[1, j], out[2, j] = maj / reps, bon / reps
    return out


def _interval(values: np.ndarray, index: np.ndarray) -> tuple[float, float]:
    boots = values[index].mean(axis=1)
    return float(np.quantile(boots, 0.025)), float(np.quantile(boots, 0.975))


def _calibration(scores: np.ndarray, labels: np.ndarray, bins: int = 10) -> dict:
    which = np.minimum((scores * bins).astype(int), bins - 1)
    table, ece = [], 0.0
    for b in range(bins):
        inside = which == b
        if inside.any():
            mean_s, mean_y = float(scores[inside].mean()), float(labels[inside].mean())
            ece += inside.mean() * abs(mean_s - mean_y)
            table.append((b, int(inside.sum()), mean_s, mean_y))
    return {
        "ece": float(ece),
        "brier": float(((scores - labels) ** 2).mean()),
        "brier_base_rate": float(labels.mean() * (1 - labels.mean())),
        "mean_score": float(scores.mean()),
        "mean_label": float(labels.mean()),
        "bins": table,
    }


def summarise_split(records: list[dict], n_draws: int, seed: int) -> dict:
    """Every number of one split (see the module docstring)."""
    rng = np.random.default_rng(seed)
    curves = np.stack([_per_question_curves(r, n_draws, rng, trials=16) for r in records])
    q = len(records)
    index = np.random.default_rng(seed + 1).integers(0, q, size=(BOOTSTRAP, q))
    names = ("pass@k", "majority@n", "prm-best-of-n")
    curve_rows = []
    for c, name in enumerate(names):
        for j, n in enumerate([n for n in NS if n <= n_draws]):
            lo, hi = _interval(curves[:, c, j], index)
            curve_rows.append((name, n, float(curves[:, c, j].mean()), lo, hi))
    rates = np.array([np.mean(r["correct"]) for r in records])
    correct_all = np.concatenate([np.asarray(r["correct"], bool) for r in records])
    genuine_all = np.concatenate([np.asarray(r["genuine"], bool) for r in records])
    kinds = Counter(k for r in records for k in r["kinds"])
    wrong = sum(v for k, v in kinds.items() if k != "none")
    low_share, high_share = (rates < 0.1).astype(float), (rates > 0.9).astype(float)
    n_correct = np.array([np.sum(r["correct"]) for r in records], float)
    n_genuine = np.array(
        [np.sum(np.asarray(r["correct"]) & np.asarray(r["genuine"])) for r in records], float
    )
    ratio = n_genuine[index].sum(axis=1) / np.maximum(1.0, n_correct[index].sum(axis=1))
    out: dict = {
        "share_rate_below_0.1_ci": _interval(low_share, index),
        "share_rate_above_0.9_ci": _interval(high_share, index),
        "genuine_share_of_correct_ci": (
            float(np.quantile(ratio, 0.025)),
            float(np.quantile(ratio, 0.975)),
        ),
        "questions": q,
        "draws": int(correct_all.size),
        "curves": curve_rows,
        "pass@1": float(rates.mean()),
        "pass@1_ci": _interval(rates, index),
        "majority@64_minus_pass@1_ci": _interval(curves[:, 1, -1] - rates, index),
        "bon@64_minus_majority@64_ci": _interval(curves[:, 2, -1] - curves[:, 1, -1], index),
        "share_rate_below_0.1": float((rates < 0.1).mean()),
        "share_rate_above_0.9": float((rates > 0.9).mean()),
        "genuine_share_of_correct": float(genuine_all[correct_all].mean())
        if correct_all.any()
        else float("nan"),
        "first_error_kinds": {k: kinds.get(k, 0) / max(1, wrong) for k in KINDS},
        "wrong_draws": wrong,
        "levels": dict(sorted(Counter(r["level"] for r in records).items())),
        "pass@1_by_level": {
            lv: float(np.mean([np.mean(r["correct"]) for r in records if r["level"] == lv]))
            for lv in sorted({r["level"] for r in records})
        },
    }
    for c, name in enumerate(names):
        out[f"{name}@64"] = float(curves[:, c, -1].mean())
        out[f"{name}@64_ci"] = _interval(curves[:, c, -1], index)
    if records and "scores" in records[0]:
        last = [np.array([s[-1] for s in r["scores"]]) for r in records]
        per_q, both = [], []
        for r, scores in zip(records, last, strict=True):
            y = np.asarray(r["correct"], bool)
            if y.any() and not y.all():
                per_q.append(auroc(list(scores[y]), list(scores[~y])))
                both.append(True)
        per_q_arr = np.array(per_q)
        if len(per_q_arr):
            idx = np.random.default_rng(seed + 2).integers(
                0, len(per_q_arr), (BOOTSTRAP, len(per_q_arr))
            )
            out["within_question_auroc"] = float(per_q_arr.mean())
            out["within_question_auroc_ci"] = _interval(per_q_arr, idx)
        out["questions_with_both_classes"] = len(per_q)
        all_scores = np.concatenate(last)
        out["pooled_auroc"] = auroc(list(all_scores[correct_all]), list(all_scores[~correct_all]))
        out["last_step_calibration"] = _calibration(all_scores, correct_all.astype(float))
        # every step against the exact step check (1 while on the true path)
        step_scores = np.concatenate([np.asarray(s) for r in records for s in r["scores"]])
        step_labels = np.concatenate(
            [np.asarray(r["step_flags"][i], float)[: len(s)] for r in records
             for i, s in enumerate(r["scores"])]
        )  # fmt: skip
        out["step_calibration"] = _calibration(step_scores, step_labels)
        top_kinds = Counter()
        for r, scores in zip(records, last, strict=True):
            top_kinds[r["kinds"][int(np.argmax(scores))]] += 1
        out["kind_of_prm_top_draw"] = dict(top_kinds.most_common())
    return out


TARGETS = (
    # (name, split, key, low, high, what would close a miss)
    ("ID pass@1 in [0.25, 0.65]", "id", "pass@1", 0.25, 0.65,
     "train the generator longer (higher) or shorter (lower)"),
    ("ID questions with solve rate < 0.1 >= 15 %", "id", "share_rate_below_0.1", 0.15, None,
     "more two-digit questions in the ID mix"),
    ("ID questions with solve rate > 0.9 >= 15 %", "id", "share_rate_above_0.9", 0.15, None,
     "more one-digit questions in the ID mix, or a longer-trained generator"),
    ("ID majority@64 - pass@1 >= 0.08", "id", "majority@64_minus_pass@1", 0.08, None,
     "a generator whose errors scatter more (fewer copied operands)"),
    ("ID correct answers on the true path >= 80 %", "id", "genuine_share_of_correct", 0.80, None,
     "longer generator training (fewer right answers from wrong steps)"),
    ("OOD pass@1 in [0.05, 0.35]", "ood", "pass@1", 0.05, 0.35,
     "more (higher) or fewer (lower) 5-operation problems in the generator's second phase "
     "(--more-max-ops 5: it carries on to a fifth operation; OOD asks for 5-6)"),
    ("ID within-question AUROC >= 0.75", "id", "within_question_auroc", 0.75, None,
     "a PRM that compares each written result with the one its body computes (the shipped "
     "PRM's auxiliary digit head and identity layers: docs/real-world.md) and less noisy "
     "labels (more Monte Carlo rollouts per prefix)"),
    ("OOD within-question AUROC >= 0.65", "ood", "within_question_auroc", 0.65, None,
     "most right OOD answers come from a wrong path (table below), which no verifier can rank "
     "above a wrong answer, and the PRM has never scored a fifth or sixth step (its body and "
     "Monte Carlo data see 1-4 operations: the generator's base wrote the data); data "
     "drawn from a policy that writes 5-6 steps (the generator after its second phase, at "
     "another temperature), a body pretrained on such chains, then the PRM retrained"),
    ("ID PRM best-of-64 >= majority@64", "id", "bon@64_minus_majority@64", 0.0, None,
     "a PRM that rarely scores a slip highest (curves above: more draws bring more slips to "
     "score): less noisy Monte Carlo labels moved this gap from -0.106 at 2 rollouts per "
     "prefix to +0.006 at 16 (docs/real-world.md), so more rollouts or more labelled solutions"),
)  # fmt: skip


def targets(splits: dict) -> list[dict]:
    """Each target: measured value, 95 % interval, met or not, the gap."""
    rows = []
    for name, split, key, low, high, closer in TARGETS:
        s = splits[split]
        if key == "majority@64_minus_pass@1":
            value = s["majority@n@64"] - s["pass@1"]
            ci = s["majority@64_minus_pass@1_ci"]
        elif key == "bon@64_minus_majority@64":
            value = s["prm-best-of-n@64"] - s["majority@n@64"]
            ci = s["bon@64_minus_majority@64_ci"]
        else:
            value = s.get(key, float("nan"))
            ci = s.get(f"{key}_ci", (float("nan"), float("nan")))
        if math.isnan(value):  # e.g. no question with both right and wrong draws
            met, gap = False, float("nan")
        else:
            met = value >= low and (high is None or value <= high)
            gap = 0.0 if met else (low - value if value < low else value - high)
        rows.append(
            {"target": name, "measured": value, "ci": list(ci), "met": bool(met),
             "gap": gap, "to_close": "" if met else closer}
        )  # fmt: skip
    return rows


def summarise(data: dict, n_draws: int, check: dict | None, seed: int = 0) -> dict:
    """The page's numbers: per split, the targets and the dprm-generator check."""
    splits = {}
    for split, block in data.items():
        for r in block["records"]:
            r.setdefault("gold", None)
        splits[split] = summarise_split(block["records"], n_draws, seed)
        splits[split]["sample_s"] = block["sample_s"]
        splits[split]["score_s"] = block["score_s"]
    out = {"splits": splits, "targets": targets(splits), "samples_per_question": n_draws}
    if check is not None:
        fast = np.array(
            [np.mean(r["correct"]) for r in data["id"]["records"][: check["questions"]]]
        )
        slow = np.array(check["dprm_rates"])
        index = np.random.default_rng(seed + 3).integers(0, len(slow), (BOOTSTRAP, len(slow)))
        out["generator_check"] = {
            **{k: v for k, v in check.items() if k != "dprm_rates"},
            "sampler_pass@1": float(fast.mean()),
            "dprm_pass@1": float(slow.mean()),
            "difference_ci": _interval(fast - slow, index),
        }
    return out
