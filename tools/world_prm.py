"""The arithmetic world's PRM, in three stages (run by ``tools/train_world.py``).

``prm-body``: a ``Qwen2ForCausalLM`` larger than the generator (``--prm-layers`` x
``--prm-hidden``) learns to compute by next-token loss on reference solutions written in the
PRM's own input format (the PRM system prompt, the question, the steps joined and ended by
``<extra_0>``), the loss on the solution tokens only.

``prm-data``: Monte Carlo step labels (Math-Shepherd style) on solutions of *another policy*
than the one the PRM scores (the generator at temperature 1): by default the generator's base
(the model before its ``--more-steps``) at ``--prm-temperature`` 1.3; or (``--prm-policy
checkpoint``) the generator after ``--policy-step`` steps, or (``--prm-policy generator``) the
shipped generator at ``--prm-temperature``: ``--prm-samples`` solutions per training question;
from each distinct step prefix (all steps but the last), ``--prm-rollouts`` continuations by the
same policy; a step's soft label is the fraction of its continuations whose boxed answer is
right. The last step's label is whether the solution's own answer is right (0 when it has none).
Among the negatives, ``--prm-corrupt`` of the solutions get a damaged copy: cut inside a step (a
truncated solution, its cut step labelled 0) or one operation step garbled (a character dropped,
inserted or swapped, or the result replaced by junk such as ``. 0``; that step and every later
one labelled 0), so malformed outliers are seen and scored low.

``prm``: a ``Qwen2ForProcessRewardModel`` (Qwen2.5-Math-PRM's layout) on the pretrained body,
trained by binary cross-entropy against the soft labels at every ``<extra_0>``. With
``--prm-slips`` (default 2) it also trains on that many slip copies per correct solution
(error injection): one operation step's result changed by a small amount (the generators' own
error), later steps computed correctly from the wrong value, labelled 0 from the slipped step
on, so the pairs differ only in a result's digits.

Training problems come from the generator's training stream at indices far past the ones the
generator saw (``PRM_DATA_START``, ``BODY_START``), skipping every packaged question.
"""

from __future__ import annotations

import argparse
import gzip
import json
import math
import random
import time
from pathlib import Path

#: stream indices of the PRM's problems (the generator's training uses indices below 1e6)
BODY_START = 20_000_000
PRM_DATA_START = 10_000_000
SEP = "<extra_0>"
JUNK = (". 0", "", "= 0", "0 0", ". ", "+", "==")


def add_prm_arguments(parser: argparse.ArgumentParser) -> None:
    """The PRM stages' options."""
    add = parser.add_argument
    add("--prm-hidden", type=int, default=128, help="PRM body width (32 per head)")
    add("--prm-layers", type=int, default=4)
    add("--body-steps", type=int, default=3000, help="PRM body pretraining steps")
    add("--body-lr", type=float, default=2e-3)
    add("--prm-questions", type=int, default=1500, help="training questions of the MC data")
    add("--prm-samples", type=int, default=8, help="policy solutions per question")
    add("--prm-rollouts", type=int, default=16, help="MC continuations per step prefix")
    add("--prm-corrupt", type=float, default=0.2, help="share of solutions given a damaged copy")
    add("--prm-workers", type=int, default=2, help="sampling processes of prm-data")
    add(
        "--prm-policy",
        choices=["base", "checkpoint", "generator"],
        default="base",
        help="whose solutions prm-data labels: the generator before its --more-steps (base), "
        "the earlier checkpoint (--policy-step) or the shipped generator (then at "
        "--prm-temperature, which must differ from 1)",
    )
    add("--prm-temperature", type=float, default=1.3, help="prm-data's sampling temperature")
    add(
        "--prm-slips",
        type=float,
        default=2.0,
        help="slip copies per correct training solution (prm stage): one step's result off by "
        "a small amount, later steps computed from it, labelled 0 from that step on",
    )
    add(
        "--prm-extra-layers",
        type=int,
        default=2,
        help="layers appended to the pretrained body for the PRM stage, initialised to pass "
        "their input through (zero output projections): room to compare after computing",
    )
    add(
        "--prm-aux-digits",
        type=float,
        default=1.0,
        help="weight of the auxiliary head (dropped after training) that predicts, at each "
        "operation step's tag, the digits of the result its written operation gives, read "
        "after the body's own layers (0: off)",
    )
    add(
        "--prm-aux-lm",
        type=float,
        default=0.5,
        help="weight of next-token loss on the reference solutions of the batch's questions, "
        "read at the same layer (keeps the body computing; 0: off)",
    )
    add("--prm-epochs", type=int, default=4)
    add("--prm-lr", type=float, default=1e-3)
    add("--prm-batch", type=int, default=32)


