"""Import layers around dprm.recipe: cli -> recipe -> orchestrate -> report / live -> ... (AST check).

Function-level imports count too. dprm.recipe never imports the CLI nor the renderer (it runs
through dprm.orchestrate); nothing below it (orchestrate, report, live, ias, evaluation, models,
llm, data, core) imports dprm.recipe, and dprm.report never imports dprm.orchestrate. Inside
dprm.recipe the table specs sit below the stage builder (:data:`RECIPE_LAYERS`).
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


def _importers(package: str, prefix: str) -> list[str]:
    return sorted(
        f"{path.relative_to(SRC)} imports {name}"
        for path in (SRC / package).rglob("*.py")
        for name in _imports(path)
        if name == prefix or name.startswith(prefix + ".")
    )


def test_recipe_runs_through_orchestrate_not_the_renderer():
    assert not _importers("recipe", "dprm.report")
    assert _importers("recipe", "dprm.orchestrate")  # the shared stages and report machinery


def test_report_only_renders():
    assert not _importers("report", "dprm.orchestrate")


#: dprm.recipe's own modules, top to bottom: a module imports only modules of lower layers
RECIPE_LAYERS = (
    ("run", "preflight"),
    ("stages",),
    ("park", "sharding", "plan"),
    ("bodies", "fingerprints"),
    ("layout", "spec"),
    ("recipe_file",),
    ("sections", "engine_specs", "executor_specs"),
)


def test_recipe_modules_import_only_lower_layers():
    layer_of = {name: i for i, names in enumerate(RECIPE_LAYERS) for name in names}
    on_disk = {p.stem for p in (SRC / "recipe").glob("*.py")} - {"__init__"}
    assert on_disk == set(layer_of), "every recipe module has a layer"
    for name, layer in layer_of.items():
        imported = {
            n.removeprefix("dprm.recipe.")
            for n in _imports(SRC / "recipe" / f"{name}.py")
            if n.startswith("dprm.recipe.")
        }
        upward = sorted(m for m in imported if layer_of[m] <= layer and m != name)
        assert not upward, f"dprm.recipe.{name} imports {upward} (same or higher layer)"
