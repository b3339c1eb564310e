"""The shipped arithmetic-world models: load through transformers and dprm, and are trained."""

from __future__ import annotations

import contextlib
import json
import sys
from importlib import resources
from pathlib import Path

import pytest

pytest.importorskip("transformers")

WORLD = Path(str(resources.files("dprm.llm") / "worlds" / "arith"))
GENERATOR = WORLD / "generator"
PRM = WORLD / "prm"


@contextlib.contextmanager
def tools_on_path():
    """``tools/`` importable (its scripts import one another by name) inside the block."""
    tools = Path(__file__).resolve().parents[3] / "tools"
    sys.path.insert(0, str(tools))
    try:
        yield tools
    finally:
        sys.path.remove(str(tools))


def test_shipped_files_are_small_safetensors_with_provenance():
    import hashlib

    files = [p for p in WORLD.rglob("*") if p.is_file()]
    assert max(p.stat().st_size for p in files) <= 16 * 2**20
    for folder in (GENERATOR, PRM):
        assert (folder / "model.safetensors").is_file()
        assert not list(folder.glob("*.bin")), "weights must not be pickles"
        record = json.loads((folder / "provenance.json").read_text())
        assert record["script"] == "tools/train_world.py"
        assert record["command"].startswith("python tools/train_world.py")
        assert isinstance(record["seed"], int) and len(record["commit"]) == 40
        assert record["torch"] and record["cpu"] and record["wall_s"] > 0 and record["cpu_s"] > 0
        # every shipped file is the one the script wrote: its sha256 is recorded beside it
        shipped = {p.name for p in folder.iterdir() if p.is_file()} - {"provenance.json"}
        assert set(record["sha256"]) == shipped
        for name, digest in record["sha256"].items():
            assert hashlib.sha256((folder / name).read_bytes()).hexdigest() == digest, name


def test_prm_is_larger_than_the_generator_and_trained_on_another_policy():
    from transformers import AutoConfig

    gen, prm = AutoConfig.from_pretrained(GENERATOR), AutoConfig.from_pretrained(PRM)
    assert prm.num_hidden_layers * prm.hidden_size > gen.num_hidden_layers * gen.hidden_size
    record = json.loads((PRM / "provenance.json").read_text())
    generator_weights = json.loads((GENERATOR / "provenance.json").read_text())["sha256"]
    # the Monte Carlo labels come from another policy than the one the PRM scores (temperature
    # 1): an earlier checkpoint, or the shipped weights at another temperature
    same_weights = (
        record["policy_sha256"]["model.safetensors"] == (generator_weights["model.safetensors"])
    )
    assert not same_weights or record["policy_temperature"] != 1.0
    data = record["stages"]["prm-data"]
    assert data["solutions"] >= 10_000 and data["rollouts_per_prefix"] >= 2
    assert data["damaged_copies"] > 0


def test_the_training_scripts_defaults_are_the_shipped_models_arguments():
    """``python tools/train_world.py all`` with no options retrains what is shipped: every
    default equals the value the shipped provenance records for its stage."""
    with tools_on_path():
        from train_world import build_parser
    defaults = vars(build_parser().parse_args(["all"]))
    gen = json.loads((GENERATOR / "provenance.json").read_text())
    prm = json.loads((PRM / "provenance.json").read_text())
    stages = prm["stages"]
    body, data = stages["prm-body"], stages["prm-data"]
    recorded = {
        "seed": gen["seed"], "threads": gen["threads"], "steps": gen["steps"],
        "batch": gen["batch"], "lr": gen["lr"], "hidden": gen["hidden"],
        "layers": gen["layers"], "more_steps": gen["more_steps"], "more_lr": gen["more_lr"],
        "more_max_ops": gen["more_max_ops"],
        "body_steps": body["steps"], "body_lr": body["lr"], "prm_hidden": body["hidden"],
        "prm_layers": body["layers"], "prm_questions": data["questions"],
        "prm_samples": data["samples_per_question"], "prm_rollouts": data["rollouts_per_prefix"],
        "prm_temperature": data["temperature"], "prm_epochs": prm["epochs"],
        "prm_lr": prm["lr"], "prm_batch": prm["batch"], "prm_extra_layers": prm["extra_layers"],
        "prm_aux_digits": prm["aux_digits"], "prm_aux_lm": prm["aux_lm"],
        "prm_slips": prm["slips_per_correct"],
    }  # fmt: skip
    if (
        "policy" in stages
    ):  # the earlier checkpoint: in the PRM's lineage only when it drew the data
        recorded["policy_step"] = stages["policy"]["steps"]
    assert {name: defaults[name] for name in recorded} == recorded
    # the data's policy is the generator's base (the model before its more_steps), drawn at
    # a temperature other than 1: another checkpoint and temperature than the scored policy
    assert defaults["prm_policy"] == "base" and data["temperature"] != 1.0
    assert data["policy_sha256"] == gen["base_sha256"] != gen["sha256"]


