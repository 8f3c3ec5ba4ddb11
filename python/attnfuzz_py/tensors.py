"""Shared-memory views to the tensors an adapter receives, and its results back into them."""
import numpy as np


def as_torch(view: np.ndarray, dtype: str):
    """A zero-copy torch view of a numpy view of the shared memory (bf16 from its uint16 bits)."""
    import torch
    t = torch.from_numpy(view) if view.size else torch.from_numpy(np.ascontiguousarray(view))
    return t.view(torch.bfloat16) if dtype == "bf16" else t


def as_numpy(view: np.ndarray, dtype: str):
    """The numpy view itself; bf16 as ml_dtypes.bfloat16 (zero-copy) where that package is there."""
    if dtype != "bf16":
        return view
    try:
        import ml_dtypes
    except ImportError as e:
        raise RuntimeError("bf16 tensors in numpy need the ml_dtypes package") from e
    return view.view(ml_dtypes.bfloat16)


def to_device(t, device: str):
    """The tensor on `device` with the same strides (one copy), so kernels still see the
    case's layout there; on the CPU, the view itself."""
    if device == "cpu":
        return t
    import torch
    out = torch.empty_strided(t.shape, t.stride(), dtype=t.dtype, device=device)
    out.copy_(t)
    return out


def _check_shape(result, shape, what):
    got = getattr(result, "shape", ())
    if tuple(got) != tuple(shape):
        raise ValueError(f"{what} has shape {list(got)}, expected {list(shape)}")


def write_result(view, dtype: str, result, what: str, framework: str, torch_view=None):
    """Copies a result into its shared-memory view: one copy, rounding to the view's dtype.
    view: the numpy view; torch_view: the same as a torch tensor, where the caller keeps one
    (then view may be None for a torch result)."""
    if framework == "torch" and not isinstance(result, np.ndarray):
        target = as_torch(view, dtype) if torch_view is None else torch_view
        _check_shape(result, target.shape, what)
        if target.numel():
            target.copy_(result.detach() if result.requires_grad else result)
        return
    _check_shape(result, view.shape, what)
    if view.size:
        np.copyto(as_numpy(view, dtype), np.asarray(result), casting="unsafe")
