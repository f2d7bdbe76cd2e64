"""The models of bench/quant_payoff.py, each trained a few hundred steps on synthetic data so activations and
weights have trained statistics (random-init weights quantize unrealistically well or badly). Weights are
cached in bench/results/payoff/ (gitignored); ``build_<name>()`` is what ``edgeport convert FILE:build_<name>``
loads, training first if the cache is empty.

- ``pitch_cnn``: a CREPE-like pitch estimator, 6 Conv2d layers with (k, 1) kernels up to 512x1 on a 1024-sample
  frame, 360 pitch bins (~0.45M parameters); trained on sine frames to classify their pitch bin.
- ``speaker_lstm``: 3-layer LSTM 40->256 and a linear head (~1.4M parameters), a d-vector speaker encoder;
  trained on synthetic "speakers" (per-speaker mean spectra + noise) through a throw-away classifier.
- ``transformer``: a 2-layer transformer encoder (d=128, 4 heads, ff 512) over 64 frames of 32 features,
  trained to tag each frame with the argmax of a moving sum of its features.
"""

from __future__ import annotations

import time
from pathlib import Path

import torch
from torch import nn

CACHE = Path(__file__).resolve().parent / "results" / "payoff"
SEQ = 50   # speaker frames: LiteRT unrolls the LSTM per step, so conversion time grows with it


class PitchCNN(nn.Module):
    def __init__(self):
        super().__init__()
        chans, kernels = [1, 64, 16, 16, 16, 32, 64], [512, 64, 64, 64, 64, 64]
        layers = []
        for i, k in enumerate(kernels):
            stride = 4 if i == 0 else 1
            layers += [nn.Conv2d(chans[i], chans[i + 1], (k, 1), (stride, 1), padding=((k - stride) // 2, 0)),
                       nn.BatchNorm2d(chans[i + 1]), nn.ReLU(), nn.MaxPool2d((2, 1))]
        self.features = nn.Sequential(*layers)
        self.classifier = nn.Linear(64 * 3, 360)

    def forward(self, audio):
        x = self.features(audio.reshape(audio.shape[0], 1, 1024, 1))
        return torch.sigmoid(self.classifier(x.flatten(1)))


class SpeakerLSTM(nn.Module):
    def __init__(self):
        super().__init__()
        self.lstm = nn.LSTM(40, 256, num_layers=3, batch_first=True)
        self.head = nn.Linear(256, 256)

    def forward(self, mels):
        y, _ = self.lstm(mels)
        e = torch.relu(self.head(y[:, -1]))
        return e / (e.norm(dim=1, keepdim=True) + 1e-6)


class Tagger(nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(32, 128)
        layer = nn.TransformerEncoderLayer(128, 4, 512, dropout=0.0, batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)
        self.out = nn.Linear(128, 10)

    def forward(self, frames):
        return self.out(self.encoder(self.proj(frames)))


def pitch_batch(g, n=32):
    bins = torch.randint(0, 360, (n,), generator=g)
    freq = 32.7 * 2 ** (bins.float() * 20 / 1200)   # CREPE's 20-cent bins from C1
    t = torch.arange(1024) / 16000
    phase = torch.rand(n, 1, generator=g) * 6.28
    audio = torch.sin(2 * torch.pi * freq[:, None] * t + phase) + 0.1 * torch.randn(n, 1024, generator=g)
    target = torch.exp(-((torch.arange(360)[None] - bins[:, None]).float() ** 2) / 2)
    return audio, target


def speaker_batch(g, means, n=32):
    who = torch.randint(0, means.shape[0], (n,), generator=g)
    return means[who][:, None] + 0.5 * torch.randn(n, SEQ, 40, generator=g), who


def tagger_batch(g, n=32):
    x = torch.randn(n, 64, 32, generator=g)
    window = torch.nn.functional.avg_pool1d(x.transpose(1, 2), 5, 1, 2).transpose(1, 2)
    return x, window[..., :10].argmax(-1)


def _train(model, step, steps: int, lr=2e-3):
    torch.backends.mkldnn.enabled = False  # oneDNN's backward of the (512, 1) conv segfaults on torch 2.13 CPU
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    model.train()
    start = time.perf_counter()
    for _ in range(steps):
        opt.zero_grad()
        loss = step()
        loss.backward()
        opt.step()
        if time.perf_counter() - start > 60:  # keep training under a minute on a busy machine
            break
    torch.backends.mkldnn.enabled = True
    return float(loss)


def _trained(name: str, make, train) -> nn.Module:
    torch.manual_seed(0)
    model = make()
    path = CACHE / f"{name}.pt"
    if path.is_file():
        model.load_state_dict(torch.load(path, weights_only=True))
    else:
        loss = train(model)
        CACHE.mkdir(parents=True, exist_ok=True)
        torch.save(model.state_dict(), path)
        (CACHE / f"{name}.loss").write_text(f"{loss:.4f}\n")
    return model.eval()


def _train_pitch(model):
    g = torch.Generator().manual_seed(1)

    def step():
        audio, target = pitch_batch(g)
        return nn.functional.binary_cross_entropy(model(audio), target)
    return _train(model, step, 300)


def _train_speaker(model):
    g = torch.Generator().manual_seed(2)
    means = torch.randn(20, 40, generator=g)
    classify = nn.Linear(256, 20)
    both = nn.ModuleList([model, classify])

    def step():
        x, who = speaker_batch(g, means)
        return nn.functional.cross_entropy(classify(model(x)) * 10, who)
    return _train(both, step, 300)


def _train_tagger(model):
    g = torch.Generator().manual_seed(3)

    def step():
        x, y = tagger_batch(g)
        return nn.functional.cross_entropy(model(x).reshape(-1, 10), y.reshape(-1))
    return _train(model, step, 300, lr=1e-3)


def build_pitch_cnn():
    return _trained("pitch_cnn", PitchCNN, _train_pitch), (torch.randn(1, 1024),)


def build_speaker_lstm():
    return _trained("speaker_lstm", SpeakerLSTM, _train_speaker), (torch.randn(1, SEQ, 40),)


def build_transformer():
    return _trained("transformer", Tagger, _train_tagger), (torch.randn(1, 64, 32),)


def inputs(name: str, count: int, seed: int):
    """Input-like samples (from the training distribution) for calibration and parity data."""
    g = torch.Generator().manual_seed(seed)
    if name == "pitch_cnn":
        return pitch_batch(g, count)[0][:, None]
    if name == "speaker_lstm":
        return speaker_batch(g, torch.randn(20, 40, generator=torch.Generator().manual_seed(2)), count)[0][:, None]
    return tagger_batch(g, count)[0][:, None]
