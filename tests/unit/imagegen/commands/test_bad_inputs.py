"""Every bad input meets the contract (tests/unit/contract.py): exit 2 (or the documented code),
one ``error:`` line and a ``hint:``, never a traceback, nothing written; with --json one
``{"error": ...}`` document. Writing output has its own tests (test_write_output.py).

No engine is needed: the tests that must not reach one block the docker SDK and subprocesses,
so touching the engine fails the test instead of waiting on a daemon.
"""

from __future__ import annotations

import subprocess
import sys
from functools import partial
from pathlib import Path
from typing import Any

import pytest

from imagegen.engine import sealed
from imagegen.errors import BadInputError, VerificationFailedError
from imagegen.imagespec.checks import op_list
from imagegen.imagespec.reference import reference_problem
from imagegen.imagespec.spec import SpecInput, build_spec
from imagegen.verify import container as verify_lib
from imagegen.verify.failures import start_error
from tests.op_package_files import builder_source, unique, write_package
from tests.unit.contract import DOCKERFILE, PEM, assert_json_error, assert_reported, invoke

# Commands with a --json option (dockerfile writes a Dockerfile, never JSON).
JSON_COMMANDS = {"build", "verify", "matrix", "ops", "new-op"}
# A name longer than a file system allows (255 bytes): every path option meets it as bad input.
LONG = "a" * 300


class EngineTouched(AssertionError):
    pass


@pytest.fixture
def no_engine(monkeypatch: pytest.MonkeyPatch) -> None:
    """Bad input must be refused before the engine: reaching for it fails the test."""
    monkeypatch.setitem(sys.modules, "docker", None)  # `import docker` raises ImportError

    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise EngineTouched(f"a process was started: {args[:1]}")

    monkeypatch.setattr(subprocess, "Popen", refuse)


# ------------------------------------------------------------------ image references


def test_tag_longer_than_docker_allows_is_refused_by_the_spec() -> None:
    with pytest.raises(BadInputError, match="128"):
        build_spec(SpecInput(cpu=True, ops="cpu_adam", tag="imagegen:" + "t" * 129))
    build_spec(SpecInput(cpu=True, ops="cpu_adam", tag="imagegen:" + "t" * 128))  # the limit itself


# Checked against dockerd 20.10 (`docker tag`): the name limit applies to the normalized name.
REFERENCES = [
    ("imagegen:cpu-dev", None),
    ("a" * 237 + ":t", None),  # docker.io/library/ + 237 = 255
    ("a" * 238, "255"),
    ("x/" + "a" * 243, None),  # docker.io/x/ + 243 = 255
    ("x/" + "a" * 245, "255"),
    ("localhost:5000/" + "a" * 240, None),  # a registry host is not prefixed
    ("a:" + "t" * 128, None),
    ("a:" + "t" * 129, "128"),
    ("a--b__c.d_e", None),
    ("a___b", "does not match"),
    ("reg.example:5000/team/ops:v1", None),
    ("Registry.IO:5000/x/y:TAG", None),  # upper case is fine in a host and a tag
    ("ghcr.io/Team/ops", "upper-case"),
    ("UPPER:x", "upper-case"),
    ("UPPER::x", "does not match"),
    ("a:b:c", "does not match"),
    ("busybox@sha256:" + "0" * 64, None),
    ("sha256:" + "0" * 64, None),  # an image id
    ("[::1]:5000/x", None),
    ("", "empty"),
    (" a", "white space"),
    ("a b", "white space"),
    ("-a", "does not match"),
    ("a/", "does not match"),
    ("a//b", "does not match"),
]


@pytest.mark.parametrize(("ref", "problem"), REFERENCES, ids=[r[:30] or "empty" for r, _ in REFERENCES])
def test_reference_grammar_matches_docker(ref: str, problem: str | None) -> None:
    found = reference_problem(ref)
    if problem is None:
        assert found is None
    else:
        assert found is not None and problem in found


def test_a_tag_to_build_cannot_have_a_digest_but_a_base_can() -> None:
    digest = "@sha256:" + "0" * 64
    with pytest.raises(BadInputError, match="digest"):
        build_spec(SpecInput(cpu=True, ops="cpu_adam", tag="imagegen" + digest))
    spec = build_spec(SpecInput(cpu=True, ops="cpu_adam", base_devel="python" + digest))
    assert spec.base_devel == "python" + digest


