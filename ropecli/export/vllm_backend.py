"""vLLM as ropecli's measuring engine (`--backend vllm`): every window and prompt scored inside the engine that serves
the winner, on as many devices as vLLM spreads it over (`--tensor-parallel N`, `--pipeline-parallel N`). It sits with
export, not with the other backends: what it measures is what `export --to vllm` writes (the same overrides, the same
map folder), so it is built from export's writers.

What runs where:
- ropecli's process keeps what it always has (the tokenizer, the windows, the cache, the statistics); vLLM runs in one
  long-lived process of its own (`ropecli.export.vllm_worker`), in ropecli's environment where vLLM imports there,
  else in the one $ROPECLI_VLLM_PYTHON names (`export.runtimes.vllm.engine_python`, as `verify` finds it).
- A schedule reaches vLLM as `hf_overrides` (longrope with long_factor = short_factor = the schedule's factors, the
  cos/sin scaled by short_mscale = long_mscale = its attention factor: `schedule_overrides`); the model as shipped as
  it is; a position map as the map folder `export --to vllm` writes, served through ropecli's plugin
  (`ropecli.maps.vllm_plugin`). One engine at a time, kept while the next block asks for the same one (lengths below
  its max_model_len included); a schedule that differs from the running engine's in its factors alone is set in it
  (`vllm_worker.reschedule`), anything else starts the next engine.
- The numbers: a window's NLL per token from vLLM's prompt log-probabilities (`prompt_logprobs=0`: the token's own
  log-probability and rank, from the raw logits), generation from vLLM's greedy sampler; an answer under a map whose
  regions the prompt fixes (LaMPE) teacher-forced through vLLM's decoding (`ropecli.export.vllm_forced`).
- Batching: the evaluator hands a block's units to `gather` before it scores them one by one. Each unit's scoring
  runs; a backend call whose answer is not yet known records its request and stops that unit (`Pending`); the round's
  requests go to vLLM as one batch (vLLM schedules them: continuous batching, chunked prefill, prefix caching), and
  the next round reruns the units, each now one call further. Then the evaluator's loop finds every answer known.

- KL: the model as shipped and the schedule are two engines; the first's whole distributions (prompt_logprobs=-1, in
  vLLM's flat lists) are kept in vLLM's process until the second's arrive, and compared there: nothing of size
  positions x vocabulary crosses to ropecli. Beyond FULL_ENTRIES a window, refused (vLLM's lists are Python's).

Refused in one line, before any engine starts: log-n and a changed position temperature (vLLM has neither as a
per-position rule), generation teacher-forced across schedules (`--decode-across`), torchrun (vLLM spreads a model
itself: --tensor-parallel), a length beyond --max-model-len's setting, a family the plugin does not serve under a map.
"""

from __future__ import annotations

import atexit
import functools
import hashlib
import json
import os
import struct
import subprocess
import tempfile
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np

from ropecli.backends.backend import (
    BackendDefaults,
    Calibration,
    native_as_loaded,
    native_reference,
)
from ropecli.backends.load import load_model, resolve_device
from ropecli.deferred import deferred
from ropecli.errors import RopeCliError
from ropecli.evaluation.cache import default_cache_dir
from ropecli.export.hf_folder import export_hf_from_gguf
from ropecli.export.map_folder import write_map_folder
from ropecli.export.runtimes.vllm import (
    RECORD,
    engine_python,
    memory_now,
    unavailable,
    with_v4_keys,
)
from ropecli.export.vllm_engine import ENV
from ropecli.export.writers import write_block
from ropecli.maps.position_maps import BoundMap
from ropecli.maps.vllm_plugin import SERVED
from ropecli.models.config import BUILTIN, BUILTIN_DIR, locate_file, read_rope_config
from ropecli.models.llamacpp_files import file_fingerprint
from ropecli.models.model_rope import ModelRope
from ropecli.models.packaged import resolve_model
from ropecli.models.token_losses import prefix_summaries
from ropecli.rope.factor_files import rope_parameters_block
from ropecli.rope.schedule import Schedule

