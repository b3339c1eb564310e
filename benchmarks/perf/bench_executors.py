"""``dprm run`` executors on CPU with tiny models: Ray vs local overhead, 1 vs 2 Ray workers.

The Ray executor's overhead over the local executor on the same recipe,
and the throughput of the GPU-type stages (generate, rollout, embed: engine actors) with 1 vs 2
Ray workers. Everything runs on this machine's CPU: a tiny random bigram generator and a tiny
random Qwen-style PRM (built here, as in the tests), real MATH-500 questions, the tiny variant of
``examples/park.toml``. Each configuration runs into a fresh directory; the Ray instance is
started once (its start-up time is printed apart). Usage::

    python benchmarks/perf/bench_executors.py [--train 16] [--test 4] [--shards 4]

Prints wall times and the ratios ``ray(1 worker) / local`` (overhead) and ``ray(1 worker) /
ray(2 workers)`` on the data stages (throughput gain; 2.0 would be perfect scaling).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DATA_STAGES = ("generate", "generate-merge", "labels", "labels-merge", "embed", "embed-merge")


def _load(name: str, path: Path):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def setup(root: Path, n_train: int, n_test: int, shards: int) -> dict:
    """Tiny models, question files and the tiny recipe (as a dict) under ``root``."""
    from dprm.llm.questions import packaged_path, read_records

    if str(ROOT / "tests") not in sys.path:  # the conftest imports the tests' tiny-model builders
        sys.path.insert(0, str(ROOT / "tests"))
    helpers = _load("dprm_tests_recipe_conftest", ROOT / "tests" / "recipe" / "conftest.py")
    tiny = helpers.tiny_models
    tokenizers = tiny.build_tokenizers(root / "tok")
    dirs = {
        "lm": tiny.build_bigram_lm(tokenizers["qwen"], root / "tiny-qwen-lm"),
        "prm": tiny.build_qwen_prm(tokenizers["qwen"], root / "tiny-prm"),
    }
    rows = read_records(packaged_path("math500"))
    picks = {"train": rows[:n_train], "id": rows[n_train : n_train + n_test]}
    picks["ood"] = rows[n_train + n_test : n_train + 2 * n_test]
    files = {}
    for split, items in picks.items():
        files[split] = root / f"{split}.jsonl"
        files[split].write_text("".join(json.dumps(r) + "\n" for r in items))
    recipe = helpers.tiny_recipe(dirs, files)
    recipe["run"]["shards"] = shards
    return {"recipe": recipe, "helpers": helpers}


def timed_run(recipe, out: Path, executor) -> dict[str, float]:
    from dprm.recipe import run_recipe

    t0 = time.perf_counter()
    outcome = run_recipe(recipe, out, executor=executor, progress=False, log=lambda s: None)
    wall = time.perf_counter() - t0
    if not outcome.ok:
        raise SystemExit(f"{out}: units failed: {outcome.failures}")
    timing = json.loads((out / "run.json").read_text())["stage_timing"]
    data = sum(timing[s]["seconds"] for s in DATA_STAGES if s in timing)
    return {"wall": wall, "data": data}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--train", type=int, default=16, help="training questions")
    parser.add_argument("--test", type=int, default=4, help="ID and OOD questions each")
    parser.add_argument("--shards", type=int, default=4, help="shards per GPU-type stage")
    parser.add_argument("--cpus", type=int, default=2, help="CPUs of the local Ray instance")
    args = parser.parse_args()
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    import ray
    import torch

    torch.set_num_threads(1)
    from dprm.recipe.spec import recipe_from_dict
    from dprm.runner.executors.ray import RayExecutor

    with tempfile.TemporaryDirectory(prefix="bench-executors-") as tmp:
        root = Path(tmp)
        made = setup(root, args.train, args.test, args.shards)
        base = made["recipe"]

        def recipe(workers: int):
            data = json.loads(json.dumps(base))
            data["executor"]["ray"]["workers"] = workers
            return recipe_from_dict(data, "bench")

        results = {"local": timed_run(recipe(1), root / "local", "local")}
        t0 = time.perf_counter()
        ray.init(num_cpus=args.cpus, include_dashboard=False, log_to_driver=False)
        ray_start = time.perf_counter() - t0
        for workers in (1, 2):
            r = recipe(workers)
            results[f"ray{workers}"] = timed_run(r, root / f"ray{workers}", RayExecutor(r, root))
        ray.shutdown()

    print(f"tiny recipe: {args.train} train + {args.test} ID + {args.test} OOD questions, "
          f"{args.shards} shards per stage; Ray instance with {args.cpus} CPUs "
          f"(start-up {ray_start:.1f} s, not included below)")  # fmt: skip
    print(f"{'executor':<16}{'wall s':>10}{'data stages s':>16}")
    for name, r in results.items():
        print(f"{name:<16}{r['wall']:>10.1f}{r['data']:>16.1f}")
    print(
        f"overhead ray(1 worker) / local, wall:            {results['ray1']['wall'] / results['local']['wall']:.2f}"
    )
    print(
        f"overhead ray(1 worker) / local, data stages:     {results['ray1']['data'] / results['local']['data']:.2f}"
    )
    print(
        f"throughput ray(2 workers) / ray(1), data stages: {results['ray1']['data'] / results['ray2']['data']:.2f}"
    )


if __name__ == "__main__":
    main()