def test_reference_check_is_fast_on_long_hostile_input() -> None:
    import time

    start = time.monotonic()
    for text in ("a-" * 5000 + "!", "a." * 5000 + "/", "a" * 10000 + ":" + "-" * 10000):
        assert reference_problem(text) is not None
    assert time.monotonic() - start < 1.0


# ------------------------------------------------------------------ --ca-cert


@pytest.mark.parametrize(
    ("content", "fragment"),
    [
        ("not a certificate\n", "is not PEM"),
        (b"\x30\x82\x01\x0a\x02\x82\x01\x01\x00", "is not PEM"),  # DER
        ("", "is not PEM"),
        ("-----BEGIN PRIVATE KEY-----\nMII\n-----END PRIVATE KEY-----\n", "is not PEM"),
        (None, "is a directory"),
    ],
    ids=["text", "der", "empty", "private-key", "directory"],
)
def test_ca_cert_that_is_not_a_pem_file_is_refused_by_name(
    tmp_path: Path, content: str | bytes | None, fragment: str
) -> None:
    ca = tmp_path / "proxy-ca.crt"
    if content is None:
        ca.mkdir()
    elif isinstance(content, bytes):
        ca.write_bytes(content)
    else:
        ca.write_text(content)
    result = invoke([*DOCKERFILE, "--ca-cert", str(ca)])
    assert_reported(result, fragment=fragment)
    assert str(ca) in result.stderr


def test_ca_cert_pem_bundle_is_accepted(tmp_path: Path) -> None:
    ca = tmp_path / "bundle.crt"
    ca.write_text("# a comment before the first certificate\n" + PEM + PEM)
    assert build_spec(SpecInput(cpu=True, ops="cpu_adam", ca_cert=str(ca))).ca_cert == ca.resolve()


def test_ca_cert_that_is_a_device_is_refused_without_reading_it() -> None:
    assert_reported(invoke([*DOCKERFILE, "--ca-cert", "/dev/zero"]), fragment="not a regular file")


# ------------------------------------------------------------------ verify


@pytest.mark.parametrize(
    ("image", "timeout", "fragment"),
    [
        ("", 300.0, "empty"),
        ("UPPER::x", 300.0, "IMAGE"),
        ("a:" + "t" * 129, 300.0, "128"),
        ("imagegen:cpu", 0.0, "--timeout"),
        ("imagegen:cpu", -5.0, "--timeout"),
        ("imagegen:cpu", float("nan"), "--timeout"),
        ("imagegen:cpu", float("inf"), "--timeout"),
    ],
)
def test_verify_image_refuses_bad_input_before_the_engine(
    no_engine: None, image: str, timeout: float, fragment: str
) -> None:
    with pytest.raises(BadInputError, match=fragment):
        verify_lib.verify_image(image, timeout=timeout)


def test_an_image_without_python_is_a_verification_failure() -> None:
    error = verify_lib.start_error(
        "busybox:latest",
        "failed to create shim task: OCI runtime create failed: runc create failed: unable to start "
        'container process: exec: "python": executable file not found in $PATH: unknown',
    )
    assert isinstance(error, VerificationFailedError) and error.exit_code == 1
    assert "has no `python`" in error.message and error.hint


def test_an_image_without_op_builder_is_a_verification_failure() -> None:
    output = "/usr/bin/python: No module named op_builder\n"
    error = verify_lib.no_report_error("python:3.11", "python -m op_builder verify --json", 1, output)
    assert error.exit_code == 1
    assert "not op_builder" in error.message


def test_the_engine_refusing_to_start_the_verifier_is_translated_once() -> None:
    import docker

    class Container:
        def start(self) -> None:
            raise docker.errors.APIError(
                "400 Client Error", explanation='exec: "python": executable file not found in $PATH'
            )

    class Containers:
        def create(self, *args: Any, **kwargs: Any) -> Container:
            return Container()

    class Client:
        containers = Containers()

    with pytest.raises(VerificationFailedError, match="no `python`"):
        run = sealed.SealedRun("busybox", "verify", {}, verify_lib.verify_command(None), 10.0)
        sealed._run(Client(), run, "name", {}, partial(start_error, "busybox"))


# ------------------------------------------------------------------ the broad table


def _ca_dir(tmp: Path) -> str:
    path = tmp / "ca-dir"
    path.mkdir(exist_ok=True)
    return str(path)


