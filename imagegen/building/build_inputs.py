"""The project's build inputs: what a wheel of the ops (and so an image) is built from.

The Dockerfile's build stage copies exactly these, so a docs or CLI change never
recompiles kernels; staging a build context, and anything else that builds the wheel
from a copy (benchmarks, tests), uses this one list.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from imagegen.errors import BadInputError
from imagegen.files import stat_input
from imagegen.render.dockerfile import SPLIT_SCRIPT

# The build stage's inputs: the wheel's, and the script that splits the venv into the runtime's
# layers (copied after the wheel is built, so a change to it compiles nothing again).
SOURCE_FILES = ("setup.py", "pyproject.toml", "README.md", SPLIT_SCRIPT)
SOURCE_DIRS = ("op_builder", "kernels")
# Build outputs and caches a checkout may hold; never part of the inputs.
_IGNORE = shutil.ignore_patterns(
    "__pycache__", "*.pyc", "*.so", "*.o", "build", "*.egg-info", "manifest.json"
)


def source_root() -> Path:
    """The checkout this imagegen runs from (the parent of the imagegen package)."""
    return Path(__file__).resolve().parents[2]


def check_sources(root: Path) -> None:
    missing = [n for n in (*SOURCE_FILES, *SOURCE_DIRS) if stat_input(root / n, "--source") is None]
    if missing:
        raise BadInputError(
            f"the project's sources are not at {root} (missing: {', '.join(missing)})",
            hint="run imagegen build from a checkout of this project (pip install -e '.[cli]')",
        )


def copy_build_inputs(root: Path, dest: Path) -> Path:
    """Copy the build inputs of the checkout at ``root`` into ``dest`` (created if needed)."""
    dest.mkdir(parents=True, exist_ok=True)
    for name in SOURCE_FILES:
        (dest / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(root / name, dest / name)
    for name in SOURCE_DIRS:
        shutil.copytree(root / name, dest / name, ignore=_IGNORE)
    return dest
