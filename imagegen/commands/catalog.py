"""``imagegen catalog``: every target, its torch range, bases and archs, and what was proven here.

``--check-upstream`` compares the catalog with what the package index publishes
(``imagegen.compat.upstream``) and exits 1 when it lacks something, 3 when the index cannot be
read (not reached, too slow, a malformed answer, a project it does not have), 2 when
``--index-url`` is no http(s) URL of a host.

The proof comes from the compatibility results that ship with the package
(``imagegen/data/compat.json``, written by ``make compat``): the torch minors whose code
compiled for the target, the toolkit that compiled its device code, and whether an image of it
was built and verified here. What has none of these is only rendered.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

from rich.table import Table

from imagegen import log
from imagegen.commands._options import JsonOption, table_options
from imagegen.commands._output import console, emit_json
from imagegen.compat import headers, results, upstream
from imagegen.compat.pip_config import pip_index_url
from imagegen.errors import BadInputError, CatalogBehindError
from imagegen.imagespec import catalog as cat
from imagegen.tables import fitted
from imagegen.urls import parse_problem, redact


def _archs(target: cat.Target, platform: str) -> list[str]:
    if target.accelerator == "cuda":
        return list(cat.default_cuda_archs(target.version or "", platform))
    if target.accelerator == "rocm":
        return list(cat.default_rocm_archs())
    return []


def target_entry(target: cat.Target, data: dict[str, Any]) -> dict[str, Any]:
    """One target as ``imagegen catalog --json`` lists it."""
    distro = target.distros[0]
    python = target.default_python(distro)
    return {
        "name": target.name,
        "accelerator": target.accelerator,
        "version": target.version,
        "full_version": target.full_version,
        "torch": list(target.torch_versions()),
        "torch_minors": results.admitted_minors(target),
        "default_torch": target.default_torch,
        "wheel_indexes": list(dict.fromkeys(r.variant for r in target.torch)),
        "distros": list(target.distros),
        "python": python,
        "bases": {"devel": target.base_devel(distro, python), "runtime": target.base_runtime(distro, python)},
        "platforms": list(target.platforms),
        "archs": _archs(target, cat.DEFAULT_PLATFORM),
        "archs_by_platform": {p: _archs(target, p) for p in target.platforms},
        "proof": results.proof(target, data),
    }


def catalog_entries(data: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    data = results.load() if data is None else data
    return [target_entry(t, data) for t in cat.all_targets()]


def _span(items: list[str]) -> str:
    return f"{items[0]}–{items[-1]}" if items else "-"


def _platforms_cell(platforms: list[str]) -> str:
    """``amd64, arm64``: the platforms an image was built (verified) for here; ``no`` for none."""
    return ", ".join(p.removeprefix("linux/") for p in platforms) or "no"


def _compiled_cell(entry: dict[str, Any]) -> str:
    proof = entry["proof"]
    compiled, missing = proof["compiled"], proof["not_compiled"]
    text = "none" if not compiled else ("all" if not missing else ", ".join(compiled))
    device = proof["device"]
    if device is not None:
        text += f" ({device['toolkit']}{'' if device['exact'] else ', nearest'})"
    return text


# Columns a narrow terminal drops, least useful first: both are in --json, and the proof
# (compiled / built / verified) is what this command is for.
DROPPABLE = ("bases (devel / runtime)", "archs", "default")
COLUMNS = (
    "target",
    "torch",
    "default",
    "bases (devel / runtime)",
    "platforms",
    "archs",
    "compiled",
    "built",
    "verified",
)


def _table(entries: list[dict[str, Any]], dropped: tuple[str, ...]) -> Table:
    table = Table()
    columns = [c for c in COLUMNS if c not in dropped]
    for name in columns:
        table.add_column(name, no_wrap=name == "target")
    for e in entries:
        cells = {
            "target": e["name"],
            "torch": _span(e["torch_minors"]),
            "default": e["default_torch"],
            "bases (devel / runtime)": f"{e['bases']['devel']}\n{e['bases']['runtime']}",
            "platforms": ", ".join(p.removeprefix("linux/") for p in e["platforms"]),
            "archs": ";".join(e["archs"]) or "-",
            "compiled": _compiled_cell(e),
            "built": _platforms_cell(e["proof"]["built_platforms"]),
            "verified": _platforms_cell(e["proof"]["verified_platforms"]),
        }
        table.add_row(*(cells[c] for c in columns))
    return table


def render_table(entries: list[dict[str, Any]], width: int | None = None) -> Table:
    """The catalog's table, fitted to ``width`` columns by leaving out ``DROPPABLE`` ones."""
    return fitted(lambda dropped: _table(entries, dropped), DROPPABLE, width)


_INDEX_HINT = "name the index's simple API, e.g. --index-url https://HOST/simple"


