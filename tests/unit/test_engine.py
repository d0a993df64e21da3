"""Engine choice from probe results, and reading a failed build's log (no Docker needed)."""

from __future__ import annotations

import os
import stat
from dataclasses import replace
from pathlib import Path

import pytest

from imagegen import engine as eng
from imagegen.engine import ClientProbe, Engine, EngineProbe, choose_engine
from imagegen.errors import BuildFailedError, EngineUnavailableError

NEW_CLI = "/usr/local/bin/docker"  # Docker 28 client without the buildx plugin
DEBIAN_CLI = "/usr/bin/docker"  # Debian's 20.10 client, BuildKit built in

# ---------------------------------------------------------------- choosing an engine


def probe(*clients: ClientProbe, server: str | None = "20.10.24") -> EngineProbe:
    return EngineProbe(server, None if server else "connection refused", clients)


@pytest.mark.parametrize(
    ("clients", "env", "prefer", "expected"),
    [
        # This machine: the first client on PATH lacks buildx, Debian's has BuildKit built in.
        (
            [ClientProbe(NEW_CLI, False, False), ClientProbe(DEBIAN_CLI, False, True)],
            {},
            True,
            ("buildkit", DEBIAN_CLI),
        ),
        # buildx wins over built-in BuildKit, wherever it is on PATH.
        (
            [ClientProbe(DEBIAN_CLI, False, True), ClientProbe(NEW_CLI, True, None)],
            {},
            True,
            ("buildx", NEW_CLI),
        ),
        ([ClientProbe(NEW_CLI, True, None)], {}, True, ("buildx", NEW_CLI)),
        # Nothing BuildKit-capable: the classic builder through the SDK (no client needed).
        ([ClientProbe(NEW_CLI, False, False)], {}, True, ("classic", None)),
        ([], {}, True, ("classic", None)),
        # Asked for classic, by flag or by Docker's own variable.
        ([ClientProbe(NEW_CLI, True, None)], {}, False, ("classic", None)),
        ([ClientProbe(NEW_CLI, True, None)], {"DOCKER_BUILDKIT": "0"}, True, ("classic", None)),
        ([ClientProbe(DEBIAN_CLI, False, True)], {"DOCKER_BUILDKIT": "1"}, True, ("buildkit", DEBIAN_CLI)),
    ],
)
def test_choose_engine(
    clients: list[ClientProbe], env: dict[str, str], prefer: bool, expected: tuple[str, str | None]
) -> None:
    engine, _ = choose_engine(probe(*clients), prefer_buildkit=prefer, env=env)
    assert (engine.kind, engine.client) == expected
    assert engine.server_version == "20.10.24"


def test_fallback_to_classic_says_why_and_names_the_clients_tried() -> None:
    _, reasons = choose_engine(probe(ClientProbe(NEW_CLI, False, False)), env={})
    assert len(reasons) == 1
    assert NEW_CLI in reasons[0] and "classic" in reasons[0]


def test_buildkit_choice_needs_no_explanation() -> None:
    _, reasons = choose_engine(probe(ClientProbe(DEBIAN_CLI, False, True)), env={})
    assert reasons == ()


def test_no_daemon_is_exit_3_with_a_hint() -> None:
    with pytest.raises(EngineUnavailableError) as info:
        choose_engine(probe(ClientProbe(DEBIAN_CLI, False, True), server=None), env={})
    assert info.value.exit_code == 3
    assert "connection refused" in info.value.message
    assert info.value.hint is not None and "scripts/ensure-docker.sh" in info.value.hint


# ---------------------------------------------------------------- probing clients (real executables)


def _script(path: Path, body: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return path


def test_docker_clients_in_path_order_one_per_real_file(tmp_path: Path) -> None:
    first = _script(tmp_path / "a" / "docker", "exit 0\n")
    second = _script(tmp_path / "b" / "docker", "exit 0\n")
    (tmp_path / "c").mkdir()
    (tmp_path / "c" / "docker").symlink_to(first)  # same file as a/docker
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "docker").write_text("not executable")
    path = os.pathsep.join(str(tmp_path / d) for d in ("d", "a", "c", "b", "missing"))
    assert eng.docker_clients({"PATH": path}) == (str(first), str(second))


