"""The BuildKit secrets one image's build passes (id -> file), for ``imagegen build`` and bake alike.

- ``compile-cache`` / ``compile-cache-key``: the compile cache's credentials from the environment
  (``imagegen.imagespec.compile_cache``);
- ``torch-index``: the torch index's whole URL when it has a user or password. The Dockerfile
  and the proof name the index with those as ``***`` and the devel stage's pip reads the URL
  from this secret: a secret is mounted for one ``RUN`` step and kept in no layer, no history
  and no build argument, where the URL in the text would be.

Each file is private (mode 0600) and removed when the build is over.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

from imagegen.imagespec import compile_cache
from imagegen.imagespec.inputs import TORCH_INDEX_SECRET_ID
from imagegen.imagespec.spec import ImageSpec


def write_private(path: Path, text: str) -> Path:
    """``text`` in a new file only its owner reads (it must not exist yet)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as out:
        out.write(text)
    return path


@contextmanager
def build_secrets(spec: ImageSpec, env: Mapping[str, str]) -> Iterator[dict[str, Path]]:
    """Every secret ``spec``'s build passes, for as long as the ``with`` lasts; empty when none."""
    with compile_cache.build_secrets(spec.compile_cache, env) as found:
        secrets = dict(found)
        if spec.torch_index_secret is None:
            yield secrets
            return
        with tempfile.TemporaryDirectory(prefix="imagegen-secret-") as folder:
            # No newline: the Dockerfile reads the file whole as PIP_INDEX_URL.
            path = write_private(Path(folder) / TORCH_INDEX_SECRET_ID, spec.torch_index_secret.value)
            secrets[TORCH_INDEX_SECRET_ID] = path
            yield secrets
