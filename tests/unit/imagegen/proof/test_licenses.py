"""Licenses as the SBOM gives them: what the probe reads of a distribution's METADATA (through
``importlib.metadata``, as inside an image) and of a Debian package's copyright file, and how the
host maps that to CycloneDX's choices. Every expected value is written here by hand."""

from __future__ import annotations

import importlib.metadata
import json
import os
from pathlib import Path
from typing import Any

import pytest
from cyclonedx import spdx

from imagegen.proof import probe
from imagegen.proof.facts import DeclaredLicense, ImageFacts
from imagegen.proof.licenses import CLASSIFIER_IDS, License, declared_licenses
from imagegen.proof.sbom import SbomInput, make_sbom

MIT_TEXT = """The MIT License (MIT)

Copyright (c) 2014 Someone

Permission is hereby granted, free of charge, to any person obtaining a copy of this software
and associated documentation files (the "Software"), to deal in the Software without restriction,
including without limitation the rights to use, copy, modify, merge, publish, distribute,
sublicense, and/or sell copies of the Software.
"""
APACHE_TEXT = """Apache License
                           Version 2.0, January 2004
                        http://www.apache.org/licenses/
"""
BSD_TEXT = """Copyright (c) 2005-2024, NumPy Developers.
All rights reserved.

Redistribution and use in source and binary forms, with or without modification, are permitted
provided that the following conditions are met: (the rest of a BSD license follows)
"""


def folded(text: str) -> str:
    """``text`` as a METADATA field value spread over lines (RFC 822 folding, as setuptools and
    wheel write a multi-line License field)."""
    return "\n        ".join(text.splitlines())


def ids(*names: str) -> tuple[License, ...]:
    return tuple(License("id", n) for n in names)


def names(*names: str) -> tuple[License, ...]:
    return tuple(License("name", n) for n in names)


CUT = {"cut": True}
# (METADATA lines after Name and Version, what the probe reports, what the SBOM claims)
METADATA_CASES: list[tuple[str, str, dict[str, Any], tuple[License, ...]]] = [
    (
        "pep639-expression-wins",
        "License-Expression: MIT OR Apache-2.0\nLicense: MIT\n"
        "Classifier: License :: OSI Approved :: MIT License\n",
        {"expression": "MIT OR Apache-2.0", "text": "MIT",
         "classifiers": ["License :: OSI Approved :: MIT License"]},
        (License("expression", "MIT OR Apache-2.0"),),
    ),
    ("field-spdx-id", "License: bsd-3-clause\n", {"text": "bsd-3-clause"}, ids("BSD-3-Clause")),
    ("field-short-name", "License: Apache 2.0\n", {"text": "Apache 2.0"}, names("Apache 2.0")),
    (
        "field-expression",
        "License: MPL-2.0 AND MIT\n",
        {"text": "MPL-2.0 AND MIT"},
        (License("expression", "MPL-2.0 AND MIT"),),
    ),
    (
        "field-pasted-license-with-a-clear-title",
        f"License: {folded(MIT_TEXT)}\n",
        {"text": MIT_TEXT.strip()[:200], **CUT},
        ids("MIT"),
    ),
    (
        "field-pasted-apache-license",
        f"License: {folded(APACHE_TEXT)}\n",
        {"text": "Apache License\n" + " " * 27 + "Version 2.0, January 2004\n" + " " * 24
                 + "http://www.apache.org/licenses/"},
        ids("Apache-2.0"),
    ),
    (
        "field-pasted-license-without-a-title-falls-back-to-classifiers",
        f"License: {folded(BSD_TEXT)}\nClassifier: License :: OSI Approved :: BSD License\n",
        {"text": BSD_TEXT.strip()[:200], **CUT, "classifiers": ["License :: OSI Approved :: BSD License"]},
        names("BSD License"),
    ),
    (
        "field-pasted-license-alone",
        f"License: {folded(BSD_TEXT)}\n",
        {"text": BSD_TEXT.strip()[:200], **CUT},
        (),
    ),
    (
        "field-unknown",
        "License: UNKNOWN\nClassifier: License :: OSI Approved :: ISC License (ISCL)\n",
        {"text": "UNKNOWN", "classifiers": ["License :: OSI Approved :: ISC License (ISCL)"]},
        ids("ISC"),
    ),
    (
        "classifiers-only",
        "Classifier: Programming Language :: Python :: 3\n"
        "Classifier: License :: DFSG approved\n"
        "Classifier: License :: OSI Approved :: MIT License\n"
        "Classifier: License :: OSI Approved :: Apache Software License\n"
        "Classifier: License :: OSI Approved :: GNU General Public License v2 or later (GPLv2+)\n"
        "Classifier: License :: OSI Approved\n",
        {"classifiers": [
            "License :: DFSG approved", "License :: OSI Approved :: MIT License",
            "License :: OSI Approved :: Apache Software License",
            "License :: OSI Approved :: GNU General Public License v2 or later (GPLv2+)",
            "License :: OSI Approved",
        ]},
        (License("id", "MIT"), License("name", "Apache Software License"), License("id", "GPL-2.0-or-later")),
    ),
    ("none", "Summary: nothing about licenses\n", {}, ()),
]  # fmt: skip


