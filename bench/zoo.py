"""The coverage zoo: models covering common architectures and every failure class of issue 6.

Each entry is a zero-argument factory returning ``(module, example)`` (the edgeport ``file.py:callable``
contract; ``example`` may be a tuple or a dict), random init, seeded, offline. ``ZOO`` maps name ->
(factory, failure class or architecture tag, realistic-size flag). ``python -m edgeport convert
bench/zoo.py:NAME`` converts one; bench/coverage.py runs them all.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import nn
import torch.nn.functional as F

torch.manual_seed(0)


def _seed():
    torch.manual_seed(0)


# ---- common architectures --------------------------------------------------------------------------------

class SmallCNN(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = nn.Sequential(nn.Conv2d(3, 16, 3, 2, 1), nn.BatchNorm2d(16), nn.ReLU(),
                                  nn.Conv2d(16, 32, 3, 2, 1, groups=16), nn.Conv2d(32, 32, 1), nn.ReLU6(),
                                  nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(32, 10))

    def forward(self, x):
        return self.body(x)


class TinyViT(nn.Module):
    def __init__(self, dim=64, patch=8, size=32):
        super().__init__()
        self.patch = nn.Conv2d(3, dim, patch, patch)
        self.cls = nn.Parameter(torch.randn(1, 1, dim) * 0.02)
        self.pos = nn.Parameter(torch.randn(1, (size // patch) ** 2 + 1, dim) * 0.02)
        layer = nn.TransformerEncoderLayer(dim, 4, dim * 2, dropout=0.0, batch_first=True, norm_first=True)
        self.encoder = nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)
        self.head = nn.Linear(dim, 10)

    def forward(self, x):
        tokens = self.patch(x).flatten(2).transpose(1, 2)
        tokens = torch.cat([self.cls.expand(x.shape[0], -1, -1), tokens], 1) + self.pos
        return self.head(self.encoder(tokens)[:, 0])


class TextEncoder(nn.Module):
    def __init__(self, vocab=200, dim=64):
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)
        layer = nn.TransformerEncoderLayer(dim, 4, dim * 2, dropout=0.0, batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)

    def forward(self, ids):
        return self.encoder(self.embed(ids)).mean(1)


class Decoder(nn.Module):
    """Causal LM: embedding, masked self-attention blocks, tied head."""

    def __init__(self, vocab=200, dim=64, seq=16):
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)
        layer = nn.TransformerEncoderLayer(dim, 4, dim * 2, dropout=0.0, batch_first=True, norm_first=True)
        self.blocks = nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)
        self.register_buffer("mask", torch.triu(torch.full((seq, seq), float("-inf")), 1))

    def forward(self, ids):
        # is_causal=True: without it nn.TransformerEncoder compares the mask to a causal one at run time, a
        # data-dependent check torch.export cannot trace (both edgeport and raw fail with GuardOnDataDependentSymNode)
        h = self.blocks(self.embed(ids), mask=self.mask, is_causal=True)
        return h @ self.embed.weight.T


class EncoderDecoder(nn.Module):
    def __init__(self, vocab=200, dim=64):
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)
        self.core = nn.Transformer(dim, 4, 2, 2, dim * 2, dropout=0.0, batch_first=True)
        self.head = nn.Linear(dim, vocab)

    def forward(self, src, tgt):
        return self.head(self.core(self.embed(src), self.embed(tgt)))


class GRUTagger(nn.Module):
    def __init__(self):
        super().__init__()
        self.gru = nn.GRU(16, 32, batch_first=True)
        self.head = nn.Linear(32, 5)

    def forward(self, x):
        return self.head(self.gru(x)[0])


# ---- failure classes -------------------------------------------------------------------------------------

def hf_moe():
    """Class 1: transformers' MoE (grouped-mm experts: histc + custom op)."""
    import transformers

    _seed()
    config = transformers.MixtralConfig(vocab_size=128, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                                        num_attention_heads=4, num_key_value_heads=2, num_local_experts=4,
                                        num_experts_per_tok=2, max_position_embeddings=64, use_cache=False)
    model = transformers.MixtralForCausalLM(config).eval()
    return model, {"input_ids": torch.randint(0, 128, (1, 8))}


class LowPrecisionMLP(nn.Module):
    """Class 2: a half-precision model with LayerNorm (converted by users as-is)."""

    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(32, 64), nn.LayerNorm(64), nn.GELU(), nn.Linear(64, 8))

    def forward(self, x):
        return self.net(x)