transformers = deferred("transformers")
hub = deferred("huggingface_hub")

GENERATION_ROOM = 64  # tokens past the longest window an engine is started with: a prompt's generated answer
FULL_ENTRIES = 32 << 20  # KL: the most log-probabilities (positions x vocabulary) one window's distributions may hold


class Pending(BaseException):
    """A request recorded for this round's batch (`VllmBackend.gather`): not an error, so no `except Exception` in a
    metric's scoring stops it."""


def schedule_overrides(rope: ModelRope, schedule: Schedule) -> dict:
    """vLLM's `hf_overrides` running `schedule` on every request: per scaled layer type (or the one RoPE) longrope with
    short_factor = long_factor = the factors (vLLM picks long_factor past original_max_position_embeddings,
    `Phi3LongRoPEScaledRotaryEmbedding.__init__` in vllm/model_executor/layers/rotary_embedding/
    phi3_long_rope_scaled_rope.py: both the same, one rotation at every length), cos/sin times short_mscale =
    long_mscale = the attention factor (vLLM's longrope reads those, not attention_factor)."""
    per_type = {}
    for layer_type, base in rope.scaled_bases.items():
        geom = rope.geometry(1.0, base)
        params = rope_parameters_block(geom, schedule, partial_rotary_factor=rope.partial_rotary_factor)["rope_parameters"]
        params["short_mscale"] = params["long_mscale"] = params["attention_factor"]
        per_type[layer_type] = params
    if None in per_type:
        return with_v4_keys({"rope_parameters": per_type[None]})
    return {"rope_parameters": {t: per_type.get(t, "unchanged") for t in rope.layer_types}}


def folder_fingerprint(folder: Path) -> str:
    """sha256 over config.json (where it was loaded from and the transformers version left out) and every safetensors
    file's size, header (each tensor's name, dtype, shape, offsets) and the first 4 KiB of each tensor: cheap at any
    size, different for different weights."""
    h = hashlib.sha256()
    config = json.loads((folder / "config.json").read_text())
    for key in ("_name_or_path", "transformers_version"):
        config.pop(key, None)
    h.update(json.dumps(config, sort_keys=True).encode())
    for path in sorted(folder.glob("*.safetensors")):
        with open(path, "rb") as fh:
            size = struct.unpack("<Q", fh.read(8))[0]
            header = fh.read(size)
            h.update(path.name.encode() + str(path.stat().st_size).encode() + header)
            for entry in sorted((v for k, v in json.loads(header).items() if k != "__metadata__"),
                                key=lambda v: v["data_offsets"][0]):
                fh.seek(8 + size + entry["data_offsets"][0])
                h.update(fh.read(min(4096, entry["data_offsets"][1] - entry["data_offsets"][0])))
    return h.hexdigest()[:16]


