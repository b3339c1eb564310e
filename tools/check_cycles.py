"""Fail on any import cycle between dprm's modules (``make check-cycles``, run by ``make lint``).

import-linter's contracts keep the layers one-way; this check covers what they leave open: two
modules of the same layer (or package) that import each other, directly or through others.
It builds the import graph with grimp (installed with import-linter), function-level imports
included, finds its strongly connected components (Tarjan) and prints every component of more
than one module with one import chain that closes it. Exit 1 if there is any, else 0.

Usage: python tools/check_cycles.py [--package dprm]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import grimp


def components(graph: grimp.ImportGraph) -> list[list[str]]:
    """Strongly connected components of more than one module, each sorted, largest first."""
    modules = sorted(graph.modules)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    found: list[list[str]] = []
    counter = 0
    for root in modules:
        if root in index:
            continue
        # iterative Tarjan: (module, iterator over its imports)
        work = [(root, iter(sorted(graph.find_modules_directly_imported_by(root))))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            advanced = False
            for child in children:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append(
                        (child, iter(sorted(graph.find_modules_directly_imported_by(child))))
                    )
                    advanced = True
                    break
                if child in on_stack:
                    low[node] = min(low[node], index[child])
            if advanced:
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return sorted(found, key=lambda c: (-len(c), c))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--package", default="dprm")
    args = parser.parse_args()
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
    graph = grimp.build_graph(args.package)
    cycles = components(graph)
    for component in cycles:
        first, *rest = component
        chain = graph.find_shortest_chain(importer=rest[0], imported=first) if rest else None
        back = graph.find_shortest_chain(importer=first, imported=rest[0]) if rest else None
        print(f"import cycle among {len(component)} modules: {', '.join(component)}")
        if chain and back:
            print(f"  {' -> '.join(chain)}")
            print(f"  {' -> '.join(back)}")
    if cycles:
        print(f"{len(cycles)} import cycle(s) in {args.package}")
        return 1
    print(f"no import cycles in {args.package} ({len(graph.modules)} modules)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
