"""Graph dumps (CompilerConfig(dump_dir=...), updraft/debug/dump.py) on real small models: the
folder layout and README, IR files that parse back (updraft.debug.load_ir) and end at the graph
the engine runs, a plan per input shape, Graphviz pictures, the partitioning with its fallback
node, and nothing written when the option is off."""
from __future__ import annotations

import os
import re
import shutil
import warnings
import xml.etree.ElementTree as ET

import pytest
import torch

import updraft
from updraft import CompilerConfig, get_backend, profiler, zoo
from updraft import _C
from updraft.debug import load_ir

HAS_DOT = shutil.which("dot") is not None


def _compile(model, dump_dir, **kw):
    cfg = CompilerConfig(dump_dir=str(dump_dir), cache_dir="", **kw)
    return torch.compile(model, backend=get_backend(cfg))


def _small_bert():
    from transformers import BertConfig, BertModel

    cfg = BertConfig(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=128,
                     vocab_size=500, max_position_embeddings=64)
    return BertModel(cfg).eval(), torch.randint(0, 500, (1, 16))


def _partitions_under(folder):
    """The live EnginePartitions whose dump is under `folder`, by dump folder."""
    out = {}
    for p in list(profiler._partitions):
        if p.dump is not None and str(p.dump.dir).startswith(str(folder)):
            out[p.dump.dir] = p
    return out


def _check_partition_folder(path, part):
    """Every IR file parses back; the first recompiles to the same final graph; the last is the
    graph the engine runs; the picture is there."""
    files = sorted(f for f in os.listdir(path) if re.fullmatch(r"ir_\d\d_\w+\.txt", f))
    assert files[0] == "ir_00_lowered.txt" and files[-1].endswith("_verify.txt"), files
    passes = open(os.path.join(path, "passes.txt")).read()
    for f in files:
        assert f in passes
        g = load_ir(os.path.join(path, f))  # raises on text that does not parse
        assert g.num_nodes() > 0
    text = open(os.path.join(path, files[-1])).read()
    assert "elided(" not in text
    cg = part._state.cg
    assert load_ir(os.path.join(path, files[-1])).text() == cg.graph_text()
    # The lowered graph, parsed back, compiles again (its constants are literals now, not the
    # caller's parameters, so the passes may fold more: the result is not compared).
    assert _C.compile(load_ir(os.path.join(path, "ir_00_lowered.txt")), {}).graph_text()
    assert os.path.isfile(os.path.join(path, "graph.dot"))
    if HAS_DOT:
        root = ET.parse(os.path.join(path, "graph.svg")).getroot()
        assert root.tag.endswith("svg")
    return files


def test_dump_small_bert(tmp_path):
    model, ids = _small_bert()
    compiled = _compile(model, tmp_path)
    with torch.no_grad():
        out, ref = compiled(ids), model(ids)
    torch.testing.assert_close(out.last_hidden_state, ref.last_hidden_state, atol=1e-4, rtol=1e-4)
    (folder,) = os.listdir(tmp_path)
    assert re.fullmatch(r"000_BertModel\.forward", folder), folder
    top = tmp_path / folder
    readme = (top / "README.txt").read_text()
    for name in ("dynamo_graph.py", "aten_graph.py", "partitioning.txt", "partitioning.dot/.svg",
                 "partitioned_graph.py", "ir_00_lowered.txt", "ir_NN_<pass>.txt", "passes.txt",
                 "constants.pt", "graph.dot/.svg", "plan_<shapes>.txt"):
        assert name in readme, name
    assert "# File:" in (top / "dynamo_graph.py").read_text()  # FX stack traces
    inf = top / "inference"
    assert "# File:" in (inf / "aten_graph.py").read_text()
    parts = _partitions_under(tmp_path)
    assert sorted(os.path.basename(p) for p in parts) == ["updraft_partition_0"]
    part_dir = str(inf / "updraft_partition_0")
    files = _check_partition_folder(part_dir, parts[part_dir])
    assert any(f.endswith("_fuse_elementwise.txt") for f in files), files
    # Provenance: the IR names the aten node(s) each engine node computes, and so does the picture.
    final = open(os.path.join(part_dir, files[-1])).read()
    assert re.search(r"= linear\(.*// from: .*addmm", final), final
    assert re.search(r'label="linear\\n[^"]*from: [^"]*addmm', open(os.path.join(part_dir, "graph.dot")).read())
    assert os.path.isfile(os.path.join(part_dir, "constants.pt"))
    assert os.listdir(part_dir).count("plan_1x16.txt") == 1
    assert "arena" in open(os.path.join(part_dir, "plan_1x16.txt")).read().lower()
    table = (inf / "partitioning.txt").read_text()
    assert re.search(r"^addmm\s+aten\.addmm\.default\s+f32\[16, 64\]\s+updraft_partition_0", table, re.M)
    if HAS_DOT:
        assert "Notes:\n- none" in readme
        ET.parse(inf / "partitioning.svg")


