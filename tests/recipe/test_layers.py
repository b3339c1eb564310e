"""Import layers around dprm.recipe: cli -> recipe -> report / live -> ... (AST check).

Function-level imports count too. dprm.recipe never imports the CLI; nothing below it (report,
live, ias, evaluation, models, llm, data, core) imports dprm.recipe.
"""

from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parents[2] / "src" / "dprm"


def _imports(path: Path) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
    return names


def test_recipe_imports_no_cli():
    for path in (SRC / "recipe").glob("*.py"):
        bad = sorted(n for n in _imports(path) if n == "dprm.cli" or n.startswith("dprm.cli."))
        assert not bad, f"{path.name} imports {bad}"


def test_lower_layers_do_not_import_recipe():
    for path in SRC.rglob("*.py"):
        rel = path.relative_to(SRC)
        if rel.parts[0] in ("cli", "recipe"):
            continue
        bad = sorted(n for n in _imports(path) if n.startswith("dprm.recipe"))
        assert not bad, f"{rel} imports {bad}"
