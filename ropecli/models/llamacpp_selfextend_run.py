"""Self-Extend inside llama.cpp, as its completion tool runs it (`--backend llamacpp` with a selfextend map).

llama.cpp serves Self-Extend (`-gan G -gaw W`) in its completion tool alone (tools/completion/completion.cpp, the
"context extension via Self-Extend" branch of the main loop). Before each batch of prompt tokens it moves the positions
of the cells already in the KV cache, through the public memory API:

    while (n_past >= ga_i + ga_w) {
        ib = (ga_n*ga_i)/ga_w;  bd = (ga_w/ga_n)*(ga_n - 1);  dd = (ga_w/ga_n) - ib*bd - ga_w;
        llama_memory_seq_add(mem, 0, ga_i,                n_past,              ib*bd);
        llama_memory_seq_div(mem, 0, ga_i + ib*bd,        ga_i + ib*bd + ga_w, ga_n);
        llama_memory_seq_add(mem, 0, ga_i + ib*bd + ga_w, n_past + ib*bd,      dd);
        n_past -= bd;  ga_i += ga_w/ga_n;
    }

then decodes the batch with `llama_batch_get_one` (no positions given: llama.cpp continues the sequence from the
cache's largest position). The moves take effect at the next decode, when llama.cpp re-rotates every moved key by
the shift its cells recorded (the K-shift: `llama_kv_cache::update` -> `build_graph_shift`, RoPE by `shift[i]`).

`group_attention` below is that loop, called the same way through llama-cpp-python, so what `--backend llamacpp`
measures under Self-Extend is what the installed build serves. With `divide="seq_add"` each `seq_div` is replaced by
one `seq_add` per position to the same destination (p -> p // G): the cells land where seq_div puts them, and the
K-shift re-rotates each key by the move it made. That is the one-line fix's behaviour on any build (below).

Why the two differ on today's builds (src/llama-kv-cells.h of the llama.cpp vendored in llama-cpp-python 0.3.36):

    bool pos_add(uint32_t i, llama_pos d) { ... pos[i] += d;  shift[i] += d; ... }          // shift = new - old
    void pos_div(uint32_t i, int d) { const llama_pos p_old = pos[i]; ...
                                      pos[i] /= d;  shift[i] += p_old - pos[i]; ... }       // shift = old - new

so a divided key is re-rotated to 2 p_old - p_new instead of p_new (`seq_div_rotates_right` measures it on the
loaded model). The fix: `shift[i] += pos[i] - p_old;` in `pos_div`.
"""

from __future__ import annotations

import numpy as np

from ropecli.deferred import deferred

llama_cpp = deferred("llama_cpp")

SELF_EXTEND_MAPS = ("selfextend", "selfextend-llamacpp")  # llama.cpp serves both as -gan G -gaw W (the same loop)
DIVIDES = ("seq_div", "seq_add")  # the build's seq_div as it is; per-position seq_add to the same positions (the fix)


def group_attention(api, mem, n_past: int, ga_i: int, G: int, W: int, divide: str = "seq_div") -> tuple[int, int]:
    """One pass of the completion tool's Self-Extend loop before a batch: the cache's positions moved, (n_past, ga_i)
    returned. `api` is the `llama_cpp` module (its ctypes bindings), `mem` the context's llama_memory_t."""
    while n_past >= ga_i + W:
        ib = (G * ga_i) // W
        bd = (W // G) * (G - 1)
        dd = (W // G) - ib * bd - W
        api.llama_memory_seq_add(mem, 0, ga_i, n_past, ib * bd)
        lo, hi = ga_i + ib * bd, ga_i + ib * bd + W
        if divide == "seq_div":
            api.llama_memory_seq_div(mem, 0, lo, hi, G)
        else:  # ascending: a moved cell lands at p // G < p, below every position still to move, never moved twice
            for p in range(max(lo, 1), hi):
                api.llama_memory_seq_add(mem, 0, p, p + 1, p // G - p)
        api.llama_memory_seq_add(mem, 0, hi, n_past + ib * bd, dd)
        n_past -= bd
        ga_i += W // G
    return n_past, ga_i


def seq_div_rotates_right(llm, tokens: list[int], G: int = 4) -> tuple[bool, float]:
    """Whether the loaded llama.cpp build re-rotates the keys `llama_memory_seq_div` moves to their new positions:
    (right, the largest logit difference seen). The same tokens are decoded twice, their positions divided by G once
    with seq_div and once with per-position seq_add to the same destinations, then one more token is decoded; the two
    caches hold the same cells at the same positions, so the next token's logits agree exactly where both shifts are
    right and differ by whole logits where seq_div's sign is wrong. Costs two decodes of len(tokens) + 1 tokens."""
    n = len(tokens) - 1
    out = []
    for divide in DIVIDES:
        llm.reset()
        llm._ctx.kv_cache_clear()
        mem = llm._ctx.memory
        llm._batch.set_batch(batch=tokens[:n], n_past=0, logits_all=False)
        llm._ctx.decode(llm._batch)
        if divide == "seq_div":
            llama_cpp.llama_memory_seq_div(mem, 0, 0, n, G)
        else:
            for p in range(1, n):
                llama_cpp.llama_memory_seq_add(mem, 0, p, p + 1, p // G - p)
        nxt = llama_cpp.llama_memory_seq_pos_max(mem, 0) + 1
        llm._batch.set_batch(batch=tokens[n:], n_past=nxt, logits_all=False)
        llm._ctx.decode(llm._batch)
        out.append(np.array(np.ctypeslib.as_array(llm._ctx.get_logits_ith(-1), shape=(llm.n_vocab(),))))
    llm.reset()
    llm._ctx.kv_cache_clear()
    gap = float(np.max(np.abs(out[0] - out[1])))
    scale = float(np.max(np.abs(out[1]))) or 1.0
    return gap <= 1e-3 * scale, gap


def probe_tokens(tokenizer) -> list[int]:
    """33 tokens of plain text for `seq_div_rotates_right` (any text serves: only the two moves differ)."""
    text = ("Self-Extend moves the positions of the cached keys before each batch, so the next token sees them grouped; "
            "a build that rotates them right gives the same logits either way.")
    return [int(t) for t in tokenizer(text)["input_ids"]][:33]


def self_extend_notes(divide: str, right: bool, gap: float) -> list[str]:
    """The notes a command ends with after Self-Extend ran through llama.cpp's loop: what ran, and what the build does."""
    both = ("note: on --backend llamacpp, --map selfextend and --map selfextend-llamacpp both run as llama.cpp's "
            "-gan G -gaw W (its completion tool's loop, batches of W)")
    if divide == "seq_add":
        return [both, "note: each seq_div was replaced by per-position seq_add (ROPECLI_LLAMACPP_DIVIDE=seq_add): what a "
                      "build with the pos_div fix serves"]
    if right:
        return [both, f"note: this build (llama-cpp-python {llama_cpp.__version__}) re-rotates the keys seq_div moves to "
                      "their new positions (probe: the logits agree with per-position seq_add)"]
    return [both, f"note: these numbers are what this build serves (llama-cpp-python {llama_cpp.__version__}): its seq_div "
                  f"re-rotates the grouped keys to 2·p_old − p_new (probe: logits {gap:.3g} apart from per-position "
                  "seq_add to the same positions); a build with the fix serves `--map selfextend-llamacpp` as --backend "
                  "transformers measures it (docs/runtimes.md#self-extend-in-llamacpp)"]
