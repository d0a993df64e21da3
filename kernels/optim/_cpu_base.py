"""The step loop the CPU optimizers share: input checks and the layouts a kernel cannot take.

The kernels read and write dense, contiguous tensors through raw pointers. What a user may
hand torch's optimizers but a kernel cannot take directly is adapted here, once, for the kernel
and the PyTorch fallback alike, so both accept the same inputs:

* a non-contiguous param (a transposed or tied view, a channels_last weight) is updated through
  a contiguous copy written back after the step (state is always kept contiguous);
* a sparse gradient (where the rule allows one: Adagrad, as ``torch.optim.Adagrad``) updates only
  the rows it names: coalesced, those rows of the param and state are gathered, updated densely
  by the same kernel, and scattered back.

It also steps one param group at a time and undoes such a step (``step_subgroup`` /
``rollback_subgroup``, what ZeRO-Offload calls on its sub-groups; see _cpu_optim_subgroup.py).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from types import ModuleType
from typing import Any, ClassVar, Literal

import torch
from torch import Tensor
from torch.optim.optimizer import ParamsT

from kernels.optim._common import Hyper, KernelOptimizer, Scalar
from kernels.optim._cpu_subgroup import RollbackPoints

Backend = Literal["kernel", "fallback"]


PARAM_DTYPES = (torch.float32, torch.bfloat16, torch.float16)


def _check_param(name: str, p: Tensor, half: Tensor | None, sparse_ok: bool) -> None:
    # Checked here for both paths, so the fallback refuses what the kernel refuses.
    if p.dtype not in PARAM_DTYPES:
        raise TypeError(f"{name}: params must be float32, bfloat16 or float16, got {p.dtype}")
    if p.device.type != "cpu":
        raise ValueError(f"{name}: params must be CPU tensors, got one on {p.device}")
    grad = p.grad
    assert grad is not None
    if grad.is_sparse and not sparse_ok:
        raise ValueError(f"{name}: sparse gradients are not supported (CPUAdagrad takes them)")
    if grad.layout not in (torch.strided, torch.sparse_coo):
        raise ValueError(f"{name}: gradients must be dense or sparse COO, got layout {grad.layout}")
    if grad.dtype != p.dtype:
        raise TypeError(f"{name}: gradients must have their param's dtype {p.dtype}, got {grad.dtype}")
    if half is None:
        return
    if p.dtype != torch.float32:
        raise TypeError(
            f"{name}: half_params are copies of float32 params; this param is {p.dtype} already "
            "(pass None for it)"
        )
    if half.dtype not in (torch.bfloat16, torch.float16):
        raise TypeError(f"{name}: half_params entries must be bfloat16 or float16, got {half.dtype}")
    if half.device.type != "cpu" or not half.is_contiguous():
        raise ValueError(f"{name}: half_params entries must be contiguous CPU tensors")
    if half.numel() != p.numel():
        raise ValueError(
            f"{name}: a half_params entry has {half.numel()} elements but its param has {p.numel()}"
        )


def _as_state(t: Tensor, dtype: torch.dtype) -> Tensor:
    """A state tensor as the kernels take it: contiguous, on the CPU (``t`` itself if it is)."""
    return t.to(device="cpu", dtype=dtype, memory_format=torch.contiguous_format)


def _row_index(indices: Tensor, sizes: Sequence[int]) -> Tensor:
    """Row numbers, in a ``(prod(sizes), -1)`` view of the param, of a COO gradient's indices."""
    strides = [math.prod(sizes[d + 1 :]) for d in range(len(sizes))]
    weights = torch.tensor(strides, dtype=indices.dtype).unsqueeze(1)
    return (indices * weights).sum(0)


