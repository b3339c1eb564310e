"""dprm: distributional, calibrated process reward models and instance-adaptive compute.

Python API (mirrors the CLI)::

    import dprm
    model = dprm.fit("ot", dprm.data.read_calibration_set("set_dir"), seed=0)
    model.save("run_dir")
    model = dprm.load("run_dir")
    q = model.quantiles(hidden, [0.1, 0.5, 0.9])  # [N, 3], hidden read in chunks

``fit`` and ``load`` are imported on first use so that ``import dprm`` stays light (no torch).
"""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("dprm")
except PackageNotFoundError:  # running from a source tree without install
    __version__ = "0.0.0+local"

__all__ = ["__version__", "fit", "load"]


def __getattr__(name: str):
    if name == "fit":
        from dprm.models.fit import fit

        return fit
    if name == "load":
        from dprm.models.interface import load

        return load
    raise AttributeError(f"module 'dprm' has no attribute {name!r}")
