"""Make the stand-in images a request needs: ``make(request, force, env) -> StandinReport``.

Cached by tag and recipe revision (the ``io.imagegen.standin.revision`` label): a current image
is left alone, so a run with everything present only asks the engine. Images whose parents
are made in the same run are remade too. Independent images (the devel and runtime derivations
of one base) are made side by side: mostly network and dpkg time.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import jinja2

from imagegen import log as ui
from imagegen import settings
from imagegen.building.standins import cuda_home, debian_cuda, mirrors, rootfs
from imagegen.building.standins.docker_cli import Docker
from imagegen.building.standins.plan import (
    LABEL_KEY,
    PYTHON_DEVEL_PACKAGES,
    PYTHON_RUNTIME_PACKAGES,
    REVISION,
    REVISION_KEY,
    Image,
    Request,
    base_components,
    plan,
    to_make,
)
from imagegen.errors import BuildFailedError
from imagegen.files import read_input
from imagegen.imagespec import catalog
from imagegen.imagespec.inputs import CA_BUNDLE_LIMIT

DEFAULT_CA = Path("/etc/ssl/certs/ca-certificates.crt")
_TRIPLETS = {"amd64": "x86_64-linux-gnu", "arm64": "aarch64-linux-gnu"}
# apt in a derive container: the host CA mounted (never copied), retries for a flaky mirror.
# "$1": the packages; the setup after it reads the rest of the arguments.
APT_SCRIPT = """
packages="$1"
shift
apt_opts="-o Acquire::Retries=3"
[ ! -s /run/host-ca.crt ] || apt_opts="$apt_opts -o Acquire::https::CAInfo=/run/host-ca.crt"
apt-get $apt_opts update -qq
apt-get $apt_opts install -y -qq --no-install-recommends $packages >/dev/null
apt-get clean
"""
CLEAN_SCRIPT = "rm -rf /var/lib/apt/lists/* /var/log/apt /var/log/dpkg.log /tmp/* /root/.cache\n"


@dataclass(frozen=True)
class Made:
    tag: str
    action: str  # "built" or "current"
    seconds: float


@dataclass(frozen=True)
class StandinReport:
    platform: str
    images: tuple[Made, ...]
    seconds: float

    def to_json(self) -> dict[str, object]:
        return {
            "platform": self.platform,
            "seconds": round(self.seconds, 1),
            "images": [
                {"tag": m.tag, "action": m.action, "seconds": round(m.seconds, 1)} for m in self.images
            ],
        }


def _templates() -> jinja2.Environment:
    return jinja2.Environment(
        loader=jinja2.PackageLoader("imagegen.building.standins", "templates"),
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
    )


def render(name: str, **values: str) -> str:
    labels = {"label_key": LABEL_KEY, "revision_key": REVISION_KEY, "revision": REVISION}
    return _templates().get_template(name).render(**labels, **values)


class _Maker:
    """The recipes, sharing one engine, work folder and the request."""

    def __init__(self, docker: Docker, req: Request, env: Mapping[str, str], workdir: Path) -> None:
        self.docker, self.req, self.env, self.workdir = docker, req, env, workdir
        self.ca = ca_bundle(env)

    def log(self, name: str) -> Path:
        return self.workdir / f"{name}.log"

    def container(self, kind: str) -> str:
        # Named after this process, so a failed run's cleanup removes only its own.
        return f"imagegen-standin-{kind}-{os.getpid()}"

    def build_context(self, ctx: Path, dockerfile: str, tag: str) -> None:
        buildkit = self.req.platform != catalog.DEFAULT_PLATFORM
        args = ["build", "-q", "-f", str(ctx / dockerfile), "-t", tag, str(ctx)]
        if buildkit:  # BuildKit for another platform (its RUN goes through qemu)
            args[1:1] = ["--platform", self.req.platform]
        self.docker.run(args, self.log(tag.replace("/", "_")), f"docker build {tag}", buildkit=buildkit)

    # ------------------------------------------------------------ recipes

    def base(self, image: Image) -> None:
        found = mirrors.resolve(image.suite, self.env)
        root = Path(tempfile.mkdtemp(prefix="rootfs-", dir=self.workdir))
        log = self.log(f"debootstrap-{image.suite}")
        ui.info(f"debootstrap {image.suite} (minbase, {self.req.arch}) from {found.main}")
        try:
            rootfs.debootstrap(
                root,
                suite=image.suite,
                arch=self.req.arch,
                components=base_components(image.suite),
                mirrors=found,
                log=log,
            )
            tar = subprocess.Popen(rootfs.tar_root(root), stdout=subprocess.PIPE)
            if self.req.platform == catalog.DEFAULT_PLATFORM:
                assert tar.stdout is not None
                changes = [
                    "ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
                    "ENV LANG=C.UTF-8",
                    f"LABEL {LABEL_KEY}=base",
                    f"LABEL {REVISION_KEY}={REVISION}",
                    'CMD ["bash"]',
                ]
                args = ["import", *(x for c in changes for x in ("--change", c)), "-", image.tag]
                with log.open("ab") as out:
                    done = subprocess.run(
                        [self.docker.binary, *args],
                        stdin=tar.stdout,
                        stdout=out,
                        stderr=subprocess.STDOUT,
                        env=dict(self.docker.env),
                        check=False,
                    )
                tar.wait()
                if done.returncode != 0 or tar.returncode != 0:
                    raise BuildFailedError(f"docker import {image.tag} failed", hint=f"the log: {log}")
            else:
                ctx = self.workdir / f"base-ctx-{image.suite}"
                ctx.mkdir()
                with (ctx / "rootfs.tar").open("wb") as out:
                    assert tar.stdout is not None
                    shutil.copyfileobj(tar.stdout, out)
                if tar.wait() != 0:
                    raise BuildFailedError(f"packing the {image.suite} root failed")
                (ctx / "Dockerfile").write_text(render("base-import.Dockerfile.j2"))
                self.build_context(ctx, "Dockerfile", image.tag)
                shutil.rmtree(ctx)
        finally:
            shutil.rmtree(root, ignore_errors=True)

    def apt(
        self,
        image: Image,
        packages: tuple[str, ...],
        kind: str,
        setup: str = "",
        setup_args: tuple[str, ...] = (),
        changes: tuple[str, ...] = (),
    ) -> None:
        ui.info(f"apt-get install {' '.join(packages)} -> {image.tag}")
        assert image.parent is not None
        self.docker.derive(
            tag=image.tag,
            parent=image.parent,
            kind=kind,
            script=APT_SCRIPT + setup + CLEAN_SCRIPT,
            args=(" ".join(packages), *setup_args),
            changes=changes,
            ca_bundle=self.ca,
            log=self.log(kind + "-" + image.tag.replace("/", "_")),
            container=self.container(kind + (image.cuda or "")),
        )

    def cuda_pair(self, devel: Image, base: Image) -> None:
        version = devel.cuda or ""
        target = catalog.CUDA_TARGETS[version]
        if devel.recipe == "cuda-debian":
            full = target.full_version or version
            self.apt(
                devel,
                debian_cuda.DEVEL_PACKAGES,
                "cuda-devel",
                debian_cuda.devel_setup(),
                debian_cuda.devel_setup_args(version, _TRIPLETS[self.req.arch]),
                debian_cuda.devel_changes(full),
            )
            self.apt(
                base, debian_cuda.RUNTIME_PACKAGES, "cuda-base", "", (), debian_cuda.runtime_changes(full)
            )
            return
        ctx = self.workdir / f"cuda-{version}"
        ctx.mkdir()
        if devel.recipe == "cuda-host":
            home = cuda_home.host_cuda_home(self.env)
            ui.info(f"copying {home} into the CUDA {version} stand-ins")
            full = cuda_home.copy_host(home, ctx, self.log(f"cuda-{version}")) or version
        else:
            ui.info(f"pip install cuda-toolkit[nvcc,cccl,cudart]=={version}.* ({self.req.machine} wheels)")
            full = cuda_home.layout_wheels(
                version, self.req.machine, ctx, self.log(f"pip-{version}"), self.env
            )
            # A release that adds or drops an arch: imagegen would plan without it, or plan one
            # this nvcc refuses, until op_builder.archs learns it.
            disagreement = cuda_home.arch_table_disagreement(ctx / "cuda", version)
            if disagreement:
                ui.warn(
                    f"CUDA {full}: op_builder.archs does not say what this nvcc compiles: {disagreement} "
                    "(update _CUDA_SUPPORT and record its listing in tests/fixtures/nvcc/)"
                )
        (ctx / "Dockerfile.devel").write_text(
            render("cuda-devel.Dockerfile.j2", parent=devel.parent or "", full_version=full)
        )
        (ctx / "Dockerfile.base").write_text(
            render("cuda-base.Dockerfile.j2", parent=base.parent or "", full_version=full)
        )
        self.build_context(ctx, "Dockerfile.devel", devel.tag)
        self.build_context(ctx, "Dockerfile.base", base.tag)
        shutil.rmtree(ctx)

    def one(self, image: Image, partner: Image | None) -> None:
        if image.recipe == "debootstrap":
            self.base(image)
        elif image.recipe == "apt":
            packages = PYTHON_DEVEL_PACKAGES if image.kind == "devel" else PYTHON_RUNTIME_PACKAGES
            self.apt(image, packages, image.kind)
        else:
            assert partner is not None
            self.cuda_pair(image, partner)


def ca_bundle(env: Mapping[str, str]) -> Path | None:
    """The CA bundle apt uses for an HTTPS mirror: STANDIN_CA (bad input unless a readable file), else
    the host's bundle where there is one."""
    named = env.get(settings.STANDIN_CA.name, "").strip()
    if named:
        # Mounted into the containers that run apt: read here first, so that a FIFO, a device or
        # a path too long is refused by name, before any work, instead of blocking or failing there.
        hint = "name the CA bundle apt should trust (PEM), e.g. /etc/ssl/certs/ca-certificates.crt"
        read_input(Path(named), "STANDIN_CA's file", limit=CA_BUNDLE_LIMIT, hint=hint)
        return Path(named)
    return DEFAULT_CA if DEFAULT_CA.is_file() else None