def _ca_text(tmp: Path) -> str:
    path = tmp / "ca.txt"
    path.write_text("plain text\n")
    return str(path)


def _a_file(tmp: Path) -> str:
    path = tmp / "a-file"
    path.write_text("x")
    return str(path)


# (arguments, expected message fragment); "{ca_dir}", "{ca_text}", "{file}", "{tmp}" are filled in.
TABLE: list[tuple[list[str], str]] = [
    # dockerfile: the spec's checks
    (["dockerfile", "--ops", "cpu_adam"], "no target"),
    (["dockerfile", "--cpu"], "no ops"),
    (["dockerfile", "--cpu", "--ops", ""], "--ops is empty"),
    (["dockerfile", "--cpu", "--ops", ",,,"], "--ops is empty"),
    (["dockerfile", "--cpu", "--ops", "cpu_adam,all"], "cannot be combined"),
    (["dockerfile", "--cpu", "--ops", "cpü_adam"], "unknown op"),
    (["dockerfile", "--cpu", "--ops", "transformer"], "GPU op"),
    (["dockerfile", "--cpu", "--cuda", "12.1", "--ops", "cpu_adam"], "two targets"),
    (["dockerfile", "--cuda", "12", "--ops", "quantizer"], "not a CUDA version"),
    (["dockerfile", "--cuda", "99.9", "--ops", "quantizer"], "not supported"),
    (["dockerfile", "--rocm", "x", "--ops", "quantizer"], "not a ROCm version"),
    (["dockerfile", "--cpu", "--ops", "cpu_adam", "--arch", "8.0"], "--arch"),
    (["dockerfile", "--cuda", "12.1", "--ops", "quantizer", "--arch", "garbage"], ""),
    (["dockerfile", "--cuda", "12.1", "--ops", "quantizer", "--arch", "native"], ""),
    (["dockerfile", "--cpu", "--ops", "cpu_adam", "--python", "3"], "not a Python version"),
    (["dockerfile", "--cpu", "--ops", "cpu_adam", "--torch", "0.1"], "torch 0.1"),
    (["dockerfile", "--cpu", "--ops", "cpu_adam", "--bytecode", "some"], "bytecode"),
    (["dockerfile", "--cpu", "--ops", "cpu_adam", "--distro", "windows"], "distro"),
    (["dockerfile", "--cpu", "--ops", "cpu_adam", "--offline"], "--offline needs --wheelhouse"),
    (["dockerfile", "--cpu", "--ops", "cpu_adam", "--keep-ca-cert"], "--keep-ca-cert"),
    (["dockerfile", "--cpu", "--ops", "cpu_adam", "--max-jobs", "-3"], "below 1"),
    (["dockerfile", "--cpu", "--ops", "cpu_adam", "--max-jobs", "abc"], "--max-jobs"),
    (["dockerfile", "--cpu", "--ops", "cpu_adam", "--wheelhouse", "{file}"], "not a directory"),
    (["dockerfile", "--cpu", "--ops", "cpu_adam", "--ca-cert", "{ca_dir}"], "is a directory"),
    (["dockerfile", "--cpu", "--ops", "cpu_adam", "--ca-cert", "{ca_text}"], "is not PEM"),
    (["dockerfile", "--cpu", "--ops", "cpu_adam", "--ca-cert", "{tmp}/none.crt"], "does not exist"),
    (["dockerfile", "--cpu", "--ops", "cpu_adam", "--base-devel", "py thon"], "white space"),
    (["dockerfile", "--cpu", "--ops", "cpu_adam", "--base-runtime", "Py:3"], "upper-case"),
    (["dockerfile", "--cpu", "--ops", "cpu_adam", "-o", "{tmp}"], "is a directory"),
    (["dockerfile", "--cpu", "--ops", "cpu_adam", "-o", ""], "is a directory"),
    (["dockerfile", "--cpu", "--ops", "cpu_adam", "-o", "{tmp}/no/Dockerfile"], "does not exist"),
    (["dockerfile", "--cpu", "--ops", "cpu_adam", "-o", "{file}/Dockerfile"], "not a folder"),
    (["dockerfile", "--cpu", "--ops", "cpu_adam", "--frobnicate"], "No such option"),
    # pre-, post- and development releases and local labels would pin another torch than asked
    (["dockerfile", "--cpu", "--ops", "cpu_adam", "--torch", "2.13.0rc1"], "pre-release"),
    (["dockerfile", "--cpu", "--ops", "cpu_adam", "--torch", "2.13.0a0"], "pre-release"),
    (["dockerfile", "--cpu", "--ops", "cpu_adam", "--torch", "2.13.0.post1"], "post-release"),
    (["dockerfile", "--cpu", "--ops", "cpu_adam", "--torch", "2.13.0.dev2"], "development release"),
    (["dockerfile", "--cpu", "--ops", "cpu_adam", "--torch", "2.13.0+cpu"], "local label"),
    (["dockerfile", "--cpu", "--ops", "cpu_adam", "--torch", "2.16.0"], "not a torch release we know"),
    (
        ["dockerfile", "--cpu", "--ops", "cpu_adam", "--torch", "2.16", "--torch-index", "https://i.x/s"],
        "patch",
    ),
    # text rendered into the Dockerfile ("$" in a pattern would let a trailing newline through)
    ([*DOCKERFILE, "--python", "3.11\n", "--base-devel", "a", "--base-runtime", "b"], "not a Python"),
    (["dockerfile", "--cpu", "--ops", "cpu_adam", "--torch", "2.13.0\n"], "not a torch release"),
    (["dockerfile", "--cpu", "--ops", "cpu_adam", "--torch-index", "http://x\nRUN echo pwned"], "not a URL"),
    (["dockerfile", "--cpu", "--ops", "cpu_adam", "--torch-index", "not a url"], "not a URL"),
    (["dockerfile", "--cpu", "--ops", "cpu_adam", "--torch-index", "x' && touch /p '"], "not a URL"),
    (["dockerfile", "--cpu", "--ops", "cpu_adam", "--torch-index", "pypi.example.com/simple"], "no scheme"),
    (["dockerfile", "--cpu", "--ops", "cpu_adam", "--torch-index", "ftp://h/simple"], "scheme 'ftp'"),
    (["dockerfile", "--cpu", "--ops", "cpu_adam", "--torch-index", "https:///simple"], "no host"),
    (["dockerfile", "--cpu", "--ops", "cpu_adam", "--torch-index", "https://h:99999/s"], "not a URL"),
    (["dockerfile", "--cpu", "--ops", "cpu_adam", "--torch-index", "file:relative"], "absolute path"),
    (["dockerfile", "--cpu", "--ops", "cpu_adam", "--max-jobs", "99999999999999999999"], "more than 1024"),
    (["dockerfile", "--cpu", "--ops", "cpu_adam", "--max-jobs", "1025"], "more than 1024"),
    (["dockerfile", "--cpu", "--ops", "ALL"], "unknown op 'ALL'"),
    (["dockerfile", "--cpu", "--ops", "cpu_adam,All"], "unknown op 'All'"),
    # paths longer than the file system takes
    (["dockerfile", "--cpu", "--ops", "cpu_adam", "-o", "{tmp}/" + LONG], "file name too long"),
    (["dockerfile", "--cpu", "--ops", "cpu_adam", "--op-source", "{tmp}/" + LONG], "--op-source"),
    (["dockerfile", "--cpu", "--ops", "cpu_adam", "--wheelhouse", "{tmp}/" + LONG], "not a directory"),
    (["dockerfile", "--cpu", "--ops", "cpu_adam", "--ca-cert", "{tmp}/" + LONG], "file name too long"),
    (["new-op", LONG], "file name too long"),
    (["new-op", "acme_long", "-o", "{tmp}/" + LONG + "/acme_ops"], "file name too long"),
    (["dockerfile", "--cpu", "--ops"], "requires an argument"),
    # build: the same spec, plus its own options, all before any engine work
    (["build", "--cpu", "--ops", "nope"], "unknown op"),
    (["build", "--cpu", "--ops", "cpu_adam", "--tag", "imagegen:" + "t" * 129], "128"),
    (["build", "--cpu", "--ops", "cpu_adam", "--tag", "a" * 238], "255"),
    (["build", "--cpu", "--ops", "cpu_adam", "--tag", "Imagegen:x"], "upper-case"),
    (["build", "--cpu", "--ops", "cpu_adam", "--tag", "a b"], "white space"),
    (["build", "--cpu", "--ops", "cpu_adam", "--tag", "x@sha256:" + "0" * 64], "digest"),
    (["build", "--cpu", "--ops", "cpu_adam", "--push", "--no-verify"], "--push"),
    (["build", "--cpu", "--ops", "cpu_adam", "--ca-cert", "{ca_dir}"], "is a directory"),
    (["build", "--cpu", "--ops", "cpu_adam", "--source", "{tmp}"], "sources"),
    (["build", "--cpu", "--ops", "cpu_adam", "--max-jobs", "1.5"], "--max-jobs"),
    (["build", "--cpu", "--ops", "cpu_adam", "--source", "{tmp}/" + LONG], "--source"),
    (["build", "--cpu", "--ops", "cpu_adam", "--op-source", "{tmp}/" + LONG + "/x"], "file name too long"),
    # verify
    (["verify", ""], "empty"),
    (["verify", "UPPER::x"], "not a valid image reference"),
    (["verify", "a:" + "t" * 129], "128"),
    (["verify", "imagegen:cpu", "--timeout", "0"], "--timeout"),
    (["verify", "imagegen:cpu", "--timeout", "-1"], "--timeout"),
    (["verify", "imagegen:cpu", "--timeout", "nan"], "--timeout"),
    (["verify", "imagegen:cpu", "--timeout", "abc"], "--timeout"),
    (["verify", "imagegen:cpu", "--ops", "cpu_adm"], "unknown op"),
    (["verify", "imagegen:cpu", "--ops", ""], "--ops is empty"),
    (["verify", "imagegen:cpu", "--ops", " , "], "--ops is empty"),
    (["verify", "imagegen:cpu", "--ops", "ALL"], "unknown op 'ALL'"),
    (["verify", "imagegen:cpu", "--timeout", "99999999999"], "--timeout"),
    (["verify", "imagegen:cpu", "--timeout", "inf"], "--timeout"),
    (["verify"], "Missing argument"),
    # matrix
    (["matrix", "--out", "{file}"], "is a file"),
    (["matrix", "--out", "{file}", "--check"], "is a file"),
    (["matrix", "--out", "{file}/sub"], "a file is in the way"),
    (["matrix", "--out", "{tmp}/" + LONG], "file name too long"),
    (["matrix", "--out", "{tmp}/" + LONG, "--check"], "file name too long"),
    (["matrix", "--out", "{tmp}/out", "--op-source", "{tmp}/" + LONG], "--op-source"),
    # ops, and the root
    (["ops", "--frobnicate"], "No such option"),
    (["ops", "extra"], "unexpected extra argument"),
    (["nosuch"], "No such command"),
]


