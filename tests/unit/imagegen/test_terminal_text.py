"""What reaches a terminal is inert and holds no password (imagegen/terminal.py).

A registry's error body, an image's output or a value a user typed can carry control characters
(an escape sequence that clears the screen, a carriage return, a bell); a URL from the user, the
environment or pip's configuration can carry a password, whatever its scheme. The CLI's error
report (text and ``--json``), its log lines and its result tables show neither: escape sequences
go, other control characters but newline and tab are written as their escapes, and a URL's
``user:password`` is ``***``. The registry here is a real HTTP server on the loopback.
"""

from __future__ import annotations

import io
import json
import threading
import unicodedata
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from rich.table import Table
from rich.text import Text
from typer.testing import CliRunner, Result

from imagegen import log
from imagegen.cli import app
from imagegen.terminal import CleanConsole, clean
from imagegen.urls import redact_in_text
from tests.unit.contract import assert_json_error, assert_reported

PASSWORD = "hunter2"
HOSTILE = "\x1b[2Jregistry says no\r\x07"


def _raw_controls(text: str) -> list[str]:
    return [c for c in text if c not in "\n\t" and unicodedata.category(c) == "Cc"]


def _invoke(args: list[str], env: dict[str, str | None] | None = None) -> Result:
    return CliRunner().invoke(app, args, env={"IMAGEGEN_DEBUG": "", "COLUMNS": "200", **(env or {})})


# ------------------------------------------------------------------ the rules, table-driven


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        ("\x1b[2Jcleared", "cleared"),  # clear screen: gone
        ("\x1b[1;31mred\x1b[0m", "red"),  # colours: gone
        ("\x1b]0;title\x07after", "after"),  # OSC (window title), BEL-terminated
        ("\x1b]8;;https://x\x1b\\link", "link"),  # OSC, ST-terminated
        ("\x9b2Jc1", "c1"),  # the C1 CSI byte
        ("over\rwrite", "over\\rwrite"),  # a lone CR is shown, not obeyed
        ("line\r\nnext", "line\nnext"),  # CR LF is a newline
        ("bell\x07", "bell\\x07"),
        ("lone \x1b", "lone \\x1b"),
        ("nul\x00 del\x7f c1\x85", "nul\\x00 del\\x7f c1\\x85"),
        ("tab\tand\nnewline kept, é and ✓ too", "tab\tand\nnewline kept, é and ✓ too"),
    ],
)
def test_clean_drops_escape_sequences_and_shows_other_control_characters(text: str, shown: str) -> None:
    assert clean(text) == shown
    assert _raw_controls(clean(text)) == []
    assert clean(clean(text)) == clean(text)


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        ("pip's index is htps://alice:hunter2@host/simple", "pip's index is htps://***@host/simple"),
        ("'ftp://alice:hunter2@host/simple'", "'ftp://***@host/simple'"),
        ("file://alice:hunter2@/srv/index", "file://***@/srv/index"),
        ("DOCKER_HOST=tcp://alice:hunter2@host:2376", "DOCKER_HOST=tcp://***@host:2376"),
        ("https://alice:hun/ter2@host", "https://***@host"),  # a '/' in the password
        ("https://alice:hun@ter2@host", "https://***@host"),  # an '@' in it
        ("https://alice:hunter2@host/repo@v1", "https://***@host/repo@v1"),  # a path's '@' stays
        ("a git+https://host/repo@v1 ref", "a git+https://host/repo@v1 ref"),  # no password
        ("file ftp:/alice:hunter2@host/x", "file ftp:/***@host/x"),  # a URL made a path: one '/'
        ("ssh://USER@HOST", "ssh://USER@HOST"),  # a user alone, as hints write it
        (f"localhost:5000/ops@sha256:{'0' * 64}", f"localhost:5000/ops@sha256:{'0' * 64}"),
        ("https://***@host", "https://***@host"),
        ("no URL: alice@host", "no URL: alice@host"),
    ],
)
def test_redact_in_text_hides_every_urls_password_whatever_the_scheme(text: str, shown: str) -> None:
    assert redact_in_text(text) == shown
    assert clean(text) == shown


# ------------------------------------------------------------------ a registry's error body, through the CLI


class _HostileRegistry:
    """Answers every request 500 with ``HOSTILE`` and a URL with a password as its body."""

    def __init__(self) -> None:
        body = f"{HOSTILE} see https://alice:{PASSWORD}@mirror.example/x".encode()

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                pass

            def do_GET(self) -> None:
                self.send_response(500)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.image = f"127.0.0.1:{self.httpd.server_address[1]}/ops/cpu@sha256:{'0' * 64}"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()


@pytest.fixture
def hostile() -> Iterator[_HostileRegistry]:
    server = _HostileRegistry()
    yield server
    server.httpd.shutdown()