def test_builtin_buildkit_probe_sends_a_scratch_build_with_buildkit_on(tmp_path: Path) -> None:
    # Succeeds only for `DOCKER_BUILDKIT=1 docker build ... -` with "FROM scratch" on stdin,
    # as Debian's 20.10 client does.
    builtin = _script(
        tmp_path / "old" / "docker",
        '[ "$DOCKER_BUILDKIT" = 1 ] && [ "$1" = build ] && grep -q "^FROM scratch" && exit 0\nexit 1\n',
    )
    # A client newer than 23.0 without the buildx plugin fails the same request.
    newer = _script(
        tmp_path / "new" / "docker",
        'echo "ERROR: BuildKit is enabled but the buildx component is missing"; exit 1\n',
    )
    assert eng.probe_builtin_buildkit(str(builtin), {"PATH": os.defpath})
    assert not eng.probe_builtin_buildkit(str(newer), {"PATH": os.defpath})
    assert not eng.probe_builtin_buildkit(str(tmp_path / "absent" / "docker"), {"PATH": os.defpath})


def test_buildx_probe(tmp_path: Path) -> None:
    with_plugin = _script(tmp_path / "x" / "docker", '[ "$1 $2" = "buildx version" ] && exit 0\nexit 1\n')
    without = _script(
        tmp_path / "y" / "docker", "echo \"docker: 'buildx' is not a docker command.\"; exit 1\n"
    )
    assert eng.probe_buildx(str(with_plugin), {})
    assert not eng.probe_buildx(str(without), {})


# ---------------------------------------------------------------- build command lines


def request(tmp_path: Path, **changes: object) -> eng.BuildRequest:
    base = eng.BuildRequest(tmp_path, tmp_path / "Dockerfile", tmp_path / "iid", "t:1")
    return replace(base, **changes)


def test_buildx_argv_loads_the_image_and_passes_contexts_and_secrets(tmp_path: Path) -> None:
    engine = Engine("buildx", NEW_CLI, "27.0")
    req = request(
        tmp_path,
        build_args={"B": "2", "A": "1"},
        extra_contexts={"wheels": tmp_path},
        secrets={"ca": tmp_path / "ca.crt"},
    )
    argv = eng.cli_build_argv(engine, req)
    assert argv[:4] == [NEW_CLI, "buildx", "build", "--load"]
    assert "--progress=plain" in argv and "--no-cache" not in argv
    assert argv[argv.index("--target") + 1] == "runtime"
    assert argv[argv.index("-t") + 1] == "t:1"
    assert argv[argv.index("-f") + 1] == str(tmp_path / "Dockerfile")
    # Sorted, so the same inputs give the same command line.
    assert [argv[i + 1] for i, a in enumerate(argv) if a == "--build-arg"] == ["A=1", "B=2"]
    assert f"wheels={tmp_path}" in argv
    assert f"id=ca,src={tmp_path / 'ca.crt'}" in argv
    assert argv[-1] == str(tmp_path)


def test_builtin_buildkit_argv_is_plain_docker_build(tmp_path: Path) -> None:
    argv = eng.cli_build_argv(
        Engine("buildkit", DEBIAN_CLI, "20.10"), request(tmp_path, target="build", no_cache=True)
    )
    assert argv[:2] == [DEBIAN_CLI, "build"]
    assert "buildx" not in argv and "--load" not in argv
    assert "--no-cache" in argv and argv[argv.index("--target") + 1] == "build"


def test_named_contexts_need_buildx(tmp_path: Path) -> None:
    from imagegen.errors import BadInputError

    with pytest.raises(BadInputError, match="buildx"):
        eng.build_image(Engine("buildkit", DEBIAN_CLI, "20.10"), tmp_path, "FROM scratch\n", "t",
                        extra_contexts={"w": tmp_path})  # fmt: skip
    with pytest.raises(BadInputError, match="BuildKit"):
        eng.build_image(Engine("classic", None, "20.10"), tmp_path, "FROM scratch\n", "t",
                        secrets={"ca": tmp_path / "ca"})  # fmt: skip


def test_context_excludes_follow_dockerignore(tmp_path: Path) -> None:
    assert ".venv" in eng.context_excludes(tmp_path)
    (tmp_path / ".dockerignore").write_text("# comment\n\nbig/\n*.log\n")
    assert eng.context_excludes(tmp_path) == ["big/", "*.log"]


# ---------------------------------------------------------------- reading a failed build's log

SOURCES = {
    "cpu_adam": ("cpu_optim/cpu_adam.cpp",),
    "cpu_lion": ("cpu_optim/cpu_lion.cpp",),
    "fused_adam": ("fused_optim/fused_adam.cu", "fused_optim/fused_adam_bindings.cpp"),
    "async_io": ("aio/async_io.cpp",),
}

