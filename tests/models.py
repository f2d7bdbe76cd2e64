"""Tiny models the tests convert (built here, random init, seeded; nothing downloads)."""

import torch
from torch import nn


class CNN(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(), nn.MaxPool2d(2),
                                  nn.Conv2d(8, 16, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten())
        self.head = nn.Linear(16, 5)

    def forward(self, x):
        return self.head(self.body(x))


class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(20, 64), nn.GELU(), nn.Linear(64, 64), nn.Tanh(), nn.Linear(64, 4))

    def forward(self, x):
        return self.net(x)


class TransformerBlock(nn.Module):
    def __init__(self, dim=32, heads=4):
        super().__init__()
        self.layer = nn.TransformerEncoderLayer(dim, heads, dim_feedforward=64, batch_first=True, dropout=0.0)

    def forward(self, x):
        return self.layer(x)


class TwoInTwoOut(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Linear(8, 6)
        self.b = nn.Linear(4, 6)

    def forward(self, x, y):
        h = torch.relu(self.a(x) + self.b(y))
        return h.sum(dim=-1, keepdim=True), h * 2.0


class MatMul(nn.Module):
    """A plain matmul: analytic FLOPs = 2 * M * K * N."""

    def __init__(self, k=64, n=32):
        super().__init__()
        self.w = nn.Parameter(torch.randn(k, n))

    def forward(self, x):
        return x @ self.w


def cnn():
    torch.manual_seed(0)
    return CNN().eval(), (torch.randn(1, 3, 16, 16),)


def mlp():
    torch.manual_seed(0)
    return MLP().eval(), (torch.randn(2, 20),)


def transformer():
    torch.manual_seed(0)
    return TransformerBlock().eval(), (torch.randn(1, 8, 32),)


def two_io():
    torch.manual_seed(0)
    return TwoInTwoOut().eval(), (torch.randn(1, 8), torch.randn(1, 4))


def matmul():
    torch.manual_seed(0)
    return MatMul().eval(), (torch.randn(16, 64),)


def bare_mlp():
    """Returns only a module: example inputs come from --input."""
    torch.manual_seed(0)
    return MLP().eval()




# ---- rewrite classes (issue 6): each trips a raw converter; edgeport's passes make them convertible ----

class Troublemaker(nn.Module):
    """Hits five LiteRT failure classes at once: ConvTranspose output_padding, sort/argsort (int64
    indices), histc, rfft -> abs (complex), scatter_add (runtime refuses STABLEHLO_SCATTER)."""

    def __init__(self):
        super().__init__()
        self.up = nn.ConvTranspose2d(3, 2, 3, 2, 1, output_padding=1)

    def forward(self, x, segment):
        y = self.up(x).flatten(1)                                      # (1, 2*8*8)
        ranked = torch.sort(y, dim=-1, descending=True)[0][:, :8]
        order = torch.argsort(y[:, :16], dim=-1)
        counts = torch.histc(y, bins=4, min=-0.5, max=0.5)
        spectrum = torch.fft.rfft(y[:, :32]).abs()
        pooled = torch.zeros(1, 4).scatter_add(1, segment, y[:, :10])
        return ranked, order, counts, spectrum, pooled


def troublemaker():
    torch.manual_seed(0)
    return Troublemaker().eval(), (torch.randn(1, 3, 4, 4), torch.randint(0, 4, (1, 10)))


class HalfNorm(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(16, 32), nn.LayerNorm(32), nn.GELU(), nn.Linear(32, 4))

    def forward(self, x):
        return self.net(x)


def bf16_norm():
    torch.manual_seed(0)
    return HalfNorm().to(torch.bfloat16).eval(), (torch.randn(2, 16).bfloat16(),)


class DictInOut(nn.Module):
    """Keyword inputs given out of signature order and a None argument; dict output."""

    def __init__(self):
        super().__init__()
        self.z, self.a = nn.Linear(8, 4), nn.Linear(3, 4)

    def forward(self, zeta, alpha, bias=None):
        extra = 0 if bias is None else bias
        return {"sum": self.z(zeta) + self.a(alpha) + extra, "diff": self.z(zeta) - self.a(alpha)}


def dict_io():
    torch.manual_seed(0)
    return DictInOut().eval(), {"alpha": torch.randn(2, 3), "bias": None, "zeta": torch.randn(2, 8)}


@torch.library.custom_op("edgeport_tests::np_square", mutates_args=())
def np_square(x: torch.Tensor) -> torch.Tensor:
    import numpy as np

    return torch.from_numpy(np.square(x.numpy()))


@np_square.register_fake
def _np_square_fake(x):
    return torch.empty_like(x)


class OpaqueOp(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Linear(6, 6)

    def forward(self, x):
        return np_square(self.a(x)) + 1


def opaque_op():
    torch.manual_seed(0)
    return OpaqueOp().eval(), (torch.randn(2, 6),)


class CacheStep(nn.Module):
    """Mutates a buffer and an input in place (a KV-cache decode step in miniature): torchax returns the
    mutated values as extra leading outputs unless outputs are picked by the program's output spec."""

    def __init__(self):
        super().__init__()
        self.register_buffer("cache", torch.zeros(2, 4))
        self.proj = nn.Linear(4, 4)

    def forward(self, x, kv):
        self.cache.add_(x)
        kv.mul_(0.5)
        return self.proj(self.cache) + kv, x * 2


def cache_step():
    torch.manual_seed(0)
    return CacheStep().eval(), (torch.randn(2, 4), torch.randn(2, 4))


class CumSum(nn.Module):
    """A linear layer (XNNPACK takes it) then a running sum (CUMSUM: XNNPACK does not)."""

    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(8, 8)

    def forward(self, x):
        return torch.cumsum(self.proj(x), dim=1)


def cumsum():
    torch.manual_seed(0)
    return CumSum().eval(), (torch.randn(2, 8),)


class TwoHeads(nn.Module):
    """Two outputs from a shared trunk; only the second passes through a Tanh (where the contract suite
    plants its wrong kernel)."""

    def __init__(self):
        super().__init__()
        self.trunk = nn.Sequential(nn.Linear(8, 16), nn.ReLU())
        self.head0 = nn.Linear(16, 4)
        self.head1 = nn.Sequential(nn.Linear(16, 16), nn.Tanh(), nn.Linear(16, 3))

    def forward(self, x):
        h = self.trunk(x)
        return self.head0(h), self.head1(h)


def two_heads():
    torch.manual_seed(0)
    return TwoHeads().eval(), (torch.randn(2, 8),)


class BiasedAttention(nn.Module):
    """Attention whose additive mask is computed from a parameter, as T5, Swin and BEiT compute their
    relative position bias: CPU SDPA takes its flash kernel only while that mask does not require grad, so
    the graph's layouts depend on the autograd state it was traced in."""

    def __init__(self):
        super().__init__()
        self.q, self.k, self.v = nn.Linear(16, 16), nn.Linear(16, 16), nn.Linear(16, 16)
        self.bias = nn.Embedding(8, 2)

    def forward(self, x):
        b, s, _ = x.shape
        pos = torch.arange(s)
        mask = self.bias((pos[:, None] + pos[None]) % 8).permute(2, 0, 1)[None].contiguous()
        q, k, v = (p(x).view(b, s, 2, 8).transpose(1, 2) for p in (self.q, self.k, self.v))
        out = nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        return out.transpose(1, 2).reshape(b, s, 16)


def biased_attention():
    torch.manual_seed(0)
    return BiasedAttention().eval(), (torch.randn(2, 8, 16),)


class MQAttention(nn.Module):
    """Causal self-attention with ONE kv head repeated over 4 query heads the way transformers'
    ``repeat_kv`` does (unsqueeze -> expand -> reshape), then SDPA. Scaled-up projections make the
    attention peaked: with near-uniform scores a wrong key layout only shows as ~1e-3 noise."""

    def __init__(self, dim=64, heads=4, kv_heads=1):
        super().__init__()
        self.heads, self.kv_heads, self.head_dim = heads, kv_heads, dim // heads
        self.q = nn.Linear(dim, dim)
        self.kv = nn.Linear(dim, 2 * kv_heads * self.head_dim)
        self.o = nn.Linear(dim, dim)
        with torch.no_grad():
            self.q.weight.mul_(4.0)
            self.kv.weight.mul_(4.0)

    def forward(self, x):
        b, s, _ = x.shape
        q = self.q(x).view(b, s, self.heads, self.head_dim).transpose(1, 2)
        k, v = self.kv(x).view(b, s, 2 * self.kv_heads, self.head_dim).transpose(1, 2).chunk(2, dim=1)
        rep = self.heads // self.kv_heads
        k, v = [t[:, :, None].expand(b, self.kv_heads, rep, s, self.head_dim).reshape(b, self.heads, s, self.head_dim)
                for t in (k, v)]
        out = nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.o(out.transpose(1, 2).reshape(b, s, -1))


def mqa_attention():
    torch.manual_seed(0)
    return MQAttention().eval(), (torch.randn(1, 8, 64),)


class ComplexRope(nn.Module):
    """Rotary embeddings the Meta-Llama / Mistral-reference / DeepSeek-V2 way: complex frequencies from
    ``torch.polar`` (one table precomputed as a complex buffer, one computed in forward), the query pairs
    as ``view_as_complex``, a complex multiply, ``view_as_real``, then a projection."""

    def __init__(self, dim=32, heads=2, positions=16):
        super().__init__()
        self.heads, self.head_dim = heads, dim // heads
        inv = 1.0 / (10000 ** (torch.arange(0, self.head_dim, 2).float() / self.head_dim))
        self.register_buffer("inv_freq", inv, persistent=False)
        table = torch.polar(torch.ones(positions, self.head_dim // 2), torch.outer(torch.arange(positions).float(), inv))
        self.register_buffer("freqs_cis", table, persistent=False)
        self.q = nn.Linear(dim, dim)
        self.o = nn.Linear(dim, dim)

    def forward(self, x):
        b, t, _ = x.shape
        q = self.q(x).view(b, t, self.heads, self.head_dim)
        freqs = torch.outer(torch.arange(t, dtype=torch.float32), self.inv_freq)
        cis = torch.polar(torch.ones_like(freqs), freqs) * 0.5            # DeepSeek-V2 scales the table
        qc = torch.view_as_complex(q.float().reshape(b, t, self.heads, -1, 2))
        fresh = torch.view_as_real(qc * cis[:, None, :]).flatten(3)
        stored = torch.view_as_real(qc * self.freqs_cis[:t].view(1, t, 1, -1).conj()).flatten(3)
        return self.o((fresh + stored).type_as(x).reshape(b, t, -1))


def complex_rope():
    torch.manual_seed(0)
    return ComplexRope().eval(), (torch.randn(1, 8, 32),)


class SortingRouter(nn.Module):
    """A mixture-of-experts layer whose router picks its top-2 experts by sorting the scores (aten.sort:
    STABLEHLO_SORT on LiteRT, no sort kernel in ExecuTorch's runtime), then mixes dense experts."""

    def __init__(self, dim=16, experts=4):
        super().__init__()
        self.router = nn.Linear(dim, experts)
        self.experts = nn.Linear(dim, dim * experts)
        self.experts_n = experts

    def forward(self, x):
        scores = torch.softmax(self.router(x), -1)
        top, index = torch.sort(scores, dim=-1, descending=True)
        weights = torch.zeros_like(scores).scatter(-1, index[..., :2], top[..., :2])
        out = self.experts(x).unflatten(-1, (self.experts_n, -1))
        return (weights.unsqueeze(-1) * out).sum(-2)


def sorting_router():
    torch.manual_seed(0)
    return SortingRouter().eval(), (torch.randn(1, 6, 16),)


class AttentionSinks(nn.Module):
    """Attention with a learned sink logit per head (gpt-oss): the scores and the sink are normalised by
    their max over the last dim of a 4-D tensor (max.dim -1), then a softmax whose sink column is dropped."""

    def __init__(self, dim=32, heads=4):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(dim, 3 * dim)
        self.sinks = nn.Parameter(torch.randn(heads))

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(x).view(b, t, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        scores = q @ k.transpose(-1, -2) / (d // self.heads) ** 0.5
        sinks = self.sinks.view(1, -1, 1, 1).expand(b, -1, t, 1)
        combined = torch.cat([scores, sinks], -1)
        combined = combined - combined.max(dim=-1, keepdim=True).values
        probs = torch.softmax(combined, -1)[..., :-1]
        return (probs @ v).transpose(1, 2).reshape(b, t, d)


def attention_sinks():
    torch.manual_seed(0)
    return AttentionSinks().eval(), (torch.randn(1, 8, 32),)
