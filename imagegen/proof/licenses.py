"""The licenses the SBOM gives a package, from what its own files declare (pure).

A Python distribution, by its METADATA, in PEP 639's order: ``License-Expression`` (an SPDX
expression, kept whole); else the ``License`` field when it is a name (an SPDX id where it is one,
an SPDX expression where it parses as one, else the name as written), or the title of a license
pasted in whole where the title says clearly which (otherwise the pasted text is skipped, never
copied); else the ``License ::`` classifiers (an SPDX id where the classifier names exactly one
license and version, else the classifier's own name). A Debian package, by its DEP-5 copyright
file's ``License`` short names (an SPDX id where one is spelled so, else the name). Nothing
declared, nothing claimed: a package whose files say nothing gets no license.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from typing import Literal

from imagegen.proof.facts import DeclaredLicense

# The longest License field read as a name; a longer one, or one of several lines, is a license
# text pasted in (numpy's and hyperframe's were), which only its title may stand for.
NAME_LENGTH = 100
# Words setuptools and others write in a License field nobody filled in.
NO_LICENSE = frozenset({"unknown", "none", "n/a", "null"})
# The titles of pasted licenses that name one license and version (the first line, lower-cased,
# blanks collapsed; the Apache license's version is on the line after its title).
TITLES = (
    (re.compile(r"(the )?mit license( \(mit\))?"), "MIT"),
    (re.compile(r"(the )?(bsd 3-clause|3-clause bsd|new bsd|revised bsd) license"), "BSD-3-Clause"),
    (re.compile(r"(the )?(bsd 2-clause|2-clause bsd|simplified bsd) license"), "BSD-2-Clause"),
    (re.compile(r"apache license,? version 2\.0\b.*"), "Apache-2.0"),
    (re.compile(r"isc license( \(iscl?\))?"), "ISC"),
    (re.compile(r"mozilla public license,? (version )?2\.0"), "MPL-2.0"),
)
# Trove classifiers (their last part) that name exactly one license and version, and its SPDX id.
# The others ("BSD License", "Apache Software License", "GNU General Public License (GPL)", the
# LGPLv2 ones that projects use for 2.0 and 2.1 alike) name a family: they stay names.
CLASSIFIER_IDS = {
    "Attribution Assurance License": "AAL",
    "Boost Software License 1.0 (BSL-1.0)": "BSL-1.0",
    "CC0 1.0 Universal (CC0 1.0) Public Domain Dedication": "CC0-1.0",
    "CEA CNRS Inria Logiciel Libre License, version 2.1 (CeCILL-2.1)": "CECILL-2.1",
    "Common Development and Distribution License 1.0 (CDDL-1.0)": "CDDL-1.0",
    "Eclipse Public License 1.0 (EPL-1.0)": "EPL-1.0",
    "Eclipse Public License 2.0 (EPL-2.0)": "EPL-2.0",
    "Educational Community License, Version 2.0 (ECL-2.0)": "ECL-2.0",
    "European Union Public Licence 1.1 (EUPL 1.1)": "EUPL-1.1",
    "European Union Public Licence 1.2 (EUPL 1.2)": "EUPL-1.2",
    "GNU Affero General Public License v3": "AGPL-3.0-only",
    "GNU Affero General Public License v3 or later (AGPLv3+)": "AGPL-3.0-or-later",
    "GNU General Public License v2 (GPLv2)": "GPL-2.0-only",
    "GNU General Public License v2 or later (GPLv2+)": "GPL-2.0-or-later",
    "GNU General Public License v3 (GPLv3)": "GPL-3.0-only",
    "GNU General Public License v3 or later (GPLv3+)": "GPL-3.0-or-later",
    "GNU Lesser General Public License v3 (LGPLv3)": "LGPL-3.0-only",
    "GNU Lesser General Public License v3 or later (LGPLv3+)": "LGPL-3.0-or-later",
    "Historical Permission Notice and Disclaimer (HPND)": "HPND",
    "ISC License (ISCL)": "ISC",
    "MIT License": "MIT",
    "MIT No Attribution License (MIT-0)": "MIT-0",
    "Mozilla Public License 1.1 (MPL 1.1)": "MPL-1.1",
    "Mozilla Public License 2.0 (MPL 2.0)": "MPL-2.0",
    "Mulan Permissive Software License v2 (MulanPSL-2.0)": "MulanPSL-2.0",
    "Open Software License 3.0 (OSL-3.0)": "OSL-3.0",
    "PostgreSQL License": "PostgreSQL",
    "Python License (CNRI Python License)": "CNRI-Python",
    "SIL Open Font License 1.1 (OFL-1.1)": "OFL-1.1",
    "The Unlicense (Unlicense)": "Unlicense",
    "Universal Permissive License (UPL)": "UPL-1.0",
    "University of Illinois/NCSA Open Source License": "NCSA",
    "Zero-Clause BSD (0BSD)": "0BSD",
    "zlib/libpng License": "Zlib",
}
# Classifiers that say who approved a license, not which one.
NOT_A_LICENSE = frozenset({"OSI Approved", "DFSG approved"})


@dataclass(frozen=True)
class License:
    """One CycloneDX license choice: an SPDX ``expression``, an SPDX ``id``, or a free ``name``."""

    kind: Literal["expression", "id", "name"]
    value: str


def declared_licenses(declared: DeclaredLicense) -> tuple[License, ...]:
    """The licenses a package's SBOM component carries: one expression, or ids and names."""
    if declared.expression:
        return (License("expression", declared.expression),)
    from_field = _from_field(declared.text, declared.cut)
    if from_field is not None:
        return (from_field,)
    from_classifiers = [_from_classifier(c) for c in declared.classifiers]
    found = [c for c in from_classifiers if c is not None] or [_spdx_or_name(n) for n in declared.names]
    return tuple(dict.fromkeys(found))


def _from_field(text: str, cut: bool) -> License | None:
    """The License field as a license: a name, or the title of the text pasted into it."""
    lines = [" ".join(line.split()) for line in text.splitlines() if line.strip()]
    if not lines or (len(lines) == 1 and lines[0].lower() in NO_LICENSE):
        return None
    if len(lines) == 1 and not cut and len(lines[0]) <= NAME_LENGTH:
        name = lines[0]
        if _spdx_id(name) is None and _is_expression(name) and " " in name:
            return License("expression", name)  # tqdm's "MPL-2.0 AND MIT"
        return _spdx_or_name(name)
    title = lines[0].lower()
    if title == "apache license" and len(lines) > 1:
        title += " " + lines[1].lower()
    return next((License("id", spdx) for pattern, spdx in TITLES if pattern.fullmatch(title)), None)


def _from_classifier(classifier: str) -> License | None:
    parts = [part.strip() for part in classifier.split("::")]
    if len(parts) < 2 or parts[0] != "License" or parts[-1] in NOT_A_LICENSE:
        return None
    spdx = CLASSIFIER_IDS.get(parts[-1])
    return License("id", spdx) if spdx else License("name", parts[-1])


def _spdx_or_name(name: str) -> License:
    spdx = _spdx_id(name)
    return License("id", spdx) if spdx else License("name", name)


@functools.cache
def _spdx_id(name: str) -> str | None:
    """``name`` as the SPDX list spells the id (``BSD-3-clause`` -> ``BSD-3-Clause``), if it is one."""
    from cyclonedx import spdx  # deferred, as in sbom.make_sbom: it loads the SPDX list

    return spdx.fixup_id(name)


@functools.cache
def _is_expression(text: str) -> bool:
    from cyclonedx import spdx

    return spdx.is_expression(text)
