"""Reading a failed build's log: the failed step, the op that did not compile, the excerpt."""

from __future__ import annotations

import pytest

from imagegen.engine.build_log import (
    compiler_excerpt,
    describe_failure,
    failing_step_output,
    find_failed_op,
    op_sources,
)
from imagegen.engine.types import EngineKind
from imagegen.errors import BuildFailedError
from op_builder.paths import PACKAGE_ROOT

# ---------------------------------------------------------------- reading a failed build's log

SOURCES = {
    "cpu_adam": ("optim/csrc/cpu_adam.cpp",),
    "cpu_lion": ("optim/csrc/cpu_lion.cpp",),
    "fused_adam": ("optim/csrc/fused_adam.cu", "optim/csrc/fused_adam_bindings.cpp"),
    "async_io": ("aio/csrc/async_io.cpp",),
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
#10 1.1 Get:1 http://deb.example.invalid/debian bookworm InRelease [151 kB]
#9 3.100 building 'kernels._ops.cpu_adam' extension
#9 3.705 kernels/optim/csrc/cpu_adam.cpp: In function 'int f()':
#9 3.705 kernels/optim/csrc/cpu_adam.cpp:2:18: error: 'undefined_symbol' was not declared in this scope
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
kernels/optim/csrc/cpu_adam.cpp: In function 'int f()':
kernels/optim/csrc/cpu_adam.cpp:2:18: error: 'undefined_symbol' was not declared in this scope
    2 | int f() { return undefined_symbol + 1; }
The command '/bin/sh -c pip wheel --no-deps -w /wheels .' returned a non-zero code: 1
""".splitlines()


def test_buildkit_failed_step_keeps_only_its_own_lines() -> None:
    title, output = failing_step_output(BUILDKIT_LOG, "buildkit")
    assert title == "[build 3/3] RUN pip wheel --no-deps -w /wheels ."
    assert output[0] == "building 'kernels._ops.cpu_lion' extension"
    assert not any("deb.example.invalid" in line for line in output)  # the cancelled sibling's line
    assert all(not line.startswith("#") for line in output)


def test_classic_failed_step_is_the_last_one() -> None:
    title, output = failing_step_output(CLASSIC_LOG, "classic")
    assert title == "RUN pip wheel --no-deps -w /wheels ."
    assert output[0] == "building 'kernels._ops.cpu_adam' extension"
    assert not any(line.startswith(" ---> ") for line in output)


@pytest.mark.parametrize("log, kind", [(BUILDKIT_LOG, "buildkit"), (CLASSIC_LOG, "classic")])
def test_failed_build_names_the_op_and_quotes_the_compiler(log: list[str], kind: EngineKind) -> None:
    err = describe_failure(log, kind, SOURCES, "img:1")
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
        (["/src/kernels/aio/csrc/async_io.cpp:10:5: error: 'io_submit' was not declared"], "async_io"),
        # nvcc's own format
        (
            ['/src/kernels/optim/csrc/fused_adam.cu(42): error: identifier "x" is undefined'],
            "fused_adam",
        ),
        # ninja names the object file
        (
            [
                "FAILED: /src/build/temp.linux-x86_64-cpython-311/kernels/optim/csrc/cpu_lion.o",
                "c++ -MMD -c /src/kernels/optim/csrc/cpu_lion.cpp -o cpu_lion.o",
            ],
            "cpu_lion",
        ),
        # An error in a shared header: the include chain names the op's source.
        (
            [
                "building 'kernels._ops.cpu_lion' extension",
                "In file included from /src/kernels/optim/includes/cpu_optim_binding.h:3,",
                "                 from /src/kernels/optim/csrc/cpu_adam.cpp:1:",
                "/src/kernels/optim/includes/cpu_simd.h:7:1: error: expected ';' before '}' token",
            ],
            "cpu_adam",
        ),
        # A header error with no include chain: the extension being built is blamed.
        (
            [
                "building 'kernels._ops.cpu_lion' extension",
                "/src/kernels/optim/includes/cpu_simd.h:7:1: error: expected ';'",
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
    assert find_failed_op(output, SOURCES) == expected


def test_flags_with_error_in_their_name_are_not_errors() -> None:
    line = "c++ -Wno-error=deprecated -Werror=return-type -c /src/kernels/optim/csrc/cpu_adam.cpp"
    assert find_failed_op([line], SOURCES) is None


def test_find_failed_op_with_the_real_registry() -> None:
    sources = op_sources()
    assert "cpu_adam" in sources
    source = sources["cpu_adam"][0]
    assert (PACKAGE_ROOT / "kernels" / source).is_file(), source  # as a build log names it
    assert find_failed_op([f"/src/kernels/{source}:1:1: error: boom"], sources) == "cpu_adam"
    kernel = "/src/kernels/optim/csrc/cpu_adam_kernel.cpp(3): error: x"
    assert find_failed_op([kernel], sources) == "cpu_adam"


def test_compiler_excerpt_starts_just_before_the_first_error() -> None:
    output = [f"noise {i}" for i in range(100)]
    output[61] = "/src/kernels/optim/csrc/cpu_adam.cpp:7:1: error: expected ';'"
    output[75] = "/src/kernels/optim/csrc/cpu_adam.cpp:9:1: error: later error"
    excerpt = compiler_excerpt(output, limit=30)
    assert excerpt == output[58:88]


def test_compiler_excerpt_keeps_the_whole_include_chain() -> None:
    output = [f"noise {i}" for i in range(100)]
    output[52] = "In file included from /src/kernels/includes/a.h:1,"
    for i in range(53, 61):
        output[i] = f"                 from /src/kernels/includes/h{i}.h:1,"
    output[61] = "/src/kernels/optim/includes/cpu_simd.h:7:1: error: expected ';'"
    excerpt = compiler_excerpt(output, limit=30)
    assert excerpt[0] == output[52]
    assert excerpt[9] == output[61]


def test_compiler_excerpt_without_errors_is_the_tail() -> None:
    output = [str(i) for i in range(50)]
    assert compiler_excerpt(output, limit=30) == [str(i) for i in range(20, 50)]


def test_missing_base_image_points_at_the_standins() -> None:
    log = [
        "#3 [internal] load metadata for docker.io/library/python:3.11-slim-bookworm",
        "#3 ERROR: failed to do request: Head https://registry.example.invalid/v2/: dial tcp: no such host",
        "failed to solve with frontend dockerfile.v0: failed to create LLB definition",
    ]
    err = describe_failure(log, "buildkit", SOURCES, "img")
    assert "base image" in err.message
    assert err.hint is not None and "imagegen standins" in err.hint


def test_a_full_disk_is_named_rather_than_the_step_or_op_it_hit() -> None:
    # As a CI run saw it: the wheel's strip step, after an op had compiled.
    log = [
        "#15 [build 4/9] RUN --mount=type=cache,target=/root/.cache/ccache pip wheel .",
        "#15 41.2 [cpu_lion] c++ -c /src/kernels/optim/csrc/cpu_lion.cpp -o cpu_lion.o",
        "#15 52.0 strip: /opt/venv/lib/python3.11/site-packages/torch/lib/stByo9Cm[.text]: "
        "No space left on device",
        "#15 ERROR: executor failed running [/bin/sh -c pip wheel .]: exit code: 1",
    ]
    err = describe_failure(log, "buildkit", SOURCES, "img")
    assert err.message == "building img failed: the disk ran out of space at step [build 4/9] RUN " + (
        "--mount=type=cache,target=/root/.cache/ccache pip wheel ."
    )
    assert (
        err.hint is not None and "No space left on device" in err.hint and "docker builder prune" in err.hint
    )
    compiled = [line.replace("No space left on device", "Error 1") for line in log]
    assert "disk" not in describe_failure(compiled, "buildkit", SOURCES, "img").message


def test_failure_without_an_op_names_the_step() -> None:
    log = [
        "#7 [build 1/4] RUN pip install torch==2.13.0",
        "#7 2.0 ERROR: No matching distribution found for torch==2.13.0",
        "#7 ERROR: executor failed running [/bin/sh -c pip install torch==2.13.0]: exit code: 1",
    ]
    err = describe_failure(log, "buildkit", SOURCES, "img")
    assert err.message == "building img failed at step [build 1/4] RUN pip install torch==2.13.0"
    assert err.hint is not None and "No matching distribution" in err.hint


# A failed op compile as pip prints it in the build stage (BuildKit prefixes stripped): ninja
# built one object, the failing one warned before its error, and pip's traceback followed.
_FAILING_CXX = (
    "c++ -MMD -MF /src/build/temp/kernels/optim/csrc/cpu_adam.o.d -O3 -Wall -fPIC "
    "-I/src/kernels/includes -c /src/kernels/optim/csrc/cpu_adam.cpp "
    "-o /src/build/temp/kernels/optim/csrc/cpu_adam.o -std=c++17"
)
_WARNINGS = "".join(
    f"      /src/kernels/optim/csrc/cpu_adam.cpp:{n}:5: warning: unused variable 'w{n}'\n"
    for n in range(3, 9)
)
PIP_COMPILE_FAILURE = f"""\
      op_builder: building op cpu_adam
      building 'kernels._ops.cpu_adam' extension
      [1/2] c++ -MMD -c /src/kernels/optim/csrc/cpu_lion.cpp -o cpu_lion.o -O3
      FAILED: [code=1] /src/build/temp/kernels/optim/csrc/cpu_adam.o
      {_FAILING_CXX}
{_WARNINGS}\
      /src/kernels/optim/csrc/cpu_adam.cpp:12:18: error: 'undefined_symbol' was not declared
         12 | int f() {{ return undefined_symbol + 1; }}
            |                  ^~~~~~~~~~~~~~~~
      ninja: build stopped: subcommand failed.
      op_builder: op cpu_adam FAILED to build
      Traceback (most recent call last):
        File "/opt/venv/lib/python3.11/site-packages/torch/utils/cpp_extension.py", line 2893, in run
          subprocess.run(
      subprocess.CalledProcessError: Command '['ninja', '-v', '-j', '2']' returned non-zero exit status 1.

      The above exception was the direct cause of the following exception:

      Traceback (most recent call last):
        File "/opt/venv/lib/python3.11/site-packages/setuptools/build_meta.py", line 441, in build_wheel
          return _build(['bdist_wheel', '--dist-info-dir', str(metadata_directory)])
                 ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^
        File "/opt/venv/lib/python3.11/site-packages/torch/utils/cpp_extension.py", line 2910, in run
          raise RuntimeError(message) from e
      RuntimeError: Error compiling objects for extension
      [end of output]

  note: This error originates from a subprocess, and is likely not a problem with pip.
  ERROR: Failed building wheel for imagegen
""".splitlines()


def test_compile_failure_hint_has_the_command_and_the_error_but_no_traceback() -> None:
    err = describe_failure(PIP_COMPILE_FAILURE, "classic", SOURCES, "img:1")
    assert "op cpu_adam" in err.message
    assert err.hint is not None
    assert _FAILING_CXX in err.hint  # the compiler command line that failed, whole
    assert "cpu_adam.cpp:12:18: error: 'undefined_symbol' was not declared" in err.hint
    assert "Traceback" not in err.hint
    assert (
        'File "' not in err.hint and "RuntimeError" not in err.hint and "CalledProcessError" not in err.hint
    )


def test_compile_failure_without_ninja_shows_the_compiler_command() -> None:
    # setuptools' own compiler loop (no ninja): the command is the last compiler line before the error.
    output = [
        "building 'kernels._ops.cpu_adam' extension",
        "x86_64-linux-gnu-gcc -fPIC -c kernels/optim/csrc/cpu_lion.cpp -o build/cpu_lion.o",
        "x86_64-linux-gnu-gcc -fPIC -c kernels/optim/csrc/cpu_adam.cpp -o build/cpu_adam.o",
        *[f"note: unrelated line {n}" for n in range(8)],
        "kernels/optim/csrc/cpu_adam.cpp:2:18: error: 'undefined_symbol' was not declared",
        "error: command '/usr/bin/x86_64-linux-gnu-gcc' failed with exit code 1",
    ]
    excerpt = compiler_excerpt(output)
    assert excerpt[0] == output[2]
    assert output[1] not in excerpt
    assert output[-2] in excerpt
