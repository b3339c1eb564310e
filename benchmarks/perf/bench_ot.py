"""Benchmark of the ``ot`` calibrator: three measurements side by side.

1. ms per OT training step (g update every batch, f every ``f_every``-th; batch 256, the
   default paper-size network, D = 3584): dprm's step (T = dg/dtau carried forward by
   forward-mode slope; f's slope at T enters g's gradient as a constant weight, so g's step is
   one ordinary backward through g alone) vs CondOT's (T = ``autograd.grad(g, tau,
   create_graph=True)``, backward through f(T) and the double graph), on the same network and
   batches, timed in interleaved rounds (medians). Reported for the whole step and for the map
   heads alone (context embeddings precomputed), since at D = 3584 the context MLP's first
   layer, identical in both variants, is a large share of the step. A third row isolates the
   slope mode: the same loss code, only how T is obtained differs. Target >= 3x.
2. Wall time of a full ``dprm.fit("ot", ...)`` on 50,000 records x 3584 dims (synthetic paper
   world, float16 memory-mapped): standardiser, training, validation, collapse check. Target
   <= 5 min on 2 CPU cores.
3. Wall time of ``model.quantiles(hidden, 100 levels)`` for the 50,000 records from the memory
   map (embed each h once, then all levels). Target <= 2 s.

Usage: ``python benchmarks/perf/bench_ot.py [--threads 2] [--records 50000] [--skip-fit]``
"""

from __future__ import annotations

import argparse
import tempfile
import time

import numpy as np
import pandas as pd
import torch

from dprm.data import read_calibration_set
from dprm.data.contract import SetWriter
from dprm.data.synth import write_world
from dprm.metrics import midpoint_levels
from dprm.models.fit import fit
from dprm.models.ot import OTCalibrator


def transport_autograd(net, context: torch.Tensor, tau: torch.Tensor) -> torch.Tensor:
    """T = d g / d tau by reverse mode with create_graph (CondOT's ``transport``)."""
    tau = tau.detach().requires_grad_(True)
    potential, _ = net.potential(context, tau, with_slope=False)
    (slope,) = torch.autograd.grad(potential.sum(), tau, create_graph=True)
    return slope


def make_step(model: OTCalibrator, mode: str, head_only: bool):
    """One OT training step (g every call, f every ``f_every``-th call).

    ``mode``: "dprm" is dprm's step (``OTCalibrator.transport_loss``: forward-mode T, f's slope
    at T as a constant weight, one backward through g alone); "condot" is CondOT's step
    (T = ``autograd.grad(g, tau, create_graph=True)``, backward through f(T) and the double
    graph). Same network, optimisers, batches and f step.
    """
    g, f = model.net, model.dual
    g_params = [p for p in g.parameters() if p.requires_grad]
    f_params = [p for p in f.parameters() if p.requires_grad]
    opt_g = torch.optim.Adam(g_params, 4e-3, betas=(0.5, 0.9), foreach=True)
    opt_f = torch.optim.Adam(f_params, 4e-3, betas=(0.5, 0.9), foreach=True)
    f_every = model.settings.f_every

    def step(index: int, hidden, tau, target) -> None:
        update_f = index % f_every == 0
        if head_only:
            context_f = hidden["f"]
        else:
            with torch.set_grad_enabled(update_f):
                context_f = f.embed(hidden)
        f.requires_grad_(False)
        context_g = hidden["g"] if head_only else g.embed(hidden)
        if mode == "dprm":
            loss_g, transported = model.transport_loss(context_g, tau, context_f.detach())
        else:
            transported = transport_autograd(g, context_g, tau)
            f_of_t, _ = f.potential(context_f.detach(), transported, with_slope=False)
            loss_g = (f_of_t - tau * transported).mean()
        opt_g.zero_grad(set_to_none=True)
        loss_g.backward()
        torch.nn.utils.clip_grad_norm_(g_params, 1.0)
        opt_g.step()
        f.requires_grad_(True)
        if update_f:
            f_of_y, _ = f.potential(context_f, target, with_slope=False)
            f_of_t, _ = f.potential(context_f, transported.detach(), with_slope=False)
            loss_f = (f_of_y - f_of_t).mean()
            opt_f.zero_grad(set_to_none=True)
            loss_f.backward()
            torch.nn.utils.clip_grad_norm_(f_params, 1.0)
            opt_f.step()

    return step


def median_ms(variants: dict, n_steps: int, rounds: int = 5) -> dict[str, float]:
    """Median ms per call of each variant, timed in interleaved rounds (the machine is shared)."""
    for run in variants.values():  # warm-up
        for i in range(6):
            run(i + 1)
    times: dict[str, list[float]] = {name: [] for name in variants}
    for _ in range(rounds):
        for name, run in variants.items():
            start = time.perf_counter()
            for i in range(n_steps):
                run(i + 1)
            times[name].append((time.perf_counter() - start) / n_steps * 1e3)
    return {name: float(np.median(t)) for name, t in times.items()}


def time_steps(dim: int, head_only: bool, n_steps: int, seed: int = 0) -> dict[str, float]:
    """ms per training step, dprm's vs CondOT's, on copies of one network and the same batches."""
    rng = np.random.default_rng(seed)
    targets = rng.beta(1, 3, 1000)
    variants = {}
    for mode in ("dprm", "condot"):
        torch.manual_seed(seed)
        model = OTCalibrator(dim)
        model.init_marginal(targets)
        batch_rng = np.random.default_rng(seed)
        batches = []
        for _ in range(4):
            hidden = torch.from_numpy(batch_rng.normal(size=(256, dim)).astype(np.float32))
            if head_only:  # precomputed contexts: only the PICNN heads train
                with torch.no_grad():
                    hidden = {"g": model.net.embed(hidden), "f": model.dual.embed(hidden)}
            tau = torch.from_numpy(batch_rng.random(256).astype(np.float32))
            target = torch.from_numpy(batch_rng.beta(1, 3, 256).astype(np.float32))
            batches.append((hidden, tau, target))
        step = make_step(model, mode, head_only)
        variants[mode] = lambda i, step=step, batches=batches: step(i, *batches[i % 4])
    return median_ms(variants, n_steps)