def _fill(args: list[str], tmp: Path) -> list[str]:
    values = {"{ca_dir}": _ca_dir(tmp), "{ca_text}": _ca_text(tmp), "{file}": _a_file(tmp)}
    filled = []
    for arg in args:
        for key, value in values.items():
            arg = arg.replace(key, value)
        filled.append(arg.replace("{tmp}", str(tmp)))
    return filled


@pytest.mark.parametrize(("args", "fragment"), TABLE, ids=[" ".join(a)[:60] for a, _ in TABLE])
def test_bad_input_meets_the_contract(no_engine: None, workdir: Path, args: list[str], fragment: str) -> None:
    filled = _fill(args, workdir)
    before = sorted(p.name for p in workdir.rglob("*"))
    assert_reported(invoke(filled), fragment=fragment)
    if filled[0] in JSON_COMMANDS:
        assert_json_error(invoke([*filled, "--json"]), fragment=fragment)
    assert sorted(p.name for p in workdir.rglob("*")) == before  # nothing written


# Odd values for each option of `dockerfile`: each is accepted (exit 0) or refused by the
# contract (exit 2), never a traceback.
ODD_VALUES = [
    "", " ", "-", "--", "all", "ALL", ",", ";", "0", "-1", "1e9", "3.11.0", "12.1.0", "x" * 300,
    "ünïcødé", "a\tb", "a\nb", "../..", "/", "%s%n", "{}", "$(true)", "\\", "'", '"', "None",
]  # fmt: skip
OPTIONS = [
    "--ops", "--python", "--torch", "--arch", "--distro", "--base-devel", "--base-runtime",
    "--torch-index", "--wheelhouse", "--ca-cert", "--bytecode", "--max-jobs", "-o",
]  # fmt: skip


