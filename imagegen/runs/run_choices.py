"""How one run builds, proves and ships its images: decided once per command, handed down whole.

``imagegen build`` and ``imagegen bake`` get one ``RunOptions`` made from their run options (the
options table's rows that are not part of what the image is: ``imagegen.options.run_options``) by
``imagegen.commands._options.table_options``: each field that names a row (``row`` in its
metadata) takes that row's value as the cascade found it, through its ``convert`` (which checks it:
a bad key or size exits 2 before anything is built). ``pipeline.build``, ``multiarch.build_platforms``,
``bake.bake`` and ``finish.finish`` read what they need from it. A new run option is a row, a field
here and the code that uses it: no command and no call between threads it through.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from imagegen.oci.push_plan import NO_PUSH, PushPlan
from imagegen.proof.signing import Signer
from imagegen.proof.size import parse_size


def _process_environment() -> Mapping[str, str]:
    return os.environ


def _row(name: str, convert: Callable[[Any], Any] | None = None) -> dict[str, Any]:
    """A field's metadata: it takes the run option ``name``'s value, through ``convert`` unless
    that value is None (no value: the field's default)."""
    return {"row": name, "convert": convert}


@dataclass(frozen=True)
class RunOptions:
    """One run's choices; the defaults are a plain local build that is verified and not pushed."""

    # Load every op in a sealed container.
    verify: bool = field(default=True, metadata=_row("no_verify", lambda no_verify: not no_verify))
    push: PushPlan = NO_PUSH  # where verified images go (the command's rule: PushPlan.for_build / for_bake)
    # The checkout built from (None: the one imagegen runs from).
    source: Path | None = field(default=None, metadata=_row("source"))
    # The proof's provenance signed, and the push for cosign.
    signer: Signer | None = field(default=None, metadata=_row("sign_key", Signer.from_file))
    # In bytes: a larger image is not ok and not pushed.
    max_size: int | None = field(default=None, metadata=_row("max_size", parse_size))
    # The environment the engine, the secrets and the tools are read from (tests pass their own).
    env: Mapping[str, str] = field(default_factory=_process_environment, compare=False, repr=False)
    # For benchmarks: a stage short of the runtime is built and measured only; every step again;
    # the proof written elsewhere than the image's own folder.
    stage: str = "runtime"
    no_cache: bool = False
    proof_dir: Path | None = None

    @classmethod
    def row_names(cls) -> tuple[str, ...]:
        """The run options (the table's rows) the fields take."""
        return tuple(f.metadata["row"] for f in dataclasses.fields(cls) if "row" in f.metadata)

    @classmethod
    def from_rows(cls, values: Mapping[str, Any], **decided: Any) -> RunOptions:
        """The run of a command: each field that names a row takes ``values[row]`` (converted;
        None leaves the field's default), ``decided`` what the command's own rules made."""
        taken: dict[str, Any] = {}
        for found in dataclasses.fields(cls):
            row = found.metadata.get("row")
            if row is None or values.get(row) is None:
                continue
            convert = found.metadata["convert"]
            taken[found.name] = values[row] if convert is None else convert(values[row])
        return cls(**taken, **decided)


LOCAL = RunOptions()
