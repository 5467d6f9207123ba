"""benchmarks/llm.py's pieces that decide what it measures, without a model run or a peer:
the tokenizer written from code (what the GGUF converter needs to read a vocabulary), the
prompts, the per-row environment (the OpenMP wait setting each backend gets) and the table's
token agreement. Timings are not asserted (the benchmark measures them)."""
import importlib.util
import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def llm():
    sys.path.insert(0, str(ROOT / "benchmarks"))
    spec = importlib.util.spec_from_file_location("llm_benchmark", ROOT / "benchmarks" / "llm.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_vocab_is_what_the_converter_reads_as_a_llama_hf_vocab(llm, tmp_path):
    # convert_hf_to_gguf.py's LlamaHfVocab takes a tokenizer.json with a byte-fallback BPE model
    # and a Sequence decoder, loaded by AutoTokenizer; anything else sends it to paths that need
    # a downloaded tokenizer.
    import transformers  # a pinned dependency (scripts/setup.sh)
    llm.write_vocab(tmp_path, 1000)
    tj = json.loads((tmp_path / "tokenizer.json").read_text())
    assert tj["model"]["type"] == "BPE" and tj["model"]["byte_fallback"] is True
    assert tj["decoder"]["type"] == "Sequence"
    tok = transformers.AutoTokenizer.from_pretrained(tmp_path, local_files_only=True)
    assert tok.is_fast and len(tok.get_vocab()) == 1000
    assert tok.convert_tokens_to_ids(["<unk>", "<s>", "</s>", "<0x00>", "<0xFF>"]) == [0, 1, 2, 3, 258]
    assert set(tok.all_special_ids) == {0, 1, 2}


def test_prompts_are_seeded_and_avoid_specials_and_bytes(llm):
    a = llm.prompt_ids(32, 32000)
    assert a == llm.prompt_ids(32, 32000) and len(a) == 32
    assert min(a) >= llm.FIRST_ID and max(a) < 32000
    assert llm.prompt_ids(128, 32000)[:32] != a  # each length its own draw


def test_child_env_wait_setting(llm, monkeypatch):
    monkeypatch.setattr(llm, "USER_ENV", {"GOMP_SPINCOUNT": "7", "PATH": "/bin"})
    env = llm.child_env(2, None)  # the user's own setting travels unchanged
    assert env["GOMP_SPINCOUNT"] == "7" and env["OMP_NUM_THREADS"] == "2"
    env = llm.child_env(1, "passive")
    assert env["OMP_WAIT_POLICY"] == "passive" and "GOMP_SPINCOUNT" not in env
    env = llm.child_env(1, "300000")
    assert env["GOMP_SPINCOUNT"] == "300000" and "OMP_WAIT_POLICY" not in env


def test_workers_import_this_process_package_and_a_change_is_seen(llm, monkeypatch, tmp_path):
    """The workers import the updraft this process imports (with its extension: in a fresh set-up
    the installed one, not the source tree's python/, which has none), and a file of it changed
    during a run shows in its stamp (the run then discards that row and stops)."""
    import updraft

    pkg = llm.package_dir()
    assert pkg == Path(updraft.__file__).parent and list(pkg.glob("_C*"))
    monkeypatch.setattr(llm, "PACKAGE", pkg.parent)
    monkeypatch.setattr(llm, "USER_ENV", {"PYTHONPATH": "/elsewhere"})
    assert llm.child_env(1, None)["PYTHONPATH"].split(":") == [str(pkg.parent), "/elsewhere"]
    fake = tmp_path / "updraft"
    (fake / "__pycache__").mkdir(parents=True)
    (fake / "quantize.py").write_text("a = 1\n")
    (fake / "__pycache__" / "quantize.pyc").write_text("x")
    stamp = llm.package_stamp(fake)
    assert list(stamp) == ["quantize.py"]
    (fake / "quantize.py").write_text("a = 22\n")
    assert llm.package_stamp(fake) != stamp


def test_table_counts_tokens_equal_to_eager_and_keeps_failed_rows(llm):
    def row(backend, run, toks, decode):
        return {"model": "m", "threads": 2, "backend": backend, "run": run, "status": "ok", "peak_rss_mb": 1000.0,
                "vmhwm_mb": 1000.0, "first_call_s": 1.0,
                "runs": [{"plen": 4, "prompt_s": 0.01, "decode_ms": decode, "tokens": toks}]}

    rows = [row("eager", 0, [5, 6, 7, 8], 20.0), row("updraft", 0, [5, 6, 9, 8], 10.0),
            row("updraft", 1, [5, 6, 9, 8], 14.0),
            {"model": "m", "threads": 2, "backend": "llamacpp_f32", "run": 0, "peak_rss_mb": float("nan"),
             "status": "not run: no peer venv"}]
    text = llm.table(llm.aggregate(rows), ["eager", "updraft", "llamacpp_f32"])
    line = next(l for l in text.splitlines() if l.startswith("| updraft |"))
    assert "12.0 (10.0-14.0)" in line and "| 2/4 |" in line  # median (min-max); first mismatch at token 2
    assert "| llamacpp_f32 | — |" in text and "not run: no peer venv" in text


def test_a_run_without_the_doc_block_leaves_the_committed_chart_and_rows(llm, monkeypatch, tmp_path):
    """`--doc -` (a slice, an A/B) writes the chart and the raw rows only where asked; with the doc
    block they default to docs/, beside it, and the block links the chart."""
    rows = [{"model": "m", "threads": 2, "backend": "eager", "run": 0, "status": "ok", "peak_rss_mb": 900.0,
             "first_call_s": 1.0, "runs": [{"plen": 4, "prompt_s": 0.01, "decode_ms": 20.0, "tokens": [1, 2]}]}]
    saved = tmp_path / "rows.json"
    saved.write_text(json.dumps({"meta": {"machine": "m", "priority": "normal", "load_start": 0.5,
                                          "command": "python benchmarks/llm.py", "date": "2026-12-07 22:00"},
                                 "rows": rows}))
    root = tmp_path / "repo"
    monkeypatch.setattr(llm, "ROOT", root)
    assert llm.main(["--from-json", str(saved), "--doc", "-"]) == 0
    assert not (root / "docs").exists()
    chart = tmp_path / "slice.png"
    assert llm.main(["--from-json", str(saved), "--doc", "-", "--chart", str(chart)]) == 0
    assert chart.exists() and not (root / "docs").exists()
    (root / "docs").mkdir(parents=True)
    doc = root / "docs" / "BENCHMARKS.md"
    assert llm.main(["--from-json", str(saved), "--doc", str(doc)]) == 0
    assert (root / "docs" / "llm_benchmark.png").exists() and "](llm_benchmark.png)" in doc.read_text()
