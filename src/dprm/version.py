"""The installed package version, in the core layer so any module may record it in its outputs."""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("dprm")
except PackageNotFoundError:  # running from a source tree without install
    __version__ = "0.0.0+local"
