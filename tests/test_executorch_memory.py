"""ExecuTorch's lowering of a multi-method ``.pte`` (a generative model's prefill and decode) keeps no copy of the
weights in memory that it does not need, and nothing once the file is written (issue 21, item 2;
bench/LARGE_GENERATION.md, "Memory, sixth session: ExecuTorch").

Before: XNNPACK's delegates held every weight as ``bytes`` once per method, and after ``save`` module-level
state (XNNPACK's ``WhyNoPartition`` loggers, ``is_same_node``'s cache, torch's fake-tensor dispatch cache)
kept every lowered graph with those bytes alive through the judges (Qwen3-0.6B: 6.06x the weights).
"""

import gc

import pytest
import torch


class Mlp(torch.nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.up, self.down = torch.nn.Linear(64, 256), torch.nn.Linear(256, 64)

    def forward(self, x):
        return self.down(torch.relu(self.up(x))).cumsum(-1)   # cumsum: a node XNNPACK turns down


def two_methods():
    """Two programs over one model's weights, as the prefill and decode programs are."""
    model = Mlp().eval()
    return {name: torch.export.export(model, (torch.randn(n, 64),)) for name, n in (("prefill_4", 4), ("decode", 1))}


def lowered_alive() -> int:
    from executorch.exir.lowered_backend_module import LoweredBackendModule

    gc.collect()
    return sum(isinstance(o, LoweredBackendModule) for o in gc.get_objects())


class TiedHead(torch.nn.Module):
    """A head tied to the embedding (Qwen3, Llama-3.2, Gemma): the table is read by the gather XNNPACK leaves
    outside its partitions and by the linear inside one, so ExecuTorch duplicates it for the partition."""

    def __init__(self, tied: bool = True):
        super().__init__()
        torch.manual_seed(0)
        self.embed, self.up = torch.nn.Embedding(512, 64), torch.nn.Linear(64, 64)
        self.head = torch.nn.Linear(64, 512, bias=False)
        if tied:
            self.head.weight = self.embed.weight

    def forward(self, ids):
        return self.head(torch.relu(self.up(self.embed(ids))))


def tied_programs(tied: bool = True):
    model = TiedHead(tied).eval()
    return {name: torch.export.export(model, (torch.randint(0, 512, (1, n)),)) for name, n in (("prefill_4", 4), ("decode", 1))}


@pytest.mark.parametrize("tied", [True, False])   # untied: the table is a constant of the .pte, not the .ptd
def test_weights_live_in_files_while_lowering_and_nothing_stays_after_save(tmp_path, monkeypatch, tied):
    """XNNPACK's named data (the delegated weights) and the emitter's constants (the table the gather outside the
    delegates reads, once per method) are file-backed, not ``bytes``, from lowering to the written ``.pte``,
    which is byte-identical; a blob that is a program weight's whole storage is that tensor, not a file; XNNPACK
    hands the store file-backed data, not ``bytes`` copies of each weight; afterwards no file, no lowered graph
    and no patched module stays."""
    import hashlib

    from executorch.backends.xnnpack.operators import node_visitor
    from executorch.exir._serialize._cord import FileBackedData
    from executorch.exir._serialize._named_data_store import NamedDataStore
    from executorch.exir.emit import _emitter
    from executorch.exir.lowered_backend_module import LoweredBackendModule
    from executorch.exir.program import _program

    from edgeport.targets.executorch import lower as L

    programs = tied_programs(tied)
    L.save(L.lower(programs), tmp_path / "in_memory.pte")
    monkeypatch.setattr(L, "SPILL_MIN_BYTES", 1)   # every blob of this small model goes to a file
    constants, emit = [], _program.emit_program

    def recording(*args, **kwargs):
        output = emit(*args, **kwargs)
        constants.extend(b.storage for b in output.program.constant_buffer[1:])   # [0] is reserved, empty
        constants.extend(output.external_constant_buffer)   # the tied table, for the .ptd (test_executorch_tied.py)
        return output

    monkeypatch.setattr(_program, "emit_program", recording)
    handed, add = [], NamedDataStore.add_named_data

    def received(store, key, data, *args, **kwargs):
        handed.append(data)
        return add(store, key, data, *args, **kwargs)

    monkeypatch.setattr(NamedDataStore, "add_named_data", received)
    with L.weights_on_disk(tmp_path, programs):
        edge = L.lower(programs)
        modules = [m for name in programs for m in edge.exported_program(name).graph_module.modules()
                   if isinstance(m, LoweredBackendModule)]
        blobs = [b for m in modules for b in m.named_data_store_output.buffers]
        assert modules and blobs and all(isinstance(b, FileBackedData) for b in blobs)
        assert len({id(b) for b in blobs}) == len({b.sha256() for b in blobs})   # one per distinct blob
        weights = {t.untyped_storage().data_ptr(): t for p in programs.values() for t in p.state_dict.values()}
        own = [b for b in blobs if isinstance(b, L.tensor_data_class())]
        assert own and all(b.to_bytes() == weights[b._tensor.untyped_storage().data_ptr()].detach().numpy().tobytes()
                           for b in own)   # the program's weight itself (before: written to a file, read back)
        files = [f.read_bytes() for f in tmp_path.glob(".weights_*/*.bin")]
        assert not {b.to_bytes() for b in own} & set(files)   # and not written to a file as well
        assert handed and all(isinstance(d, FileBackedData) for d in handed)   # before: bytes, copied twice each
        L.save(edge, tmp_path / "spilled.pte")
        assert constants and all(isinstance(c, FileBackedData) for c in constants)
        table = programs["decode"].state_dict["embed.weight"].detach().numpy().tobytes()
        assert [c.to_bytes() for c in constants].count(table) == 1   # the gather's table, once for both methods
    del edge, modules, blobs
    suffixes = (".pte", ".ptd") if tied else (".pte",)
    for suffix in suffixes:
        assert (tmp_path / f"spilled{suffix}").read_bytes() == (tmp_path / f"in_memory{suffix}").read_bytes()
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(f"{name}{suffix}" for name in ("in_memory", "spilled")
                                                                for suffix in suffixes)   # the spill folder went
    assert lowered_alive() == 0   # before: the last lowering's graphs, with their weights, stayed reachable
    assert all("bytes" not in vars(m) and m.hashlib is hashlib for m in (_emitter, node_visitor))


def test_lowering_shares_the_programs_weights_and_writes_the_same_pte(tmp_path, monkeypatch):
    """The partitions XNNPACK preprocesses read the programs' own weight storage (before: a deep copy of every
    partition's program for every method at once, and of the tied table per method), and the ``.pte`` is
    byte-identical to ExecuTorch's own copying lowering."""
    import contextlib
    import copy

    from executorch.backends.xnnpack.xnnpack_preprocess import XnnpackBackend
    from executorch.exir.backend.canonical_partitioners import duplicate_constant_node_pass

    from edgeport.targets.executorch import lower as L

    programs = tied_programs()
    weights = {t.untyped_storage().data_ptr() for p in programs.values() for t in p.state_dict.values()}
    read, preprocess = [], XnnpackBackend.preprocess

    def recording(program, specs):
        read.append({t.untyped_storage().data_ptr() for t in program.state_dict.values()})
        return preprocess(program, specs)

    monkeypatch.setattr(XnnpackBackend, "preprocess", staticmethod(recording))
    L.save(L.lower(programs), tmp_path / "shared.pte")
    shared, read[:] = list(read), []
    monkeypatch.setattr(L, "weights_not_copied", contextlib.nullcontext)
    L.save(L.lower(programs), tmp_path / "copied.pte")
    assert shared and all(ptrs and ptrs <= weights for ptrs in shared)
    assert any(not ptrs <= weights for ptrs in read)   # ExecuTorch's own lowering preprocesses copies
    for suffix in (".pte", ".ptd"):
        assert (tmp_path / f"shared{suffix}").read_bytes() == (tmp_path / f"copied{suffix}").read_bytes()
    assert "copy_exported_program_for_preprocess" not in XnnpackBackend.__dict__   # ExecuTorch's own, restored
    assert duplicate_constant_node_pass.copy is copy


def test_a_large_pte_is_judged_one_method_at_a_time_with_the_same_outputs(tmp_path, monkeypatch):
    """XNNPACK packs each loaded method's own copy of the weights, and ``Program.load_method`` keeps every method
    it loads: over ONE_AT_A_TIME_ABOVE the generative runner keeps one method alive at a time (the last one is
    released before the next loads), with the same outputs, and the row says so; below it both stay."""
    import weakref

    import numpy as np

    from edgeport.targets import signature
    from edgeport.targets.executorch import lower as L
    from edgeport.targets.executorch.runtime import ExecuTorchSignatureRunner

    L.save(L.lower(two_methods()), tmp_path / "two.pte")
    feeds = {"prefill_4": {"x": np.random.default_rng(0).standard_normal((4, 64), dtype=np.float32)},
             "decode": {"x": np.random.default_rng(1).standard_normal((1, 64), dtype=np.float32)}}
    kept = ExecuTorchSignatureRunner(tmp_path / "two.pte", 1)
    expected = {name: kept.run(name, feeds[name])["output_0"] for name in feeds}
    assert sorted(kept.loaded.method.live) == ["decode", "prefill_4"] and kept.details() == {}

    monkeypatch.setattr(signature, "ONE_AT_A_TIME_ABOVE", 1000)   # the .pte holds 66 KiB of weights
    lean = ExecuTorchSignatureRunner(tmp_path / "two.pte", 1)
    assert "one method" in lean.details()["runtime_sessions"]
    dropped = []
    for name in ("prefill_4", "decode", "prefill_4", "decode"):
        np.testing.assert_array_equal(lean.run(name, feeds[name])["output_0"], expected[name])
        assert list(lean.loaded.method.live) == [name]
        assert all(m is None for m in lean.loaded.program._methods.values())   # the Program caches none
        assert all(ref() is None for ref in dropped)   # every earlier Method (and its packed weights) is gone
        dropped.append(weakref.ref(lean.loaded.method.live[name]))
