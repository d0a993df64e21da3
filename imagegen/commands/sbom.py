"""``imagegen sbom IMAGE``: the SBOM (or, with --provenance, the provenance statement) an image
carries, printed as a table of its op modules, as the document itself (--json), or written to a
file exactly as the image holds it (-o FILE)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated, Any

import typer

from imagegen.commands._options import JsonOption, table_options
from imagegen.commands._output import console
from imagegen.errors import BadInputError, VerificationFailedError
from imagegen.files import write_atomic
from imagegen.oci.pulled_proof import fetch_proof, is_registry_digest
from imagegen.proof import image_proof as proof_lib
from imagegen.proof import sbom as props
from imagegen.proof.compare import SbomOp, sbom_ops

ImageArgument = Annotated[
    str,
    typer.Argument(
        metavar="IMAGE", help="Image tag or id; REGISTRY/NAME@DIGEST: read from the registry (its referrers)."
    ),
]


@table_options("sbom")  # every option but --json: the table's rows (-o FILE: sbom_output)
def sbom(
    image: ImageArgument,
    provenance: bool = False,
    signature: bool = False,
    sbom_output: Path | None = None,
    json: JsonOption = False,
) -> None:
    """Print IMAGE's SBOM (CycloneDX 1.6): every op module with its sha256, device code or CPU code paths."""
    if provenance and signature:
        raise BadInputError("--provenance and --signature name different documents", hint="pass one of them")
    kind = "signature" if signature else "provenance" if provenance else "sbom"
    if is_registry_digest(image):  # what was pushed: the proof attached to the manifest
        data = fetch_proof(image, kind)
    else:
        data = proof_lib.require_document(proof_lib.read_documents(image), kind)
    # Judged before anything is printed or written: a document that is no JSON object (or not
    # UTF-8) is no proof imagegen sealed, and a half-shown one would read as an answer.
    document = proof_lib.document_object(image, kind, data)
    if sbom_output is not None and str(sbom_output) != "-":
        write_atomic(sbom_output, data)
        return
    if json or sbom_output is not None or kind != "sbom":
        sys.stdout.write(data.decode())
        sys.stdout.flush()
        return
    try:
        ops = sbom_ops(document)
    except ValueError as exc:
        raise VerificationFailedError(
            f"{image}: its SBOM is {exc}",
            hint="the image's proof was damaged or not made by `imagegen build`: rebuild the image; "
            "do not trust it",
        ) from None
    _print(image, document, ops)


def _print(image: str, document: dict[str, Any], ops: dict[str, SbomOp]) -> None:
    out = console()
    components = [c for c in document.get("components") or [] if isinstance(c, dict)]
    counts = {
        "deb": sum(1 for c in components if str(c.get("purl", "")).startswith("pkg:deb/")),
        "pypi": sum(1 for c in components if str(c.get("purl", "")).startswith("pkg:pypi/")),
    }
    out.print(
        f"{image}: CycloneDX {document.get('specVersion')}, {counts['deb']} OS packages, "
        f"{counts['pypi']} Python packages",
        markup=False,
    )
    for name, op in ops.items():
        # What the module holds; a kind it holds none of (gfx in a CUDA module) is left out.
        found = [f"{key.split(':', 1)[1]} {','.join(names)}" for key, names in op.code.items() if names]
        empty = "isa - (no instruction-set path found)" if props.ISA in op.code else "no device code found"
        code = ", ".join(found) or empty
        out.print(f"{name}  sha256:{op.sha256}  {code}", markup=False)
        out.print(f"  {op.path}", markup=False)
