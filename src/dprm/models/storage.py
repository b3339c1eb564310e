"""Loading a saved calibrator directory, its weights verified before they are read.

A directory written by :meth:`dprm.models.interface.Calibrator.save` holds ``config.json`` and
``model.safetensors``; :func:`load` rebuilds the calibrator its config names (no pickle
involved) after :func:`verify_weights` has checked the weights file against that architecture
(safetensors' own header parser, ``safetensors.safe_open``) and against the content hash
recorded at save time.
"""

from __future__ import annotations

from pathlib import Path

import torch

from dprm.io import DataError, read_json
from dprm.models.interface import CONFIG_FILE, WEIGHTS_FILE, Calibrator, file_sha256
from dprm.models.registry import REGISTRY, load_methods

#: safetensors dtype names of the tensors a calibrator saves
SAFETENSORS_DTYPES = {
    torch.float64: "F64",
    torch.float32: "F32",
    torch.float16: "F16",
    torch.bfloat16: "BF16",
    torch.int64: "I64",
    torch.int32: "I32",
    torch.bool: "BOOL",
}


def verify_weights(path: Path, model: Calibrator, sha256: str | None) -> None:
    """Check a weights file against the architecture its config describes, before reading it.

    Checks, each failing with a one-line :class:`DataError` naming ``path``: the file is a
    complete safetensors file (``safetensors.safe_open`` parses its header and checks that the
    tensors' byte ranges tile the data section), every tensor of ``model`` is present with its
    dtype and shape and there are no others, and the bytes hash to ``sha256`` when the config
    recorded one.
    """
    from safetensors import SafetensorError, safe_open

    try:
        with safe_open(str(path), framework="pt") as handle:
            header = {
                name: (handle.get_slice(name).get_dtype(), list(handle.get_slice(name).get_shape()))
                for name in handle.keys()  # noqa: SIM118 - safe_open has no __iter__
            }
    except (SafetensorError, OSError, ValueError) as err:
        reason = str(err).splitlines()[0] if str(err) else type(err).__name__
        raise DataError(path, f"not a complete safetensors file ({reason})") from None
    expected = model.state_dict()
    missing = sorted(set(expected) - set(header))
    unexpected = sorted(set(header) - set(expected))
    if missing or unexpected:
        raise DataError(
            path,
            f"weights do not match {model.method!r}: missing {missing}, unexpected {unexpected}",
        )
    for name, tensor in expected.items():
        dtype, shape = header[name]
        want_dtype = SAFETENSORS_DTYPES.get(tensor.dtype, str(tensor.dtype))
        if name in model.data_sized and len(shape) == tensor.dim():
            tensor = tensor.new_empty(shape)
        if dtype != want_dtype or shape != list(tensor.shape):
            raise DataError(
                path,
                f"tensor {name!r} is {dtype} {shape}, the config describes "
                f"{want_dtype} {list(tensor.shape)}",
            )
    if sha256 is not None and file_sha256(path) != sha256:
        raise DataError(
            path, "content hash differs from the one recorded in config.json (file corrupt)"
        )


def load(directory: str | Path) -> Calibrator:
    """Load a calibrator directory written by :meth:`Calibrator.save` (no pickle involved).

    The weights are verified first (:func:`verify_weights`): header, tensor shapes against the
    config, and the content hash recorded at save time.

    Raises:
        DataError: a missing, corrupt, truncated or mismatched file, named in the message.
    """
    from safetensors.torch import load_file

    directory = Path(directory)
    cfg_path = directory / CONFIG_FILE
    cfg = read_json(cfg_path)
    if not isinstance(cfg, dict):
        raise DataError(cfg_path, "expected a JSON object")
    method = cfg.get("method")
    if method not in load_methods():
        raise DataError(
            cfg_path, f"key 'method': unknown calibrator {method!r}; known: {sorted(REGISTRY)}"
        )
    hidden_dim = cfg.get("hidden_dim")
    if not isinstance(hidden_dim, int) or isinstance(hidden_dim, bool) or hidden_dim < 1:
        raise DataError(
            cfg_path, f"key 'hidden_dim': expected a positive integer, found {hidden_dim!r}"
        )
    try:  # a negative or zero width inside the config: torch's RuntimeError, said in one line
        model = REGISTRY[method].from_config(hidden_dim, cfg.get("config", {}))
    except (KeyError, TypeError, ValueError, RuntimeError) as err:
        raise DataError(
            cfg_path, f"config does not describe a {method!r} calibrator: {err}"
        ) from None
    weights = directory / WEIGHTS_FILE
    if not weights.exists():
        raise DataError(weights, "file not found")
    verify_weights(weights, model, cfg.get("weights_sha256"))
    model.load_state_dict(load_file(str(weights)), strict=True)
    model.info = cfg.get("info", {})
    model.source = str(directory)
    model.eval()
    return model
