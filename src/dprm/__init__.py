"""dprm: distributional, calibrated process reward models and instance-adaptive compute."""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("dprm")
except PackageNotFoundError:  # running from a source tree without install
    __version__ = "0.0.0+local"

__all__ = ["__version__"]
