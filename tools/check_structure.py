"""Structure checks on libs/ and services/ (not tests, not bench), printing every hit.

    uv run python tools/check_structure.py [ROOT]

- a function longer than 80 lines (decorators and docstring included);
- a file longer than 600 lines;
- a third-party private name: `X._name` where X is not `self`/`cls` and `_name` is not one that
  governor's own code defines (a def, a class, an assignment or a field); and `X._name` where X
  is imported from a third-party package, whatever the name;
- in a governor class that subclasses a third-party class, `self._name` it does not define.

Dunder names (`__x__`) and the documented namedtuple API (`_replace`, `_asdict`, `_fields`,
`_make`) are public. Prints one `path:line: kind: detail` row per hit, then a count per kind;
exits 1 when there is any hit.
"""

from __future__ import annotations

import ast
import sys
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

MAX_FUNCTION_LINES = 80
MAX_FILE_LINES = 600
FIRST_PARTY = ("governor", "governor_")  # governor, governor_tools, governor_<service>
PUBLIC_UNDERSCORE = frozenset({"_replace", "_asdict", "_fields", "_make"})


def sources(root: Path) -> list[Path]:
    found = [p for top in ("libs", "services") for p in sorted((root / top).rglob("*.py"))]
    return [p for p in found if ".venv" not in p.parts]


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__") and name not in PUBLIC_UNDERSCORE


def _first_party(module: str | None) -> bool:
    top = (module or "").split(".")[0]
    return top == FIRST_PARTY[0] or top.startswith(FIRST_PARTY[1])


def _defines(node: ast.AST) -> str | None:
    """The name `node` defines: a def, a class, an assignment target, an argument, an import."""
    if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
        return node.name
    if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
        return node.id
    if isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
        return node.attr
    if isinstance(node, ast.arg):
        return node.arg
    if isinstance(node, ast.alias):
        return (node.asname or node.name).split(".")[0]
    return None


def defined_names(trees: list[ast.Module]) -> set[str]:
    """Every underscore name governor's code defines: defs, classes, assignments, fields."""
    names = {_defines(node) for tree in trees for node in ast.walk(tree)}
    return {n for n in names if n is not None and _private(n)}


def third_party_imports(tree: ast.Module) -> set[str]:
    """The names a module binds to third-party modules or objects."""
    bound: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                if not _first_party(a.name):
                    bound.add((a.asname or a.name).split(".")[0])
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and not _first_party(node.module):
            bound.update(a.asname or a.name for a in node.names)
    return bound


def _root(node: ast.expr) -> str | None:
    while isinstance(node, ast.Attribute):
        node = node.value
    return node.id if isinstance(node, ast.Name) else None


def _class_defines(cls: ast.ClassDef) -> set[str]:
    return {n for n in map(_defines, ast.walk(cls)) if n is not None}


def private_uses(
    tree: ast.Module, ours: set[str], first_party_classes: set[str]
) -> Iterator[tuple[int, str]]:
    foreign = third_party_imports(tree)
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Attribute) and _private(node.attr)):
            continue
        root = _root(node.value)
        direct = isinstance(node.value, ast.Name) and root in ("self", "cls")
        if root in foreign or (not direct and node.attr not in ours):
            yield node.lineno, f"{ast.unparse(node)} (not defined by governor)"
    for cls in (n for n in ast.walk(tree) if isinstance(n, ast.ClassDef)):
        bases = {_root(b) for b in cls.bases} - {None}
        if not bases or bases <= first_party_classes | {"object", "Protocol", "Generic"}:
            continue
        if not bases & foreign:
            continue
        own = _class_defines(cls)
        for node in ast.walk(cls):
            if (
                isinstance(node, ast.Attribute)
                and isinstance(node.value, ast.Name)
                and node.value.id in ("self", "cls")
                and _private(node.attr)
                and node.attr not in own
            ):
                base = ", ".join(sorted(b for b in bases if b))
                yield node.lineno, f"{ast.unparse(node)} (inherited from third-party {base})"


def _outermost(hits: Iterator[tuple[int, str]]) -> list[tuple[int, str]]:
    """`a._b._c` is one use, not two: drop a hit that another on its line extends."""
    found = list(hits)
    exprs = {(line, detail.split(" ")[0]) for line, detail in found}
    return [
        (line, detail)
        for line, detail in found
        if not any(other.startswith(detail.split(" ")[0] + ".") for n, other in exprs if n == line)
    ]


def long_functions(tree: ast.Module) -> Iterator[tuple[int, str]]:
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            start = min([node.lineno, *(d.lineno for d in node.decorator_list)])
            assert node.end_lineno is not None
            lines = node.end_lineno - start + 1
            if lines > MAX_FUNCTION_LINES:
                yield node.lineno, f"{node.name} is {lines} lines (> {MAX_FUNCTION_LINES})"


def check(root: Path) -> list[tuple[str, int, str, str]]:
    """Every hit under `root`: (path relative to root, line, kind, detail)."""
    paths = sources(root)
    trees = {p: ast.parse(p.read_text(), str(p)) for p in paths}
    ours = defined_names(list(trees.values()))
    classes = {n.name for t in trees.values() for n in ast.walk(t) if isinstance(n, ast.ClassDef)}
    hits: list[tuple[str, int, str, str]] = []
    for path, tree in trees.items():
        rel = str(path.relative_to(root))
        lines = len(path.read_text().splitlines())
        if lines > MAX_FILE_LINES:
            hits.append((rel, 1, "long-file", f"{lines} lines (> {MAX_FILE_LINES})"))
        hits += [(rel, n, "long-function", d) for n, d in long_functions(tree)]
        hits += [
            (rel, n, "private-name", d) for n, d in _outermost(private_uses(tree, ours, classes))
        ]
    return sorted(hits)


def main(argv: list[str]) -> int:
    root = Path(argv[1]) if len(argv) > 1 else Path(__file__).resolve().parents[1]
    hits = check(root)
    for path, line, kind, detail in hits:
        print(f"{path}:{line}: {kind}: {detail}")
    counts = Counter(kind for _, _, kind, _ in hits)
    print(", ".join(f"{k} {counts[k]}" for k in ("long-file", "long-function", "private-name")))
    return 1 if hits else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
