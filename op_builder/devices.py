"""The device questions every part of op_builder asks, in one leaf module (imports nothing of
op_builder): is there a GPU for torch, and if not, why, in words.

Kept apart so that the self-test harness and the preflight check both ask it here, rather than
one reaching into the other (which closed an import circle through the registry).
"""

from __future__ import annotations


def no_gpu_reason() -> str:
    """Why there is no GPU to run on, in words (for a skip, or a refused ``--device cuda``)."""
    import torch  # deferred: op_builder never imports torch at module level

    build = torch.version.cuda or torch.version.hip
    if build is None:
        return f"needs a GPU: torch {torch.__version__} is a CPU build"
    return f"needs a GPU: none is visible to torch {torch.__version__}"