def test_generator_is_a_standard_qwen2_causal_lm_vllm_can_serve():
    from transformers import AutoConfig, AutoModelForCausalLM

    config = AutoConfig.from_pretrained(GENERATOR)
    assert config.architectures == ["Qwen2ForCausalLM"]
    assert config.hidden_size // config.num_attention_heads >= 32
    model = AutoModelForCausalLM.from_pretrained(GENERATOR)
    assert type(model).__name__ == "Qwen2ForCausalLM"


def test_tokenizer_round_trips_steps_and_separators():
    from transformers import PreTrainedTokenizerFast

    from dprm.llm.prompts import build_prompt, split_steps
    from dprm.llm.tasks.arith_sets import set_rows

    tok = PreTrainedTokenizerFast(tokenizer_file=str(GENERATOR / "tokenizer.json"))
    for row in set_rows("ood")[:10]:
        text = row["solution"]
        ids = tok.encode(text, add_special_tokens=False)
        assert tok.decode(ids) == text
        assert split_steps(tok.decode(ids)) == split_steps(text)
        prompt = build_prompt(row["question"], str(GENERATOR))
        assert tok.decode(tok.encode(prompt, add_special_tokens=False)) == prompt
    newline = tok.encode("\n", add_special_tokens=False)
    assert tok.encode("\n\n", add_special_tokens=False) == newline * 2


def test_generator_writes_the_step_format_it_was_trained_on():
    """Random weights fail this: greedy decoding must give parsable steps and a boxed answer."""
    from dprm.llm.generate import load_generator
    from dprm.llm.prompts import build_prompt, split_steps
    from dprm.llm.questions import extract_boxed
    from dprm.llm.tasks.arith import parse_step
    from dprm.llm.tasks.arith_sets import set_rows

    generator = load_generator("transformers", str(GENERATOR), device="cpu")
    rows = set_rows("id")[:4]
    prompts = [build_prompt(r["question"], str(GENERATOR)) for r in rows]
    outs = generator.generate(prompts, 1, temperature=0.0, max_new_tokens=160, seeds=[0] * 4)
    for (completion,) in outs:
        steps = split_steps(completion.text)
        assert len(steps) >= 2
        assert parse_step(steps[0]) is not None
        assert extract_boxed(steps[-1]) is not None


def test_prm_reads_as_qwen_prm_and_scores_every_step():
    import numpy as np

    from dprm.llm.prm import infer_kind, load_prm
    from dprm.llm.tasks.arith_sets import set_rows

    assert infer_kind(str(PRM)) == "qwen-prm"
    prm = load_prm(str(PRM), device="cpu")
    row = set_rows("id")[0]
    right = row["solution"].split("\n\n")
    wrong = list(right)
    wrong[0] = right[0].rsplit("=", 1)[0] + "= 1000"
    outputs = prm.score_steps(row["question"], [right, wrong])
    for out, steps in zip(outputs, [right, wrong], strict=True):
        assert out.scores.shape == (len(steps),)
        assert np.all((out.scores >= 0) & (out.scores <= 1))
        assert out.hidden.shape == (len(steps), prm.hidden_dim)
    # trained on exact step labels: an absurd first result scores below the true one
    assert outputs[1].scores[0] < outputs[0].scores[0]