def prm_ids(tok, question: str, steps: list[str]) -> tuple[list[int], list[int]]:
    """The PRM's input ids for ``steps`` (``dprm.llm.prm.QwenPRM``'s text) and the positions
    of its ``<extra_0>`` tags."""
    from dprm.llm.prm import QWEN_PRM_SYSTEM

    messages = [
        {"role": "system", "content": QWEN_PRM_SYSTEM},
        {"role": "user", "content": question},
        {"role": "assistant", "content": SEP.join(steps) + SEP},
    ]
    ids = tok.encode(tok.apply_chat_template(messages, tokenize=False))
    sep_id = tok.convert_tokens_to_ids(SEP)
    return ids, [i for i, t in enumerate(ids) if t == sep_id]


def _padded(seqs: list[list[int]], pad_id: int):
    import torch

    width = max(len(s) for s in seqs)
    ids = torch.full((len(seqs), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(seqs), width), dtype=torch.long)
    for row, seq in enumerate(seqs):
        ids[row, : len(seq)] = torch.tensor(seq)
        mask[row, : len(seq)] = 1
    return ids, mask


def train_body(out: Path, seed: int, args: argparse.Namespace) -> dict:
    """Pretrain the PRM body by next-token loss on reference solutions in the PRM format."""
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    from train_world import autocast, build_tokenizer, lr_at, save_model, training_problems

    torch.manual_seed(seed + 1)
    tok = build_tokenizer()
    hidden = args.prm_hidden
    config = Qwen2Config(
        vocab_size=len(tok), hidden_size=hidden, num_hidden_layers=args.prm_layers,
        num_attention_heads=hidden // 32, num_key_value_heads=hidden // 32,
        intermediate_size=4 * hidden, max_position_embeddings=512,
        tie_word_embeddings=True, rms_norm_eps=1e-6, rope_theta=10000.0,
        bos_token_id=tok.convert_tokens_to_ids("<|endoftext|>"),
        eos_token_id=tok.convert_tokens_to_ids("<|im_end|>"),
        pad_token_id=tok.pad_token_id,
    )  # fmt: skip
    model = Qwen2ForCausalLM(config)
    model.config._attn_implementation = "eager"  # its CPU backward is the fast one here
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=args.body_lr, weight_decay=0.01)
    t0, c0 = time.time(), time.process_time()
    index, losses = BODY_START, []
    batch = args.batch
    for step in range(args.body_steps):
        problems, index = training_problems(index, batch, seed)
        seqs, starts = [], []
        for p in problems:
            steps = p.solution_steps()
            ids, positions = prm_ids(tok, p.question, steps)
            # the loss starts at the first solution token: the one after the user turn
            first = positions[0] - len(tok.encode(steps[0]))
            seqs.append(ids[: positions[-1] + 1])
            starts.append(first)
        ids, mask = _padded(seqs, tok.pad_token_id)
        labels = ids.clone()
        labels[mask == 0] = -100
        for row, first in enumerate(starts):
            labels[row, :first] = -100
        for group in opt.param_groups:
            group["lr"] = lr_at(step, args.body_steps, args.body_lr, warmup=50)
        with autocast():
            loss = model(input_ids=ids, attention_mask=mask, labels=labels).loss
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        losses.append(float(loss.detach()))
        if step % 50 == 0 or step == args.body_steps - 1:
            recent = sum(losses[-50:]) / len(losses[-50:])
            print(f"prm-body step {step}/{args.body_steps} loss {recent:.4f}", flush=True)
    save_model(model, tok, out)
    return {
        "seed": seed, "steps": args.body_steps, "batch": batch, "lr": args.body_lr,
        "hidden": hidden, "layers": args.prm_layers, "final_loss": sum(losses[-50:]) / len(losses[-50:]),
        "parameters": sum(p.numel() for p in model.parameters()),
        "wall_s": round(time.time() - t0, 1), "cpu_s": round(time.process_time() - c0, 1),
    }  # fmt: skip