def test_dump_small_resnet_plans_and_numbering(tmp_path):
    from transformers import ResNetConfig, ResNetModel

    model = ResNetModel(ResNetConfig(embedding_size=8, hidden_sizes=[8, 16], depths=[1, 1])).eval()
    compiled = _compile(model, tmp_path)
    with torch.no_grad():
        for batch in (1, 2, 3):  # batch 2: Dynamo recompiles with a dynamic batch; 3: a new plan only
            x = torch.randn(batch, 3, 32, 32)
            torch.testing.assert_close(compiled(x).last_hidden_state, model(x).last_hidden_state,
                                       atol=1e-4, rtol=1e-4)
    folders = sorted(os.listdir(tmp_path))
    assert [f[:4] for f in folders] == ["000_", "001_"], folders
    parts = _partitions_under(tmp_path)
    assert len(parts) == 2
    for path, part in parts.items():
        _check_partition_folder(path, part)
        dot = open(os.path.join(path, "graph.dot")).read()
        assert re.search(r'fillcolor="#f4a261", label="conv2d\\n', dot)  # convs in the matmul colour
    dynamic = [p for p in parts if p.startswith(str(tmp_path / folders[1]))][0]
    plans = sorted(f for f in os.listdir(dynamic) if f.startswith("plan_"))
    assert plans == ["plan_2x3x32x32.txt", "plan_3x3x32x32.txt"], plans


def test_dump_names_the_fallback_node(tmp_path):
    model, (x,) = zoo.build("mlp", width=32, depth=2)
    compiled = _compile(model, tmp_path, eager_ops=("aten.relu",), partition_cost=False)
    with torch.no_grad():
        torch.testing.assert_close(compiled(x), model(x))
    (folder,) = os.listdir(tmp_path)
    inf = tmp_path / folder / "inference"
    table = (inf / "partitioning.txt").read_text()
    row = re.search(r"^relu\s+aten\.relu\.default\s+f32\[1, 32\]\s+PyTorch\s+(.*)$", table, re.M)
    assert row and "eager_ops" in row.group(1), table
    assert re.search(r"^addmm\s+aten\.addmm\.default\s+f32\[1, 32\]\s+updraft_partition_\d$", table, re.M), table
    dot = (inf / "partitioning.dot").read_text()
    assert re.search(r'"relu" \[style="dashed,filled"', dot)  # the fallback node drawn apart
    assert 'subgraph "cluster_updraft_partition_0"' in dot
    assert sorted(p for p in os.listdir(inf) if p.startswith("updraft_partition_")) == \
        ["updraft_partition_0", "updraft_partition_1"]  # the two linears, relu between them in PyTorch


def test_nothing_written_when_off(tmp_path, monkeypatch):
    monkeypatch.delenv("UPDRAFT_DUMP_DIR", raising=False)
    assert CompilerConfig().dump_dir is None
    assert CompilerConfig(dump_dir="").dump_dir is None
    monkeypatch.setenv("UPDRAFT_DUMP_DIR", "")
    assert CompilerConfig().dump_dir is None
    assert "record_ir" not in CompilerConfig().engine_options()
    monkeypatch.chdir(tmp_path)
    before = set(profiler._partitions)
    model, (x,) = zoo.build("mlp", width=16, depth=2)
    compiled = torch.compile(model, backend=get_backend(CompilerConfig(cache_dir="")))
    with torch.no_grad():
        compiled(x)
    assert os.listdir(tmp_path) == []
    parts = [p for p in set(profiler._partitions) - before]
    assert parts and all(p.dump is None for p in parts)
    assert all(ir == "" for p in parts for _, _, _, ir in p._state.cg.pass_log())