class AudioFrontEnd(nn.Module):
    """Class 3: log-mel-like features: stft -> magnitude -> mel matmul -> log."""

    def __init__(self, n_fft=128, mels=20):
        super().__init__()
        self.n_fft = n_fft
        self.register_buffer("window", torch.hann_window(n_fft))
        self.mel = nn.Parameter(torch.rand(n_fft // 2 + 1, mels))

    def forward(self, wave):
        spec = torch.stft(wave, self.n_fft, hop_length=32, window=self.window, return_complex=True).abs()
        return torch.log(spec.transpose(-1, -2) @ self.mel + 1e-3)


class RfftFeatures(nn.Module):
    """Class 3: rfft magnitude of a signal, then a linear head."""

    def __init__(self):
        super().__init__()
        self.head = nn.Linear(33, 4)

    def forward(self, x):
        return self.head(torch.fft.rfft(x, norm="ortho").abs())


class UpsampleDecoder(nn.Module):
    """Class 4: ConvTranspose2d(k=3, s=2, p=1, output_padding=1) (segmentation/GAN decoders)."""

    def __init__(self):
        super().__init__()
        self.up1 = nn.ConvTranspose2d(16, 8, 3, 2, 1, output_padding=1)
        self.up2 = nn.ConvTranspose2d(8, 3, 3, 2, 1, output_padding=1)

    def forward(self, z):
        return torch.sigmoid(self.up2(F.relu(self.up1(z))))


class DetectionPost(nn.Module):
    """Class 5: score head + argsort/sort post-processing (top boxes by score)."""

    def __init__(self):
        super().__init__()
        self.score = nn.Linear(16, 1)
        self.box = nn.Linear(16, 4)

    def forward(self, feats):
        scores = self.score(feats).squeeze(-1)
        order = torch.argsort(scores, dim=-1, descending=True)[:, :10]
        boxes = torch.gather(self.box(feats), 1, order.unsqueeze(-1).expand(-1, -1, 4))
        top, _ = torch.sort(scores, dim=-1, descending=True)
        return boxes, top[:, :10], order


class ScatterPool(nn.Module):
    """Class 6: scatter_add pooling of node features into graph slots (GNN readout)."""

    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(8, 8)

    def forward(self, x, segment):
        h = self.proj(x)
        index = segment.unsqueeze(-1).expand(-1, -1, 8)
        return torch.zeros(x.shape[0], 4, 8).scatter_add(1, index, h)


def hf_bert_raw():
    """Class 7: raw HF BERT called with a dict of inputs (token_type_ids None), returning a ModelOutput."""
    import transformers

    _seed()
    config = transformers.BertConfig(vocab_size=128, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                                     intermediate_size=64, max_position_embeddings=64)
    model = transformers.BertModel(config, add_pooling_layer=True).eval()
    ids = torch.randint(0, 128, (1, 12))
    return model, {"input_ids": ids, "attention_mask": torch.ones(1, 12, dtype=torch.int64), "token_type_ids": None}


def hf_gpt2_raw():
    """Class 7: raw HF GPT-2 (small config) with dict inputs and a ModelOutput."""
    import transformers

    _seed()
    config = transformers.GPT2Config(vocab_size=128, n_positions=64, n_embd=32, n_layer=2, n_head=4, use_cache=False)
    model = transformers.GPT2LMHeadModel(config).eval()
    return model, {"input_ids": torch.randint(0, 128, (1, 12)), "attention_mask": torch.ones(1, 12, dtype=torch.int64)}


class DictIO(nn.Module):
    """Class 8: dict inputs whose sorted key order differs from the signature order, dict outputs."""

    def __init__(self):
        super().__init__()
        self.z = nn.Linear(8, 4)
        self.a = nn.Linear(3, 4)

    def forward(self, zeta, alpha):
        return {"sum": self.z(zeta) + self.a(alpha), "diff": self.z(zeta) - self.a(alpha)}


class KVCacheStep(nn.Module):
    """Class 8: one LLM decode step that writes k/v into cache buffers in place."""

    def __init__(self, dim=32, max_len=16):
        super().__init__()
        self.qkv = nn.Linear(dim, dim * 3)
        self.out = nn.Linear(dim, dim)
        self.register_buffer("k_cache", torch.zeros(1, max_len, dim))
        self.register_buffer("v_cache", torch.zeros(1, max_len, dim))

    def forward(self, x, pos):
        q, k, v = self.qkv(x).chunk(3, -1)
        self.k_cache.index_copy_(1, pos, k)
        self.v_cache.index_copy_(1, pos, v)
        attn = torch.softmax(q @ self.k_cache.transpose(1, 2) / 32 ** 0.5, -1)
        return self.out(attn @ self.v_cache)


@torch.library.custom_op("zoo::gated", mutates_args=())
def gated(x: torch.Tensor, gate: torch.Tensor) -> torch.Tensor:
    return x * torch.sigmoid(gate)


@gated.register_fake
def _gated_fake(x, gate):
    return torch.empty_like(x)


@torch.library.custom_op("zoo::np_square", mutates_args=())
def np_square(x: torch.Tensor) -> torch.Tensor:
    return torch.from_numpy(np.square(x.numpy()))


@np_square.register_fake
def _np_square_fake(x):
    return torch.empty_like(x)


class CustomOpTraceable(nn.Module):
    """Class 9: a torch.library.custom_op whose body is torch code (inlinable)."""

    def __init__(self):
        super().__init__()
        self.a, self.b = nn.Linear(16, 16), nn.Linear(16, 16)

    def forward(self, x):
        return gated(self.a(x), self.b(x))


class CustomOpOpaque(nn.Module):
    """Class 9: a custom op whose body is numpy: not convertible; the user must get the op, the call site
    and how to register a decomposition."""

    def __init__(self):
        super().__init__()
        self.a = nn.Linear(16, 16)

    def forward(self, x):
        return np_square(self.a(x)) + 1


class ValidSameConv(nn.Module):
    """Class 10: Conv2d(padding="valid") and padding="same" with an even kernel."""

    def __init__(self):
        super().__init__()
        self.v = nn.Conv2d(3, 8, 3, padding="valid")
        self.s = nn.Conv2d(8, 8, 4, padding="same")

    def forward(self, x):
        return self.s(F.relu(self.v(x)))


# ---- realistic size (plain torch: torchvision is not installable here) -------------------------------------

class InvertedResidual(nn.Module):
    def __init__(self, cin, cout, stride, expand):
        super().__init__()
        hidden = cin * expand
        layers = [] if expand == 1 else [nn.Conv2d(cin, hidden, 1, bias=False), nn.BatchNorm2d(hidden), nn.ReLU6()]
        layers += [nn.Conv2d(hidden, hidden, 3, stride, 1, groups=hidden, bias=False), nn.BatchNorm2d(hidden), nn.ReLU6(),
                   nn.Conv2d(hidden, cout, 1, bias=False), nn.BatchNorm2d(cout)]
        self.block = nn.Sequential(*layers)
        self.residual = stride == 1 and cin == cout

    def forward(self, x):
        return x + self.block(x) if self.residual else self.block(x)


class MobileNetV2(nn.Module):
    """MobileNetV2 1.0 (torchvision's layout, 3.5 M params), 224x224."""

    SETTINGS = [(1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2), (6, 96, 3, 1), (6, 160, 3, 2), (6, 320, 1, 1)]

    def __init__(self, classes=1000):
        super().__init__()
        layers = [nn.Conv2d(3, 32, 3, 2, 1, bias=False), nn.BatchNorm2d(32), nn.ReLU6()]
        cin = 32
        for expand, cout, repeats, stride in self.SETTINGS:
            for i in range(repeats):
                layers.append(InvertedResidual(cin, cout, stride if i == 0 else 1, expand))
                cin = cout
        layers += [nn.Conv2d(cin, 1280, 1, bias=False), nn.BatchNorm2d(1280), nn.ReLU6()]
        self.features = nn.Sequential(*layers)
        self.classifier = nn.Linear(1280, classes)

    def forward(self, x):
        return self.classifier(F.adaptive_avg_pool2d(self.features(x), 1).flatten(1))


class Bottleneck(nn.Module):
    def __init__(self, cin, width, stride):
        super().__init__()
        cout = width * 4
        self.conv = nn.Sequential(nn.Conv2d(cin, width, 1, bias=False), nn.BatchNorm2d(width), nn.ReLU(),
                                  nn.Conv2d(width, width, 3, stride, 1, bias=False), nn.BatchNorm2d(width), nn.ReLU(),
                                  nn.Conv2d(width, cout, 1, bias=False), nn.BatchNorm2d(cout))
        self.down = None
        if stride != 1 or cin != cout:
            self.down = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x):
        return F.relu(self.conv(x) + (x if self.down is None else self.down(x)))


class ResNet50(nn.Module):
    """ResNet-50 (torchvision's layout, 25.6 M params), 224x224."""

    def __init__(self, classes=1000):
        super().__init__()
        layers = [nn.Conv2d(3, 64, 7, 2, 3, bias=False), nn.BatchNorm2d(64), nn.ReLU(), nn.MaxPool2d(3, 2, 1)]
        cin = 64
        for width, blocks, stride in [(64, 3, 1), (128, 4, 2), (256, 6, 2), (512, 3, 2)]:
            for i in range(blocks):
                layers.append(Bottleneck(cin, width, stride if i == 0 else 1))
                cin = width * 4
        self.features = nn.Sequential(*layers)
        self.fc = nn.Linear(2048, classes)

    def forward(self, x):
        return self.fc(F.adaptive_avg_pool2d(self.features(x), 1).flatten(1))


def _randomize_bn(model):
    """Random BatchNorm statistics, so the realistic models do not collapse to near-constant outputs."""
    gen = torch.Generator().manual_seed(1)
    for m in model.modules():
        if isinstance(m, nn.BatchNorm2d):
            m.running_mean.copy_(torch.randn(m.num_features, generator=gen) * 0.1)
            m.running_var.copy_(torch.rand(m.num_features, generator=gen) + 0.5)
    return model.eval()


def gpt2_small_hf():
    """GPT-2 small (124 M params) from a transformers config, random init."""
    import transformers

    _seed()
    config = transformers.GPT2Config(use_cache=False)  # 12 layers, 768 wide, 50257 vocab
    model = transformers.GPT2LMHeadModel(config).eval()
    return model, {"input_ids": torch.randint(0, config.vocab_size, (1, 32))}


def _plain(cls, *example, **kwargs):
    def factory():
        _seed()
        return cls(**kwargs).eval(), tuple(example)
    factory.__doc__ = cls.__doc__
    return factory


def _half(dtype):
    def factory():
        _seed()
        return LowPrecisionMLP().to(dtype).eval(), (torch.randn(4, 32).to(dtype),)
    return factory


def _realistic(cls):
    def factory():
        _seed()
        return _randomize_bn(cls()), (torch.randn(1, 3, 224, 224),)
    return factory


# name -> (factory, what it covers, realistic size)
ZOO = {
    "small_cnn": (_plain(SmallCNN, torch.randn(1, 3, 64, 64)), "vision CNN", False),
    "tiny_vit": (_plain(TinyViT, torch.randn(1, 3, 32, 32)), "vision ViT", False),
    "text_encoder": (_plain(TextEncoder, torch.randint(0, 200, (1, 16))), "text encoder", False),
    "decoder": (_plain(Decoder, torch.randint(0, 200, (1, 16))), "decoder LM", False),
    "encoder_decoder": (_plain(EncoderDecoder, torch.randint(0, 200, (1, 12)), torch.randint(0, 200, (1, 8))),
                        "encoder-decoder", False),
    "gru_tagger": (_plain(GRUTagger, torch.randn(1, 10, 16)), "recurrent", False),
    "hf_moe": (hf_moe, "1 MoE (histc, grouped_mm)", False),
    "bf16_mlp": (_half(torch.bfloat16), "2 bf16 model", False),
    "fp16_mlp": (_half(torch.float16), "2 fp16 model", False),
    "audio_stft": (_plain(AudioFrontEnd, torch.randn(1, 1024)), "3 stft -> abs", False),
    "rfft_features": (_plain(RfftFeatures, torch.randn(2, 64)), "3 rfft -> abs", False),
    "conv_transpose": (_plain(UpsampleDecoder, torch.randn(1, 16, 8, 8)), "4 ConvTranspose output_padding", False),
    "argsort_post": (_plain(DetectionPost, torch.randn(1, 50, 16)), "5 sort/argsort int64", False),
    "scatter_add": (_plain(ScatterPool, torch.randn(2, 12, 8), torch.randint(0, 4, (2, 12))), "6 scatter_add", False),
    "hf_bert_raw": (hf_bert_raw, "7 HF BERT dict/None/ModelOutput", False),
    "hf_gpt2_raw": (hf_gpt2_raw, "7 HF GPT-2 dict/ModelOutput", False),
    "dict_io": (lambda: (DictIO().eval(), {"zeta": torch.randn(2, 8), "alpha": torch.randn(2, 3)}), "8 dict I/O order", False),
    "kv_cache_step": (_plain(KVCacheStep, torch.randn(1, 1, 32), torch.tensor([3])), "8 KV-cache mutation", False),
    "custom_op": (_plain(CustomOpTraceable, torch.randn(2, 16)), "9 custom op (traceable)", False),
    "custom_op_opaque": (_plain(CustomOpOpaque, torch.randn(2, 16)), "9 custom op (numpy body)", False),
    "conv_valid_same": (_plain(ValidSameConv, torch.randn(1, 3, 16, 16)), "10 Conv padding='valid'/'same'", False),
    "mobilenet_v2": (_realistic(MobileNetV2), "realistic: MobileNetV2-224", True),
    "resnet50": (_realistic(ResNet50), "realistic: ResNet-50-224", True),
    "gpt2_small": (gpt2_small_hf, "realistic: GPT-2 small", True),
}

# `edgeport convert bench/zoo.py:<name>` calls these
globals().update({name: entry[0] for name, entry in ZOO.items()})
