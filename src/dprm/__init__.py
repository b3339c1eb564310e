"""dprm: distributional, calibrated process reward models and instance-adaptive compute.

Implements R. Ma, D. Hadfield-Menell and K. Greenewald, *Distributional Process Reward Models:
Calibrated Prediction of Future Rewards via Conditional Optimal Transport* (2025): a monotone
conditional quantile function Q(tau | h) of a PRM's success probability, learned from its hidden
state h by conditional optimal transport (CondOT, Bunne et al., NeurIPS 2022), and used for the
instance-adaptive scaling of Park et al., *Know What You Don't Know: Uncertainty Calibration of
Process Reward Models* (NeurIPS 2025, arXiv:2506.09338). Bibliography: docs/references.md.

Python API (mirrors the CLI)::

    import dprm
    from dprm.data import read_calibration_set

    model = dprm.fit("ot", read_calibration_set("set_dir"), seed=0)
    model.save("run_dir")
    model = dprm.load("run_dir")
    q = model.quantiles(hidden, [0.1, 0.5, 0.9])  # [N, 3], hidden read in chunks

``fit`` and ``load`` are imported on first use so that ``import dprm`` stays light (no torch).
"""

from dprm.version import __version__

__all__ = ["__version__", "fit", "load"]


def __getattr__(name: str):
    if name == "fit":
        from dprm.models.fit import fit

        return fit
    if name == "load":
        from dprm.models.storage import load

        return load
    raise AttributeError(f"module 'dprm' has no attribute {name!r}")
