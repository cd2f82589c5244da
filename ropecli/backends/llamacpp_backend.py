"""The llama.cpp backend (`--backend llamacpp`): a GGUF evaluated inside llama.cpp, as GGUF users serve it.

The schedule is applied the way llama.cpp serves an exported GGUF: a temporary copy of the file with
`rope_freqs.weight` = the d/2 factors and `{arch}.rope.scaling.attn_factor` (`ropecli.models.gguf_rope`,
the exporter's own function; what llama.cpp does with both: `ropecli.export.readback`). Windows are
decoded `n_batch` tokens at a time with logits requested for every position; each batch's logits
(n_batch x vocab, fp32, llama.cpp's output buffer) are scored at once by the same functions as the
transformers backend (`ropecli.models.chunked_scoring.chunk_nll`, `answer_scores`, `chunk_kl`), so memory
holds the quantized weights, the KV cache and one batch of logits: a 7B Q4 GGUF needs ~4 GB, not the
~28 GB of fp32 weights transformers dequantizes it to. Tokens come from transformers' tokenizer of the
same GGUF: both backends score identical token windows.

llama-cpp-python is an optional extra (`pip install 'ropecli[llamacpp]'`, which builds llama.cpp).
"""

from __future__ import annotations

import os
import tempfile
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ropecli.backends.backend import BackendDefaults, Calibration
from ropecli.deferred import deferred
from ropecli.errors import RopeCliError
from ropecli.maps.position_maps import BoundMap
from ropecli.models.chunked_scoring import answer_scores, chunk_kl, token_nll
from ropecli.models.gguf_rope import GGUF_ROPE_FREQS_ARCHS, export_gguf, read_gguf_input
from ropecli.models.llamacpp_files import plain_weight_buffers
from ropecli.models.llamacpp_selfextend_run import (
    SELF_EXTEND_MAPS,
    group_attention,
    probe_tokens,
    self_extend_notes,
    seq_div_rotates_right,
)
from ropecli.models.model_rope import ModelRope
from ropecli.models.token_losses import prefix_summaries
from ropecli.rope.schedule import Schedule

llama_cpp = deferred("llama_cpp")
torch = deferred("torch")

N_BATCH = 512  # tokens per llama_decode: llama.cpp's default batch; logits of one batch at a time


