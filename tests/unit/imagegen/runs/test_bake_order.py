"""A bake over several torch releases of one target builds the image of the newest first and the
others after it, with a compile cache, so their shared stable op modules compile once; what does
not share modules builds at once. `--torch-releases` makes one image per release, each under a
name and tag of its own, and is refused where it would be ambiguous."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import pytest
from typer.testing import CliRunner

from imagegen.cli import app
from imagegen.errors import BadInputError
from imagegen.imagespec.compile_cache import STATS_MARKER
from imagegen.imagespec.spec import ImageSpec, SpecInput, build_spec
from imagegen.runs.bake import run_bakes
from imagegen.runs.bake_inputs import BakeRequest
from imagegen.runs.bake_order import leaders, shared_modules_key, uncached_followers

runner = CliRunner()
OPS = "fused_lion,fused_adam"


def _cuda(torch: str, **changes: Any) -> ImageSpec:
    return build_spec(SpecInput(**{"cuda": "13.0", "ops": OPS, "torch": torch, "standins": True, **changes}))


def test_the_newest_torch_builds_first_and_the_others_wait_for_it() -> None:
    requests = [BakeRequest(f"t{torch}", _cuda(torch)) for torch in ("2.13.0", "2.15.0", "2.14.1")]
    assert leaders(requests) == {"t2.13.0": "t2.15.0", "t2.14.1": "t2.15.0"}


def test_images_that_share_no_modules_build_at_once() -> None:
    cpu = BakeRequest("cpu", build_spec(SpecInput(cpu=True, ops="cpu_adam")))
    one = BakeRequest("one", _cuda("2.15.0"))
    assert leaders([cpu, one]) == {}
    # torch 2.9 has no stable ABI: its modules are its own, whatever else is baked
    old = BakeRequest("old", _cuda("2.9.1"))
    assert shared_modules_key(old.spec) is None
    assert leaders([old, one, cpu]) == {}


@pytest.mark.parametrize(
    "other",
    [
        {"ops": "fused_lion"},  # other ops
        {"arch": "9.0"},  # other archs
        {"stable_headers": "own"},  # compiled against its own torch's headers
    ],
)
def test_images_whose_modules_differ_do_not_wait_for_each_other(other: dict[str, str]) -> None:
    first = BakeRequest("a", _cuda("2.15.0"))
    second = BakeRequest("b", _cuda("2.14.1", **other))
    assert shared_modules_key(first.spec) != shared_modules_key(second.spec)
    assert leaders([first, second]) == {}


def test_a_later_image_without_a_compile_cache_is_named() -> None:
    requests = [BakeRequest(f"t{torch}", _cuda(torch)) for torch in ("2.14.1", "2.15.0")]
    assert uncached_followers(requests) == ("t2.14.1",)
    cached = [BakeRequest(f"t{torch}", _cuda(torch, compile_cache="local")) for torch in ("2.14.1", "2.15.0")]
    assert uncached_followers(cached) == ()
    # the same with a compile cache: the cache is part of what the images share
    assert shared_modules_key(cached[0].spec) == shared_modules_key(cached[1].spec)


# ---------------------------------------------------------------- running them


def _script(*steps: str) -> list[str]:
    return ["sh", "-c", "; ".join(steps)]


def test_a_waiting_target_starts_once_the_first_has_compiled_not_once_it_ended() -> None:
    argvs = {
        "later": _script("echo started"),  # named first: the order given does not start it
        "first": _script(
            f"echo '#20 [build 8/13] RUN ... echo \"{STATS_MARKER}$(sccache --show-stats)\"'",  # the header
            "sleep 1",
            f"echo '#20 30.1 {STATS_MARKER}{{}}'",  # the step's output: compiled
            "sleep 4",
            "echo done",
        ),
        "alone": _script("echo started"),
    }
    runs = run_bakes(argvs, {"PATH": "/usr/bin:/bin"}, {"later": "first"})
    assert all(run.returncode == 0 for run in runs.values())
    first, later, alone = runs["first"], runs["later"], runs["alone"]
    assert alone.started - first.started < 1.0  # not waiting: at once
    assert later.started - first.started >= 1.0  # after the compile step's count
    assert later.started < first.started + first.seconds - 2.0  # well before the first ended


def test_a_target_waits_for_the_end_of_one_that_compiles_nothing() -> None:
    argvs = {"first": _script("sleep 1", "exit 1"), "later": _script("echo started")}
    runs = run_bakes(argvs, {"PATH": "/usr/bin:/bin"}, {"later": "first"})
    assert runs["first"].returncode == 1 and runs["later"].returncode == 0
    assert runs["later"].started >= runs["first"].started + runs["first"].seconds - 0.1


# ---------------------------------------------------------------- --torch-releases


@pytest.fixture
def seen(monkeypatch: pytest.MonkeyPatch) -> dict[str, BakeRequest]:
    """The requests the command hands the bake (which stops there: nothing builds)."""
    found: dict[str, BakeRequest] = {}

    def stop(requests: Sequence[BakeRequest], *_: Any, **__: Any) -> Any:
        found.update({r.name: r for r in requests})
        raise BadInputError("stop here")

    monkeypatch.setattr("imagegen.commands.bake.bake", stop)
    return found


def test_one_image_per_release_each_named_for_it_with_a_compile_cache(seen: dict[str, BakeRequest]) -> None:
    result = runner.invoke(
        app, ["bake", "cuda13-0", "--standins", "--ops", OPS, "--torch-releases", "2.14.1, 2.15"]
    )
    assert "stop here" in result.output
    assert {name: r.spec.torch for name, r in seen.items()} == {
        "cuda13-0-torch2-14-1": "2.14.1",
        "cuda13-0-torch2-15": "2.15.0",
    }
    assert len({r.spec.tag for r in seen.values()}) == 2
    assert {r.spec.compile_cache and r.spec.compile_cache.url for r in seen.values()} == {"local"}
    assert "--compile-cache local" in result.output


def test_a_compile_cache_given_is_kept(seen: dict[str, BakeRequest]) -> None:
    runner.invoke(
        app,
        ["bake", "cuda13-0", "--standins", "--ops", OPS, "--torch-releases", "2.14.1,2.15.0",
         "--compile-cache", "redis://cache.internal:6379"],
    )  # fmt: skip
    assert {r.spec.compile_cache and r.spec.compile_cache.url for r in seen.values()} == {
        "redis://cache.internal:6379"
    }


def test_without_releases_nothing_changes(seen: dict[str, BakeRequest]) -> None:
    runner.invoke(app, ["bake", "cuda13-0", "--standins", "--ops", OPS])
    assert list(seen) == ["cuda13-0"]
    assert seen["cuda13-0"].spec.compile_cache is None


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--torch-releases", "2.14.1,2.14.1"], "names 2.14.1 twice"),
        (["--torch-releases", "2.14.1,,2.15.0"], "an empty item"),
        (["--torch-releases", "2.14,2.14.1"], "would both be imagegen:cuda13.0-torch2.14.1"),
        (["--torch-releases", "2.14.1", "--torch", "2.15"], "--torch-releases and --torch (2.15)"),
        (["--torch-releases", "2.14.1", "--platform-torch", "linux/amd64=2.15.0"], "and --platform-torch"),
        (["--torch-releases", "2.14.1,3.0.0"], "torch 3.0.0 is not a torch release we know"),
    ],
)
def test_releases_that_cannot_be_meant_are_exit_2(
    args: list[str], says: str, seen: dict[str, BakeRequest]
) -> None:
    result = runner.invoke(app, ["bake", "cuda13-0", "--standins", "--ops", OPS, *args, "--json"])
    assert result.exit_code == 2, result.output
    assert says in json.loads(result.stdout)["error"]["message"]
    assert seen == {}  # judged before the bake


# ---------------------------------------------------------------- what the table says


def test_the_table_counts_each_images_compiles_and_the_whole_bakes() -> None:
    from rich.console import Console

    from imagegen.commands.bake import _table
    from imagegen.imagespec.compile_cache import CacheStats
    from imagegen.runs.report import ImageReport, RunImage, RunReport

    def image(tag: str, stats: CacheStats | None) -> RunImage:
        built = ImageReport(
            ok=True, tag=tag, target="cuda13.0", platform="linux/amd64", ops=("fused_adam",), archs=("9.0",),
            torch="2.15.0", python="3.11", engine="buildx", stage="runtime", image_id="sha256:abc",
            size_bytes=10, build_seconds=1.0, verify=None, pushed=False, steps=(), compile_cache=stats,
        )  # fmt: skip
        return RunImage(tag.split(":")[1], "linux/amd64", tag, built)

    report = RunReport(
        "bake",
        (
            image("i:first", CacheStats(hits=0, misses=38, errors=0, location="local")),
            image("i:second", CacheStats(hits=38, misses=0, errors=0, location="local")),
            image("i:cached", None),  # its build stage came from the layer cache
        ),
        driver="docker",
    )
    console = Console(width=200, record=True)
    console.print(_table(report))
    text = console.export_text()
    cells = [[cell.strip() for cell in line.split("│")[1:-1]] for line in text.splitlines() if "│" in line]
    compiled = {row[0]: row[5] for row in cells}
    assert compiled == {"first": "38 (+0 cached)", "second": "0 (+38 cached)", "cached": "-"}
    assert "compiled 38 translation unit(s) for 2 image(s), 38 more from the compile cache" in text
