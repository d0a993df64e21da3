"""Reading the log of a build whose ops compiled concurrently: lines behind their op's name."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from imagegen.engine import BuildResult, Engine
from imagegen.engine.build_log import compile_seconds, describe_failure, find_failed_op, split_prefix
from imagegen.imagespec.spec import SpecInput, build_spec
from imagegen.proof.size import SizeReport
from imagegen.runs import finish, pipeline
from imagegen.runs.run_choices import RunOptions

SOURCES = {
    "cpu_adam": ("optim/csrc/cpu_adam.cpp",),
    "cpu_lion": ("optim/csrc/cpu_lion.cpp",),
    "async_io": ("aio/csrc/async_io.cpp",),
}
REPO = Path(__file__).resolve().parents[4]

_LION_CXX = (
    "c++ -MMD -MF /src/build/temp.linux-x86_64-cpython-311/cpu_lion/kernels/optim/csrc/cpu_lion.o.d "
    "-O3 -Wall -fPIC -I/src/kernels/csrc/includes -c /src/kernels/optim/csrc/cpu_lion.cpp "
    "-o /src/build/temp.linux-x86_64-cpython-311/cpu_lion/kernels/optim/csrc/cpu_lion.o -std=c++17"
)
# pip's replay of a failed build (indented), shaped like a real one from op_builder: cpu_lion's
# error in a shared header interleaves line by line with cpu_adam's warnings, and cpu_adam was
# announced after cpu_lion, so "the op being built" would be the wrong one to blame.
PARALLEL_FAILURE = f"""\
      op_builder: 2 compile job(s) (MAX_JOBS, else the CPUs): 2 op(s) at once, cpu_lion -j1, cpu_adam -j1
      op_builder: building op cpu_lion (1 job)
      building 'kernels._ops.cpu_lion' extension
      op_builder: building op cpu_adam (1 job)
      building 'kernels._ops.cpu_adam' extension
      [cpu_lion] FAILED: [code=1] /src/build/temp/cpu_lion/kernels/optim/csrc/cpu_lion.o
      [cpu_lion] {_LION_CXX}
      [cpu_adam] [1/1] c++ -MMD -O3 -c /src/kernels/optim/csrc/cpu_adam.cpp -o cpu_adam.o
      [cpu_lion] In file included from /src/kernels/optim/includes/cpu_optim_binding.h:15,
      [cpu_adam] /src/kernels/optim/csrc/cpu_adam.cpp:40:5: warning: unused variable 'w'
      [cpu_lion]                  from /src/kernels/optim/csrc/cpu_lion.cpp:3:
      [cpu_adam]    40 |     int w;
      [cpu_lion] /src/kernels/optim/includes/cpu_simd.h:7:1: error: expected ';' before '}}' token
      [cpu_lion]     7 | }}
      [cpu_lion] ninja: build stopped: subcommand failed.
      op_builder: op cpu_lion FAILED to build
      [cpu_adam] g++ -O3 -shared /src/build/temp.linux-x86_64-cpython-311/cpu_adam/cpu_adam.o -o cpu_adam.so
      op_builder: built cpu_adam in 19.6s
      Traceback (most recent call last):
        File "/opt/venv/lib/python3.11/site-packages/op_builder/setup_support.py", line 240, in _run_ninja
          raise RuntimeError(f"{{error_prefix}} {{job.name}}: ninja exited {{code}}")
      RuntimeError: Error compiling objects for extension cpu_lion: ninja exited 1
      [end of output]