class _GroupCalls:
    """The kernel calls of one param group, made as one call of the op's list form.

    A call into an op costs microseconds whatever the tensor's size (through torch.ops, for a
    stable module, about 5 us more than through pybind11): a model's many small tensors would pay
    it per tensor. Calls that need nothing done after them (a contiguous param, no half copy, a
    dense gradient) wait here and go as ``module.<kernel_list_fn>(params, grads, *state lists,
    *per-param scalar lists, *group scalars)``.
    """

    def __init__(self, per_param_scalars: int) -> None:
        self._per_param = per_param_scalars
        # The group's scalars (lr, betas, ...) -> each call's tensors and per-param scalars.
        self._calls: dict[tuple[Scalar, ...], list[tuple[Sequence[Tensor], tuple[Scalar, ...]]]] = {}

    def add(self, tensors: Sequence[Tensor], scalars: tuple[Scalar, ...]) -> None:
        shared = scalars[self._per_param :]
        self._calls.setdefault(shared, []).append((tensors, scalars[: self._per_param]))

    def run(self, list_fn: Callable[..., object]) -> None:
        for shared, calls in self._calls.items():
            tensor_lists = [list(column) for column in zip(*(tensors for tensors, _ in calls), strict=True)]
            scalar_lists = [list(column) for column in zip(*(own for _, own in calls), strict=True)]
            list_fn(*tensor_lists, *scalar_lists, *shared)
        self._calls.clear()