#: a short retrain (seconds, not the shipped half hour): its numbers on any machine, within
#: these tolerances (the same script, seed and arguments; not the same bytes, which depend on
#: the CPU's floating-point kernels)
SHORT_TRAINING = ["--seed", "0", "--steps", "80", "--batch", "16", "--hidden", "64",
                  "--policy-step", "40", "--more-steps", "20", "--prm-hidden", "64", "--prm-layers", "2",
                  "--body-steps", "10", "--prm-questions", "6", "--prm-samples", "2",
                  "--prm-rollouts", "2", "--prm-workers", "1", "--prm-batch", "8",
                  "--prm-epochs", "1", "--prm-extra-layers", "1", "--prm-aux-digits", "1",
                  "--prm-aux-lm", "0.5"]  # fmt: skip
#: the generator's mean loss over its last 50 of 80 + 20 steps (1.12 measured; it starts at
#: ln(vocab) ~ 5.7, and 100 steps of a 64-wide model do not get far below ~1) must land here
SHORT_LOSS = (0.8, 1.6)


@pytest.mark.slow
def test_a_short_retrain_writes_checkable_provenance_and_learns(tmp_path):
    import hashlib

    with tools_on_path():
        train_world = _load_tool("train_world")
        out, work = tmp_path / "world", tmp_path / "work"
        assert (
            train_world.main(["all", "--out", str(out), "--work", str(work), *SHORT_TRAINING]) == 0
        )
    for folder in (
        out / "generator",
        out / "prm",
        work / "policy",
        work / "base",
        work / "prm-body",
    ):
        record = json.loads((folder / "provenance.json").read_text())
        for name, digest in record["sha256"].items():
            assert hashlib.sha256((folder / name).read_bytes()).hexdigest() == digest
    generator = json.loads((out / "generator" / "provenance.json").read_text())
    assert SHORT_LOSS[0] <= generator["final_loss"] <= SHORT_LOSS[1], generator["final_loss"]
    assert generator["command"] == "python tools/train_world.py all --out " + " ".join(
        [str(out), "--work", str(work), *SHORT_TRAINING]
    )
    prm = json.loads((out / "prm" / "provenance.json").read_text())
    assert prm["stages"]["prm-data"]["solutions"] == 12
    # the PRM's data came from the generator's base, not from the generator it scores
    assert prm["policy_sha256"] == generator["base_sha256"] != generator["sha256"]
    assert 0.0 <= prm["mean_label"] <= 1.0 and prm["steps_labelled"] >= 12


def test_slip_copies_leave_the_path_at_one_step_and_compute_correctly_after_it():
    with tools_on_path():
        from world_prm import slip_rows
    from dprm.llm.questions import extract_boxed
    from dprm.llm.tasks.arith import (
        ArithSpec,
        check_steps,
        make_problem,
        parse_step,
        step_values,
    )

    problems = [make_problem(ArithSpec(min_steps=2, max_steps=4), 0, i) for i in range(40)]
    rows = []
    for q, p in enumerate(problems):
        steps = p.solution_steps()
        mc = [0.5] * (len(steps) - 1) + [1.0]  # MC labels of a correct solution
        rows.append({"q": q, "steps": steps, "labels": mc, "kind": "sampled"})
    rows.append({"q": 0, "steps": problems[0].solution_steps(), "labels": [0.0] * 2, "kind": "x"})
    slips = slip_rows(rows, 2.0, seed=0)
    assert 60 <= len(slips) <= 80  # two per correct sampled solution, minus impossible slips
    assert {s["kind"] for s in slips} == {"slip"} and all(s["q"] < 40 for s in slips)
    for slip in slips:
        problem, steps = problems[slip["q"]], slip["steps"]
        flags = check_steps(problem.start, problem.ops, steps)
        k = flags.index(False)  # the slipped step: the first (and only) error
        assert slip["labels"] == [0.5] * k + [0.0] * (len(steps) - k)
        a, op, x, result = parse_step(steps[k])
        values = [problem.start, *step_values(problem.start, problem.ops)]
        assert (a, (op, x)) == (values[k], problem.ops[k])  # right operands, wrong result
        right = {"+": a + x, "-": a - x, "*": a * x}[op]
        assert 1 <= abs(result - right) <= 20
        value = result
        for step in steps[k + 1 : -1]:  # later steps apply their operation to the wrong value
            a_i, op_i, x_i, r_i = parse_step(step)
            assert a_i == value and r_i == {"+": a_i + x_i, "-": a_i - x_i, "*": a_i * x_i}[op_i]
            value = r_i
        assert extract_boxed(steps[-1]) == str(value) != str(problem.answer)