""".splitlines()


@pytest.mark.parametrize("buildkit", [False, True])
def test_a_concurrent_failure_names_its_op_with_its_command_and_first_error(buildkit: bool) -> None:
    if buildkit:
        log = [
            "#9 [build 5/5] RUN pip wheel --no-deps -w /wheels .",
            *(f"#9 {12 + i / 10:.3f} {line}" for i, line in enumerate(PARALLEL_FAILURE)),
            "#9 ERROR: executor failed running [/bin/sh -c pip wheel --no-deps -w /wheels .]: exit code: 1",
        ]
    else:
        log = ["Step 5/5 : RUN pip wheel --no-deps -w /wheels .", *PARALLEL_FAILURE]
    err = describe_failure(log, "buildkit" if buildkit else "classic", SOURCES, "img:1")
    assert err.message == "building img:1 failed: op cpu_lion did not compile"
    assert err.hint is not None
    hint = err.hint.splitlines()
    assert hint[1] == _LION_CXX  # the failing command, whole and without its prefix
    assert "/src/kernels/optim/includes/cpu_simd.h:7:1: error: expected ';' before '}' token" in hint
    # The include chain above the error, though cpu_adam's lines came between its lines.
    assert "In file included from /src/kernels/optim/includes/cpu_optim_binding.h:15," in hint
    assert "                 from /src/kernels/optim/csrc/cpu_lion.cpp:3:" in hint
    # Nothing of the op that compiled fine, and no traceback.
    assert not any("cpu_adam" in line for line in hint)
    assert "Traceback" not in err.hint


def test_find_failed_op_trusts_the_prefix_over_the_last_announced_op() -> None:
    assert find_failed_op(PARALLEL_FAILURE, SOURCES) == "cpu_lion"
    # A link error names no source; the prefix still tells whose it is.
    link = [
        "op_builder: building op async_io (1 job)",
        "op_builder: building op cpu_adam (1 job)",
        "[async_io] /usr/bin/ld: async_io.o: undefined reference to `io_setup'",
    ]
    assert find_failed_op(link, SOURCES) == "async_io"
    # Warnings behind a prefix are not errors.
    assert find_failed_op(["[cpu_adam] a.cpp:1:1: warning: unused"], SOURCES) is None


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        ("[cpu_adam] c++ -c a.cpp", ("cpu_adam", "c++ -c a.cpp")),
        ("      [cpu_lion]                  from b.cpp:3:", ("cpu_lion", "                 from b.cpp:3:")),
        ("[cpu_adam]", ("cpu_adam", "")),
        # ninja's progress, pip's notices and unknown names are not op prefixes.
        ("[1/2] c++ -c a.cpp", (None, "[1/2] c++ -c a.cpp")),
        ("[notice] A new release of pip", (None, "[notice] A new release of pip")),
        ("[not_an_op] text", (None, "[not_an_op] text")),
    ],
)
def test_split_prefix(line: str, expected: tuple[str | None, str]) -> None:
    assert split_prefix(line, SOURCES) == expected


def test_compile_seconds_from_the_build_log() -> None:
    log = [
        "#12 3.1 op_builder: building op cpu_adam (1 job)",
        "#12 24.0   op_builder: built cpu_adam in 20.8s",
        "#12 25.2 op_builder: built async_io in 45.6s",
        "op_builder: built op cpu_lion",  # an older op_builder's line, without a time
        "#12 25.3 [cpu_adam] built cpu_lion in 3.0s",  # not op_builder's own line
        "      op_builder: built cpu_adagrad in 7s",
    ]
    assert compile_seconds(log) == {"cpu_adam": 20.8, "async_io": 45.6, "cpu_adagrad": 7.0}
    assert compile_seconds([]) == {}


def test_the_build_report_carries_each_ops_compile_seconds(monkeypatch: pytest.MonkeyPatch) -> None:
    log = ("#9 20.1 op_builder: built cpu_adam in 19.64s", "#9 21.0 op_builder: built cpu_lion in 20.0s")

    def build_image(engine: Engine, context: Path, text: str, tag: str, **kw: Any) -> BuildResult:
        return BuildResult(tag, "sha256:abc", 30.0, log=log)

    monkeypatch.setattr(pipeline, "build_image", build_image)
    # No image to seal or measure here: the finish sequence's steps answer for one.
    monkeypatch.setattr(finish, "measure_image", lambda tag: SizeReport(tag, 1, ()))
    monkeypatch.setattr(finish, "seal_image", lambda *args, **kw: None)
    spec = build_spec(SpecInput(cpu=True, ops="cpu_adam,cpu_lion", tag="it:1"))
    engine = Engine("buildkit", "/usr/bin/docker", "20.10.24")
    report = pipeline.build(spec, RunOptions(source=REPO, verify=False), engine=engine)
    assert report.compile_seconds == {"cpu_adam": 19.64, "cpu_lion": 20.0}
    data = report.to_json()
    assert data["compile_seconds"] == {"cpu_adam": 19.6, "cpu_lion": 20.0}
    assert data["build_seconds"] == 30.0 and data["ops"] == ["cpu_adam", "cpu_lion"]
