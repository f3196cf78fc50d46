"""The import graph of the vseries package, read from its sources (nothing is imported).

    python -m vseries.lab.imports            # one line per module, lowest layer first
    python -m vseries.lab.imports --dot      # Graphviz, to draw it

A module's layer is one more than the highest layer it imports (layer 0 imports no vseries
module), so every arrow points down. CONTRIBUTING.md shows this picture; the layout test
(tests/workspace/test_layout.py) holds the code to it.
"""

import argparse
import ast
from dataclasses import dataclass, field
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent


@dataclass
class Module:
    """One module: dotted name, file, line count, the vseries modules it imports, and the
    private names (``_x``) it takes from other modules."""

    name: str
    path: Path
    lines: int
    imports: set[str] = field(default_factory=set)
    private: list[str] = field(default_factory=list)


def _name(path: Path, root: Path) -> str:
    rel = path.relative_to(root.parent).with_suffix("")
    parts = list(rel.parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules(root: Path = PACKAGE) -> dict[str, Module]:
    """Every module of the package under ``root``, with its imports resolved to modules."""
    found = {}
    for path in sorted(root.rglob("*.py")):
        if "__pycache__" in path.parts:
            continue
        text = path.read_text()
        found[_name(path, root)] = Module(_name(path, root), path, len(text.splitlines()))
    for mod in found.values():
        tree = ast.parse(mod.path.read_text())
        aliases = {}
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                if not node.module.startswith(root.name):
                    continue
                for a in node.names:
                    full = f"{node.module}.{a.name}"
                    if full in found:
                        mod.imports.add(full)
                        aliases[a.asname or a.name] = full
                    else:
                        mod.imports.add(node.module)
                        if a.name.startswith("_"):
                            mod.private.append(f"{node.module}.{a.name}")
            elif isinstance(node, ast.Import):
                for a in node.names:
                    if a.name in found:
                        mod.imports.add(a.name)
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Attribute)
                and isinstance(node.value, ast.Name)
                and node.value.id in aliases
                and node.attr.startswith("_")
                and not node.attr.startswith("__")
            ):
                mod.private.append(f"{aliases[node.value.id]}.{node.attr}")
        mod.imports.discard(mod.name)
        # a module inside a package does not "import" the package when it imports a sibling
        mod.imports = {i for i in mod.imports if not mod.name.startswith(i + ".")}
    return found


def layers(found: dict[str, Module]) -> dict[str, int]:
    """{module: layer}. Raises ValueError on an import cycle."""
    out: dict[str, int] = {}

    def layer(name: str, seen: tuple[str, ...] = ()) -> int:
        if name in seen:
            raise ValueError("import cycle: " + " -> ".join((*seen, name)))
        if name not in out:
            deps = [d for d in found[name].imports if d in found]
            out[name] = 1 + max((layer(d, (*seen, name)) for d in deps), default=-1)
        return out[name]

    for name in found:
        layer(name)
    return out


def picture(found: dict[str, Module]) -> list[str]:
    """One line per module: layer, name, lines, and the modules it imports."""
    lay = layers(found)
    short = {n: n.removeprefix(PACKAGE.name + ".") for n in found}
    rows = sorted(found, key=lambda n: (lay[n], n))
    width = max(len(short[n]) for n in rows)
    return [
        f"{lay[n]:2}  {short[n]:{width}}  {found[n].lines:4}  "
        + (", ".join(sorted(short[d] for d in found[n].imports if d in found)) or "-")
        for n in rows
    ]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m vseries.lab.imports", description=__doc__.split("\n\n")[0]
    )
    ap.add_argument("--dot", action="store_true", help="print Graphviz instead of the table")
    a = ap.parse_args(argv)
    found = modules()
    if a.dot:
        print("digraph vseries {\n  rankdir=BT; node [shape=box];")
        for n, m in sorted(found.items()):
            for d in sorted(m.imports):
                print(f'  "{n}" -> "{d}";')
        print("}")
        return 0
    print("layer  module  lines  imports")
    print("\n".join(picture(found)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