def _correct(text: str, answer: str) -> bool:
    from dprm.llm.questions import extract_boxed

    boxed = extract_boxed(text)
    return boxed is not None and boxed.strip() == answer


def _corrupt(rng: random.Random, steps: list[str], op_steps: int):
    """A damaged copy of ``steps``: (steps, index of the first damaged step, kind) or None."""
    from dprm.llm.tasks.arith import parse_step

    text = "\n\n".join(steps)
    if rng.random() < 0.4:  # truncated inside a step
        bounds = [i for i, c in enumerate(text) if c not in "\n"]
        cut = rng.choice(bounds[5:]) if len(bounds) > 5 else None
        if cut is None:
            return None
        short = text[:cut].rstrip("\n").split("\n\n")
        if short[-1] == steps[len(short) - 1]:  # cut on a boundary: not truncated
            return None
        return short, len(short) - 1, "truncated"
    candidates = [i for i in range(min(op_steps, len(steps))) if parse_step(steps[i])]
    if not candidates:
        return None
    i = rng.choice(candidates)
    step = steps[i]
    head, _, result = step.rpartition("= ")
    how = rng.randrange(4)
    if how == 0:
        new = head + "= " + rng.choice(JUNK) + rng.choice(["", result])
    elif how == 1:
        pos = rng.randrange(len(step))
        new = step[:pos] + step[pos + 1 :]
    elif how == 2:
        pos = rng.randrange(len(step) + 1)
        new = step[:pos] + rng.choice(" .=+-0123456789") + step[pos:]
    else:
        pos = rng.randrange(len(step) - 1)
        new = step[:pos] + step[pos + 1] + step[pos] + step[pos + 2 :]
    if new == step:
        return None
    return [*steps[:i], new, *steps[i + 1 :]], i, "malformed"


#: slip sizes |wrong result - right result|, weighted like the generators' own slips
#: (mostly 1-3, fewer up to 10, some by a ten or a teen)
SLIP_SIZES = (1, 1, 1, 2, 2, 3, 3, 4, 5, 6, 7, 8, 9, 10, 10, 11, 12, 20)


def _slip(rng: random.Random, steps: list[str]):
    """A slipped copy of a correct solution: (steps, index of the slipped step) or None.

    One operation step's stated result is changed by a slip-like amount (``SLIP_SIZES``, either
    sign); every later operation step applies its own operation to the wrong running value and
    states that correctly, and the boxed answer is the wrong final value, so only the slipped
    step is an error (the generators' own error pattern).
    """
    from dprm.llm.tasks.arith import FINAL_TEMPLATE, parse_step, step_values

    parsed = [parse_step(s) for s in steps[:-1]]
    if not parsed or any(p is None for p in parsed):
        return None
    k = rng.randrange(len(parsed))
    a, op, x, right = parsed[k]
    wrong = right + rng.choice((-1, 1)) * rng.choice(SLIP_SIZES)
    if wrong < 0 or wrong == right:
        return None
    new = list(steps[:k])
    value = wrong
    new.append(f"## Step {k + 1}: {a} {op} {x} = {wrong}")
    for i in range(k + 1, len(parsed)):
        _, op_i, x_i, _ = parsed[i]
        result = step_values(value, ((op_i, x_i),))[0]
        if result < 0:
            return None
        new.append(f"## Step {i + 1}: {value} {op_i} {x_i} = {result}")
        value = result
    new.append(FINAL_TEMPLATE.format(answer=value))
    return new, k


