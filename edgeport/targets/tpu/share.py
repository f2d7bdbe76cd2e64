"""The program's weights and their jax copies held once: the torch tensors are made to view the jax arrays.

Why: torchax's ``t2j`` aliases a torch tensor through dlpack only when its data is 64-byte aligned; weights
mapped from ``model.safetensors`` sit at the file's offsets (not aligned), so each is copied. The process
then held the mapped weights (the programs') and the jax copies (the lowering's) through the lowering, the
AOT compiles and the writing: 2 x 2.4 GB for Qwen3-0.6B. The copy has the same bytes, so the programs'
tensors can as well read it: once no tensor is left over the mapped file, torch unmaps it, and the weights
are in memory once. The values every later row (another target) reads are the same bytes.
"""

from __future__ import annotations


def view_converted(states: list[dict], names: list[str], weights: dict, tied: dict, cache: dict, compute) -> int:
    """Point every tensor named ``names`` in ``states`` (a program's state before and after decompositions:
    usually the same tensor objects) at the jax array converted for it (``weights[tied.get(name, name)]``),
    when that array is an exact copy (same dtype and shape, on the CPU) and not already the same memory;
    the tensor's new storage is added to ``cache`` (``lower_program``'s key) so the next signature finds
    the array. Returns the bytes that stopped being held twice."""
    from edgeport.core.memory import storage_key

    if compute is not None:   # a cast copy (bf16) is not the program's values
        return 0
    moved, seen = 0, set()
    for name in names:
        array = weights.get(tied.get(name, name))
        for state in states:
            tensor = state.get(name)
            if array is None or tensor is None or id(tensor) in seen:
                continue
            seen.add(id(tensor))
            if _view(tensor, array):
                cache.setdefault((*storage_key(tensor), compute), (tensor, array))
                moved += tensor.numel() * tensor.element_size()
    return moved


def _view(tensor, array) -> bool:
    """``tensor.data`` becomes a view of ``array``'s buffer; False (untouched) when it can not be one."""
    import torch

    if not isinstance(tensor, torch.Tensor) or tensor.layout != torch.strided or not tensor.is_contiguous():
        return False
    try:
        if {d.platform for d in array.devices()} != {"cpu"}:
            return False
        alias = torch.from_dlpack(array)
    except Exception:  # no dlpack for this array (dtype, device): the copy stays beside the tensor
        return False
    if alias.dtype != tensor.dtype or alias.shape != tensor.shape or alias.data_ptr() == tensor.data_ptr():
        return False
    with torch.no_grad():
        tensor.data = alias
    return True