@pytest.mark.parametrize("target", ["--cpu", "--cuda=12.1"])
@pytest.mark.parametrize("option", OPTIONS)
@pytest.mark.parametrize("value", ODD_VALUES)
def test_odd_option_values_never_crash(workdir: Path, target: str, option: str, value: str) -> None:
    ops = "cpu_adam" if target == "--cpu" else "quantizer"
    args = ["dockerfile", target, "--ops", ops, option, value]
    if option == "--ops":
        args = ["dockerfile", target, option, value]
    result = invoke(args)
    if result.exit_code == 0:
        assert result.exception is None or isinstance(result.exception, SystemExit)
        assert "Traceback" not in result.stderr
    else:
        assert_reported(result)


# ------------------------------------------------------------------ inputs of issue 28


def test_all_in_another_case_is_refused_with_a_suggestion(workdir: Path) -> None:
    result = invoke(["dockerfile", "--cpu", "--ops", "ALL"])
    assert_reported(result, fragment="'ALL'")
    assert "hint: did you mean all?" in result.stderr


def test_op_lists_keep_each_op_once_in_the_order_given() -> None:
    assert op_list("cpu_lion, cpu_adam,cpu_lion,,cpu_adam", empty_hint="-") == ("cpu_lion", "cpu_adam")
    spec = build_spec(SpecInput(cpu=True, ops="cpu_lion,cpu_adam,cpu_lion"))
    assert spec.ops == ("cpu_adam", "cpu_lion")  # the spec's own order: the registry's


