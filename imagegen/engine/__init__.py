"""Floor 0, the container engine: find what can build here, build, show and explain the build,
read, name and push images, run the sealed container.

It is imagegen's only door to Docker: nothing outside it imports the docker SDK or opens a client
(imagegen/.ruff.toml bans both), and the SDK's errors leave it as the project's own.

- ``client``     the one Docker SDK client factory, the no-daemon error, the SDK's errors translated
- ``types``      ``Engine`` / ``EngineKind``: what the probe decides
- ``detect``     probe the daemon and the docker clients, then choose an engine (pure)
- ``backend``    ``BuildRequest`` and the ``BuildBackend`` Protocol
- ``buildkit``   backend: the docker CLI (buildx, or BuildKit built in)
- ``classic``    backend: the classic builder through the SDK
- ``build``      ``build_image``: checks, then the backend the engine's kind picks
- ``process``    run a docker CLI, streaming its output; cancel it on Ctrl-C
- ``log_lines``  the shapes of build output lines (shared by the display and the parser)
- ``progress``   the live display of a build
- ``build_log``  read a failed build's log: the failed step, the op, an excerpt
- ``images``     images here: presence, inspection, id, size, another name, removal
- ``push``       push an image to its registry (the docker CLI, else the SDK)
- ``image_files`` files copied out of an image, through a container that never starts
- ``layers``     an image's layers read from the engine's export, as the engine applies them
- ``layer_dirs`` the same from a local engine's overlay2 layer folders
- ``sealed``     the sealed container every in-image check runs in

The docker SDK is imported only where a function needs it (see ``client``).
"""

from __future__ import annotations

from imagegen.engine.build import BuildResult, build_image
from imagegen.engine.detect import detect_engine
from imagegen.engine.images import image_size, local_images, remove_image
from imagegen.engine.types import Engine, EngineKind

__all__ = [
    "BuildResult",
    "Engine",
    "EngineKind",
    "build_image",
    "detect_engine",
    "image_size",
    "local_images",
    "remove_image",
]