def slip_rows(rows: list[dict], share: float, seed: int) -> list[dict]:
    """``share`` slip copies (on average) of each correct sampled solution (``_slip``); the
    copy keeps the original's labels before the slipped step and is labelled 0 from it on."""
    rng = random.Random(seed + 3)
    out = []
    for row in rows:
        if row["kind"] != "sampled" or row["labels"][-1] != 1.0:
            continue
        copies = int(share) + (rng.random() < share - int(share))
        for _ in range(copies):
            slipped = _slip(rng, row["steps"])
            if slipped is None:
                continue
            steps, k = slipped
            labels = [*row["labels"][:k], *[0.0] * (len(steps) - k)]
            out.append({"q": row["q"], "steps": steps, "labels": labels, "kind": "slip"})
    return out


#: prompts per sampling job: each job is seeded by (seed, job index), so the draws do not
#: depend on how many worker processes share the jobs
JOB_PROMPTS = 512


def _sample_job(job: tuple[str, list[str], int, int, float]) -> list[list[str]]:
    import torch
    from transformers import AutoTokenizer, Qwen2ForCausalLM

    from world_sampler import sample_texts

    policy, prompts, n, seed, temperature = job
    torch.set_num_threads(1)
    tok = AutoTokenizer.from_pretrained(policy)
    model = Qwen2ForCausalLM.from_pretrained(policy).float().eval()  # float32 on any transformers
    return sample_texts(model, tok, prompts, n, temperature, 160, seed)