class Worker:
    """The vLLM process: started on the first batch, one JSON line each way per batch, ended at exit. One per Python
    and environment in a process (`shared`): commands run one after another in one process (tests, a notebook) keep
    vLLM imported and its last engine loaded."""

    @staticmethod
    @functools.cache
    def shared(python: str, env: tuple) -> "Worker":
        return Worker(python, dict(env))

    def __init__(self, python: str, env: dict):
        self.python, self.env, self.proc, self.log = python, env, None, None

    def ask(self, job: dict) -> dict:
        if self.proc is None or self.proc.poll() is not None:
            self.start()
        try:
            self.proc.stdin.write(json.dumps(job) + "\n")
            self.proc.stdin.flush()
            line = self.proc.stdout.readline()
        except BrokenPipeError:
            line = ""
        if not line:
            raise RopeCliError(f"vLLM's engine process ({self.python}) ended: {self.tail()}")
        return json.loads(line)

    def start(self) -> None:
        if self.proc is None:  # the first start: ended with the process (a restart keeps the one registration)
            atexit.register(self.close)
        self.log = tempfile.NamedTemporaryFile("w+", prefix="ropecli-vllm-", suffix=".log", delete=False)
        self.proc = subprocess.Popen([self.python, "-m", "ropecli.export.vllm_worker"], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=self.log, text=True,
                                     env={**os.environ, **ENV, **self.env})
        first = self.proc.stdout.readline()
        if not first:
            raise RopeCliError(f"vLLM's engine process ({self.python}) did not start: {self.tail()}")
        self.version = json.loads(first)["version"]

    def tail(self) -> str:
        """The last line vLLM wrote to its log, for one-line errors; its log file's path."""
        if self.log is None:
            return "no log"
        self.log.flush()
        lines = [x for x in Path(self.log.name).read_text(errors="replace").splitlines() if x.strip()]
        return f"{(lines or ['no output'])[-1][:300]} (log: {self.log.name})"

    def close(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            try:
                self.proc.stdin.write(json.dumps({"close": True}) + "\n")
                self.proc.stdin.flush()
                self.proc.wait(timeout=60)
            except (OSError, subprocess.TimeoutExpired):
                self.proc.kill()
        self.proc = None


@dataclass
class VllmBackend(BackendDefaults):
    """A model measured inside vLLM's engine (module docstring)."""
    source: str  # the folder (or hub id) vLLM loads
    tokenizer: Any
    rope: ModelRope
    fingerprint: str
    dtype: str  # vLLM's --dtype: float32 on a CPU (ropecli's fp32), bfloat16 on a GPU unless --dtype says
    device: str
    worker: Worker
    engine_args: dict  # tensor_parallel_size, pipeline_parallel_size, the executor, memory share
    max_len: int  # the longest window the command asks for: engines start with room for it and an answer
    cap: int | None = None  # --max-model-len: no engine is started longer
    positions: int = 0  # config.json's max_position_embeddings
    vocab: int = 0  # config.json's vocab_size: a KL window's distributions are positions x vocab
    token_bytes: int = 0  # one token's keys and values over every layer, in the engine's dtype (`kv_token_bytes`)
    architecture: str = ""  # config.json's architectures[0]: the plugin serves maps on SERVED
    runtime: str = RECORD.name  # vLLM's runtime record's
    maps: bool = True
    earlier_fingerprints: tuple[str, ...] = ()
    selection_model: Any = None  # () -> a TransformersBackend of the same weights: DPE's key pairs are chosen there
    _engine: dict | None = None  # the engine the current `scaled` block runs on
    _maps_now: bool = False  # the block runs a map folder (the plugin rotates every position itself)
    _per_prompt: bool = False  # the block's map fixes its regions from the prompt (LaMPE): answers forced through decoding
    _answers: dict = field(default_factory=dict)
    _round: dict | None = None  # requests recorded in this round of `gather` (by their JSON), or None outside it
    _folders: dict = field(default_factory=dict)  # map folders written for this process, by what they carry
    _tmp: Any = None
    _notes: list = field(default_factory=list)
    _loads: list = field(default_factory=list)  # seconds each engine took to start
    _rescheduled: int = 0  # schedules set in a running engine instead (`vllm_worker.reschedule`)

    @property
    def name(self) -> str:
        return self.rope.name

    def describe(self) -> str:
        ranks = self.engine_args.get("tensor_parallel_size", 1) * self.engine_args.get("pipeline_parallel_size", 1)
        return self.rope.describe(f"{self.dtype} in vLLM's engine on {self.device}"
                                  + (f", {ranks} ranks" if ranks > 1 else ""))

    def map_refusal(self) -> str | None:
        if self.architecture in SERVED:
            return None
        return (f"{self.architecture or 'this model'}: ropecli's vLLM plugin serves maps on {', '.join(SERVED)}; "
                "measure the map with --backend transformers")

    def notes(self) -> list[str]:
        said = list(self._notes)
        if self._loads or self._rescheduled:
            said.append(f"vLLM {getattr(self.worker, 'version', '')}: {len(self._loads)} engine(s) started, "
                        f"{sum(self._loads):.0f} s in all" + (f"; {self._rescheduled} schedule(s) set in a running "
                                                            "engine" if self._rescheduled else ""))
        return said

    # --- the block's engine ---

    @contextmanager
    def scaled(self, schedule: Schedule, log_n: bool, position_map: BoundMap | None = None,
               calibration: Calibration | None = None):
        if log_n:
            raise RopeCliError("log-n under --backend vllm: vLLM scales no query by its position's log; measure it "
                               "with --backend transformers")
        if schedule.temperature is not None:
            raise RopeCliError(f"{schedule.method} changes the model's position temperature, which vLLM reads from "
                               "config.json only; measure it with --backend transformers")
        args = {"dtype": self.dtype, **self.engine_args}
        if position_map:
            bound, note = self.rope.on_model(position_map)
            if note and note not in self._notes:
                self._notes.append(note)
            if (bound.record.per_length or bound.record.per_prompt) and "distributed_executor_backend" in args:
                # a block's keys are its prompt length's too (LaMPE): in-process the plugin keys the blocks by it, with
                # ranks in processes of their own it cannot, and refuses a hit (`maps/vllm_model.py: salt_block_hashes`)
                args = {**args, "enable_prefix_caching": False}
            engine = {"model": self.map_folder(schedule, bound, calibration), "hf_overrides": None, "engine": args}
            self._per_prompt, self._maps_now = bool(bound.record.per_prompt), True
        else:
            # the model as loaded where it ships a schedule of its own; a plain-RoPE model's `native` goes as longrope
            # with factors 1 too (the same rotation, 1.0 * x and x * 1.0 exact in float32), so that every schedule of it,
            # KL's reference among them, is set in one running engine (`vllm_worker.reschedule`)
            as_loaded = native_as_loaded(self.rope, schedule, False) and self.rope.shipped is not None
            engine = {"model": self.source, "hf_overrides": None if as_loaded else schedule_overrides(self.rope, schedule),
                      "engine": args}
            self._per_prompt = self._maps_now = False
        self._engine = engine
        try:
            yield
        finally:
            self._engine, self._per_prompt, self._maps_now = None, False, False
            self._answers.clear()

    def map_folder(self, schedule: Schedule, bound: BoundMap, calibration: Calibration | None) -> str:
        """The map folder `export --to vllm` writes for `bound` over `schedule` (written once per process)."""
        key = json.dumps([schedule.method, [float(x) for x in schedule.factors], schedule.attention_factor,
                          bound.name, bound.key_values], default=str)
        if key in self._folders:
            return self._folders[key]
        if self._tmp is None:
            self._tmp = tempfile.TemporaryDirectory(prefix="ropecli-vllm-maps-")
        out = str(Path(self._tmp.name) / f"map{len(self._folders)}")
        native = native_as_loaded(self.rope, schedule, False)
        block = None if native else {**schedule_overrides(self.rope, schedule),
                                     "max_position_embeddings": max(self.positions, self.max_len + GENERATION_ROOM)}

        def folder(path: str) -> dict:  # the model's files linked beside its config.json, the schedule merged in
            return write_block({"model": self.source, "lines": []}, block, path, self.source, None, True, folder=True)

        def select() -> dict | None:  # DPE's key pairs, chosen on the same weights as the transformers backend does
            if bound.share >= 1.0:
                return None
            return self.selection_model().pair_selection(bound, calibration)

        write_map_folder(SimpleNamespace(position_map=bound), out, folder, select, self.max_len)
        self._folders[key] = out
        return out

    # --- requests: answered, recorded for the round, or sent alone ---

    def gather(self, units: list, score) -> None:
        """Every unit's backend calls answered in as many batches as the longest unit makes calls: `score(unit)` runs
        for each unit, each call it makes either answered or recorded (which stops that unit for this round)."""
        if self._engine is None:
            return  # KL switches engines itself (refused here): nothing to gather
        while True:
            self._round = {}
            try:
                for unit in units:
                    try:
                        score(unit)
                    except Pending:
                        pass
                todo = list(self._round.values())
            finally:
                self._round = None
            if not todo:
                return
            self._send(todo)

    def _ask(self, request: dict) -> dict:
        key = json.dumps(request, sort_keys=True)
        if key in self._answers:
            return self._answers[key]
        if self._engine is None:
            raise RopeCliError("internal: a vLLM request outside a scaled block")
        if self._round is not None:
            self._round.setdefault(key, request)
            raise Pending()
        self._send([request])
        return self._answers[key]

    def _send(self, requests: list[dict]) -> None:
        longest = max(len(r["ids"]) + len(r.get("force") or ()) + int(r.get("generate") or 0) for r in requests)
        if self.cap and longest > self.cap:
            raise RopeCliError(f"a {longest}-token request is beyond --max-model-len {self.cap}: raise it or pass a "
                               "shorter --len")
        room = max(self.max_len + GENERATION_ROOM, longest + 1)  # one engine for every length the command asks for
        spec = {**self._engine, "max_model_len": min(room, self.cap) if self.cap else room}
        if self.device == "cpu" and self.token_bytes:  # the KV cache a block needs, not vLLM's share of the machine
            spec["engine"] = {**spec["engine"], "kv_cache_memory_bytes": kv_cache_bytes(self.token_bytes, spec["max_model_len"],
                                                                            memory_now()[0])}
        if spec["max_model_len"] > self.positions and not self._maps_now:
            # vLLM sizes its cos/sin cache by max_position_embeddings (`RotaryEmbedding._compute_cos_sin_cache`): a
            # position past it indexes out of range, where transformers rotates any position
            spec["hf_overrides"] = {**(spec["hf_overrides"] or {}), "max_position_embeddings": spec["max_model_len"]}
        out = self.worker.ask({"engine": spec, "requests": requests})
        if out.get("load_s") is not None:
            self._loads.append(out["load_s"])
        if out.get("rescheduled_s") is not None:
            self._rescheduled += 1
        if out["error"] is not None:
            raise RopeCliError(f"vLLM's engine: {out['error'][:400]}")
        for request, answer in zip(requests, out["answers"]):
            self._answers[json.dumps(request, sort_keys=True)] = answer

    # --- the measures (`ModelBackend`) ---

    def token_losses(self, ids: np.ndarray, chunk_tokens: int | None = None) -> np.ndarray:
        return np.asarray(self._ask({"ids": [int(i) for i in ids]})["nll"], dtype=np.float64)

    def window_nll(self, ids: np.ndarray, chunk_tokens: int | None, score_last: int | None,
                   prefixes: list[int] | None = None, keep_tokens: bool = False):
        return prefix_summaries(self.token_losses(ids), score_last, prefixes, keep_tokens)

    def passkey_scores(self, ids: np.ndarray, answer_start: int) -> tuple[float, float]:
        """(1.0 if every answer token ranks first else 0.0, their NLL): from the prompt log-probabilities of prompt +
        answer, or under a map the prompt fixes, teacher-forced through vLLM's decoding as the transformers backend
        scores it (`chunked_scoring.passkey_scores`)."""
        ids = [int(i) for i in ids]
        if self._per_prompt:
            got = self._ask({"ids": ids[:answer_start], "force": ids[answer_start:]})
            nll, ranks = got["nll"], got["ranks"]
        else:
            got = self._ask({"ids": ids})
            nll, ranks = got["nll"][answer_start - 1:], got["ranks"][answer_start - 1:]
        return float(all(r == 1 for r in ranks)), float(np.sum(np.asarray(nll, dtype=np.float64)))

    def greedy(self, ids: np.ndarray, max_new: int) -> str:
        got = self._ask({"ids": [int(i) for i in ids], "score": False, "generate": int(max_new), "eos": True})
        return self.tokenizer.decode(got["tokens"], skip_special_tokens=True)

    def window_kl(self, ids: np.ndarray, schedule: Schedule, log_n: bool, chunk_tokens: int | None,
                  position_map: BoundMap | None = None, calibration: Calibration | None = None):
        """KL(p_as_shipped || p_scaled) at every position of one window: the reference engine's whole distributions
        (prompt_logprobs=-1, and the token after the window's) kept in vLLM's process, the scaled engine's compared
        with them there (`vllm_worker.window_kl`); (sum, positions, positions whose argmaxes agree, per position)."""
        ids = [int(i) for i in ids]
        if len(ids) * self.vocab > FULL_ENTRIES:
            raise RopeCliError(f"kl under --backend vllm: vLLM hands whole distributions over as Python lists, "
                               f"{len(ids)} x {self.vocab} = {len(ids) * self.vocab / 1e6:.0f} M log-probabilities a "
                               f"window (at most {FULL_ENTRIES / 1e6:.0f} M here); measure kl with --backend transformers "
                               "(the same weights)")
        handle = hashlib.sha256(json.dumps([ids, schedule.method, list(map(float, schedule.factors))]).encode()).hexdigest()
        with self.scaled(native_reference(self.rope, schedule), False):
            self._ask({"ids": ids, "full": "keep", "handle": handle})
        with self.scaled(schedule, log_n, position_map, calibration):
            got = self._ask({"ids": ids, "full": handle})
        kl = np.asarray(got["divergence"], dtype=np.float64)
        return float(kl.sum()), int(kl.size), int(got["agree"]), kl.tolist()

    def decode_losses(self, ids, segments):
        raise RopeCliError("--decode-across under --backend vllm: vLLM runs one schedule per engine, not one per "
                           "segment of a sequence; measure it with --backend transformers")


def open_vllm(name: str | None, gguf_file: str | None = None, *, dtype: str = "auto", device: str = "auto",
              tensor_parallel: int = 1, pipeline_parallel: int = 1, max_len: int = 0, max_model_len: int | None = None,
              train_len: int | None = None, rope_layers: str | None = None, trust_remote_code: bool = False,
              refused: dict | None = None) -> VllmBackend:
    """`--model` for vLLM's engine: a folder (the built-in model's, a packaged short name's, a local one), a hub id
    (downloaded as vLLM would), or a GGUF dequantized once into a folder beside the evaluation cache (the weights
    transformers runs for the same file). `max_len`: the command's longest --len; `max_model_len`: the user's cap."""
    for flag, given in (refused or {}).items():
        if given:
            raise RopeCliError(f"{flag} does not apply to --backend vllm (vLLM places and runs the model itself: "
                               "--tensor-parallel, --pipeline-parallel); leave it out or use --backend transformers")
    if tensor_parallel < 1 or pipeline_parallel < 1:
        raise RopeCliError("--tensor-parallel and --pipeline-parallel are at least 1")
    if max_model_len and max_len and max_len + 1 > max_model_len:
        raise RopeCliError(f"--len {max_len} is beyond --max-model-len {max_model_len}: raise --max-model-len or "
                           "pass a shorter --len")
    if (why := unavailable()) is not None:
        raise RopeCliError(f"--backend vllm: {why}")
    name = name or BUILTIN
    folder = model_folder_for_vllm(name, gguf_file)
    config = json.loads((folder / "config.json").read_text())
    rope = read_rope_config(name, gguf_file, rope_layers).overridden(train_len=train_len)
    dev = resolve_device(device)
    vllm_dtype = {"auto": "float32" if dev == "cpu" else "bfloat16", "fp32": "float32", "bf16": "bfloat16",
                  "fp16": "float16"}.get(dtype, dtype)
    # the model's own code only with --trust-remote-code (a map folder needs none: ropecli's plugin serves it)
    args: dict = {"tensor_parallel_size": tensor_parallel, "pipeline_parallel_size": pipeline_parallel,
                  "trust_remote_code": trust_remote_code}
    env: dict = {}
    ranks = tensor_parallel * pipeline_parallel
    if ranks > 1:  # the "uni" executor runs one rank in this process; more are vLLM's worker processes
        args["distributed_executor_backend"] = "mp"
        if dev == "cpu" and "VLLM_CPU_OMP_THREADS_BIND" not in os.environ:  # each rank's OpenMP threads on its cores
            env["VLLM_CPU_OMP_THREADS_BIND"] = thread_binding(os.cpu_count() or ranks, ranks)
    if dev != "cpu":
        args["gpu_memory_utilization"] = 0.85
    transformers.utils.logging.set_verbosity_error()
    tokenizer = transformers.AutoTokenizer.from_pretrained(str(folder), trust_remote_code=trust_remote_code)
    backend = VllmBackend(str(folder.resolve()), tokenizer, rope, folder_fingerprint(folder), vllm_dtype, dev,
                          Worker.shared(engine_python(), tuple(sorted(env.items()))), args, max_len, cap=max_model_len,
                          positions=int((config.get("text_config") or config).get("max_position_embeddings") or 0),
                          token_bytes=kv_token_bytes(config, vllm_dtype),
                          vocab=int((config.get("text_config") or config).get("vocab_size") or len(tokenizer)),
                          architecture=(config.get("architectures") or [""])[0])
    backend.selection_model = functools.cache(lambda: load_model(str(folder), dtype="fp32", device="cpu"))
    return backend


CONCURRENT = 2  # full-length sequences a CPU engine's KV cache holds at once (vLLM schedules a batch through it; on
# 2 cores two at a time keep them busy: 8 cost SmolLM2 at 16k 6 GB more for the same 0.98x time)


def kv_token_bytes(config: dict, dtype: str) -> int:
    """One token's keys and values over every layer (layers x 2 x key-value heads x head dim x the dtype's bytes),
    from config.json; 0 where the config does not say (vLLM's own share of memory is used then)."""
    text = config.get("text_config") or config
    try:
        heads = int(text["num_attention_heads"])
        head_dim = int(text.get("head_dim") or int(text["hidden_size"]) // heads)
        return int(text["num_hidden_layers"]) * 2 * int(text.get("num_key_value_heads") or heads) * head_dim * \
            (4 if dtype == "float32" else 2)
    except (KeyError, TypeError, ValueError):
        return 0


def kv_cache_bytes(token_bytes: int, max_model_len: int, available: int | None = None) -> int:
    """vLLM's kv_cache_memory_bytes on a CPU: CONCURRENT sequences of max_model_len tokens, at least 256 MiB, at most
    40 % of the `available` memory (vLLM's reading, `runtimes.vllm.memory_now`) but never under one sequence. vLLM's
    default there is 92 % of the machine's memory (`gpu_memory_utilization`), allocated and zeroed at every engine's
    start: 3.9 s and 4.7 GB resident for the built-in model, against 1.8 s and 1.0 GB at this size."""
    want = max(256 << 20, CONCURRENT * max_model_len * token_bytes)
    if available:
        want = min(want, max(int(0.4 * available), max_model_len * token_bytes))
    return want


def thread_binding(cores: int, ranks: int) -> str:
    """VLLM_CPU_OMP_THREADS_BIND for `ranks` ranks on `cores` cores: each its own contiguous share ("0|1", "0-7|8-15")."""
    per = max(1, cores // ranks)
    return "|".join(f"{r * per}-{r * per + per - 1}" if per > 1 else str(r) for r in range(ranks))


def model_folder_for_vllm(name: str, gguf_file: str | None) -> Path:
    """The folder vLLM loads for `--model name`: the built-in model's, a local folder, a hub id's snapshot, or a GGUF's
    weights dequantized by transformers (float32 safetensors and its tokenizer), written once under the cache folder."""
    source = str(BUILTIN_DIR) if name == BUILTIN else resolve_model(name)
    path = Path(source)
    if gguf_file is not None or path.suffix == ".gguf":
        gguf = path if gguf_file is None else locate_file(name, path, gguf_file)
        if not gguf.is_file():
            raise RopeCliError(f"--model {name}: no such GGUF file")
        folder = default_cache_dir() / "vllm-folders" / file_fingerprint(gguf)
        if not (folder / "config.json").exists():
            folder.parent.mkdir(parents=True, exist_ok=True)
            export_hf_from_gguf(gguf, folder, None, force=True)
        return folder
    if not path.exists():
        path = Path(hub.snapshot_download(source))
    if not (path / "config.json").exists():
        raise RopeCliError(f"--model {name}: no config.json in {path}; --backend vllm loads a model folder, a hub id "
                           "or a GGUF")
    return path
