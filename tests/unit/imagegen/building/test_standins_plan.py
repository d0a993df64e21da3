"""imagegen/building/standins/plan.py: which stand-ins a request makes, named from the catalog, and what
is remade; bad flags are bad input (exit 2)."""

from __future__ import annotations

import fcntl
import threading
from pathlib import Path

import pytest
from typer.testing import CliRunner

from imagegen.building.standins import cuda_home
from imagegen.building.standins import make as make_lib
from imagegen.building.standins import plan as plan_lib
from imagegen.building.standins.plan import Image, plan, request, to_make
from imagegen.cli import app
from imagegen.errors import BadInputError
from imagegen.imagespec import catalog
from imagegen.imagespec.spec import SpecInput, build_spec

runner = CliRunner()


def tags(images: tuple[Image, ...]) -> list[str]:
    return [i.tag for i in images]


def test_the_cpu_pair_and_its_base() -> None:
    assert tags(plan(request())) == [
        "imagegen-standin/debian:bookworm",
        "imagegen-standin/python:3.11-devel",
        "imagegen-standin/python:3.11-runtime",
    ]


def test_every_tag_is_the_catalogs() -> None:
    # Whatever --standins builds from is what `imagegen standins` makes, for every target.
    for (target, platform), pair in catalog.STANDINS.items():
        versions = () if target == "cpu" else (target.removeprefix("cuda"),)
        made = tags(plan(request(versions, platform), host_cuda="13.0"))
        assert set(pair) <= set(made), (target, platform)


def test_cuda_12_4_comes_from_trixie() -> None:
    images = {i.tag: i for i in plan(request(["12.4"]))}
    devel, base = images["imagegen-standin/cuda:12.4-devel"], images["imagegen-standin/cuda:12.4-base"]
    assert (devel.recipe, devel.parent, devel.suite) == (
        "cuda-debian",
        "imagegen-standin/debian:trixie",
        "trixie",
    )
    assert (base.parent, base.pair, devel.pair) == (devel.parent, devel.tag, base.tag)
    assert images["imagegen-standin/debian:trixie"].recipe == "debootstrap"
    assert plan_lib.base_components("trixie") == ("main", "contrib", "non-free")
    assert plan_lib.base_components("bookworm") == ("main",)


def test_cuda_13_recipes() -> None:
    assert plan_lib.cuda_recipe("13.0", catalog.AMD64, host_cuda="13.0") == "cuda-host"
    # No 13.0 toolkit here (or another release at CUDA_HOME): NVIDIA's wheels of exactly 13.0.
    assert plan_lib.cuda_recipe("13.0", catalog.AMD64, host_cuda=None) == "cuda-wheels"
    assert plan_lib.cuda_recipe("13.0", catalog.AMD64, host_cuda="12.8") == "cuda-wheels"
    assert plan_lib.cuda_recipe("13.0", catalog.ARM64, host_cuda="13.0") == "cuda-wheels"
    assert plan_lib.cuda_recipe("13.2", catalog.AMD64, host_cuda="13.0") == "cuda-wheels"
    images = {i.tag: i for i in plan(request(["13.2"]))}
    assert images["imagegen-standin/cuda:13.2-devel"].parent == catalog.STANDIN_DEVEL
    assert images["imagegen-standin/cuda:13.2-base"].parent == catalog.STANDIN_RUNTIME


def test_arm64_tags_and_prefix() -> None:
    req = request(["13.2"], "linux/arm64/v8", {"STANDIN_PREFIX": "cold-run/"})
    assert (req.platform, req.arch, req.machine) == ("linux/arm64", "arm64", "aarch64")
    assert tags(plan(req)) == [
        "cold-run/debian:bookworm-arm64",
        "cold-run/python:3.11-devel-arm64",
        "cold-run/python:3.11-runtime-arm64",
        "cold-run/cuda:13.2-devel-arm64",
        "cold-run/cuda:13.2-base-arm64",
    ]


@pytest.mark.parametrize(
    ("cuda", "platform", "env", "message"),
    [
        (["12.1"], None, {}, "no stand-in for CUDA 12.1 on linux/amd64"),
        (["12.8"], None, {}, "Debian packages 12.4 only"),
        (["13"], None, {}, "is not a CUDA version"),
        (["13.1"], None, {}, "no stand-in for CUDA 13.1"),
        (["12.4"], "linux/arm64", {}, "only NVIDIA's 13.x wheels"),
        ([], "linux/s390x", {}, "not one the stand-ins are made for"),
        ([], "", {}, "--platform '' is not one"),
        (["x" * 300], None, {}, r"--cuda 'x{36}\.\.\. is not a CUDA version"),
        (["13.2 "], None, {}, "is not a CUDA version"),
        ([], None, {"STANDIN_PREFIX": "Bad Prefix"}, "not an image repository name"),
    ],
)
def test_bad_requests(cuda: list[str], platform: str | None, env: dict[str, str], message: str) -> None:
    with pytest.raises(BadInputError, match=message):
        request(cuda, platform, env)