def time_map_loss(n_steps: int, batch: int = 256) -> dict[str, float]:
    """ms for T, g's loss f(T) - tau T and one backward, no optimiser, the loss code shared:
    only how T is obtained differs (forward-mode slope vs autograd with create_graph)."""
    torch.manual_seed(0)
    model = OTCalibrator(16)
    g, f = model.net, model.dual
    context_g, context_f, tau = torch.randn(batch, 16), torch.randn(batch, 16), torch.rand(batch)

    def run(forward_mode: bool) -> None:
        transported = (
            g.quantile(context_g, tau) if forward_mode else transport_autograd(g, context_g, tau)
        )
        (
            f.potential(context_f, transported, with_slope=False)[0] - tau * transported
        ).mean().backward()

    return median_ms({"dprm": lambda i: run(True), "condot": lambda i: run(False)}, n_steps)


def check_same_map(dim: int = 64) -> float:
    """Forward-mode and double-backward T agree (float64) on the benchmarked network."""
    torch.manual_seed(0)
    net = OTCalibrator(dim).net.double()
    context = net.embed(torch.randn(128, dim, dtype=torch.float64))
    tau = torch.rand(128, dtype=torch.float64)
    with torch.no_grad():
        forward = net.quantile(context, tau)
    return float((forward - transport_autograd(net, context, tau).detach()).abs().max())


def fifty_k_set(root: str, n_records: int):
    """A calibration set of exactly ``n_records`` rows x 3584 (paper world, ID then OOD rows)."""
    paths = write_world(f"{root}/world", "llama-3.2-1b__qwen-prm", size="paper", progress=False)
    parts = [read_calibration_set(paths[f"{s}/calib"], check_hidden=False) for s in ("id", "ood")]
    take = [min(len(parts[0]), n_records), max(0, n_records - len(parts[0]))]
    records = pd.concat(
        [p.records.iloc[:k] for p, k in zip(parts, take, strict=True)], ignore_index=True
    )
    dim = parts[0].hidden_dim
    with SetWriter(f"{root}/set", "calibration", len(records), dim) as writer:
        row = 0
        for part, k in zip(parts, take, strict=True):
            for start in range(0, k, 8192):
                stop = min(start + 8192, k)
                writer.hidden[row + start : row + stop] = part.hidden[start:stop]
            row += k
        writer.records = records
        writer.meta.update(source="bench_ot")
    return read_calibration_set(f"{root}/set", check_hidden=False)


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--records", type=int, default=50_000)
    parser.add_argument("--dim", type=int, default=3584)
    parser.add_argument("--steps", type=int, default=40, help="timed steps per variant")
    parser.add_argument("--skip-fit", action="store_true", help="only the step timing")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    rows = []
    print(
        f"torch {torch.__version__}, {torch.get_num_threads()} threads; max |T_forward - T_autograd| (float64) = {check_same_map():.2e}"
    )

    for head_only in (False, True):
        ms = time_steps(args.dim, head_only, args.steps)
        what = "map heads only" if head_only else f"whole step, D={args.dim}"
        rows.append(
            (
                f"ms/step dprm vs CondOT-style ({what})",
                f"{ms['dprm']:.1f} vs {ms['condot']:.1f}",
                f"{ms['condot'] / ms['dprm']:.2f}x",
                ">= 3x",
            )
        )
    ms = time_map_loss(4 * args.steps)
    rows.append(
        (
            "ms for T + f(T) - tau T + backward (slope mode only)",
            f"{ms['dprm']:.2f} vs {ms['condot']:.2f}",
            f"{ms['condot'] / ms['dprm']:.2f}x",
            "(isolates the slope)",
        )
    )

    if not args.skip_fit:
        with tempfile.TemporaryDirectory() as root:
            started = time.perf_counter()
            data = fifty_k_set(root, args.records)
            print(
                f"built a {len(data)} x {data.hidden_dim} set in {time.perf_counter() - started:.1f} s"
            )
            started = time.perf_counter()
            model = fit("ot", data, seed=0, progress=False)
            fit_s = time.perf_counter() - started
            training = model.info["training"]
            rows.append(
                (
                    f"full ot fit, {len(data)} x {data.hidden_dim}",
                    f"{fit_s:.1f} s ({training['steps']} steps)",
                    f"{300 / fit_s:.2f}x",
                    "<= 300 s",
                )
            )
            levels = midpoint_levels(100)
            model.quantiles(data.hidden[:1000], levels)  # warm-up
            started = time.perf_counter()
            q = model.quantiles(data.hidden, levels)
            q_s = time.perf_counter() - started
            crossings = int((np.diff(q, axis=1) < 0).sum())
            rows.append(
                (
                    f"quantiles at 100 levels, {len(data)} records",
                    f"{q_s:.2f} s ({crossings} crossings)",
                    f"{2 / q_s:.2f}x",
                    "<= 2 s",
                )
            )

    width = max(len(r[0]) for r in rows)
    print(f"\n{'measurement':{width}s}  {'measured':>26s}  {'ratio':>8s}  target")
    for name, measured, ratio, target in rows:
        print(f"{name:{width}s}  {measured:>26s}  {ratio:>8s}  {target}")
    print(
        "(ratio: for steps, autograd / forward-mode; for times, target / measured; >= 1 meets it)"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