@pytest.mark.parametrize(
    "packages",
    [
        '("a; touch /pwned",)',
        '("libfoo1 libbar2",)',
        '("$(touch /pwned)",)',
        '("libfoo\\nRUN touch /pwned",)',
        '("-y",)',
        '("LibFoo",)',
        '("x",)',
    ],
)
def test_an_op_packages_runtime_packages_must_be_debian_package_names(
    no_engine: None, workdir: Path, packages: str
) -> None:
    op = unique("bad_pkg_op")
    root = write_package(
        workdir,
        unique("bad_pkg"),
        builder_source("SquareBuilder", op, extra=f"runtime_packages = {packages}"),
    )
    before = sorted(p.name for p in workdir.rglob("*"))
    result = invoke(["dockerfile", "--cpu", "--op-source", str(root), "--ops", op])
    assert_reported(result, fragment="not a Debian package name")
    assert op in result.stderr and "runtime_packages" in result.stderr
    assert_json_error(invoke(["build", "--cpu", "--op-source", str(root), "--ops", op, "--json"]))
    assert sorted(p.name for p in workdir.rglob("*")) == before


def test_an_op_package_with_debian_package_names_renders_them(workdir: Path) -> None:
    op = unique("good_pkg_op")
    extra = 'runtime_packages = ("libfoo1", "libstdc++6", "libbar-2.0-0")'
    root = write_package(workdir, unique("good_pkg"), builder_source("SquareBuilder", op, extra=extra))
    result = invoke(["dockerfile", "--cpu", "--op-source", str(root), "--ops", op])
    assert result.exit_code == 0, result.stderr
    assert "--no-install-recommends libbar-2.0-0 libfoo1 libstdc++6 \\\n" in result.stdout


def test_a_torch_outside_the_catalog_is_accepted_from_your_own_index_with_a_warning(workdir: Path) -> None:
    """docs/imagegen.md: with your own index, a torch version outside the catalog is accepted."""
    index = "https://pypi.example.com/simple"
    result = invoke([*DOCKERFILE, "--torch", "2.16.0", "--torch-index", index])
    assert result.exit_code == 0, result.stderr
    warnings = [line for line in result.stderr.splitlines() if line.startswith("warning: ")]
    assert len(warnings) == 1 and "2.16.0" in warnings[0] and index in warnings[0]
    assert f'pip install --index-url {index} "torch==2.16.0"' in result.stdout
    assert 'io.imagegen.torch="2.16.0"' in result.stdout
    # Known releases from your own index: the catalog's checks still apply (Python support).
    too_new = invoke([*DOCKERFILE, "--torch", "2.1.0", "--python", "3.13", "--torch-index", index])
    assert_reported(too_new, fragment="no wheels for Python 3.13")


def test_dash_output_is_stdout_not_a_file(workdir: Path) -> None:
    result = invoke([*DOCKERFILE, "-o", "-"])
    assert result.exit_code == 0, result.stderr
    assert result.stdout.startswith("# imagegen ops image: cpu")
    assert list(workdir.iterdir()) == []