def distribution(tmp_path: Path, lines: str) -> importlib.metadata.Distribution:
    info = tmp_path / "demo-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.4\nName: demo\nVersion: 1.0\n{lines}")
    return importlib.metadata.PathDistribution(info)


@pytest.mark.parametrize(
    ("lines", "reported", "claimed"), [c[1:] for c in METADATA_CASES], ids=[c[0] for c in METADATA_CASES]
)
def test_a_distributions_metadata_gives_its_license(
    tmp_path: Path, lines: str, reported: dict[str, Any], claimed: tuple[License, ...]
) -> None:
    found = probe.python_license(distribution(tmp_path, lines).metadata)
    assert found == reported
    assert json.loads(json.dumps(found)) == found  # what the probe prints is plain JSON
    assert declared_licenses(DeclaredLicense.from_json(found)) == claimed


def test_a_pasted_license_is_never_copied_whole(tmp_path: Path) -> None:
    text = BSD_TEXT * 40
    found = probe.python_license(distribution(tmp_path, f"License: {folded(text)}\n").metadata)
    assert len(found["text"]) == probe.LICENSE_HEAD and found["cut"] is True
    # A one-line name far longer than a name is no name either.
    assert declared_licenses(DeclaredLicense(text="BSD " + "x" * 150)) == ()


def test_every_classifier_id_is_on_the_spdx_list() -> None:
    # The list cyclonedx-python-lib ships (the CycloneDX schema's), not ours.
    assert [i for i in CLASSIFIER_IDS.values() if not spdx.is_supported_id(i)] == []


# --------------------------------------------------------------------------- Debian copyright files

DEP5 = """Format: https://www.debian.org/doc/packaging-manuals/copyright-format/1.0/
Upstream-Name: demo
Source: https://example.org/demo

Files: debian/*
Copyright: 2020 A Maintainer
License: GPL-2+

Files: *
Copyright: 1998-2024 The Demo Authors
License: BSD-3-clause
 Redistribution and use in source and binary forms, with or without
 modification, are permitted ...

Files: lib/compat/*
       lib/extra/*
Copyright: 2001 Someone Else
License: GPL-2+ or LGPL-2.1+

Files: lib/zlib/*
Copyright: 1995 Jean-loup Gailly
License:   Zlib

License: GPL-2+
 This program is free software; you can redistribute it ...
 .
 On Debian systems, see /usr/share/common-licenses/GPL-2.
"""
PROSE = """This is the Debian prepackaged version of the GNU C Library.

It was put together by the GNU Libc Maintainers.

License:
 Redistribution and use in source and binary forms, with or without
License: Permission to use, copy, modify, and distribute this software
"""
# (copyright file text, the short names the probe reports)
DEP5_CASES: list[tuple[str, str, list[str]]] = [
    ("several-stanzas", DEP5, ["BSD-3-clause", "GPL-2+", "GPL-2+ or LGPL-2.1+", "Zlib"]),
    ("http-format-url", DEP5.replace("https://", "http://").replace("1.0/\n", "1.0\n", 1),
     ["BSD-3-clause", "GPL-2+", "GPL-2+ or LGPL-2.1+", "Zlib"]),
    ("prose", PROSE, []),
    ("draft-format", "Format-Specification: http://svn.debian.org/wsvn/dep/web/deps/dep5.mdwn?rev=135\n"
     "\nFiles: *\nLicense: MIT\n", []),
    ("empty", "", []),
]  # fmt: skip


