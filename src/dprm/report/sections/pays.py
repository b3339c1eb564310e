"""The "Does adaptive compute pay?" section of ``report.md``."""

from __future__ import annotations

RECOMMENDATION = (
    'Which calibrator for what: the section "Which calibrator?" above, computed from this '
    'report\'s held-out tables by the rule of docs/calibrators.md ("One recommendation"). '
    "`conformal` is a lower bound by design (marked ‡ in the tables), never a winner."
)


def pays_lines(pays, cfg) -> list[str]:
    """The "Does adaptive compute pay?" section: how it is computed, a reading generated from
    the numbers, then a table per world (:func:`dprm.report.pays.pays_markdown`)."""
    from dprm.report.pays import LEVEL, pays_markdown, pays_reading

    allocations = set(pays["allocation"])
    seeds = int(pays["seed"].nunique()) if "seed" in pays.columns else 1
    rules = ", ".join(
        f"`{r}`" for r in dict.fromkeys(pays.loc[pays["allocation"] == "uniform", "rule"])
    )
    costs = ", ".join(f"{c:g}" for c in sorted(pays["cost"].unique()))
    vote = getattr(cfg, "vote_trials", None)
    lines = [
        "## Does adaptive compute pay?",
        "",
        f"Accuracy at equal mean cost ({costs}; cost = mean draws per question / N_max) on the "
        f"held-out best-of-N sets, per selection rule ({rules}). **uniform** gives every "
        "question the same number of draws. The **C rule** is the paper's allocation: its C "
        "sweep interpolated to the cost (`--` where the sweep does not reach it), selection by "
        "the highest last-step score. **auto** allocates on each question's predicted accuracy "
        "of the *selected* answer, learnt on the world's training best-of-N set (`train/bon`) "
        "only; it falls back to uniform when the test questions' states look unlike the "
        "training ones. "
        + (
            "**auto-seq** (`--sequential`, `[ias] sequential`) is `auto` drawn one candidate at "
            "a time: the next draw goes to the question whose posterior success probability, "
            "updated from its drawn candidates' calibrated estimates (and final answers, where "
            "the sets have them), promises the largest gain (for majority vote, read from the "
            "current answer counts: a settled vote gains nothing from a draw, a close one "
            "does); its accuracy is a Monte Carlo "
            "over random draw orders per question, paired with `auto` on the same orders. "
            if "auto-seq" in allocations
            else ""
        )
        + (
            "**oracle-p** is `auto`'s allocation on each question's true success probability "
            "(known in a synthetic world) but not its pool. "
            if "oracle-p" in allocations
            else ""
        )
        + "The **oracle** knows every question's accuracy-vs-n curve on its realised pool (so "
        "also the luck of that pool); oracle − uniform is the *headroom* (in brackets on the "
        "oracle row). "
        + (
            "**oracle-pop** knows each question's true curve, the expectation over fresh pools "
            "from the synthetic world, but not the realised pool; its gain over uniform (in "
            "brackets) is the *population headroom*. "
            if "oracle-pop" in allocations
            else ""
        )
        + "Other cells: accuracy, and in brackets the share of the headroom captured, "
        "(method − uniform) / headroom"
        + (
            "; then the same share of the population headroom (pop.)"
            if "oracle-pop" in allocations
            else ""
        )
        + (f"; ± is the std over {seeds} training seeds" if seeds > 1 else "")
        + ". `highest-*` rules are exact expectations"
        + (
            f"; voting rules are a Monte Carlo mean over {vote} random orders per question, the "
            "same orders for every row"
            if vote
            else ""
        )
        + ". See docs/adaptive-bon.md for the definitions.",
        "",
        RECOMMENDATION,
        "",
    ]
    if "auto" not in allocations:
        lines += [
            "No `auto` rows: this run has no training best-of-N set (`train/bon`) to learn "
            "the allocation on.",
            "",
        ]
    reading = pays_reading(pays)
    if reading:
        lines += [
            f"Reading (generated from the numbers below, seed means): 'above' / 'below' = by "
            f"more than {LEVEL} against uniform at the same cost and rule, 'level' = within it.",
            "",
            *reading,
            "",
        ]
    for world in dict.fromkeys(pays["world"]):
        lines += [f"### {world}", "", pays_markdown(pays, world)]
    lines += ["Standalone: `tables/pays.md`, every row and seed in `tables/pays.csv`.", ""]
    return lines
