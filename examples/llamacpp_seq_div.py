"""A minimal reproduction of llama.cpp's seq_div K-shift sign, for an upstream report (llama-cpp-python alone, any GGUF).

llama.cpp's Self-Extend (-gan/-gaw, tools/completion/completion.cpp) divides cached positions with llama_memory_seq_div.
The cells land at p // d, but src/llama-kv-cells.h's pos_div records the shift as p_old - p_new where pos_add records
new - old, so the K-shift rotates each divided key to 2·p_old - p_new. This script decodes the same tokens twice, moves
their positions to p // 4 once with seq_div and once with one seq_add per position (the same destinations), decodes one
more token and compares its logits: they agree exactly on a build whose seq_div is right (b5484 and earlier, or with
the fix `shift[i] += pos[i] - p_old;`) and differ by whole logits on one that is not (b5486 on).

    python examples/llamacpp_seq_div.py MODEL.gguf
"""

import sys

import llama_cpp
import numpy as np


def next_logits(llm, tokens, divide: str, d: int = 4):
    llm.reset()
    llama_cpp.llama_memory_clear(llm._ctx.memory, True)
    mem, n = llm._ctx.memory, len(tokens) - 1
    llm._batch.set_batch(batch=tokens[:n], n_past=0, logits_all=False)
    llm._ctx.decode(llm._batch)
    if divide == "seq_div":
        llama_cpp.llama_memory_seq_div(mem, 0, 0, n, d)
    else:  # the same destinations, each position moved by its own seq_add (pos_add's shift has the right sign)
        for p in range(1, n):
            llama_cpp.llama_memory_seq_add(mem, 0, p, p + 1, p // d - p)
    nxt = llama_cpp.llama_memory_seq_pos_max(mem, 0) + 1  # both: n // d positions deep
    llm._batch.set_batch(batch=tokens[n:], n_past=nxt, logits_all=False)
    llm._ctx.decode(llm._batch)  # applies the K-shift, then decodes the last token against the shifted keys
    return np.array(np.ctypeslib.as_array(llm._ctx.get_logits_ith(-1), shape=(llm.n_vocab(),)))


def plain_buffers():
    """use_extra_bufts off (llama-cpp-python does not expose it): on the machine this was written on (a Xeon with AMX,
    sandboxed) the repacked quantized weights fault on the first decode; irrelevant to the K-shift."""
    default = llama_cpp.llama_cpp.llama_model_default_params

    def params():
        p = default()
        p.use_extra_bufts = False
        return p

    llama_cpp.llama.llama_cpp.llama_model_default_params = params


def main(path: str) -> int:
    plain_buffers()
    llm = llama_cpp.Llama(model_path=path, n_ctx=256, n_batch=64, verbose=False)
    tokens = llm.tokenize(b"The positions of these cached keys are divided by four before the next token is decoded.")[:33]
    by_div, by_add = next_logits(llm, tokens, "seq_div"), next_logits(llm, tokens, "seq_add")
    gap = float(np.max(np.abs(by_div - by_add)))
    right = gap <= 1e-3 * float(np.max(np.abs(by_add)))
    print(f"llama-cpp-python {llama_cpp.__version__}: largest logit difference seq_div vs per-position seq_add = {gap:.4g}: "
          + ("seq_div rotates the divided keys right" if right else
             "seq_div re-rotates the divided keys the wrong way (src/llama-kv-cells.h pos_div: shift[i] += p_old - pos[i])"))
    llm.close()
    return 0 if right else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