# Captured from Debian's docker 20.10 with DOCKER_BUILDKIT=1 --progress=plain, with a sibling
# stage's output interleaved (step #10) the way parallel stages print.
BUILDKIT_LOG = """\
#8 [build 2/3] COPY kernels/ /src/kernels/
#8 sha256:5c9cf4b321b6b4434d22d381149063dd0a1642b6c8f6eaf8f94b3b95632d069e
#8 DONE 0.1s

#9 [build 3/3] RUN pip wheel --no-deps -w /wheels .
#9 sha256:2f84b7bab2e7fa589c7d1a9083ac6cb07c80044db8268d82b5666fe3f3083b41
#9 0.402 building 'kernels._ops.cpu_lion' extension
#10 [runtime 2/4] RUN apt-get update
#10 1.1 Get:1 http://deb.debian.org/debian bookworm InRelease [151 kB]
#9 3.100 building 'kernels._ops.cpu_adam' extension
#9 3.705 kernels/csrc/cpu_optim/cpu_adam.cpp: In function 'int f()':
#9 3.705 kernels/csrc/cpu_optim/cpu_adam.cpp:2:18: error: 'undefined_symbol' was not declared in this scope
#9 3.705     2 | int f() { return undefined_symbol + 1; }
#9 3.705       |                  ^~~~~~~~~~~~~~~~
#9 3.800 error: command '/usr/bin/g++' failed with exit code 1
#10 CANCELED
#10 ERROR: context canceled
#9 ERROR: executor failed running [/bin/sh -c pip wheel --no-deps -w /wheels .]: exit code: 1
------
 > [build 3/3] RUN pip wheel --no-deps -w /wheels .:
------
executor failed running [/bin/sh -c pip wheel --no-deps -w /wheels .]: exit code: 1
""".splitlines()

# The same failure from the classic builder (colour codes already stripped by the log view).
CLASSIC_LOG = """\
Step 2/5 : COPY kernels/ /src/kernels/
 ---> bbc1d35a804e
Step 3/5 : RUN pip wheel --no-deps -w /wheels .
 ---> Running in f03568776eda
building 'kernels._ops.cpu_adam' extension
kernels/csrc/cpu_optim/cpu_adam.cpp: In function 'int f()':
kernels/csrc/cpu_optim/cpu_adam.cpp:2:18: error: 'undefined_symbol' was not declared in this scope
    2 | int f() { return undefined_symbol + 1; }
The command '/bin/sh -c pip wheel --no-deps -w /wheels .' returned a non-zero code: 1
""".splitlines()


def test_buildkit_failed_step_keeps_only_its_own_lines() -> None:
    title, output = eng.failing_step_output(BUILDKIT_LOG, "buildkit")
    assert title == "[build 3/3] RUN pip wheel --no-deps -w /wheels ."
    assert output[0] == "building 'kernels._ops.cpu_lion' extension"
    assert not any("deb.debian.org" in line for line in output)  # the cancelled sibling's line
    assert all(not line.startswith("#") for line in output)


def test_classic_failed_step_is_the_last_one() -> None:
    title, output = eng.failing_step_output(CLASSIC_LOG, "classic")
    assert title == "RUN pip wheel --no-deps -w /wheels ."
    assert output[0] == "building 'kernels._ops.cpu_adam' extension"
    assert not any(line.startswith(" ---> ") for line in output)


@pytest.mark.parametrize("log, kind", [(BUILDKIT_LOG, "buildkit"), (CLASSIC_LOG, "classic")])
def test_failed_build_names_the_op_and_quotes_the_compiler(log: list[str], kind: eng.EngineKind) -> None:
    err = eng.describe_failure(log, kind, SOURCES, "img:1")
    assert isinstance(err, BuildFailedError) and err.exit_code == 1
    assert "op cpu_adam" in err.message
    assert err.hint is not None
    assert "cpu_adam.cpp:2:18: error: 'undefined_symbol'" in err.hint
    # cpu_lion built fine before cpu_adam failed: it is not blamed.
    assert "cpu_lion" not in err.message


