"""`imagegen standins` against the real engine: a no-op when every stand-in is current, and it
makes what is missing (only that), with the CA mounted for apt and left out of the image.

The images are the session's CPU stand-ins tagged under a prefix of this test's own
(STANDIN_PREFIX), so the tags other builds use are never touched.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import docker
import pytest

from imagegen.building.standins.plan import REVISION, REVISION_KEY
from imagegen.imagespec import catalog
from tests.integration.conftest import REPO, run_in

PREFIX = "imagegen-it-standin"
OURS = [
    f"{catalog.STANDIN_PREFIX}/debian:{catalog.STANDIN_DISTRO}",
    catalog.STANDIN_DEVEL,
    catalog.STANDIN_RUNTIME,
]
COPIES = [PREFIX + tag.removeprefix(catalog.STANDIN_PREFIX) for tag in OURS]


def standins(*args: str) -> dict[str, Any]:
    env = {**os.environ, "STANDIN_PREFIX": PREFIX, "CI": "true"}
    done = subprocess.run(
        [sys.executable, "-m", "imagegen", "standins", "--json", *args],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=900,
    )  # fmt: skip
    sys.stderr.write(done.stderr[-5000:])
    assert done.returncode == 0, done.stderr[-3000:]
    report: dict[str, Any] = json.loads(done.stdout)
    return report


@pytest.fixture
def copies(docker_client: Any) -> Iterator[None]:
    for source, copy in zip(OURS, COPIES):
        docker_client.images.get(source).tag(copy)
    yield
    for copy in COPIES:
        with contextlib.suppress(docker.errors.ImageNotFound):  # the test removed it
            docker_client.images.remove(copy)


def test_current_images_are_left_alone_and_a_missing_one_is_made(docker_client: Any, copies: None) -> None:
    report = standins()
    assert [(i["tag"], i["action"]) for i in report["images"]] == [(t, "current") for t in COPIES]
    assert report["seconds"] < 30  # asks the engine only

    runtime = COPIES[2]
    before = docker_client.images.get(COPIES[1]).id
    docker_client.images.remove(runtime)
    report = standins()
    assert [(i["tag"], i["action"]) for i in report["images"]] == [
        (COPIES[0], "current"),
        (COPIES[1], "current"),
        (runtime, "built"),
    ]
    assert docker_client.images.get(COPIES[1]).id == before  # the devel image was not touched
    made = docker_client.images.get(runtime)
    labels = made.labels
    assert labels["io.imagegen.standin"] == "runtime" and labels[REVISION_KEY] == REVISION
    # apt's environment stays in the recipe, not in the image's (images built on it inherit that).
    assert not [e for e in made.attrs["Config"]["Env"] if e.startswith("DEBIAN_FRONTEND=")]
    # The CA was mounted for apt: at most the empty mount point is left, none of its bytes.
    script = "python3 --version; echo ca=$(cat /run/host-ca.crt 2>/dev/null | wc -c); command -v g++ || true"
    code, out = run_in(docker_client, runtime, ["sh", "-c", script])
    assert code == 0 and "Python 3.11" in out and "ca=0" in out and "g++" not in out, out


CUDA_12_4_DEVEL, CUDA_12_4_BASE = catalog.STANDINS[("cuda12.4", "linux/amd64")]
# What torch's extension build does with the stand-in: nvcc through $CUDA_HOME/bin with the CUDA
# headers by -I, and the link through setuptools' x86_64-linux-gnu-g++. Then the CUDA headers read
# from a folder of their own, as a CUDA home copied out of the image has them: there glibc 2.41's
# sinpi/cospi meet CUDA 12.4's declarations as non-system headers, an error unless mended.
CUDA_12_4_CHECK = r"""
set -e
nvcc --version | grep -q 'release 12.4,'
[ "$CUDA_HOME" = /usr/local/cuda ] && [ "$(command -v nvcc)" = /usr/local/cuda/bin/nvcc ]
g++ --version | head -1 | grep -q ' 13\.'
x86_64-linux-gnu-g++ --version | head -1 | grep -q ' 13\.'
python3 -c 'import sys; assert sys.version_info[:2] == (3, 13)'
test -e /usr/local/cuda/lib64/stubs/libcuda.so && test -e /usr/local/cuda/lib64/libcudart_static.a
! ls /usr/local/cuda/lib64/libcuda.so* /usr/lib/x86_64-linux-gnu/nvidia/current/libcuda.so* 2>/dev/null
! ls /usr/local/cuda/lib64/libcublasLt_static.a 2>/dev/null
cd /tmp
printf '%s\n' '#include <cmath>' '#include <cuda_runtime.h>' '#include <cuda_fp8.h>' \
  '__global__ void k(float* x) { x[0] = sinpif(x[0]) + cospi(1.0) + std::sin(x[1]); }' > t.cu
nvcc -I/usr/local/cuda/include -std=c++17 -Xcompiler -fPIC -gencode=arch=compute_80,code=sm_80 -c t.cu -o t.o
x86_64-linux-gnu-g++ -shared t.o -L/usr/local/cuda/lib64 -lcudart -o t.so
cuobjdump --list-elf t.o | grep -q sm_80
mkdir inc && cd /usr/include && cp -r crt cuda*.h *_functions*.h *_types.h *_functions.hpp \
  *_indirect_functions.h host_*.h *_defines.h channel_descriptor.h vector_*.h sm_*.h* \
  /tmp/inc/ 2>/dev/null || true
cd /tmp
nvcc -I/tmp/inc -std=c++17 -gencode=arch=compute_80,code=sm_80 -c t.cu -o t2.o
echo CUDA-12.4-OK
"""


# The slow tier: its bases are 5 GB of packages that `make image-cuda CUDA=12.4` makes, not set-up.
@pytest.mark.slow
def test_cuda_12_4_standins_are_a_cuda_home(docker_client: Any) -> None:
    import docker

    try:
        docker_client.images.get(CUDA_12_4_DEVEL)
    except docker.errors.ImageNotFound:
        pytest.skip(f"{CUDA_12_4_DEVEL} is not made here (`imagegen standins --cuda 12.4`: 5 GB of packages)")
    code, out = run_in(docker_client, CUDA_12_4_DEVEL, ["sh", "-c", CUDA_12_4_CHECK])
    assert code == 0 and "CUDA-12.4-OK" in out, out
    base = docker_client.images.get(CUDA_12_4_BASE)
    env = dict(e.split("=", 1) for e in base.attrs["Config"]["Env"])
    assert env["CUDA_VERSION"] == "12.4.1" and env["NVIDIA_DRIVER_CAPABILITIES"] == "compute,utility"
    code, out = run_in(
        docker_client,
        CUDA_12_4_BASE,
        ["sh", "-c", "ldconfig -p | grep -c 'libcudart.so.12 '; command -v g++ || true"],
    )
    assert code == 0 and out.split() == ["1"], out  # cudart, no compiler
