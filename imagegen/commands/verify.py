"""``imagegen verify IMAGE``: load, self-test and audit each op in a sealed container
(no network, read-only, non-root), on the GPUs ``--gpus`` passes."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from imagegen.commands._options import JsonOption, table_options
from imagegen.commands._output import console, emit_json
from imagegen.errors import BadInputError, VerificationFailedError
from imagegen.imagespec.checks import op_list
from imagegen.proof import image_proof as proof_lib
from imagegen.proof.signing import load_public_key
from imagegen.verify import container as verify_lib
from imagegen.verify.table import render_table
from op_builder.registry import ALL_OPS, check_op_names
from op_builder.suggest import closest

_EMPTY_OPS = "leave --ops out to check every op of the image's io.imagegen.ops label, or name some"
ImageArgument = Annotated[str, typer.Argument(metavar="IMAGE", help="Image tag or id.")]


# Every option but --json: the table's rows (--ops: verify_ops, --timeout, --key: verify_...).
@table_options("verify")
def verify(
    image: ImageArgument,
    verify_ops: str | None = None,
    verify_timeout: float = 300.0,
    gpus: str | None = None,
    require_gpu: bool = False,
    verify_key: Path | None = None,
    derived: bool = False,
    json: JsonOption = False,
) -> None:
    """Verify IMAGE: every op loads ahead of time, passes its self-test, and holds its planned GPU code."""
    # Each op once, in the order given; an empty --ops is bad input, not "every op".
    lower_case = "op names are lower case; " + _EMPTY_OPS
    names = None if verify_ops is None else list(op_list(verify_ops, _EMPTY_OPS, all_hint=lower_case))
    # A misspelt op of ours is caught here, before the engine is asked; other names may be an op
    # package's, which only the image knows (verify_image checks them against its labels).
    check_op_names([n for n in names or () if n in ALL_OPS or closest(n, ALL_OPS)])
    selected = verify_lib.parse_gpus(gpus)
    if derived and verify_key is None:
        raise BadInputError(
            "--derived without --key: it says what a signature covers of an image built on a signed one",
            hint="add --key PUBLIC_KEY.pem (the signed image's key)",
        )
    # A bad key file: exit 2 before the engine.
    public_key = None if verify_key is None else load_public_key(verify_key)
    verify_lib.check_verify_input(image, verify_timeout)  # so is a bad reference or timeout
    # The proof first: with --key it is read from outside the image, and decides whether the image
    # is the signed one whatever its own Python does when it runs (below).
    proof = proof_lib.check_image(image, public_key, timeout=verify_timeout, derived=derived)
    try:
        result = verify_lib.verify_image(
            image, ops=names, timeout=verify_timeout, gpus=selected, require_gpu=require_gpu
        )
    except VerificationFailedError as exc:
        if proof is None or proof.ok:
            raise
        # The ops could not be checked at all; what the proof found says more about why.
        raise VerificationFailedError(
            f"{image} failed verification: {_proof_name(proof)}: {proof.summary()}; and its ops could not be "
            f"checked in it: {exc.message}",
            hint=proof.hint,
        ) from None
    ok = result.ok and (proof is None or proof.ok)
    if json:
        emit_json({**result.to_json(), "ok": ok, "proof": None if proof is None else proof.to_json()})
    else:
        out = console()
        out.print(render_table(result, width=out.width))
        out.print(proof_lib.proof_line(proof), markup=False)
    if not ok:
        failures = [result.failure_summary()] if not result.ok else []
        failures += [f"{_proof_name(proof)}: {proof.summary()}"] if proof is not None and not proof.ok else []
        raise VerificationFailedError(
            f"{image} failed verification: {'; '.join(failures)}",
            hint="the table above has each op's load, self-test and device-code result"
            if not result.ok or proof is None
            else proof.hint,
            reported=json,  # the result document already says which op failed and why
        )


def _proof_name(proof: proof_lib.ProofCheck) -> str:
    """What failed: the proof against a key, or (without one) the SBOM's consistency."""
    return "SBOM" if proof.signed is None else "proof"