@pytest.mark.parametrize(
    ("output", "expected"),
    [
        # gcc, path relative to the build directory
        (["/src/kernels/csrc/aio/async_io.cpp:10:5: error: 'io_submit' was not declared"], "async_io"),
        # nvcc's own format
        (
            ['/src/kernels/csrc/fused_optim/fused_adam.cu(42): error: identifier "x" is undefined'],
            "fused_adam",
        ),
        # ninja names the object file
        (
            [
                "FAILED: /src/build/temp.linux-x86_64-cpython-311/kernels/csrc/cpu_optim/cpu_lion.o",
                "c++ -MMD -c /src/kernels/csrc/cpu_optim/cpu_lion.cpp -o cpu_lion.o",
            ],
            "cpu_lion",
        ),
        # An error in a shared header: the include chain names the op's source.
        (
            [
                "building 'kernels._ops.cpu_lion' extension",
                "In file included from /src/kernels/csrc/includes/cpu_optim_binding.h:3,",
                "                 from /src/kernels/csrc/cpu_optim/cpu_adam.cpp:1:",
                "/src/kernels/csrc/includes/cpu_simd.h:7:1: error: expected ';' before '}' token",
            ],
            "cpu_adam",
        ),
        # A header error with no include chain: the extension being built is blamed.
        (
            [
                "building 'kernels._ops.cpu_lion' extension",
                "/src/kernels/csrc/includes/cpu_simd.h:7:1: error: expected ';'",
            ],
            "cpu_lion",
        ),
        # A link error names no source.
        (
            [
                "building 'kernels._ops.async_io' extension",
                "/usr/bin/ld: async_io.o: undefined reference to `io_setup'",
            ],
            "async_io",
        ),
        # op_builder's own progress line
        (
            ["imagegen: building op fused_adam (cuda)", "nvcc fatal   : Unsupported gpu architecture"],
            "fused_adam",
        ),
        # Markers for unknown names are ignored; no error line and no op: nothing to blame.
        (["building 'kernels._ops.not_an_op' extension", "ERROR: could not find torch"], None),
        ([], None),
    ],
)
def test_find_failed_op(output: list[str], expected: str | None) -> None:
    assert eng.find_failed_op(output, SOURCES) == expected


def test_flags_with_error_in_their_name_are_not_errors() -> None:
    line = "c++ -Wno-error=deprecated -Werror=return-type -c /src/kernels/csrc/cpu_optim/cpu_adam.cpp"
    assert eng.find_failed_op([line], SOURCES) is None


def test_find_failed_op_with_the_real_registry() -> None:
    sources = eng.op_sources()
    assert "cpu_adam" in sources
    source = sources["cpu_adam"][0]
    assert eng.find_failed_op([f"/src/kernels/csrc/{source}:1:1: error: boom"], sources) == "cpu_adam"


def test_compiler_excerpt_starts_just_before_the_first_error() -> None:
    output = [f"noise {i}" for i in range(100)]
    output[61] = "/src/kernels/csrc/cpu_optim/cpu_adam.cpp:7:1: error: expected ';'"
    output[75] = "/src/kernels/csrc/cpu_optim/cpu_adam.cpp:9:1: error: later error"
    excerpt = eng.compiler_excerpt(output, limit=30)
    assert excerpt == output[58:88]


def test_compiler_excerpt_keeps_the_whole_include_chain() -> None:
    output = [f"noise {i}" for i in range(100)]
    output[52] = "In file included from /src/kernels/csrc/includes/a.h:1,"
    for i in range(53, 61):
        output[i] = f"                 from /src/kernels/csrc/includes/h{i}.h:1,"
    output[61] = "/src/kernels/csrc/includes/cpu_simd.h:7:1: error: expected ';'"
    excerpt = eng.compiler_excerpt(output, limit=30)
    assert excerpt[0] == output[52]
    assert excerpt[9] == output[61]


def test_compiler_excerpt_without_errors_is_the_tail() -> None:
    output = [str(i) for i in range(50)]
    assert eng.compiler_excerpt(output, limit=30) == [str(i) for i in range(20, 50)]


def test_missing_base_image_points_at_the_standins() -> None:
    log = [
        "#3 [internal] load metadata for docker.io/library/python:3.11-slim-bookworm",
        "#3 ERROR: failed to do request: Head https://registry-1.docker.io/v2/: dial tcp: no such host",
        "failed to solve with frontend dockerfile.v0: failed to create LLB definition",
    ]
    err = eng.describe_failure(log, "buildkit", SOURCES, "img")
    assert "base image" in err.message
    assert err.hint is not None and "scripts/standin-images.sh" in err.hint


def test_failure_without_an_op_names_the_step() -> None:
    log = [
        "#7 [build 1/4] RUN pip install torch==2.13.0",
        "#7 2.0 ERROR: No matching distribution found for torch==2.13.0",
        "#7 ERROR: executor failed running [/bin/sh -c pip install torch==2.13.0]: exit code: 1",
    ]
    err = eng.describe_failure(log, "buildkit", SOURCES, "img")
    assert err.message == "building img failed at step [build 1/4] RUN pip install torch==2.13.0"
    assert err.hint is not None and "No matching distribution" in err.hint


def test_plain_log_view_strips_colour_and_times_classic_steps(capsys: pytest.CaptureFixture[str]) -> None:
    view = eng._LogView("classic", plain=True)
    view.feed("Step 1/2 : FROM x\n\x1b[91mkernels/csrc/a.cpp:1:1: error: y\n\x1b[0m")
    view.feed("Step 2/2 : RUN true")
    view.close()
    err = capsys.readouterr().err
    assert "\x1b" not in err
    assert view.lines[1] == "kernels/csrc/a.cpp:1:1: error: y"
    assert err.count("s)") == 2  # one timing line per step
