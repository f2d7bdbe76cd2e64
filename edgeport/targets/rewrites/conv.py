"""Convolutions in forms some converters refuse: transposed conv with ``output_padding``, and string
padding (``"valid"``/``"same"``), each rewritten to the plain integer-padding conv every backend has."""

from __future__ import annotations

from edgeport.targets.rewrites.registry import rewrite


def has_output_padding(node) -> bool:
    value = node.kwargs.get("output_padding", node.args[5] if len(node.args) > 5 else 0)
    return any(value) if isinstance(value, (list, tuple)) else bool(value)


@rewrite("conv_transpose_output_padding",
         ops=("aten.conv_transpose1d.default", "aten.conv_transpose2d.input", "aten.conv_transpose3d.input"),
         fixes="ConvTranspose with output_padding fails to legalize: transposed conv without padding + crop + bias",
         when=has_output_padding)
def conv_transpose_cropped(x, weight, bias=None, stride=1, padding=0, output_padding=0, groups=1, dilation=1):
    """Transposed conv with ``output_padding`` as: full transposed conv (padding 0), crop ``padding`` at
    the start and ``padding - output_padding`` at the end (zero-pad if negative), then add the bias."""
    import torch.nn.functional as F

    dims = x.dim() - 2
    conv = {1: F.conv_transpose1d, 2: F.conv_transpose2d, 3: F.conv_transpose3d}[dims]
    as_list = lambda v: list(v) if isinstance(v, (list, tuple)) else [v] * dims  # noqa: E731
    pads, extra = as_list(padding), as_list(output_padding)
    y = conv(x, weight, None, stride, 0, 0, groups, dilation)
    for axis in range(dims):
        size = y.shape[2 + axis]
        end = size - pads[axis] + extra[axis]
        if end > size:
            widths = [0, 0] * (dims - 1 - axis) + [0, end - size]
            y = F.pad(y, widths)
        y = y.narrow(2 + axis, pads[axis], end - pads[axis])
    if bias is not None:
        y = y + bias.reshape(1, -1, *([1] * dims))
    return y


@rewrite("conv_padding_numeric", ops=("aten.conv1d.padding", "aten.conv2d.padding", "aten.conv3d.padding"),
         fixes="Conv(padding='valid'/'same') breaks torchax ('immutable_list' ...): explicit integer padding")
def conv_numeric_padding(x, weight, bias=None, stride=1, padding="valid", dilation=1, groups=1):
    """``conv(padding="valid"|"same")`` as explicit integer padding (asymmetric "same" pads first), the
    form torchax and converters that expect ints accept."""
    import torch.nn.functional as F

    dims = x.dim() - 2
    conv = {1: F.conv1d, 2: F.conv2d, 3: F.conv3d}[dims]
    if padding == "valid":
        return conv(x, weight, bias, stride, 0, dilation, groups)
    dil = list(dilation) if isinstance(dilation, (list, tuple)) else [dilation] * dims
    totals = [d * (k - 1) for d, k in zip(dil, weight.shape[2:])]
    if all(t % 2 == 0 for t in totals):
        return conv(x, weight, bias, stride, [t // 2 for t in totals], dilation, groups)
    widths = []
    for total in reversed(totals):
        widths += [total // 2, total - total // 2]
    return conv(F.pad(x, widths), weight, bias, stride, 0, dilation, groups)