def _load_tool(name: str):
    """``tools/<name>.py`` as a module (loaded afresh)."""
    import importlib.util

    with tools_on_path() as tools:
        spec = importlib.util.spec_from_file_location(name, tools / f"{name}.py")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    return module


def test_auxiliary_digit_targets_are_what_each_written_operation_gives():
    world_prm = _load_tool("world_prm")
    steps = ["## Step 1: 59 + 70 = 128", "## Step 2: 128 * 3 = 384", "## Step 3: 9 - 12 = 3",
             "## Step 4: 99999 + 1 = 0", "Therefore, the final answer is: $\\boxed{3}$."]  # fmt: skip
    targets = world_prm.step_result_digits(steps, [10, 20, 30, 40, 50])
    # 59 + 70 is 129 whatever was written (the head learns to compute, not to copy); 9 - 12 < 0
    # and 99999 + 1 >= 10^5 have no target; the final sentence is not an operation
    assert targets == [(10, [9, 2, 1, 0, 0]), (20, [4, 8, 3, 0, 0])]


def test_extra_layers_start_as_the_identity():
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    world_prm = _load_tool("world_prm")
    torch.manual_seed(0)
    config = Qwen2Config(vocab_size=50, hidden_size=64, num_hidden_layers=2,
                         num_attention_heads=2, num_key_value_heads=2, intermediate_size=128,
                         max_position_embeddings=64)  # fmt: skip
    model = Qwen2ForCausalLM(config).eval()
    ids = torch.randint(0, 50, (2, 12))
    with torch.no_grad():
        before = model(input_ids=ids).logits
        world_prm.deepen(model, 2)
        after = model(input_ids=ids).logits
    assert model.config.num_hidden_layers == 4 and len(model.model.layers) == 4
    torch.testing.assert_close(after, before)
    # the new layers train: their zeroed projections get gradients
    model.train()
    model(input_ids=ids).logits.sum().backward()
    assert model.model.layers[3].mlp.down_proj.weight.grad.abs().sum() > 0


def test_body_check_reads_exactly_the_result_digits_in_both_formats():
    with tools_on_path():
        from transformers import AutoTokenizer

        from dprm.llm.tasks.arith import parse_step
        from dprm.llm.tasks.arith_sets import set_rows
        from world_body_check import check, model_text, result_positions

        tok = AutoTokenizer.from_pretrained(PRM)
        row = set_rows("id")[0]
        steps = row["solution"].split("\n\n")
        results = "".join(str(parse_step(s)[3]) for s in steps[:-1]) + row["answer"]
        for fmt in ("prm", "generator"):
            ids, positions = result_positions(
                tok, model_text(tok, row["question"], row["solution"], fmt)
            )
            assert "".join(tok.decode([ids[p]]) for p in positions) == results
        # the generator computes: most of its result tokens right on references
        record = check(GENERATOR, "generator", "id", 5)
        assert record["solutions"] == 5 and 0.5 < record["result_token_accuracy"] <= 1.0


#: the one second-draw question the shipped models were trained on: the PRM body, pretrained
#: 3,000 steps before ``arith-id2`` existed, drew it (its reference solution) in its stream
#: (docs/real-world.md); a retrain skips it, as it skips every packaged question
SECOND_DRAWS_SEEN = {"Ann has 4 books. Ann gives away 4. Ann gets 9 more. How many books does Ann have now?"}  # fmt: skip