@dataclass
class LlamaCppBackend(BackendDefaults):
    gguf: Path  # the source GGUF
    tokenizer: Any
    rope: ModelRope
    fingerprint: str
    dtype: str  # the GGUF's file type, e.g. "gguf MOSTLY_Q4_1": llama.cpp computes with the quantized weights
    device: str = "cpu"
    runtime: str = "llamacpp"  # the cache key: entries of the older spelling "llama.cpp" are migrated (cache_migrations)
    threads: int = field(default_factory=lambda: len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity")
                         else os.cpu_count() or 1)  # the cores this process may use (Linux), else all
    gpu_layers: int = 0
    _path: Path | None = None  # the GGUF the current block runs (the source, or a temporary scaled copy)
    _llms: dict = field(default_factory=dict)  # (path, n_ctx) -> llama_cpp.Llama, reused across windows
    native_only: bool = False  # the GGUF carries its own scaling: only `native` (the file as it is) runs here
    maps: tuple[str, ...] = SELF_EXTEND_MAPS  # the position maps it runs: llama.cpp's own Self-Extend loop
    divide: str = "seq_div"  # Self-Extend's division of cached positions: the build's seq_div, or "seq_add" (the fix)
    _group: tuple[int, int] | None = None  # (G, W) while a Self-Extend block runs
    _seq_div: tuple[bool, float] | None = None  # `seq_div_check`, once

    def describe(self) -> str:
        return self.rope.describe(f"llama.cpp ({self.dtype.removeprefix('gguf ')}, {self.threads} threads)")

    def map_refusal(self) -> str | None:
        """Why llama.cpp's Self-Extend does not run on this model, or None: its loop moves every layer's cached positions
        under one RoPE, every dimension rotated."""
        rope = self.rope
        if rope.partial_rotary_factor != 1:
            return f"llama.cpp's Self-Extend rotates every dimension; {rope.name} rotates {rope.partial_rotary_factor:g} of each head"
        if rope.layer_bases or rope.layers is not None:
            return f"llama.cpp's Self-Extend runs one RoPE on every layer; {rope.name}'s layers differ"
        return None

    @contextmanager
    def scaled(self, schedule: Schedule, log_n: bool, position_map: BoundMap | None = None,
               calibration: Calibration | None = None):
        """The model under `schedule` inside the block: a temporary GGUF with rope_freqs and attn_factor (`calibration`:
        unused, Self-Extend selects no key pairs)."""
        if position_map and position_map.name not in SELF_EXTEND_MAPS:
            raise RopeCliError(f"--map {position_map.name}: llama.cpp serves one position map, Self-Extend (-gan G -gaw W: "
                               f"--map selfextend or selfextend-llamacpp); measure {position_map.name} with --backend transformers")
        if schedule.temperature is not None:
            raise RopeCliError(f"a changed position temperature ({schedule.temperature.label}) is measured with --backend "
                               "transformers; the llamacpp backend runs the GGUF's own")
        if log_n:
            raise RopeCliError("--log-n scales each query by its own position, which llama.cpp cannot express; "
                               "use the transformers backend for log-n")
        if position_map:  # llama.cpp's own group-attention loop, batch by batch (`batches`), under the schedule below
            G, W = (int(position_map.values[k]) for k in ("G", "W"))
            if W % G:
                raise RopeCliError(f"--map {position_map.name}:G={G},W={W}: llama.cpp needs W a multiple of G "
                                   f"(GGML_ASSERT(ga_w % ga_n == 0) in tools/completion/completion.cpp); pass W = "
                                   f"{W - W % G or G} or {W + G - W % G}")
            self._group = (G, W)
            try:
                with self.scaled(schedule, log_n):
                    yield
            finally:
                self._group = None
            return
        native = schedule.method == "native"  # the GGUF as shipped, untouched
        if self.native_only and not native:
            raise RopeCliError(f"--backend llamacpp: {self.gguf.name} carries its own RoPE scaling (rope_freqs or a llama.cpp "
                               f"scaling type), which a schedule written as rope_freqs would stack on; here it runs only as "
                               f"--method native. Other schedules: --backend transformers")
        if native or (np.allclose(schedule.factors, 1.0, rtol=0, atol=0) and schedule.attention_factor == 1.0):
            self._path = self.gguf
            yield
            return
        tmp = self.scaled_copy(schedule)
        try:
            self._path = tmp
            yield
        finally:
            self._close(tmp)
            tmp.unlink(missing_ok=True)
            self._path = self.gguf

    def scaled_copy(self, schedule: Schedule) -> Path:
        src, reader = read_gguf_input(self.gguf)
        if not src.reads_rope_freqs:
            raise RopeCliError(f"--backend llamacpp: llama.cpp's loader for GGUF architecture '{src.arch}' does not read "
                               f"rope_freqs, so ropecli cannot apply a schedule there (supported: "
                               f"{', '.join(GGUF_ROPE_FREQS_ARCHS)}); it runs here only as --method native or none")
        fd, name = tempfile.mkstemp(suffix=".gguf", prefix="ropecli-", dir=os.environ.get("ROPECLI_TMPDIR"))
        os.close(fd)
        L = self.rope.train_len
        try:
            export_gguf(reader, src, Path(name), schedule.factors, schedule.attention_factor, L, L)
        except BaseException:
            Path(name).unlink(missing_ok=True)
            raise
        return Path(name)

    def _llm(self, path: Path, n_ctx: int, n_batch: int = N_BATCH, slot: str = "main"):
        key = (str(path), n_ctx, n_batch, slot)  # slot "reference": a second context of the same file (KL under a map)
        if key not in self._llms:
            for old in [k for k in self._llms if k[0] == str(path) and k[3] == slot]:  # one per file, sized for this window
                self._llms.pop(old).close()
            with plain_weight_buffers():  # n_ubatch: llama.cpp's default micro-batch (it splits a batch, positions kept)
                self._llms[key] = llama_cpp.Llama(model_path=str(path), n_ctx=n_ctx, n_batch=n_batch,
                                                  n_ubatch=min(n_batch, N_BATCH),
                                                  n_threads=self.threads, n_threads_batch=self.threads,
                                                  n_gpu_layers=self.gpu_layers, verbose=False)
        return self._llms[key]

    def _close(self, path: Path) -> None:
        for k in [k for k in self._llms if k[0] == str(path)]:
            self._llms.pop(k).close()

    def batches(self, ids: np.ndarray, path: Path | None = None, group: tuple[int, int] | None = None,
                size: int | None = None, slot: str = "main", outputs_from: int = 0):
        """Yield (start, fp32 logits (b, vocab) of tokens start .. start+b-1) over one window; each array is a view of
        llama.cpp's output buffer, valid until the next step. `outputs_from`: logits of the tokens from there on only
        (the model's head skipped before; batches that end before it yield nothing). Under Self-Extend (`group` = (G, W), default the block's)
        the window is decoded as llama.cpp's completion tool decodes a prompt with -gan G -gaw W -b W: batches of W,
        the cache's positions grouped before each (`llamacpp_selfextend_run.group_attention`), each batch continuing from
        the cache's largest position, as `llama_batch_get_one` does."""
        group = self._group if group is None else group or None
        size = group[1] if group else size or N_BATCH
        llm = self._llm(path or self._path or self.gguf, max(len(ids), 8), size, slot)
        llm.reset()
        llm._ctx.kv_cache_clear()  # a fresh window: nothing of the last one in the KV cache
        tokens = [int(t) for t in ids]
        vocab = llm.n_vocab()
        n_past = ga_i = 0
        for start in range(0, len(tokens), size):
            part = tokens[start:start + size]
            if group:
                mem = llm._ctx.memory
                n_past, ga_i = group_attention(llama_cpp, mem, n_past, ga_i, *group, divide=self.divide)
                if llama_cpp.llama_memory_seq_pos_max(mem, 0) + 1 != n_past:  # the loop's bookkeeping is the cache's
                    raise RopeCliError(f"llama.cpp's cache ends at {llama_cpp.llama_memory_seq_pos_max(mem, 0)} after "
                                       f"Self-Extend's moves, not {n_past - 1}: this build groups positions differently")
            else:
                n_past = start
            llm._batch.set_batch(batch=part, n_past=n_past, logits_all=True)  # what Llama.eval does, logits kept per batch
            first = min(max(outputs_from - start, 0), len(part))  # the batch's first token with logits
            for i in range(first):
                llm._batch.batch.logits[i] = False
            llm._ctx.decode(llm._batch)
            n_past += len(part)
            if first < len(part):
                yield start + first, np.ctypeslib.as_array(llm._ctx.get_logits(), shape=(len(part) - first, vocab))

    def seq_div_check(self) -> tuple[bool, float]:
        """Whether this llama.cpp build re-rotates the keys seq_div moves to their new positions (`seq_div_rotates_right`
        on the source GGUF, in a small context of its own), measured once per backend: (right, the largest difference)."""
        if self._seq_div is None:
            llm = self._llm(self.gguf, 64, slot="probe")
            self._seq_div = seq_div_rotates_right(llm, probe_tokens(self.tokenizer))
        return self._seq_div

    def notes(self) -> list[str]:
        """What a command says at its end when Self-Extend ran here (`llamacpp_selfextend_run.self_extend_notes`)."""
        return [] if self._seq_div is None else self_extend_notes(self.divide, *self._seq_div)

    def map_key(self) -> dict:
        """What a Self-Extend number measured here depends on beyond the model and the map, for the cache key: the
        llama.cpp build's seq_div (right or not, checked on the model) and the way the loop divides."""
        right, _ = self.seq_div_check()
        return {"llama_cpp_python": llama_cpp.__version__, "seq_div_right": right, "divide": self.divide}

    def window_nll(self, ids: np.ndarray, chunk_tokens: int | None, score_last: int | None, prefixes: list[int] | None = None,
                   keep_tokens: bool = False):
        return prefix_summaries(self.token_losses(ids), score_last, prefixes, keep_tokens)

    def token_losses(self, ids: np.ndarray, chunk_tokens: int | None = None) -> np.ndarray:
        T = len(ids)
        targets = torch.from_numpy(np.asarray(ids, dtype=np.int64))
        per_token = np.empty(T - 1, dtype=np.float64)
        for start, logits in self.batches(ids):
            hi = min(start + len(logits), T - 1)  # position t predicts token t+1
            if start < hi:
                per_token[start:hi] = token_nll(torch.from_numpy(logits[:hi - start]), targets[start + 1:hi + 1]).numpy()
        return per_token

    def passkey_scores(self, ids: np.ndarray, answer_start: int) -> tuple[float, float]:
        rows = []
        for start, logits in self.batches(ids, outputs_from=answer_start - 1):
            lo, hi = max(start, answer_start - 1), min(start + len(logits), len(ids) - 1)
            if lo < hi:
                rows.append(np.array(logits[lo - start:hi - start]))
        target = torch.from_numpy(np.asarray(ids[answer_start:], dtype=np.int64))
        return answer_scores(torch.from_numpy(np.concatenate(rows)), target)

    def greedy(self, ids: np.ndarray, max_new: int) -> str:
        raise RopeCliError("--generate (RULER's generation score) runs on the transformers backend; drop --generate "
                           "(the answer likelihood is scored here too) or pass --backend transformers")

    def window_kl(self, ids: np.ndarray, schedule: Schedule, log_n: bool, chunk_tokens: int | None,
                  position_map: BoundMap | None = None, calibration: Calibration | None = None) -> tuple[float, int, int, list[float]]:
        """KL(unscaled || scaled) per position: the source GGUF and the scaled copy decode the window in
        step, batch by batch (two llama.cpp contexts; one batch of logits of each at a time). Under Self-Extend the
        reference decodes in the same batches of W, ungrouped."""
        with self.scaled(schedule, log_n, position_map):
            scaled, group = self._path, self._group
            if scaled == self.gguf and not group:  # the unscaled model against itself: exactly 0 everywhere
                return 0.0, len(ids), len(ids), [0.0] * len(ids)
            per, agree = [], 0
            size = group[1] if group else N_BATCH
            for (_, ref), (_, new) in zip(self.batches(ids, self.gguf, group=(), size=size, slot="reference"),
                                          self.batches(ids, scaled)):
                kl, same = chunk_kl(torch.from_numpy(np.array(ref)), torch.from_numpy(np.array(new)))
                per.append(kl)
                agree += same
        values = torch.cat(per)
        return float(values.sum()), int(values.numel()), agree, values.tolist()

    def close(self) -> None:
        for llm in self._llms.values():
            llm.close()
        self._llms.clear()