def test_a_registrys_error_body_reaches_the_terminal_inert(hostile: _HostileRegistry) -> None:
    result = _invoke(["sbom", hostile.image])
    assert result.exit_code == 1, result.output
    assert "Traceback" not in result.stderr and result.stdout == ""
    assert _raw_controls(result.stderr) == [], repr(result.stderr)
    assert "registry says no\\r\\x07" in result.stderr and "[2J" not in result.stderr
    assert PASSWORD not in result.stderr and "https://***@mirror.example" in result.stderr


def test_the_json_error_says_what_the_text_says(hostile: _HostileRegistry) -> None:
    text = _invoke(["sbom", hostile.image]).stderr.splitlines()[0].removeprefix("error: ")
    result = _invoke(["sbom", hostile.image, "--json"])
    assert result.exit_code == 1 and result.stderr == ""
    assert _raw_controls(result.stdout) == []
    doc = json.loads(result.stdout)
    assert doc["error"]["message"] == text
    assert _raw_controls(doc["error"]["message"]) == [] and PASSWORD not in result.stdout


# ------------------------------------------------------------------ pip's index, any scheme

PIP_INDEXES = [
    f"htps://alice:{PASSWORD}@index.example.com/simple",
    f"ftp://alice:{PASSWORD}@index.example.com/simple",
    f"file://alice:{PASSWORD}@/srv/index",
]


@pytest.mark.parametrize("url", PIP_INDEXES)
def test_pip_index_url_that_a_build_cannot_read_is_shown_without_its_password(url: str) -> None:
    env: dict[str, str | None] = {"PIP_INDEX_URL": url}
    args = ["catalog", "--check-upstream"]
    assert_reported(_invoke(args, env), code=2, fragment="***@")
    assert PASSWORD not in _invoke(args, env).stderr
    json_result = _invoke([*args, "--json"], env)
    assert_json_error(json_result, code=2, fragment="***@")
    assert PASSWORD not in json_result.stdout


@pytest.mark.parametrize("url", PIP_INDEXES)
def test_pip_conf_index_url_is_shown_without_its_password(url: str, tmp_path: Path) -> None:
    config = tmp_path / "pip.conf"
    config.write_text(f"[global]\nindex-url = {url}\n")
    env: dict[str, str | None] = {"PIP_INDEX_URL": None, "PIP_CONFIG_FILE": str(config)}
    result = _invoke(["catalog", "--check-upstream"], env)
    assert_reported(result, code=2, fragment="***@")
    assert PASSWORD not in result.stderr


@pytest.mark.parametrize(
    "option", ["--ca-cert", "--op-source", "--wheelhouse", "--torch-index", "--base-devel"]
)
@pytest.mark.parametrize("scheme", ["ftp", "htps", "file"])
def test_a_url_given_where_a_path_or_an_image_goes_is_shown_without_its_password(
    option: str, scheme: str
) -> None:
    result = _invoke(
        ["dockerfile", "--cpu", "--ops", "cpu_adam", option, f"{scheme}://alice:{PASSWORD}@host/x"]
    )
    assert_reported(result, code=2)
    assert PASSWORD not in result.stderr and "***@host/x" in result.stderr


@pytest.mark.parametrize("scheme", ["tcp", "htps", "ssh"])
def test_docker_host_with_a_password_is_shown_without_it_in_text_and_json(scheme: str) -> None:
    env: dict[str, str | None] = {"DOCKER_HOST": f"{scheme}://alice:{PASSWORD}@host:99999"}
    for args in (["verify", "img:1"], ["doctor"], ["doctor", "--json"]):
        result = _invoke(args, env)
        assert result.exit_code in (1, 3), result.output
        assert PASSWORD not in result.stdout + result.stderr, (args, result.output)
        assert f"{scheme}://***@host" in result.stdout + result.stderr


# ------------------------------------------------------------------ log lines and result tables


def test_log_lines_are_cleaned(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CI", "1")  # plain lines
    log.warn(f"the image said {HOSTILE} from https://alice:{PASSWORD}@host/x")
    with log.step(f"step {HOSTILE}"):
        log.info(HOSTILE)
    err = capsys.readouterr().err
    assert _raw_controls(err) == [] and PASSWORD not in err and "registry says no\\r\\x07" in err


@pytest.mark.parametrize("force_terminal", [False, True])
def test_a_result_tables_cells_are_cleaned(force_terminal: bool) -> None:
    out = io.StringIO()
    console = CleanConsole(file=out, width=60, force_terminal=force_terminal, highlight=False)
    table = Table("op", "error")
    table.add_row("cpu_adam", f"{HOSTILE} https://alice:{PASSWORD}@mirror.example.com/simple/torch/")
    table.add_row(Text(f"text {HOSTILE}"), "ok")
    console.print(table)
    console.print(f"[bold]{HOSTILE}[/bold]")
    shown = out.getvalue()
    if force_terminal:  # rich's own styles (SGR) remain; nothing else does
        shown = Text.from_ansi(shown).plain
    assert _raw_controls(shown) == [], repr(shown)
    assert PASSWORD not in shown and "***@" in shown and "[2J" not in shown
