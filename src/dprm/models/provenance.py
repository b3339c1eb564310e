"""What a calibrator was trained on, and the warning when it is applied to other data.

A calibrator reads one PRM's hidden states and learns one generator's success rates: applied
to another generator's or another PRM's data it still returns numbers, but nothing says they
are calibrated there. :func:`dprm.models.fit.fit` records the training set's
:data:`PROVENANCE_KEYS` (from its ``meta.json``) in ``info["trained_on"]``; the commands that
apply a calibrator (``evaluate``, ``predict``, ``ias``) compare it with their data's.
"""

from __future__ import annotations

from typing import Any

#: the meta.json keys that name where a data set's hidden states and labels come from
PROVENANCE_KEYS = ("generator", "prm")


def data_provenance(meta: dict[str, Any] | None) -> dict[str, str]:
    """The :data:`PROVENANCE_KEYS` a data set's meta.json names (missing or empty ones left out)."""
    meta = meta or {}
    return {key: str(meta[key]) for key in PROVENANCE_KEYS if meta.get(key)}


def provenance_warning(model: Any, meta: dict[str, Any] | None, data: str) -> str | None:
    """A one-line warning when ``model`` was trained on another generator's or PRM's data.

    Args:
        model: a calibrator (its ``info["trained_on"]``, written by ``fit``; older calibrators
            have none and are not checked).
        meta: the meta.json of the data it is applied to.
        data: how to name that data in the message (its path).

    Returns:
        The warning, or None when every key both sides name agrees.
    """
    trained = (getattr(model, "info", None) or {}).get("trained_on") or {}
    here = data_provenance(meta)
    differ = [
        key
        for key in PROVENANCE_KEYS
        if key in trained and key in here and trained[key] != here[key]
    ]
    if not differ:
        return None
    source = getattr(model, "source", None) or model.method
    was = ", ".join(f"{key} {trained[key]!r}" for key in differ)
    now = ", ".join(f"{key} {here[key]!r}" for key in differ)
    return (
        f"{source}: this {model.method} calibrator was trained on {was} but {data} is {now}; "
        "its estimates are not calibrated for this data (train one on it)"
    )