class CPUOptimizer(KernelOptimizer):
    """The step loop shared by the three optimizers; subclasses supply state and updates.

    The kernel call is ``module.<kernel_fn>(param, grad, *state[state_keys], half, *scalars)``,
    or for a group's plain tensors at once ``module.<kernel_list_fn>(params, grads, *state
    lists, *lists of the first per_param_scalars scalars, *the other scalars)``.
    """

    backend: Backend | None
    op_name: ClassVar[str]
    kernel_fn: ClassVar[str]
    kernel_list_fn: ClassVar[str]
    # How many of _kernel_scalars' values (from the first) are each param's own: the step count.
    per_param_scalars: ClassVar[int] = 0
    state_keys: ClassVar[tuple[str, ...]]
    # Whether the rule takes sparse gradients (torch's Adagrad does; its Adam does not).
    sparse_grads: ClassVar[bool] = False
    # What a param group's "state_dtype" may be; the first is the default.
    state_dtypes: ClassVar[tuple[torch.dtype, ...]] = (torch.float32,)

    def __init__(self, params: ParamsT, hyper: Hyper, use_kernel: bool | None) -> None:
        super().__init__(params, hyper, use_kernel)
        self._rollback = RollbackPoints()

    def __setstate__(self, state: dict[str, Any]) -> None:
        super().__setstate__(state)
        if "_rollback" not in self.__dict__:  # unpickled from a version without sub-group steps
            self._rollback = RollbackPoints()

    @torch.no_grad()
    def step(  # type: ignore[override]
        self,
        closure: Callable[[], float] | None = None,
        half_params: Sequence[Tensor | None] | None = None,
    ) -> float | None:
        """One update of every parameter that has a gradient.

        half_params: one tensor (bf16 or fp16, same numel) or None per parameter, in
        param-group order; each receives its parameter's new values, converted as
        ``param.to(dtype)`` would.
        """
        loss = self._run_closure(closure)
        self._rollback.disarm()
        self._step_groups(self.param_groups, half_params, "the optimizer")
        return loss

    @torch.no_grad()
    def step_subgroup(
        self,
        group_id: int,
        closure: Callable[[], float] | None = None,
        half_params: Sequence[Tensor | None] | None = None,
    ) -> float | None:
        """One update of the params of ``param_groups[group_id]`` that have a gradient.

        Each param keeps its own state and step count, so groups may step different numbers of
        times. ``rollback_subgroup(group_id)`` can undo this step until the group's next
        sub-group step, a ``step()`` or a ``load_state_dict()``; for that the step first copies
        the group's params and state aside (memory: one more copy of them, reused by later
        sub-group steps). The copy holds whatever state the rule keeps, so CPUAdam, CPUAdagrad
        and CPULion all take it. half_params: as in ``step``, one entry per param of this group.
        """
        group = self._group(group_id)
        loss = self._run_closure(closure)
        stepped = [p for p in group["params"] if p.grad is not None]
        self._rollback.save(group_id, stepped, self.state)
        self._step_groups([group], half_params, f"param group {group_id}")
        return loss

    @torch.no_grad()
    def rollback_subgroup(self, group_id: int, half_params: Sequence[Tensor | None] | None = None) -> None:
        """Undo the last ``step_subgroup(group_id)``: params, state and step counts become, bit
        for bit, what they were before it (state the step created is removed).

        Raises ValueError when there is no such step to undo: the group was not stepped with
        ``step_subgroup``, or ``step()``, ``load_state_dict()`` or a rollback came after.
        half_params: one bf16 / fp16 copy or None per param of the group, rewritten from the
        restored params.
        """
        group = self._group(group_id)
        if half_params is not None and len(half_params) != len(group["params"]):
            raise ValueError(
                f"{type(self).__name__}: half_params has {len(half_params)} entries but param group "
                f"{group_id} has {len(group['params'])} params"
            )
        self._rollback.restore(group_id, self.state, type(self).__name__)
        for p, half in zip(group["params"], half_params or (), strict=False):
            if half is not None:
                half.view(-1).copy_(p.reshape(-1))

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        super().load_state_dict(state_dict)
        self._rollback.disarm()  # the saved values belong to the state just replaced
        # torch casts floating state to each param's dtype on load, which for bf16 / fp16 params
        # would round fp32 state: take those tensors from the saved state instead, in the dtype
        # the group keeps its state in.
        saved_ids = [i for group in state_dict["param_groups"] for i in group["params"]]
        params = [(p, group) for group in self.param_groups for p in group["params"]]
        for saved_id, (p, group) in zip(saved_ids, params, strict=True):
            saved = state_dict["state"].get(saved_id, {})
            for key in self.state_keys:
                if isinstance(saved.get(key), Tensor) and saved[key].is_floating_point():
                    self.state[p][key] = _as_state(saved[key], self._state_dtype(group))

    def add_param_group(self, param_group: dict[str, Any]) -> None:
        dtype = param_group.get("state_dtype", self.state_dtypes[0])
        if dtype not in self.state_dtypes:
            allowed = " or ".join(str(d) for d in self.state_dtypes)
            raise ValueError(f"{type(self).__name__}: state_dtype must be {allowed}, got {dtype!r}")
        super().add_param_group(param_group)

    def _state_dtype(self, group: dict[str, Any]) -> torch.dtype:
        dtype: torch.dtype = group.get("state_dtype", self.state_dtypes[0])
        return dtype

    def _group(self, group_id: int) -> dict[str, Any]:
        if not 0 <= group_id < len(self.param_groups):
            raise IndexError(
                f"{type(self).__name__}: group_id {group_id} is out of range: the optimizer has "
                f"{len(self.param_groups)} param groups"
            )
        return self.param_groups[group_id]

    def _module(self) -> ModuleType | None:
        """The op module, or None for the fallback."""
        raise NotImplementedError

    def _step_groups(
        self, groups: Sequence[dict[str, Any]], half_params: Sequence[Tensor | None] | None, owner: str
    ) -> None:
        params = [p for group in groups for p in group["params"]]
        if half_params is not None and len(half_params) != len(params):
            raise ValueError(
                f"{type(self).__name__}: half_params has {len(half_params)} entries but "
                f"{owner} has {len(params)} params (give one per param, None to skip one)"
            )
        module = self._module()
        self.backend = "fallback" if module is None else "kernel"
        calls = _GroupCalls(self.per_param_scalars) if module is not None else None
        index = 0
        for group in groups:
            for p in group["params"]:
                half = half_params[index] if half_params is not None else None
                index += 1
                if p.grad is not None:
                    self._update_param(module, group, p, half, calls)
            if calls is not None:
                calls.run(getattr(module, self.kernel_list_fn))

    def _update_param(
        self,
        module: ModuleType | None,
        group: dict[str, Any],
        p: Tensor,
        half: Tensor | None,
        calls: _GroupCalls | None = None,
    ) -> None:
        _check_param(type(self).__name__, p, half, self.sparse_grads)
        grad = p.grad
        assert grad is not None
        state = self.state[p]
        if not state:
            self._init_state(p, group, state)
        for key in self.state_keys:
            # A state dict saved by torch keeps state in the param's layout (preserve_format) and
            # dtype; the kernels take it contiguous, in the group's state dtype.
            state[key] = _as_state(state[key], self._state_dtype(group))
        work = p if p.is_contiguous() else p.contiguous()
        if grad.is_sparse:
            self._sparse_update(module, work, grad, state, group)
        else:
            tensors = [state[key] for key in self.state_keys]
            if calls is not None and work is p and half is None:
                # Nothing to do after the kernel: it may run with the group's other tensors.
                calls.add((p, grad.contiguous(), *tensors), self._kernel_scalars(state, group))
            else:
                self._dense_update(module, work, grad.contiguous(), tensors, state, group, half)
            half = None  # written by the dense update
        if work is not p:
            p.copy_(work)
        if half is not None:
            half.view(-1).copy_(work.view(-1))

    def _dense_update(
        self,
        module: ModuleType | None,
        p: Tensor,
        grad: Tensor,
        tensors: list[Tensor],
        state: dict[str, Any],
        group: dict[str, Any],
        half: Tensor | None,
    ) -> None:
        """The update of contiguous ``p`` with ``grad`` and state ``tensors``, in place."""
        if module is not None:
            scalars = self._kernel_scalars(state, group)
            getattr(module, self.kernel_fn)(p, grad, *tensors, half, *scalars)
            return
        # The fallback computes in fp32 as the kernel does: bf16 / fp16 params and bf16 state are
        # widened, updated and rounded back once per step.
        work = p.float()
        work_state = [t.float() for t in tensors]
        view = {**state, **dict(zip(self.state_keys, work_state, strict=True))}
        self._fallback_update(work, grad.float(), view, group)
        if "step" in view:  # advance_step replaces a count that was not a tensor
            state["step"] = view["step"]
        for t, updated in ((p, work), *zip(tensors, work_state, strict=True)):
            if updated is not t:
                t.copy_(updated)
        if half is not None:
            half.view(-1).copy_(p.view(-1))

    def _sparse_update(
        self, module: ModuleType | None, p: Tensor, grad: Tensor, state: dict[str, Any], group: dict[str, Any]
    ) -> None:
        """torch.optim.Adagrad's sparse update: only the rows the coalesced gradient names change
        (repeated indices are summed first); the step count advances either way."""
        if float(group["weight_decay"]) != 0.0:
            raise ValueError(
                f"{type(self).__name__}: weight_decay is not compatible with sparse gradients "
                "(as in torch.optim.Adagrad)"
            )
        grad = grad.coalesce()
        sizes = p.shape[: grad.sparse_dim()]
        rows = math.prod(sizes)
        width = p.numel() // rows if rows else 0
        index = _row_index(grad.indices(), sizes)
        values = grad.values().reshape(index.numel(), width).contiguous()
        flat = [t.view(rows, width) for t in (p, *(state[key] for key in self.state_keys))]
        gathered = [t.index_select(0, index) for t in flat]  # copies: the kernel's dense rows
        self._dense_update(module, gathered[0], values, gathered[1:], state, group, None)
        for t, rows_after in zip(flat, gathered, strict=True):
            t.index_copy_(0, index, rows_after)  # coalesced: each row once

    def _init_state(self, p: Tensor, group: dict[str, Any], state: dict[str, Any]) -> None:
        raise NotImplementedError

    def _kernel_scalars(self, state: dict[str, Any], group: dict[str, Any]) -> tuple[Scalar, ...]:
        """The kernel's arguments after ``half``; counts the step when the kernel takes one."""
        raise NotImplementedError

    def _fallback_update(self, p: Tensor, grad: Tensor, state: dict[str, Any], group: dict[str, Any]) -> None:
        """The rule in PyTorch, in place on contiguous fp32 ``p`` and ``state``'s tensors."""
        raise NotImplementedError
