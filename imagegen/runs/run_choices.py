"""How one run builds, proves and ships its images: decided once per command, handed down whole.

``imagegen build`` and ``imagegen bake`` make one ``RunOptions`` from their run options (the
options table's rows that are not part of what the image is: ``imagegen.options.run_options``),
each value checked where it is read (the push rule by ``PushPlan``, the key by ``Signer``, the
budget by ``parse_size``); ``pipeline.build``, ``multiarch.build_platforms``, ``bake.bake`` and
``finish.finish`` read what they need from it. A new run option is a row, a field here and the
code that uses it: nothing threads it through the calls between.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from imagegen.oci.push_plan import NO_PUSH, PushPlan
from imagegen.proof.signing import Signer


def _process_environment() -> Mapping[str, str]:
    return os.environ


@dataclass(frozen=True)
class RunOptions:
    """One run's choices; the defaults are a plain local build that is verified and not pushed."""

    verify: bool = True  # load every op in a sealed container (--no-verify: False)
    push: PushPlan = NO_PUSH  # where verified images go (PushPlan.for_build / for_bake)
    signer: Signer | None = None  # --sign-key: the proof's provenance signed, and the push for cosign
    max_size: int | None = None  # --max-size in bytes: a larger image is not ok and not pushed
    source: Path | None = None  # --source: the checkout built from (default: the one imagegen runs from)
    # The environment the engine, the secrets and the tools are read from (tests pass their own).
    env: Mapping[str, str] = field(default_factory=_process_environment, compare=False, repr=False)
    # For benchmarks: a stage short of the runtime is built and measured only; every step again;
    # the proof written elsewhere than the image's own folder.
    stage: str = "runtime"
    no_cache: bool = False
    proof_dir: Path | None = None


LOCAL = RunOptions()