def host_cuda(env: Mapping[str, str]) -> str | None:
    return cuda_home.host_cuda_version(cuda_home.host_cuda_home(env))


def _lock_path(env: Mapping[str, str]) -> Path:
    cache = env.get(settings.XDG_CACHE_HOME.name) or str(Path.home() / ".cache")
    return Path(cache) / "imagegen" / "standins.lock"


@contextmanager
def _one_at_a_time(env: Mapping[str, str]) -> Iterator[None]:
    """Two runs on one engine (CI and a developer, the tests of two checkouts) would make the same
    tags at once: the second waits, then finds them current. No lock where the cache folder
    cannot be written or locked (a read-only home): the runs then only repeat work."""
    path = _lock_path(env)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        lock = path.open("a")
    except OSError:
        yield
        return
    with lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            ui.info(f"waiting for another `imagegen standins` to finish ({path})")
            fcntl.flock(lock, fcntl.LOCK_EX)
        except OSError:
            pass  # a file system without locks
        yield


def make(req: Request, *, force: bool = False, env: Mapping[str, str] = os.environ) -> StandinReport:
    """Make what ``req`` needs and is not current; BuildFailedError (1), EngineUnavailableError (3)."""
    start = time.monotonic()
    images = plan(req, host_cuda(env))
    ca_bundle(env)  # bad input before any work
    docker = Docker.connect(env)
    with _one_at_a_time(env):
        return _make(docker, req, images, force, env, start)


