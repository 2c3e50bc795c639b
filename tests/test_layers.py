"""The import rule of the house: a module imports its own part of the package or a lower layer,
never a higher one nor a sibling on its own layer (docs/architecture.md draws the same table).

Every `import` and `from ... import` in screener/ is read with ast (function-local and
TYPE_CHECKING ones too), so a lazy import cannot slip a layer either; so is the hook server's
preload list (modules it imports by name), and the Slurm flows' packages have no import
cycle inside."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "screener"

# Lowest layer first. A part is a module or a package (longest name wins); a module may import
# its own part and the parts of lower layers. Keep docs/architecture.md's diagram in step.
LAYERS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("errors", ("screener", "screener.errors")),
    (
        "foundation",
        (
            "screener.probe_data",
            "screener.hostlist",
            "screener.process",
            "screener.slurm.client",
            "screener.units",
        ),
    ),
    ("configuration", ("screener.policy",)),
    ("pure deciders", ("screener.probe", "screener.verdict", "screener.steady")),
    ("edges", ("screener.transport", "screener.slurm", "screener.store")),
    ("screening loop", ("screener.pipeline",)),
    ("services", ("screener.spool", "screener.ingest", "screener.report")),
    ("run bookkeeping", ("screener.run_marker", "screener.metrics")),
    ("running a screen", ("screener.run",)),
    ("composition root", ("screener.app",)),
    ("hook common", ("screener.hooks",)),
    ("Slurm flows", ("screener.prolog", "screener.epilog", "screener.sweep")),
    ("hook server", ("screener.hook_server",)),
    ("commands", ("screener.cli",)),
    ("entry point", ("screener.entry",)),
)
LEVEL = {part: level for level, (_, parts) in enumerate(LAYERS) for part in parts}


def module_name(path: Path) -> str:
    """screener/store/tables.py -> screener.store.tables; a package's __init__ is the package."""
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def part_of(module: str) -> str:
    """The longest table entry naming `module` or a package holding it (the root only exactly)."""
    best = ""
    for part in LEVEL:
        if (module == part or module.startswith(part + ".")) and part != "screener":
            best = part if len(part) > len(best) else best
    if not best and module == "screener":
        best = "screener"
    if not best:
        raise KeyError(f"{module} is in no layer of tests/test_layers.py LAYERS")
    return best


def imported(module: str, source: str) -> set[str]:
    """The screener modules (or packages) `module`'s source imports, however it spells them."""
    is_package = MODULES[module].name == "__init__.py"
    found: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = module.split(".")
                anchor = anchor[: len(anchor) - node.level + (1 if is_package else 0)]
                base = ".".join(anchor + ([base] if base else []))
            for alias in node.names:
                sub = f"{base}.{alias.name}"
                found.add(sub if sub in MODULES else base)
    return {name for name in found if name == "screener" or name.startswith("screener.")}


def violations(module: str, source: str) -> list[str]:
    """One line per import of a part on the same or a higher layer than `module`'s own part."""
    own = part_of(module)
    bad = []
    for target in sorted(imported(module, source)):
        theirs = part_of(target)
        if theirs != own and LEVEL[theirs] >= LEVEL[own]:
            bad.append(
                f"{module} ({LAYERS[LEVEL[own]][0]}) imports {target} ({LAYERS[LEVEL[theirs]][0]})"
            )
    return bad


def test_every_module_has_a_layer() -> None:
    """A new module or package must be placed in the table before it can pass."""
    for module in MODULES:
        part_of(module)


@pytest.mark.parametrize("module", sorted(MODULES))
def test_imports_go_down_only(module: str) -> None:
    assert violations(module, MODULES[module].read_text()) == []


@pytest.mark.parametrize(
    ("module", "line"),
    [
        ("screener.verdict.judge", "from screener.transport.base import Transport"),
        ("screener.probe.fio", "from screener.store import open_store"),
        ("screener.store.store", "from screener.hooks.log import HookLog"),
        ("screener.store.reads", "import screener.pipeline"),
        ("screener.slurm.parse", "from screener.store import tables"),
        ("screener.slurm.cli_backend", "from screener import transport"),
        ("screener.app", "    from screener.cli import main"),
        ("screener.hooks.drain_rules", "from . import drains\nfrom .. import cli"),
        ("screener.hooks.drains", "from screener.sweep.job import run_sweep"),
        ("screener.epilog.hook", "from screener.prolog.hook import job_from_env"),
        ("screener.sweep.job", "    from screener.hook_server.wire import FALLBACK_ENV"),
        ("screener.probe.lines", "from screener.steady import steady_state"),
    ],
)
def test_the_rule_catches_an_upward_import(module: str, line: str) -> None:
    """The checker itself: each of these imports runs up a layer (or across one) and is named."""
    source = f"def f():\n{line}\n" if line.startswith(" ") else line
    assert violations(module, source), line


