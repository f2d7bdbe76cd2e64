"""Complex intermediates (``stft``/``rfft`` followed by ``abs``/``real``/``imag``) as real arithmetic: no
converter here takes complex tensors, but every one takes matmuls and strided convolutions."""

from __future__ import annotations

import math

from edgeport.targets.rewrites.registry import node_rewrite


def _dft_parts(x, n: int):
    """Real and imaginary parts of the one-sided DFT of the last dim, as two matmuls. The angle index
    k*t mod n is computed in integers so large n keeps full float precision."""
    import torch

    k = torch.arange(n // 2 + 1, dtype=torch.int32)
    t = torch.arange(n, dtype=torch.int32)
    angle = (torch.remainder(t.unsqueeze(-1) * k.unsqueeze(0), n).to(torch.float32)) * (2 * math.pi / n)
    x = x.to(torch.float32)
    return x @ torch.cos(angle), -(x @ torch.sin(angle))


_NORM_SCALE = {None: lambda n: 1.0, "backward": lambda n: 1.0, "ortho": lambda n: n ** -0.5, "forward": lambda n: 1.0 / n}


def rfft_pair(x, n=None, dim=-1, norm=None):
    """``torch.fft.rfft`` as a real DFT, returned as ``(..., 2)`` (real, imag) like ``view_as_real``."""
    import torch

    x = x.movedim(dim, -1)
    size = x.shape[-1] if n is None else n
    if n is not None and n != x.shape[-1]:
        x = x[..., :n] if n < x.shape[-1] else torch.nn.functional.pad(x, (0, n - x.shape[-1]))
    re, im = _dft_parts(x, size)
    scale = _NORM_SCALE[norm](size)
    return torch.stack([re * scale, im * scale], -1).movedim(-2, dim - 1 if dim < 0 else dim)


def stft_pair(x, n_fft, hop_length=None, win_length=None, window=None, normalized=False, onesided=None,
              return_complex=None, align_to_window=None):
    """``torch.stft`` (center padding already lowered to ``pad`` by export) as one strided conv1d whose
    kernels are window * cos / window * -sin: framing, windowing and the DFT in one op every backend has.
    Returns ``(..., freq, frames, 2)`` like ``view_as_real(stft(...))``."""
    import torch

    hop = hop_length or n_fft // 4
    win = win_length or n_fft
    if window is None:
        window = torch.ones(win)
    if win < n_fft:
        left = (n_fft - win) // 2
        window = torch.nn.functional.pad(window, (left, n_fft - win - left))
    k = torch.arange(n_fft // 2 + 1, dtype=torch.int32)
    t = torch.arange(n_fft, dtype=torch.int32)
    angle = torch.remainder(k.unsqueeze(-1) * t.unsqueeze(0), n_fft).to(torch.float32) * (2 * math.pi / n_fft)
    kernels = torch.cat([torch.cos(angle) * window, -torch.sin(angle) * window]).unsqueeze(1)  # (2F, 1, n_fft)
    batch_shape = x.shape[:-1]
    frames = torch.nn.functional.conv1d(x.reshape(-1, 1, x.shape[-1]).float(), kernels, stride=hop)
    if normalized:
        frames = frames * n_fft ** -0.5
    freq = n_fft // 2 + 1
    pair = torch.stack([frames[:, :freq], frames[:, freq:]], -1)
    return pair.reshape(*batch_shape, freq, pair.shape[-2], 2)


def pair_abs(pair):
    return (pair[..., 0] * pair[..., 0] + pair[..., 1] * pair[..., 1]).sqrt()


def pair_real(pair):
    return pair[..., 0]


def pair_imag(pair):
    return pair[..., 1]


def pair_itself(pair):
    return pair


COMPLEX_USERS = {
    "aten.abs.default": pair_abs,
    "aten.view_as_real.default": pair_itself,
    "aten.real.default": pair_real,
    "aten.imag.default": pair_imag,
}


@node_rewrite("real_dft", ops=("aten.stft.default", "aten.fft_rfft.default"),
              fixes="complex intermediates (stft/rfft -> abs): real DFT as matmul / strided conv1d")
def real_dft(_gm, node) -> bool:
    """Replace a complex-producing FFT node with a real (real, imag) pair when every user can take the
    pair: abs, view_as_real, real, imag. Anything else (angle, complex mul) keeps the complex op and its error."""
    users = list(node.users)
    plan = []
    for user in users:
        name = str(user.target)
        if name in COMPLEX_USERS:
            plan.append((user, COMPLEX_USERS[name]))
        else:
            return False
    node.target = stft_pair if str(node.target).startswith("aten.stft") else rfft_pair
    for user, function in plan:
        user.target = function
    return True