def test_second_draws_meet_the_shipped_models_training_streams_only_where_documented():
    """``arith-id2`` / ``arith-ood2`` came after the models were trained, so the training
    streams could not skip them. Each stream is rebuilt as its stage drew it (from its start,
    skipping the first draws' questions, for the counts the shipped provenance records): the
    generator and its policy checkpoint, the PRM body and the PRM's Monte Carlo data (which the
    PRM stage also trains on) share with them exactly the documented question."""
    from dprm.llm.tasks.arith import make_problem
    from dprm.llm.tasks.arith_sets import set_rows

    with tools_on_path():
        from train_world import TRAIN_SPECS, TRAIN_STREAM, train_specs
        from world_prm import BODY_START, PRM_DATA_START
    gen = json.loads((WORLD / "generator" / "provenance.json").read_text())
    prm = json.loads((WORLD / "prm" / "provenance.json").read_text())
    body, data = prm["stages"]["prm-body"], prm["stages"]["prm-data"]
    skipped = {row["question"] for split in ("train", "id", "ood") for row in set_rows(split)}
    seed = TRAIN_STREAM + gen["seed"]

    def stream(start: int, *, kept: int | None = None, end: int | None = None) -> set[str]:
        drawn, index = set(), start
        while (kept is None or len(drawn) < kept) and (end is None or index < end):
            question = make_problem(TRAIN_SPECS[index % len(TRAIN_SPECS)], seed, index).question
            index += 1
            if question not in skipped:
                drawn.add(question)
        return drawn

    second = {row["question"] for split in ("id2", "ood2") for row in set_rows(split)}
    base_end = gen.get("base_stream_end", gen["training_stream_end"])
    if gen.get("more_steps"):
        # trained after the second draws existed: that phase skipped them, as a retrain does;
        # its recorded stream end is where more_steps x batch questions were taken
        packaged = skipped | second
        more_specs = train_specs(gen["more_max_ops"])
        more = [
            make_problem(more_specs[index % len(more_specs)], seed, index)
            for index in range(base_end, gen["training_stream_end"])
        ]
        kept = [problem for problem in more if problem.question not in packaged]
        assert len(kept) == gen["more_steps"] * gen["batch"]
        # the second phase saw longer chains than the base (OOD asks for 5-6 operations)
        assert max(len(problem.ops) for problem in kept) == gen["more_max_ops"] == 5
    trained = {
        "generator": stream(0, end=base_end),
        "prm-body": stream(BODY_START, kept=body["steps"] * body["batch"]),
        "prm-data": stream(PRM_DATA_START, kept=data["questions"]),
    }
    assert len(second) == 600
    assert {name: drawn & second for name, drawn in trained.items()} == {
        "generator": set(), "prm-body": SECOND_DRAWS_SEEN, "prm-data": set()}  # fmt: skip


def test_a_target_is_decided_only_when_its_whole_interval_agrees():
    with tools_on_path():
        from world_page import verdict

    name = "ID within-question AUROC >= 0.75"  # low 0.75, no high bound
    undecided = "(point estimate; the 95 % interval reaches past the bound)"
    assert verdict({"target": name, "met": True, "ci": [0.76, 0.80]}) == "yes"
    assert verdict({"target": name, "met": True, "ci": [0.736, 0.793]}) == f"yes {undecided}"
    assert verdict({"target": name, "met": False, "ci": [0.60, 0.70]}) == "no"
    assert verdict({"target": name, "met": False, "ci": [0.70, 0.76]}) == f"no {undecided}"
    ranged = "ID pass@1 in [0.25, 0.65]"  # both bounds
    assert verdict({"target": ranged, "met": True, "ci": [0.40, 0.48]}) == "yes"
    assert verdict({"target": ranged, "met": True, "ci": [0.60, 0.70]}) == f"yes {undecided}"
    assert verdict({"target": ranged, "met": False, "ci": [0.70, 0.80]}) == "no"
    nan = float("nan")
    assert verdict({"target": name, "met": False, "ci": [nan, nan]}) == "no"


def test_the_page_reads_the_calibration_recipes_rollouts_against_the_target(tmp_path):
    with tools_on_path():
        from world_page import MIN_ROLLOUTS, RECIPES, recipe_rollouts, size_target_rows

    recipe = tmp_path / "r.toml"
    recipe.write_text("[rollout]\nn = 3\nmax_steps = 4\n")
    assert recipe_rollouts({"mine": recipe, "gone": tmp_path / "none.toml"}) == {"mine": 3}
    assert set(recipe_rollouts(RECIPES)) == set(RECIPES)  # the shipped recipes are read
    splits = {"id": {"questions": 400, "draws": 400 * 64},
              "ood": {"questions": 200, "draws": 200 * 32}}  # fmt: skip
    rows = size_target_rows(splits, {"mine": 3, "big": MIN_ROLLOUTS})
    assert rows[0].endswith("| 400 ID, 200 OOD, 32 draws each | no |")
    assert rows[1].endswith(
        f"| 3 | no: missed by {MIN_ROLLOUTS - 3} (docs/real-world.md says what it costs) |"
    )
    assert rows[2].endswith(f"| {MIN_ROLLOUTS} | yes |")
