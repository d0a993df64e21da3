"""Image references checked against Docker's own grammar, so a bad one fails before the engine.

The grammar is distribution/reference's (``reference/regexp.go``, which the daemon uses):
``[domain[:port]/]path[:tag][@digest]``; path components are lower case, a tag is at most
128 characters, and the name (domain and path) is at most 255 characters *after* Docker
normalizes it (``name`` -> ``docker.io/library/name``): the daemon checks the normalized
name, so ``a`` repeated 238 times is refused although it is shorter than 255.
"""

from __future__ import annotations

import re

from imagegen.errors import BadInputError

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


def _normalized_name(name: str, domain: str | None) -> str:
    # As the daemon's ParseNormalizedNamed: a first component that looks like no host
    # (no '.', no ':', not localhost, no upper case) is a Docker Hub path.
    looks_like_host = domain is not None and (
        any(c in domain for c in ".:[") or domain == "localhost" or domain != domain.lower()
    )
    if looks_like_host:
        return name
    return "docker.io/" + (name if "/" in name else "library/" + name)


def reference_problem(ref: str, allow_digest: bool = True) -> str | None:
    """What is wrong with ``ref`` as an image reference, or None when Docker would accept it."""
    if not ref.strip():
        return "it is empty"
    if ref != ref.strip() or any(c.isspace() for c in ref):
        return "it contains white space"
    match = _REFERENCE.fullmatch(ref)
    if match is None:
        if _REFERENCE.fullmatch(ref.lower()):
            return "its name has upper-case letters (Docker allows them in a tag or a registry host only)"
        return "it does not match [registry[:port]/]name[:tag][@digest]"
    tag = match.group("tag")
    if tag is not None and len(tag) > TAG_MAX:
        return f"its tag has {len(tag)} characters; Docker allows at most {TAG_MAX}"
    if match.group("digest") is not None and not allow_digest:
        return "a tag to build cannot have a digest (@...)"
    full = _normalized_name(match.group("name"), match.group("domain"))
    if len(full) > NAME_TOTAL_MAX:
        return (
            f"its name as Docker spells it ({full[:24]}...) has {len(full)} characters; "
            f"Docker allows at most {NAME_TOTAL_MAX}"
        )
    return None


def check_reference(what: str, ref: str, allow_digest: bool = True) -> None:
    """Raise BadInputError (exit 2) naming ``what`` (``--tag``, ``IMAGE``) when ``ref`` is malformed."""
    problem = reference_problem(ref, allow_digest=allow_digest)
    if problem is not None:
        shown = ref if len(ref) <= 80 else ref[:77] + "..."
        raise BadInputError(f"{what} {shown!r} is not a valid image reference: {problem}", hint=_EXAMPLE)
