"""Files copied out of an image, through a container of it that is created and never started:
nothing the image holds runs, and the container (labelled as a sealed one, so that what a Ctrl-C
might leave behind can be found) is always removed.
"""

from __future__ import annotations

import io
import tarfile
import uuid

from imagegen.engine import sealed
from imagegen.engine.client import connection


def copy_files(image: str, path: str, purpose: str = "copy") -> dict[str, bytes] | None:
    """The regular files at ``path`` in ``image`` (a file or a folder, read whole), by their name
    in the engine's archive of it (``folder/file``); None when the image has nothing at ``path``."""
    import docker  # deferred for the reason imagegen.engine.client gives

    name = f"imagegen-{purpose}-{uuid.uuid4().hex[:12]}"
    with connection(f"copying {path} out of {image}") as client:
        try:
            client.api.create_container(image, command=["true"], name=name, labels={sealed.SEALED_LABEL: "1"})
            try:
                stream, _ = client.api.get_archive(name, path)
                archive = b"".join(stream)
            except docker.errors.NotFound:
                return None
        finally:
            with sealed.interrupts_deferred():
                sealed.remove_container(client, name)
    files = {}
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        for member in tar.getmembers():
            handle = tar.extractfile(member) if member.isfile() else None
            if handle is not None:
                files[member.name] = handle.read()
    return files
