"""The packages' import graphs, counting every import (module level and inside functions), as
tests/_import_graph.py reads them from the source: op_builder's files and imagegen's rooms import
one another without a circle, imagegen's rooms only downward through its floors
(README.md, "Layout"), no two modules of a package share a name and no folder is named
like build output or tests. The readers are shown failing on a small package made here."""

from __future__ import annotations

from pathlib import Path

from tests._import_graph import cycles, floor_violations, imports, room

REPO = Path(__file__).resolve().parents[2]


# imagegen's floors: a room imports only rooms on its floor or below. Every folder is one room on
# one floor; the top level holds only the entry points and the ground floor's modules.
FLOORS = {
    # 0: the ground: the package's leaves (errors, settings, logging, files, hosts, URLs, HTTP
    # deadlines, terminal text, tables), the options table and the container engine
    **dict.fromkeys(
        (
            "imagegen",
            "imagegen.errors",
            "imagegen.settings",
            "imagegen.log",
            "imagegen.files",
            "imagegen.hosts",
            "imagegen.urls",
            "imagegen.deadlines",
            "imagegen.terminal",
            "imagegen.tables",
            "imagegen.engine",
            "imagegen.options",
        ),
        0,
    ),
    "imagegen.imagespec": 1,  # what the image is: catalog, checks, resolution
    "imagegen.registry": 2,  # a registry's client: references, manifests, blobs, referrers
    "imagegen.render": 3,  # the Dockerfile, matrix and bake file
    "imagegen.building": 4,  # staging, bases, stand-ins
    "imagegen.verify": 5,  # the verifier in the sealed container
    "imagegen.proof": 5,  # SBOM, provenance, signing, size
    "imagegen.oci": 6,  # publishing: the push plan, the push, cosign's bundles and tags
    "imagegen.runs": 7,  # the runs: one image, several platforms, the matrix's bake
    "imagegen.doctor": 7,  # can this machine build and verify
    "imagegen.compat": 7,  # ops x torch releases x toolkits
    **dict.fromkeys(("imagegen.commands", "imagegen.cli", "imagegen.__main__"), 8),
}
# The modules imagegen's top level may hold: the entry points and the ground floor's leaves.
TOP_LEVEL = {"__init__", "__main__", "cli", "errors", "settings", "log", "files", "hosts", "urls",
             "deadlines", "terminal", "tables"}  # fmt: skip


def test_op_builder_has_no_import_circle() -> None:
    assert cycles(imports(REPO / "op_builder")) == []


def test_imagegens_rooms_import_only_downward_and_without_a_circle() -> None:
    graph = imports(REPO / "imagegen")
    assert floor_violations(graph, FLOORS) == []
    rooms: dict[str, set[str]] = {}
    for module, targets in graph.items():
        rooms.setdefault(room(module), set()).update(room(t) for t in targets if room(t) != room(module))
    assert cycles(rooms) == []


def test_imagegens_top_level_holds_only_entry_points_and_the_ground_floor() -> None:
    modules = {path.stem for path in (REPO / "imagegen").glob("*.py")}
    assert modules <= TOP_LEVEL, sorted(modules - TOP_LEVEL)
    assert all(FLOORS[f"imagegen.{name}"] in (0, 8) for name in TOP_LEVEL - {"__init__"})
    # Every folder is a room with a floor of its own (a module inside one takes its folder's).
    folders = {p.name for p in (REPO / "imagegen").iterdir() if (p / "__init__.py").is_file()}
    assert {f"imagegen.{name}" for name in folders} <= FLOORS.keys()


def _basenames(package: Path) -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}
    for path in package.rglob("*.py"):
        relative = path.relative_to(package)
        # A package's __init__ / __main__ and a command's module (named for its command) aside.
        if path.name in ("__init__.py", "__main__.py") or relative.parts[0] == "commands":
            continue
        found.setdefault(path.stem, []).append(str(relative))
    # A module and a package folder of the same name read as one name too.
    for folder in package.rglob("*/"):
        if (folder / "__init__.py").is_file() and folder.name != "commands":
            found.setdefault(folder.name, []).append(str(folder.relative_to(package)) + "/")
    return {name: paths for name, paths in found.items() if len(paths) > 1}