def _make(
    docker: Docker, req: Request, images: tuple[Image, ...], force: bool, env: Mapping[str, str], start: float
) -> StandinReport:
    current = {image.tag: docker.current(image.tag) for image in images}
    todo = to_make(images, current, force)
    if todo and req.platform != catalog.DEFAULT_PLATFORM:
        rootfs.check_emulation(req.arch, req.machine)
    made: dict[str, float] = {}
    if todo:
        workdir = Path(tempfile.mkdtemp(prefix="imagegen-standin."))
        maker = _Maker(docker, req, env, workdir)
        try:
            _run(maker, todo, made)
        except BaseException:
            _keep_logs_only(workdir)  # the errors name them
            raise
        shutil.rmtree(workdir, ignore_errors=True)
    return StandinReport(
        req.platform,
        tuple(Made(i.tag, "built" if i.tag in made else "current", made.get(i.tag, 0.0)) for i in images),
        time.monotonic() - start,
    )


def _keep_logs_only(workdir: Path) -> None:
    for path in workdir.iterdir():
        if path.suffix != ".log":
            if path.is_dir() and not path.is_symlink():
                shutil.rmtree(path, ignore_errors=True)
            else:
                path.unlink(missing_ok=True)


def _run(maker: _Maker, todo: tuple[Image, ...], made: dict[str, float]) -> None:
    """In waves: every job whose parents are made runs, two at a time; a CUDA pair is one job
    (one recipe makes both). The first failure ends the run once its wave is over."""
    jobs: list[tuple[Image, Image | None]] = []
    for image in todo:
        if any(partner is not None and partner.tag == image.tag for _, partner in jobs):
            continue
        jobs.append((image, next((i for i in todo if i.tag == image.pair), None)))
    pending = {i.tag for i in todo}
    while jobs:
        ready = [
            (image, partner)
            for image, partner in jobs
            if image.parent not in pending and (partner is None or partner.parent not in pending)
        ]
        assert ready, "a stand-in's parent is never made"
        with ThreadPoolExecutor(max_workers=2) as pool:
            futures = [pool.submit(_one, maker, image, partner) for image, partner in ready]
            errors = [f.exception() for f in futures]
        for (image, partner), future in zip(ready, futures):
            if future.exception() is None:
                for tag in (image.tag, *((partner.tag,) if partner else ())):
                    made[tag] = future.result()
                    pending.discard(tag)
        for error in errors:
            if error is not None:
                raise error
        jobs = [job for job in jobs if job not in ready]


def _one(maker: _Maker, image: Image, partner: Image | None) -> float:
    began = time.monotonic()
    maker.one(image, partner)
    seconds = time.monotonic() - began
    ui.info(f"{image.tag}{' and ' + partner.tag if partner else ''} ready ({seconds:.0f}s)")
    return seconds
