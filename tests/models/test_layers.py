"""The calibrator layer imports only downwards (models -> data -> core), not even in a function."""

from __future__ import annotations

import ast
from pathlib import Path

import dprm.models

#: what dprm.models may import from dprm
ALLOWED = ("dprm.models", "dprm.data", "dprm.metrics", "dprm.config", "dprm.io")


def imported_modules(path: Path) -> set[str]:
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            out.add(node.module)
            if node.module == "dprm":  # ``from dprm import x`` imports dprm.x unless x is a name
                out.update(
                    f"dprm.{alias.name}" for alias in node.names if alias.name != "__version__"
                )
    return out


def test_models_import_only_lower_layers():
    root = Path(dprm.models.__file__).parent
    offenders = {
        f"{path.name}: {module}"
        for path in sorted(root.glob("*.py"))
        for module in imported_modules(path)
        if module.startswith("dprm.") and not module.startswith(ALLOWED)
    }
    assert not offenders, sorted(offenders)