def test_no_two_modules_share_a_name_and_no_folder_reads_as_output_or_tests() -> None:
    for package in ("imagegen", "op_builder"):
        assert _basenames(REPO / package) == {}, package
        folders = {p.name for p in (REPO / package).rglob("*/") if (p / "__init__.py").is_file()}
        assert not folders & {"build", "dist", "spec", "test", "tests"}, package


def _package(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        path = root / "pkg" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root / "pkg"


def test_a_circle_closed_inside_a_function_is_found(tmp_path: Path) -> None:
    package = _package(
        tmp_path,
        {
            "__init__.py": "",
            "low.py": "def f():\n    from pkg.sub import high  # deferred: still an edge\n",
            "sub/__init__.py": "",
            "sub/high.py": "from pkg import low\n",
            "leaf.py": "import json\nfrom . import low\n",
        },
    )
    graph = imports(package)
    assert graph["pkg.low"] == {"pkg.sub.high"} and graph["pkg.sub.high"] == {"pkg.low"}
    assert graph["pkg.leaf"] == {"pkg.low"}  # relative, and nothing outside the package
    assert cycles(graph) == [["pkg.low", "pkg.sub.high"]]
    # Without the deferred import, no circle.
    (package / "low.py").write_text("def f():\n    return 1\n")
    assert cycles(imports(package)) == []


def test_an_import_that_reaches_up_a_floor_is_found(tmp_path: Path) -> None:
    package = _package(
        tmp_path,
        {
            "__init__.py": "",
            "ground.py": "def f():\n    from pkg.upper import g  # deferred: still reaches up\n",
            "upper/__init__.py": "",
            "upper/g.py": "from pkg import ground\n",
            "image.py": "",
            "spec/__init__.py": "",
            "spec/image.py": "",
        },
    )
    graph = imports(package)
    floors = {"pkg": 0, "pkg.ground": 0, "pkg.upper": 1, "pkg.image": 0, "pkg.spec": 0}
    assert floor_violations(graph, floors) == ["pkg.ground -> pkg.upper.g (floor 0 -> 1)"]
    assert floor_violations(graph, {"pkg.ground": 0}) == [
        "pkg: room pkg has no floor", "pkg.image: room pkg.image has no floor",
        "pkg.spec: room pkg.spec has no floor", "pkg.spec.image: room pkg.spec has no floor",
        "pkg.upper: room pkg.upper has no floor", "pkg.upper.g: room pkg.upper has no floor",
    ]  # fmt: skip
    assert _basenames(package) == {"image": ["image.py", "spec/image.py"]}


# The project-wide rules that stand at tests/unit's top; every other unit test sits in the folder
# of the package (and, for imagegen, the room) it tests.
PROJECT_WIDE = {"test_import_graph.py", "test_layering.py", "test_pytest_markers.py",
                "test_settings_tables.py", "test_setup_entry.py"}  # fmt: skip


def mirror_problems(unit: Path, repo: Path) -> list[str]:
    """Unit tests that stand where no package or room of the repository is."""
    problems = [
        f"{p.name}: loose at tests/unit" for p in unit.glob("test_*.py") if p.name not in PROJECT_WIDE
    ]
    for path in unit.rglob("test_*.py"):
        folder = path.parent.relative_to(unit)
        if folder.parts and not (repo / folder).is_dir():
            problems.append(f"{path.relative_to(unit)}: no {folder} in the repository")
    return sorted(problems)


def test_the_unit_tests_mirror_the_packages(tmp_path: Path) -> None:
    assert mirror_problems(REPO / "tests" / "unit", REPO) == []
    # Shown failing: a test loose at the top, one in a folder no package has.
    unit = tmp_path / "unit"
    (unit / "imagegen" / "nowhere").mkdir(parents=True)
    (unit / "test_loose.py").write_text("")
    (unit / "imagegen" / "nowhere" / "test_x.py").write_text("")
    assert mirror_problems(unit, REPO) == [
        "imagegen/nowhere/test_x.py: no imagegen/nowhere in the repository",
        "test_loose.py: loose at tests/unit",
    ]