def _host_problem(host: str) -> str | None:
    """What makes ``host`` (a URL's hostname, brackets gone) no host name, or None."""
    if ":" in host:  # an IPv6 address: urlsplit has checked it
        return None
    try:
        labels = (host if host.isascii() else host.encode("idna").decode("ascii")).split(".")
    except UnicodeError:  # a label the IDNA codec refuses (too long, empty)
        return "its host is not a host name"
    if len(".".join(labels)) > 253 or any(len(label) > 63 for label in labels):
        return "its host is longer than a host name can be (253 characters, 63 between dots)"
    return None


def checked_index_url(url: str, what: str = "--index-url") -> str:
    """``url`` when it is an http(s) URL naming a host; else BadInputError (exit 2) saying what is
    wrong, before anything is read. No message shows a user or password that it holds."""
    shown = redact(url)
    shown = repr(shown if len(shown) <= 80 else shown[:77] + "...")
    if not url.strip():
        raise BadInputError(
            f"{what} is empty", hint=_INDEX_HINT + ", or leave it out to read the index pip installs from"
        )
    if any(c.isspace() or not c.isprintable() for c in url):
        raise BadInputError(
            f"{what} {shown} is not a URL: it holds white space or control characters",
            hint=_INDEX_HINT + "; percent-encode spaces",
        )
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018  (raises ValueError for a port that is not a number in range)
    except ValueError as exc:
        raise BadInputError(f"{what} {shown} is not a URL: {parse_problem(exc)}", hint=_INDEX_HINT) from None
    if parts.scheme.lower() not in ("http", "https"):
        scheme = f"its scheme is {parts.scheme!r}" if parts.scheme else "it has no scheme"
        raise BadInputError(
            f"{what} {shown} is not an http(s) URL: {scheme}", hint=_INDEX_HINT + " (http:// or https://)"
        )
    problem = "it names no host" if not parts.hostname else _host_problem(parts.hostname)
    if problem is not None:
        raise BadInputError(f"{what} {shown} is not an index's URL: {problem}", hint=_INDEX_HINT)
    return url


def _index(given: str | None) -> str:
    if given is not None:
        return checked_index_url(given)
    try:
        found = pip_index_url()
    except (ImportError, ValueError) as exc:
        raise BadInputError(
            f"no package index to check against: {exc}", hint="name one with --index-url"
        ) from None
    return checked_index_url(found, "pip's index URL")


def _say_findings(report: dict[str, Any]) -> None:
    out = console()
    torch, cuda = report["upstream"]["torch"], report["upstream"]["cuda"]
    newest_torch = torch[-1] if torch else None
    seen = f"{report['index']}: torch up to {newest_torch['version'] if newest_torch else '-'}"
    if newest_torch and newest_torch["cuda"]:
        seen += f" (its Linux wheel a CUDA {newest_torch['cuda']} build)"
    seen += f", CUDA up to {cuda[-1]['minor'] if cuda else '-'}"
    if report["missing"]:
        out.print(f"the catalog lacks {len(report['missing'])} thing(s) published on {seen}:")
    else:
        out.print(f"the catalog is current with {seen}")
    for finding in report["missing"]:
        out.print(f"  {finding['kind']}: {finding['message']}")
        out.print(f"    hint: {finding['hint']}")
    for finding in report["held"]:
        out.print(f"  held ({finding['kind']}): {finding['message']}: {finding['held']}")


def compare_upstream(json: bool, index_url: str | None) -> None:
    index = _index(index_url)
    log.info(f"reading torch, {upstream.NVCC} and {upstream.TOOLKIT} from {redact(index)} ...")
    found_upstream = upstream.read(index, headers.session())
    report = upstream.report(found_upstream, upstream.findings(found_upstream))
    if json:
        emit_json(report)
    else:
        _say_findings(report)
    if report["missing"]:
        raise CatalogBehindError("the catalog is behind its upstream", reported=True)


@table_options("catalog")  # every option but --json: the table's rows
def catalog(json: JsonOption = False, check_upstream: bool = False, index_url: str | None = None) -> None:
    """List every target: torch range, default torch, bases, platforms, default archs, and proof;
    with --check-upstream, what the package index publishes that the catalog lacks."""
    if check_upstream:
        compare_upstream(json, index_url)
        return
    if index_url:
        raise BadInputError("--index-url is read only with --check-upstream", hint="add --check-upstream")
    entries = catalog_entries()
    if json:
        emit_json({"targets": entries})
        return
    out = console()
    table = render_table(entries, out.width)
    out.print(table)
    left_out = [c for c in DROPPABLE if c not in {col.header for col in table.columns}]
    out.print(
        "compiled: torch minors whose ops compiled here (make compat; docs/compat.md); "
        "built / verified: the platforms an image of the target was built and verified for, here."
        + (f" Left out to fit the terminal: {', '.join(left_out)} (see --json)." if left_out else "")
    )