def parallel_sample(
    policy: Path,
    prompts: list[str],
    n: int,
    seed: int,
    workers: int,
    job: int = JOB_PROMPTS,
    temperature: float = 1.0,
):
    """``n`` draws per prompt at ``temperature``, in jobs of ``job`` prompts spread over
    ``workers`` processes (one thread each)."""
    import multiprocessing

    jobs = [
        (str(policy), prompts[i : i + job], n, seed * 100_003 + i // job, temperature)
        for i in range(0, len(prompts), job)
    ]
    if workers <= 1:
        results = [_sample_job(job) for job in jobs]
    else:
        with multiprocessing.get_context("spawn").Pool(workers) as pool:
            results = pool.map(_sample_job, jobs, chunksize=1)
    return [texts for chunk in results for texts in chunk]


def _children_cpu() -> float:
    import resource

    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def make_data(out: Path, policy: Path, seed: int, args: argparse.Namespace) -> dict:
    """Sample the policy's solutions, label their steps by MC rollouts, add damaged copies;
    write ``prm-data.jsonl.gz`` (one solution a line: question, steps, labels, kind)."""
    from dprm.llm.prompts import build_prompt
    from train_world import training_problems

    t0, c0, children0 = time.time(), time.process_time(), _children_cpu()
    problems, _ = training_problems(PRM_DATA_START, args.prm_questions, seed)
    prompts = [build_prompt(p.question, "qwen", template="qwen") for p in problems]
    temperature = args.prm_temperature
    solutions = parallel_sample(
        policy, prompts, args.prm_samples, seed, args.prm_workers, temperature=temperature
    )
    sample_s = time.time() - t0
    # the distinct step prefixes (all steps but the last) of each question's solutions
    prefixes: dict[tuple[int, tuple[str, ...]], float] = {}
    for qi, texts in enumerate(solutions):
        for text in texts:
            steps = text.split("\n\n")
            for i in range(1, len(steps)):
                prefixes[(qi, tuple(steps[:i]))] = 0.0
    keys = list(prefixes)
    rollout_prompts = [
        build_prompt(problems[qi].question, "qwen", template="qwen", prefix_steps=list(prefix))
        for qi, prefix in keys
    ]
    print(
        f"prm-data: {sum(map(len, solutions))} solutions ({sample_s:.0f}s), {len(keys)} distinct "
        f"prefixes x {args.prm_rollouts} rollouts",
        flush=True,
    )
    rollouts = parallel_sample(
        policy, rollout_prompts, args.prm_rollouts, seed + 1, args.prm_workers,
        temperature=temperature,
    )  # fmt: skip
    for key, outs in zip(keys, rollouts, strict=True):
        answer = str(problems[key[0]].answer)
        prefixes[key] = sum(_correct(o, answer) for o in outs) / len(outs)
    rng = random.Random(seed)
    rows = []
    for qi, texts in enumerate(solutions):
        problem = problems[qi]
        answer = str(problem.answer)
        for text in texts:
            steps = text.split("\n\n")
            labels = [prefixes[(qi, tuple(steps[: i + 1]))] for i in range(len(steps) - 1)]
            labels.append(float(_correct(steps[-1], answer)))
            rows.append({"q": qi, "steps": steps, "labels": labels, "kind": "sampled"})
            if rng.random() < args.prm_corrupt:
                damaged = _corrupt(rng, steps, len(problem.ops))
                if damaged is not None:
                    new_steps, first, kind = damaged
                    new_labels = [*labels[:first], *[0.0] * (len(new_steps) - first)]
                    rows.append({"q": qi, "steps": new_steps, "labels": new_labels, "kind": kind})
    record = {"questions": [p.question for p in problems], "rows": rows}
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_bytes(gzip.compress(json.dumps(record).encode(), compresslevel=6, mtime=0))
    sampled = [r for r in rows if r["kind"] == "sampled"]
    return {
        "seed": seed, "policy": str(policy), "temperature": temperature,
        "questions": len(problems),
        "samples_per_question": args.prm_samples, "rollouts_per_prefix": args.prm_rollouts,
        "solutions": len(sampled), "damaged_copies": len(rows) - len(sampled),
        "distinct_prefixes": len(keys), "rollouts": len(keys) * args.prm_rollouts,
        "policy_solved": sum(r["labels"][-1] for r in sampled) / len(sampled),
        "wall_s": round(time.time() - t0, 1),
        # this process and its sampling workers
        "cpu_s": round(time.process_time() - c0 + _children_cpu() - children0, 1),
    }  # fmt: skip


#: digits of a step's result predicted by the auxiliary head (little-endian, results < 10^5)
AUX_DIGITS = 5


def deepen(model, extra: int) -> None:
    """Append ``extra`` copies of the last decoder layer that pass their input through (zero
    attention output and MLP down projections) to ``model.model`` (a Qwen2 body), in place."""
    import copy

    import torch

    layers = model.model.layers
    n = len(layers)
    for i in range(extra):
        layer = copy.deepcopy(layers[n - 1])
        torch.nn.init.zeros_(layer.self_attn.o_proj.weight)
        torch.nn.init.zeros_(layer.mlp.down_proj.weight)
        layer.self_attn.layer_idx = n + i
        layers.append(layer)
    model.config.num_hidden_layers = n + extra
    if getattr(model.config, "layer_types", None):
        model.config.layer_types = [model.config.layer_types[0]] * (n + extra)


def step_result_digits(steps: list[str], tags: list[int]) -> list[tuple[int, list[int]]]:
    """(tag position, digits [AUX_DIGITS]) of each operation step whose written operation
    ``a op x`` gives a result in [0, 10^AUX_DIGITS): the auxiliary head's targets."""
    from dprm.llm.tasks.arith import parse_step, step_values

    out = []
    for step, tag in zip(steps, tags, strict=False):
        parsed = parse_step(step)
        if parsed is None:
            continue
        a, op, x, _ = parsed
        value = step_values(a, ((op, x),))[0]
        if 0 <= value < 10**AUX_DIGITS:
            out.append((tag, [(value // 10**d) % 10 for d in range(AUX_DIGITS)]))
    return out


def train_prm(out: Path, body: Path, data: Path, seed: int, args: argparse.Namespace) -> dict:
    """The PRM on the pretrained body: BCE against the MC labels at every tag.

    With ``--prm-extra-layers`` the body gets layers that start as the identity; with
    ``--prm-aux-digits`` an auxiliary head reads the state after the body's own layers at
    each operation step's tag and predicts the digits of the result the step's written
    operation gives (so that state computes the result the score head can compare with the
    written one); with ``--prm-aux-lm`` the same state keeps its next-token loss on the
    reference solutions of the batch's questions. The auxiliary heads are not saved.
    """
    import torch
    from transformers import AutoTokenizer, Qwen2ForCausalLM

    from dprm.llm.prm_models import qwen_prm_class
    from train_world import autocast, lr_at, save_model, training_problems

    torch.manual_seed(seed + 2)
    t0, c0 = time.time(), time.process_time()
    tok = AutoTokenizer.from_pretrained(body)
    record = json.loads(gzip.decompress(data.read_bytes()))
    slips = slip_rows(record["rows"], args.prm_slips, seed)
    examples = []
    for row in [*record["rows"], *slips]:
        ids, positions = prm_ids(tok, record["questions"][row["q"]], row["steps"])
        if len(positions) == len(row["labels"]) and len(ids) <= 512:
            digits = step_result_digits(row["steps"], positions)
            examples.append((ids, positions, row["labels"], digits, row["q"]))
    references = []
    if args.prm_aux_lm > 0:  # the MC data's questions, drawn again from the same stream
        problems, _ = training_problems(PRM_DATA_START, len(record["questions"]), seed)
        if [p.question for p in problems] != record["questions"]:
            raise SystemExit(f"{data}: its questions are not the stream's (another seed?)")
        for p in problems:
            steps = p.solution_steps()
            ids, positions = prm_ids(tok, p.question, steps)
            references.append((ids, positions[0] - len(tok.encode(steps[0]))))
    lm = Qwen2ForCausalLM.from_pretrained(body).float()  # float32 on any transformers
    body_layers = lm.config.num_hidden_layers
    deepen(lm, args.prm_extra_layers)
    config = lm.config
    config.architectures = ["Qwen2ForProcessRewardModel"]
    model = qwen_prm_class()(config)
    model.model.load_state_dict(lm.model.state_dict())
    model.config._attn_implementation = "eager"
    model.train()
    digit_head = torch.nn.Linear(config.hidden_size, AUX_DIGITS * 10)
    params = [*model.parameters(), *digit_head.parameters()]
    opt = torch.optim.AdamW(params, lr=args.prm_lr, weight_decay=0.01)
    rng = random.Random(seed)
    batch = args.prm_batch
    total = args.prm_epochs * math.ceil(len(examples) / batch)
    step, losses, digit_hits = 0, [], []
    aux = args.prm_aux_digits > 0 or args.prm_aux_lm > 0
    for _ in range(args.prm_epochs):
        order = list(range(len(examples)))
        rng.shuffle(order)
        for start in range(0, len(order), batch):
            chunk = [examples[i] for i in order[start : start + batch]]
            seqs = [c[0] for c in chunk]
            # the reference solutions of the batch's questions (their next-token loss)
            refs = sorted({c[4] for c in chunk})[: batch // 4] if references else []
            seqs += [references[q][0] for q in refs]
            ids, mask = _padded(seqs, tok.pad_token_id)
            rows_idx = [r for r, c in enumerate(chunk) for _ in c[1]]
            cols_idx = [p for c in chunk for p in c[1]]
            target = torch.tensor([y for c in chunk for y in c[2]])
            for group in opt.param_groups:
                group["lr"] = lr_at(step, total, args.prm_lr, warmup=min(50, total // 10))
            with autocast():
                states = model.model(input_ids=ids, attention_mask=mask, output_hidden_states=aux)
                logits = model.score(states.last_hidden_state[rows_idx, cols_idx])
            logits = logits.float()
            # BCE on the positive-class probability softmax(logits)[1] = sigmoid(l1 - l0)
            loss = torch.nn.functional.binary_cross_entropy_with_logits(
                logits[:, 1] - logits[:, 0], target
            )
            if aux:
                # the state after the body's own layers (the extra ones start as the identity)
                inner = model.model.norm(states.hidden_states[body_layers]).float()
            pairs = [(r, tag, d) for r, c in enumerate(chunk) for tag, d in c[3]]
            if args.prm_aux_digits > 0 and pairs:
                guess = digit_head(inner[[r for r, _, _ in pairs], [t for _, t, _ in pairs]])
                guess = guess.view(-1, AUX_DIGITS, 10)
                truth = torch.tensor([d for _, _, d in pairs])
                loss = loss + args.prm_aux_digits * torch.nn.functional.cross_entropy(
                    guess.reshape(-1, 10), truth.reshape(-1)
                )
                digit_hits.append(float((guess.argmax(-1) == truth).all(-1).float().mean()))
            if refs:
                rows = list(range(len(chunk), len(seqs)))
                word = inner[rows, :-1] @ model.model.embed_tokens.weight.T
                labels = ids[rows, 1:].clone()
                labels[mask[rows, 1:] == 0] = -100
                for k, q in enumerate(refs):
                    labels[k, : references[q][1] - 1] = -100
                loss = loss + args.prm_aux_lm * torch.nn.functional.cross_entropy(
                    word.reshape(-1, word.shape[-1]), labels.reshape(-1)
                )
            opt.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(params, 1.0)
            opt.step()
            losses.append(float(loss.detach()))
            if step % 50 == 0 or step == total - 1:
                recent = sum(losses[-50:]) / len(losses[-50:])
                hits = sum(digit_hits[-50:]) / max(len(digit_hits[-50:]), 1)
                print(f"prm step {step}/{total} loss {recent:.4f} digits {hits:.3f}", flush=True)
            step += 1
    save_model(model, tok, out)
    labels = [y for c in examples for y in c[2]]
    return {
        "seed": seed, "examples": len(examples), "slip_copies": len(slips),
        "slips_per_correct": args.prm_slips, "steps_labelled": len(labels),
        "mean_label": sum(labels) / len(labels), "epochs": args.prm_epochs, "lr": args.prm_lr,
        "batch": batch, "extra_layers": args.prm_extra_layers,
        "aux_digits": args.prm_aux_digits, "aux_lm": args.prm_aux_lm,
        "final_loss": sum(losses[-50:]) / len(losses[-50:]),
        "final_digits_right": sum(digit_hits[-50:]) / max(len(digit_hits[-50:]), 1),
        "parameters": sum(p.numel() for p in model.parameters()),
        "wall_s": round(time.time() - t0, 1), "cpu_s": round(time.process_time() - c0, 1),
    }  # fmt: skip


def run_prm_stage(stage: str, args: argparse.Namespace) -> None:
    """Run one PRM stage; write its outputs and their provenance."""
    from train_world import sha256_files, write_provenance

    work = args.work
    if stage == "prm-body":
        stats = train_body(work / "prm-body", args.seed, args)
        write_provenance(work / "prm-body", "prm-body", args, stats)
    elif stage == "prm-data":
        policy = {
            "base": work / "base", "checkpoint": work / "policy", "generator": args.out / "generator"
        }[args.prm_policy]  # fmt: skip
        if not (policy / "config.json").is_file():
            raise SystemExit(
                f"no policy model in {policy}: run the generator stage first"
                + (" with --more-steps > 0" if args.prm_policy == "base" else "")
            )
        if args.prm_policy == "generator" and args.prm_temperature == 1.0:
            raise SystemExit("--prm-policy generator needs --prm-temperature != 1 (another policy)")
        stats = make_data(work / "prm-data" / "prm-data.jsonl.gz", policy, args.seed, args)
        stats["policy_sha256"] = sha256_files(policy)
        write_provenance(work / "prm-data", "prm-data", args, stats)
    else:
        body, data = work / "prm-body", work / "prm-data"
        stats = train_prm(args.out / "prm", body, data / "prm-data.jsonl.gz", args.seed, args)
        stats["body_sha256"] = sha256_files(body)
        stats["data_sha256"] = sha256_files(data)
        data_record = json.loads((data / "provenance.json").read_text())
        stats["policy_sha256"] = data_record["policy_sha256"]
        stats["policy_temperature"] = data_record.get("temperature", 1.0)
        stats["stages"] = {
            name: json.loads((work / name / "provenance.json").read_text())
            for name in ("policy", "prm-body", "prm-data")
            if (work / name / "provenance.json").is_file()
        }
        write_provenance(args.out / "prm", "prm", args, stats)
    print(json.dumps(stats), flush=True)
