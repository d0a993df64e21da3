"""Image references checked against Docker's own grammar, so a bad one fails before the engine.

The grammar is distribution/reference's (``reference/regexp.go``, which the daemon uses):
``[domain[:port]/]path[:tag][@digest]``; path components are lower case, a tag is at most
128 characters, and the name (domain and path) is at most 255 characters *after* Docker
normalizes it (``name`` -> ``docker.io/library/name``): the daemon checks the normalized
name, so ``a`` repeated 238 times is refused although it is shorter than 255.

Two rules the pattern alone does not hold, both the daemon's (20.10): a first component is a
registry host only when it has a ``.`` or a ``:`` or is ``localhost``, so ``Foo/bar`` is a
Docker Hub path and its upper case is refused; and a digest is checked as go-digest checks it,
a known algorithm and exactly its number of lower-case hex digits (``sha256``: 64), so that
``@sha256:zz`` is refused here rather than sent to a registry.
"""

from __future__ import annotations

import re

from imagegen.errors import BadInputError
from imagegen.urls import redact

TAG_MAX = 128
NAME_TOTAL_MAX = 255

_PATH_COMPONENT = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
_DOMAIN_COMPONENT = r"(?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9])"
_DOMAIN = rf"(?:{_DOMAIN_COMPONENT}(?:\.{_DOMAIN_COMPONENT})*|\[[a-fA-F0-9:]+\])(?::[0-9]+)?"
_TAG = r"[\w][\w.-]*"  # the length is checked on its own, for a message that says so
_DIGEST = r"[A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*:[0-9a-fA-F]{32,}"
_REFERENCE = re.compile(
    rf"(?P<name>(?:(?P<domain>{_DOMAIN})/)?{_PATH_COMPONENT}(?:/{_PATH_COMPONENT})*)"
    rf"(?::(?P<tag>{_TAG}))?(?:@(?P<digest>{_DIGEST}))?"
)
_EXAMPLE = "use [registry[:port]/]name[:tag], the name in lower case, e.g. imagegen:cpu-dev"
# go-digest's algorithms and the length of each one's hex encoding.
DIGEST_HEX_LENGTHS = {"sha256": 64, "sha384": 96, "sha512": 128}
_LOWER_HEX = re.compile(r"[0-9a-f]+")
_DIGEST_EXAMPLE = "sha256: and 64 lower-case hex digits"


def _looks_like_host(domain: str) -> bool:
    """The daemon's rule for a first component that names a registry (not a Docker Hub path)."""
    return any(c in domain for c in ".:[") or domain == "localhost"


def digest_problem(digest: str) -> str | None:
    """What is wrong with ``digest`` (``sha256:<hex>``, after a reference's ``@``), or None."""
    algorithm, sep, encoded = digest.partition(":")
    shown = digest if len(digest) <= 24 else digest[:21] + "..."
    if not sep or not algorithm:
        return f"its digest {shown!r} is not ALGORITHM:HEX ({_DIGEST_EXAMPLE})"
    length = DIGEST_HEX_LENGTHS.get(algorithm)
    if length is None:
        known = ", ".join(DIGEST_HEX_LENGTHS)
        return f"its digest's algorithm {algorithm[:20]!r} is not one Docker knows ({known})"
    if len(encoded) != length or not _LOWER_HEX.fullmatch(encoded):
        return f"its digest {shown!r} is not {algorithm}: and {length} lower-case hex digits"
    return None


def _normalized_name(name: str, domain: str | None) -> str:
    # As the daemon's ParseNormalizedNamed: a first component that looks like no host
    # (no '.', no ':', not localhost) is a Docker Hub path.
    if domain is not None and _looks_like_host(domain):
        return name
    return "docker.io/" + (name if "/" in name else "library/" + name)


def reference_problem(ref: str, allow_digest: bool = True) -> str | None:
    """What is wrong with ``ref`` as an image reference, or None when Docker would accept it."""
    if not ref.strip():
        return "it is empty"
    if ref != ref.strip() or any(c.isspace() for c in ref):
        return "it contains white space"
    if "@" in ref:
        if not allow_digest:
            return "a tag to build cannot have a digest (@...)"
        problem = digest_problem(ref.partition("@")[2])
        if problem is not None:
            return problem
    match = _REFERENCE.fullmatch(ref)
    if match is None:
        if _REFERENCE.fullmatch(ref.lower()):
            return "its name has upper-case letters (Docker allows them in a tag or a registry host only)"
        return "it does not match [registry[:port]/]name[:tag][@digest]"
    tag = match.group("tag")
    if tag is not None and len(tag) > TAG_MAX:
        return f"its tag has {len(tag)} characters; Docker allows at most {TAG_MAX}"
    domain = match.group("domain")
    if domain is not None and not _looks_like_host(domain) and domain != domain.lower():
        # A newer daemon would take it for a registry host; 20.10 (and the CLI) for a path.
        return (
            f"its first component {domain[:40]!r} has upper-case letters: it names no registry host "
            "(a host has a '.' or a ':', or is localhost), and a name is lower case"
        )
    full = _normalized_name(match.group("name"), domain)
    if len(full) > NAME_TOTAL_MAX:
        return (
            f"its name as Docker spells it ({full[:24]}...) has {len(full)} characters; "
            f"Docker allows at most {NAME_TOTAL_MAX}"
        )
    return None


def check_reference(what: str, ref: str, allow_digest: bool = True) -> None:
    """Raise BadInputError (exit 2) naming ``what`` (``--tag``, ``IMAGE``) when ``ref`` is malformed."""
    problem = reference_problem(ref, allow_digest=allow_digest)
    if problem is not None and "://" in ref:
        # A URL where an image belongs, perhaps with a password: shown without it, and judged as
        # a URL (the problem's text might quote the part after an '@' in the password).
        problem, ref = "it is a URL (SCHEME://...), not an image name", redact(ref)
    if problem is not None:
        shown = ref if len(ref) <= 80 else ref[:77] + "..."
        raise BadInputError(f"{what} {shown!r} is not a valid image reference: {problem}", hint=_EXAMPLE)