# The flows' packages and the two they stand on: no import cycle among a package's own
# modules, function-local imports counted (a cycle is broken by moving the shared piece down).
ACYCLIC = (
    "screener.hooks",
    "screener.prolog",
    "screener.epilog",
    "screener.sweep",
    "screener.hook_server",
)


def cycle_in(package: str) -> list[str]:
    """One import cycle among ``package``'s modules (as a path a -> b -> ... -> a), or []."""
    inside = {m for m in MODULES if m.startswith(package + ".")}
    graph = {
        m: sorted(t for t in imported(m, MODULES[m].read_text()) if t in inside and t != m)
        for m in sorted(inside)
    }
    done: set[str] = set()

    def walk(module: str, path: list[str]) -> list[str]:
        if module in path:
            return [*path[path.index(module) :], module]
        if module in done:
            return []
        for target in graph[module]:
            if found := walk(target, [*path, module]):
                return found
        done.add(module)
        return []

    for module in graph:
        if found := walk(module, []):
            return found
    return []


@pytest.mark.parametrize("package", ACYCLIC)
def test_no_import_cycle_inside(package: str) -> None:
    assert any(m.startswith(package + ".") for m in MODULES), package
    assert cycle_in(package) == [], " -> ".join(cycle_in(package))


SERVER = PACKAGE / "hook_server" / "server.py"


def preloaded(source: str) -> list[str]:
    """The module names in server.py's PRELOAD (imported by name, importlib.import_module,
    before the first fork), read with ast: the server is never imported here."""
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Assign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if any(isinstance(t, ast.Name) and t.id == "PRELOAD" for t in targets):
                assert isinstance(node.value, ast.Tuple | ast.List), "PRELOAD is a literal"
                names = [ast.literal_eval(e) for e in node.value.elts]
                assert all(isinstance(n, str) for n in names), names
                return names
    raise AssertionError("no PRELOAD in screener/hook_server/server.py")


def preload_problems(source: str) -> list[str]:
    """A preloaded screener name that is no module of the package, or lies on a layer the
    hook server may not import (a higher one: the commands); other names (sqlalchemy's
    dialects) are not ours to place."""
    ours = [n for n in preloaded(source) if n == "screener" or n.startswith("screener.")]
    bad = [f"{n} is no module of screener/" for n in ours if n not in MODULES]
    imports = "\n".join(f"import {n}" for n in ours if n in MODULES)
    return bad + violations("screener.hook_server.server", imports)


def test_the_hook_server_preloads_only_modules_below_it() -> None:
    names = preloaded(SERVER.read_text())
    assert {"screener.prolog.hook", "screener.epilog.hook"} <= set(names)
    assert preload_problems(SERVER.read_text()) == []


def test_a_bad_preload_is_caught() -> None:
    source = 'PRELOAD = ("screener.cli", "screener.hooks.nowhere", "sqlalchemy.dialects.sqlite")'
    assert preload_problems(source) == [
        "screener.hooks.nowhere is no module of screener/",
        "screener.hook_server.server (hook server) imports screener.cli (commands)",
    ]


def private_store_uses(source: str) -> list[str]:
    """Accesses of a private member of something called a store (``self.store._write``,
    ``store._read``): the store's public surface (screener/store/__init__.py) is the way in."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if (
            isinstance(node, ast.Attribute)
            and node.attr.startswith("_")
            and not node.attr.startswith("__")
            and ast.unparse(node.value).split(".")[-1] in {"store", "db"}
        ):
            found.append(f"{ast.unparse(node.value)}.{node.attr}")
    return found


@pytest.mark.parametrize("module", sorted(MODULES))
def test_nobody_reaches_into_a_store(module: str) -> None:
    assert private_store_uses(MODULES[module].read_text()) == []


def test_a_private_store_access_is_caught() -> None:
    assert private_store_uses("with self.store._write('x') as c: pass") == ["self.store._write"]
