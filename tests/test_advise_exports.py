"""advise exports to every runtime record (transformers, vLLM, llama.cpp, SGLang, Ollama): each gets the best-ranked
candidate it serves, or a one-line reason; a candidate a runtime's writer refuses (SGLang's DCA on an architecture its
model lacks) passes to the next one, said in the export's line. Driven through `export_winner` on a planted ranking."""

import json

from transformers import Qwen3MoeConfig

from ropecli.export.registry import records
from ropecli.models.config import BUILTIN_DIR, read_rope_config
from ropecli.report.advice import export_lines
from ropecli.tuning.advise_exports import export_winner
from ropecli.tuning.standings import Standings

from tiny_models import build


def ranking(winner: str) -> dict:
    """An advise result with Self-Extend, DCA and YaRN ranked (Self-Extend or DCA first)."""
    se = {"name": "selfextend", "params": {"G": 4.0, "W": 64.0}}
    dca = {"name": "dca", "params": {"chunk": 48.0, "local": 4.0}}
    rows = {"selfextend": {"candidate": "selfextend", "method": "none", "params": {}, "log_n": False, "position_map": se},
            "dca": {"candidate": "dca", "method": "none", "params": {}, "log_n": False, "position_map": dca},
            "yarn": {"candidate": "yarn", "method": "yarn", "params": {"beta_fast": 32, "beta_slow": 1}, "log_n": False}}
    order = [winner, *[n for n in ("selfextend", "dca", "yarn") if n != winner]]
    table = [{**rows[n], "excluded": False, "rank": i + 1} for i, n in enumerate(order)]
    spec = {k: v for k, v in rows[winner].items() if k != "candidate"}
    return {"winner": winner, "winner_spec": spec, "rows": table, "factor": 4.0}


def exports(tmp_path, arch: str, winner: str) -> dict:
    folder = tmp_path / arch
    build(arch).config.save_pretrained(folder)
    out = tmp_path / "out"
    out.mkdir()
    return {e["runtime"]: e for e in export_winner(Standings.from_json(ranking(winner)), ranking(winner), read_rope_config(str(folder)), str(folder), None, out)}


def test_every_runtime_gets_an_export_or_a_line(tmp_path):
    got = exports(tmp_path, "qwen2", "dca")
    assert list(got) == list(records())  # all five, in the registry's order
    assert got["sglang"]["ok"] and got["sglang"]["candidate"] == "dca" and "--map dca" in got["sglang"]["command"]
    block = json.loads((tmp_path / "out" / "sglang-overrides.json").read_text())
    assert block["dual_chunk_attention_config"]["chunk_size"] == 48  # SGLang serves DCA, so it gets the winner
    # transformers serves every map through the exported folder's own modeling file: the winner itself
    assert got["transformers"]["ok"] and got["transformers"]["candidate"] == "dca", got["transformers"]
    assert json.loads((tmp_path / "out" / "hf" / "config.json").read_text())["ropecli_map"]["name"] == "dca"
    assert "trust_remote_code=True" in got["transformers"]["output"]
    # vLLM serves every map through ropecli's plugin: the winner's folder and the line that serves it
    assert got["vllm"]["ok"] and got["vllm"]["candidate"] == "dca" and "instead" not in got["vllm"], got["vllm"]
    assert json.loads((tmp_path / "out" / "vllm" / "config.json").read_text())["architectures"] == ["RopecliMapForCausalLM"]
    assert f"api_server --model {tmp_path / 'out' / 'vllm'}" in got["vllm"]["output"] and "plugin" in got["vllm"]["output"]
    assert "--to vllm --out " + str(tmp_path / "out" / "vllm") in got["vllm"]["command"]
    for name in ("llamacpp", "ollama"):  # a config folder, not a GGUF
        assert not got[name]["ok"] and "not a GGUF file" in got[name]["output"]


def test_a_candidate_the_writer_refuses_passes_to_the_next(tmp_path):
    got = exports(tmp_path, "llama", "selfextend")  # SGLang's llama model passes no DCA config
    e = got["sglang"]
    assert e["ok"] and e["candidate"] == "yarn", e
    assert "exporting dca" in e["instead"] and "sglang refused dca" in e["instead"] and "exporting yarn" in e["instead"]


def test_sglangs_dca_is_not_exported_where_it_crashes(tmp_path):
    """Qwen3-MoE: SGLang's attention passes its rotary a keyword DCA's rotary does not take (sglang #16461), so advise
    exports the next candidate SGLang serves and says why."""
    folder = tmp_path / "qwen3_moe"
    Qwen3MoeConfig(vocab_size=96, hidden_size=64, intermediate_size=96, moe_intermediate_size=32, num_hidden_layers=2,
                   num_attention_heads=4, num_key_value_heads=2, head_dim=16, num_experts=4, num_experts_per_tok=2,
                   max_position_embeddings=256).save_pretrained(folder)
    out = tmp_path / "out"
    out.mkdir()
    table = ranking("dca")
    e = {x["runtime"]: x for x in export_winner(Standings.from_json(table), table, read_rope_config(str(folder)),
                                                str(folder), None, out)}["sglang"]
    assert e["ok"] and e["candidate"] != "dca", e
    assert "sglang refused dca" in e["instead"] and "#16461" in e["instead"], e["instead"]


def test_advise_says_how_to_load_each_export_and_copies_ropecli_own_weights(tmp_path):
    """The terminal says exactly what to type (trust_remote_code for a map's folder) for every export it wrote; the
    built-in model's weights are copied (links into the installed package break with it), --weights link keeps
    links and goes into the printed command."""
    result = ranking("selfextend")
    rope = read_rope_config(str(BUILTIN_DIR))
    for weights in ("auto", "link"):
        out = tmp_path / weights
        out.mkdir()
        got = {e["runtime"]: e for e in export_winner(Standings.from_json(result), result, rope, None, None, out, weights)}
        assert got["transformers"]["serve"] == f"AutoModelForCausalLM.from_pretrained('{out / 'hf'}', trust_remote_code=True)"
        assert ("--weights link" in got["transformers"]["command"]) is (weights == "link")
        assert (out / "hf" / "model.safetensors").is_symlink() is (weights == "link")
    said = export_lines(list(got.values()))
    assert f"  load it: AutoModelForCausalLM.from_pretrained('{out / 'hf'}', trust_remote_code=True)" in said
    assert any(line.startswith(f"  serve it: python -m vllm.entrypoints.openai.api_server --model {out / 'vllm'} "
                               "--max-model-len 1024 --dtype float32 --enforce-eager") for line in said), said