def test_dump_dir_from_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("UPDRAFT_DUMP_DIR", str(tmp_path / "dumps"))
    cfg = CompilerConfig(cache_dir="")
    assert cfg.dump_dir == str(tmp_path / "dumps")
    assert cfg.engine_options()["record_ir"] is True
    model, (x,) = zoo.build("mlp", width=16, depth=1)
    with torch.no_grad():
        torch.compile(model, backend=get_backend(cfg))(x)
    assert [f[:4] for f in os.listdir(tmp_path / "dumps")] == ["000_"]
    (tmp_path / "file").write_text("")
    with pytest.raises(ValueError, match=r"dump_dir=.*is not a folder"):
        CompilerConfig(dump_dir=str(tmp_path / "file"))
    with pytest.raises(TypeError, match="dump_dir must be"):
        CompilerConfig(dump_dir=3)


def test_unwritable_dump_is_one_warning_not_a_failed_compile(tmp_path):
    (tmp_path / "file").write_text("")
    model, (x,) = zoo.build("mlp", width=16, depth=2)
    compiled = _compile(model, tmp_path / "file" / "dumps")  # a folder under a file: mkdir fails
    with warnings.catch_warnings(record=True) as caught, torch.no_grad():
        warnings.simplefilter("always")
        torch.testing.assert_close(compiled(x), model(x))
    msgs = [str(w.message) for w in caught if "[updraft.dump]" in str(w.message)]
    assert len(msgs) == 1 and "cannot make a dump folder" in msgs[0], msgs


def test_load_ir_reports_bad_text_and_missing_constants(tmp_path):
    bad = tmp_path / "ir_01_x.txt"
    bad.write_text("graph(%x: f32[2]) {\n  %0 = relu(%y) : f32[2]\n  return (%0)\n}\n")
    with pytest.raises(_C.UpdraftError, match=r"\[parse\] line 2"):
        load_ir(bad)
    ext = tmp_path / "ir_02_y.txt"
    ext.write_text("graph(%x: f32[100]) {\n  %w = constant f32[100] extern(c00)\n  %0 = add(%x, %w) : f32[100]\n"
                   "  return (%0)\n}\n")
    with pytest.raises(FileNotFoundError):
        load_ir(ext)
    torch.save({"c00": torch.arange(100, dtype=torch.float32)}, tmp_path / "constants.pt")
    assert "constant f32[100] elided(" in load_ir(ext).text()
    torch.save({"c00": torch.arange(32, dtype=torch.float32)}, tmp_path / "constants.pt")
    with pytest.raises(_C.UpdraftError, match=r"extern\(c00\)"):
        load_ir(ext)


def test_dump_of_a_compile_cache_hit_says_so(tmp_path):
    model, (x,) = zoo.build("mlp", width=16, depth=1)
    cfg = CompilerConfig(dump_dir=str(tmp_path / "dumps"), cache_dir=str(tmp_path / "cache"))
    with torch.no_grad():
        torch.compile(model, backend=get_backend(cfg))(x)  # a miss: compiled and stored
        torch._dynamo.reset()
        torch.testing.assert_close(torch.compile(model, backend=get_backend(cfg))(x), model(x))  # a hit
    first, second = sorted(os.listdir(tmp_path / "dumps"))
    part = tmp_path / "dumps" / second / "inference" / "updraft_partition_0"
    assert not any(f.startswith("ir_") for f in os.listdir(part))
    assert "linear(" in (part / "graph_from_cache.txt").read_text()
    assert "loaded from the compile cache" in (tmp_path / "dumps" / second / "README.txt").read_text()
    assert (tmp_path / "dumps" / first / "inference" / "updraft_partition_0" / "ir_00_lowered.txt").is_file()