@pytest.mark.parametrize(("text", "expected"), [c[1:] for c in DEP5_CASES], ids=[c[0] for c in DEP5_CASES])
def test_a_dep5_copyright_file_gives_its_license_names(text: str, expected: list[str]) -> None:
    assert probe.dep5_license_names(text) == expected


def test_each_installed_package_gets_the_names_of_its_own_copyright_file(tmp_path: Path) -> None:
    (tmp_path / "status").write_text(
        "".join(
            f"Package: {name}\nStatus: install ok installed\nArchitecture: {arch}\nVersion: 1\n\n"
            for name, arch in [
                ("demo", "amd64"), ("demo", "i386"), ("libdemo1", "amd64"), ("prose", "amd64"),
                ("nodoc", "amd64"), ("folder", "amd64"), ("binary", "amd64"),
            ]
        )
    )  # fmt: skip
    doc = tmp_path / "doc"
    (doc / "demo").mkdir(parents=True)
    (doc / "demo/copyright").write_text(DEP5)
    os.symlink("demo", doc / "libdemo1")  # a doc folder linked to its source's, as libgcc-s1's
    (doc / "prose").mkdir()
    (doc / "prose/copyright").write_text(PROSE)
    (doc / "folder/copyright").mkdir(parents=True)  # not a file: no license, no crash
    (doc / "binary").mkdir()
    # Bytes that are not UTF-8 (a maintainer's name in Latin-1) do not stop the file being read.
    (doc / "binary/copyright").write_bytes(DEP5.replace("A Maintainer", "Jos\xe9").encode("latin-1"))
    packages = probe.deb_packages(tmp_path / "status", doc)
    found = {(p["name"], p["architecture"]): p.get("license") for p in packages}
    demo = {"names": ["BSD-3-clause", "GPL-2+", "GPL-2+ or LGPL-2.1+", "Zlib"]}
    assert found == {
        ("demo", "amd64"): demo, ("demo", "i386"): demo, ("libdemo1", "amd64"): demo,
        ("prose", "amd64"): None, ("nodoc", "amd64"): None, ("folder", "amd64"): None,
        ("binary", "amd64"): demo,
    }  # fmt: skip
    # The SBOM's choices for a deb: SPDX ids where a name is spelled as one, else the name.
    assert declared_licenses(DeclaredLicense.from_json(demo)) == (
        License("id", "BSD-3-Clause"), License("name", "GPL-2+"), License("name", "GPL-2+ or LGPL-2.1+"),
        License("id", "Zlib"),
    )  # fmt: skip


# --------------------------------------------------------------------------- older facts

OLD_FACTS: dict[str, Any] = {
    "format": 1, "python": "3.11.2", "machine": "x86_64", "os": {"id": "debian", "version_id": "12"},
    "deb_packages": [{"name": "libaio1", "version": "0.3.113-4", "architecture": "amd64"}],
    "python_packages": [{"name": "torch", "version": "2.13.0"}],
    "manifest_path": "/m.json", "manifest": {}, "ops": [],
}  # fmt: skip


def test_facts_from_a_probe_without_licenses_still_read_and_claim_none() -> None:
    import datetime

    facts = ImageFacts.from_json(OLD_FACTS)
    assert {p.license for p in (*facts.deb_packages, *facts.python_packages)} == {DeclaredLicense()}
    document = json.loads(
        make_sbom(
            SbomInput(
                image="acme/ops:1", facts=facts, bases=(), ds_build=(), source_digests={},
                timestamp=datetime.datetime(2026, 1, 1, tzinfo=datetime.timezone.utc), tool_version="0",
            )
        )
    )  # fmt: skip
    packages = [c for c in document["components"] if c.get("purl")]
    assert len(packages) == 2 and all("licenses" not in c for c in packages)
