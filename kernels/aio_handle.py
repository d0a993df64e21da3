"""``kernels.aio_handle``: where DeepSpeed's ``aio_handle`` lived before our ops moved into op
packages (now ``kernels.aio.handle``). Kept as an alias, so code written against the documented
path still imports: the same class and function, not copies."""

from kernels.aio.handle import AIOHandle, aio_handle

__all__ = ["AIOHandle", "aio_handle"]