def test_bad_flags_exit_2_before_any_engine_is_asked() -> None:
    for args, message in (
        (["--platform", "linux/s390x"], "not one the stand-ins are made for"),
        (["--cuda", "12.8"], "no stand-in for CUDA 12.8"),
        (["--cpu", "--cuda", "13.2"], "--cpu and --cuda exclude each other"),
    ):
        result = runner.invoke(app, ["standins", *args], env={"DOCKER_HOST": "unix:///nonexistent.sock"})
        assert result.exit_code == 2, result.output
        assert message in result.output
    missing_ca = {"DOCKER_HOST": "unix:///nonexistent.sock", "STANDIN_CA": "/nonexistent/ca.crt"}
    result = runner.invoke(app, ["standins"], env=missing_ca)
    assert (
        result.exit_code == 2 and "STANDIN_CA's file /nonexistent/ca.crt: it does not exist" in result.output
    )


def test_a_failed_run_keeps_its_logs_only(tmp_path: Path) -> None:
    (tmp_path / "rootfs-x" / "etc").mkdir(parents=True)
    (tmp_path / "cuda-13.2").mkdir()
    for name in ("debootstrap-bookworm.log", "pip-13.2.log", "Dockerfile.devel"):
        (tmp_path / name).write_text("x")
    make_lib._keep_logs_only(tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["debootstrap-bookworm.log", "pip-13.2.log"]


def _current(images: tuple[Image, ...], missing: set[str]) -> dict[str, bool]:
    return {i.tag: i.tag not in missing for i in images}


def test_nothing_to_make_when_all_are_current() -> None:
    images = plan(request(["12.4", "13.2"]))
    assert to_make(images, _current(images, set())) == ()
    assert tags(to_make(images, _current(images, set()), force=True)) == tags(images)


def test_a_new_base_remakes_what_derives_from_it() -> None:
    images = plan(request(["12.4", "13.2"]))
    remade = tags(to_make(images, _current(images, {"imagegen-standin/debian:bookworm"})))
    assert remade == [
        "imagegen-standin/debian:bookworm",
        "imagegen-standin/python:3.11-devel",
        "imagegen-standin/python:3.11-runtime",
        "imagegen-standin/cuda:13.2-devel",
        "imagegen-standin/cuda:13.2-base",
    ]  # the 12.4 pair comes from trixie's base: untouched


def test_one_missing_image_of_a_cuda_pair_remakes_the_pair_only() -> None:
    images = plan(request(["12.4"]))
    remade = tags(to_make(images, _current(images, {"imagegen-standin/cuda:12.4-base"})))
    assert remade == ["imagegen-standin/cuda:12.4-devel", "imagegen-standin/cuda:12.4-base"]
    runtime_only = tags(to_make(images, _current(images, {"imagegen-standin/python:3.11-runtime"})))
    assert runtime_only == ["imagegen-standin/python:3.11-runtime"]


def test_cuda_12_4_standins_build_with_trixies_python() -> None:
    spec = build_spec(SpecInput(cuda="12.4", ops="all", standins=True))
    assert (spec.base_devel, spec.base_runtime) == catalog.STANDINS[("cuda12.4", "linux/amd64")]
    assert (spec.python, spec.distro, spec.torch) == ("3.13", "trixie", "2.6.0")
    with pytest.raises(BadInputError, match=r"the stand-in bases have Python 3\.13, not 3\.11"):
        build_spec(SpecInput(cuda="12.4", ops="all", standins=True, python="3.11"))


def test_two_runs_take_turns(tmp_path: Path) -> None:
    # A second `imagegen standins` waits for the first (then finds the images current).
    env = {"XDG_CACHE_HOME": str(tmp_path)}
    (tmp_path / "imagegen").mkdir()
    held = (tmp_path / "imagegen" / "standins.lock").open("a")
    fcntl.flock(held, fcntl.LOCK_EX)
    entered = threading.Event()

    def second() -> None:
        with make_lib._one_at_a_time(env):
            entered.set()

    thread = threading.Thread(target=second)
    thread.start()
    assert not entered.wait(0.5)  # still waiting for the first run
    fcntl.flock(held, fcntl.LOCK_UN)
    held.close()
    assert entered.wait(10)
    thread.join()


def test_the_host_toolkits_version(tmp_path: Path) -> None:
    # A toolkit laid out from wheels has no version.json: its headers say which release it is.
    assert cuda_home.version_from_header("#define CUDART_VERSION  13000\n") == "13.0"
    assert cuda_home.version_from_header("# define CUDART_VERSION 12040 /* 12.4 */\n") == "12.4"
    assert cuda_home.version_from_header("#define CUDA_VERSION 12040\n") is None
    assert cuda_home.host_cuda_version(tmp_path) is None  # no toolkit there
    (tmp_path / "include").mkdir()
    (tmp_path / "include" / "cuda_runtime_api.h").write_text("#define CUDART_VERSION 13020\n")
    assert cuda_home.host_cuda_version(tmp_path) == "13.2"
    (tmp_path / "version.json").write_text('{"cuda": {"name": "CUDA SDK", "version": "12.8.1"}}')
    assert cuda_home.host_cuda_version(tmp_path) == "12.8"  # an installer's toolkit says so itself
