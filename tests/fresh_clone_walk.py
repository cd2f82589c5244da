"""A new user's first hour, walked by a script: a fresh clone of this checkout, worked from a folder outside it. The
README's first commands as written (install, the main job; the tests' quick subset, the README's words for it), then
docs/guide/export.md's "A position map in vLLM": the export, the steps of its walk (vLLM's CPU build in an environment
of its own, ropecli beside it, the server line export printed, a completion through the OpenAI API on 127.0.0.1) and
`verify` of that export by the relative path export printed, with vLLM's engine found through $ROPECLI_VLLM_PYTHON.
The greedy text vLLM serves is compared with transformers' generate() on the same folder.

    python tests/fresh_clone_walk.py [--work DIR] [--skip-tests]

Prints one row per command (exit status, seconds, first line of its output) and writes them to DIR/walk.json. Not
collected by pytest (its name does not start with test_): it installs two environments (about 12 minutes on 2 cores)
and serves a model. The steps come from the pages themselves, so a page that changes its commands changes the walk;
`pip install ropecli` becomes `pip install -e CLONE` (this checkout is not on a package index here)."""

from __future__ import annotations

import argparse
import json
import re
import shlex
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def fenced(page: Path, lang: str, after: str) -> list[str]:
    """The logical lines (continuations joined, comments cut) of the first ```lang block after the text `after`."""
    text = page.read_text()
    block = re.search(rf"```{lang}\n(.*?)```", text[text.index(after):], flags=re.S).group(1)
    joined = re.sub(r"\s*\\\n\s*", " ", block)  # a continued line joined as one, its indent dropped
    return [re.sub(r"\s+#\s.*$", "", ln).strip() for ln in joined.splitlines() if ln.strip()]


class Walk:
    def __init__(self, work: Path, clone: Path):
        self.work, self.clone, self.rows = work, clone, []

    def run(self, line: str, cwd: Path, env: dict | None = None, timeout: int = 3600) -> subprocess.CompletedProcess:
        """One command through bash in `cwd`, its row kept (exit status, seconds, first line of stdout, else stderr)."""
        t0 = time.time()
        r = subprocess.run(["bash", "-c", line], cwd=cwd, capture_output=True, text=True, timeout=timeout,
                           env=env)
        first = next((ln for ln in (r.stdout.splitlines() + r.stderr.splitlines()) if ln.strip()), "")
        self.rows.append({"command": line, "cwd": str(cwd), "exit": r.returncode, "seconds": round(time.time() - t0, 1),
                          "first_line": first[:300]})
        print(f"[{r.returncode}] {time.time() - t0:7.1f} s  {line[:110]}\n      {first[:160]}", flush=True)
        if r.returncode != 0:
            print(r.stdout[-3000:], r.stderr[-3000:], sep="\n", flush=True)
        return r


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--work", type=Path, default=None, help="a folder outside the checkout (default: a new temp one)")
    ap.add_argument("--skip-tests", action="store_true", help="leave out the README's test line (its quick subset)")
    args = ap.parse_args()
    work = (args.work or Path(tempfile.mkdtemp(prefix="ropecli-walk-"))).resolve()
    work.mkdir(parents=True, exist_ok=True)
    clone = work / "ropecli"
    subprocess.run(["git", "clone", "-q", str(ROOT), str(clone)], check=True)
    walk = Walk(work, clone)
    # a new user's machine: no ropecli evaluation cache yet (XDG_CACHE_HOME), pip's own cache kept (HOME)
    env = {"PATH": f"{work / 'venv' / 'bin'}:/usr/local/bin:/usr/bin:/bin", "HOME": str(Path.home()),
           "XDG_CACHE_HOME": str(work / "cache"), "PIP_CACHE_DIR": str(Path.home() / ".cache" / "pip")}

    # the README: a virtual environment (its words), the install line in the clone, the main job from outside it
    readme = fenced(clone / "README.md", "bash", "## Install and the first command")
    walk.run(f"python3 -m venv {work / 'venv'}", work)
    walk.run(readme[0], clone, env)
    walk.run(readme[1], work, env)
    if not args.skip_tests:  # the README's test line, its quick subset ("-m quick: a subset in about a minute")
        walk.run(f"{readme[2]} -m quick -p no:cacheprovider", clone, env)

    # docs/guide/export.md, "A position map in vLLM": the export, then the walk's steps as written
    page = clone / "docs" / "guide" / "export.md"
    export = fenced(page, "bash", "## A position map in vLLM")[0]
    r = walk.run(export, work, env)
    printed = next(ln.strip() for ln in r.stdout.splitlines() if "vllm.entrypoints.openai.api_server" in ln)
    folder = shlex.split(printed)[shlex.split(printed).index("--model") + 1]
    steps = fenced(page, "text", "From nothing to a served completion")
    venv_env = dict(env, PATH=f"{work / 'vllm-env' / 'bin'}:/usr/local/bin:/usr/bin:/bin")
    server = None
    try:
        for step in steps:
            step = step.replace("pip install ropecli", f"pip install -e {clone}")
            if step.startswith(". vllm-env/bin/activate"):
                continue  # the environment's PATH, set for the lines after it
            if step.startswith("python -m vllm.entrypoints.openai.api_server"):
                # the page's line is the one export printed, but for the memory share (what was available then): the
                # printed one, where to listen the page's
                share = r" --gpu-memory-utilization [0-9.]+"
                assert re.sub(share, "", step.split(" --host")[0]) == re.sub(share, "", printed), (step, printed)
                step = printed + " --host" + step.split(" --host")[1]
                server = subprocess.Popen(["bash", "-c", step.rstrip("& ")], cwd=work, env=venv_env,
                                          stdout=open(work / "server.log", "w"), stderr=subprocess.STDOUT)
                t0 = time.time()
                while True:
                    assert server.poll() is None, (work / "server.log").read_text()[-3000:]
                    try:
                        with urllib.request.urlopen("http://127.0.0.1:8000/health", timeout=5):
                            break
                    except OSError:
                        time.sleep(3)
                walk.rows.append({"command": step, "cwd": str(work), "exit": None, "seconds": round(time.time() - t0, 1),
                                  "first_line": "serving: /health answered"})
                print(f"[up] {time.time() - t0:7.1f} s  {step[:110]}", flush=True)
                continue
            r = walk.run(step, work, venv_env if step.startswith("curl") else env)
            if step.startswith("curl"):
                served = json.loads(r.stdout)["choices"][0]["text"]
                prompt = json.loads(re.search(r"-d '(.*)'", step).group(1))
    finally:
        if server is not None:
            server.terminate()
            server.wait(60)

    # the greedy text transformers generates from the same folder and prompt
    check = (f"import json, sys, torch; from transformers import AutoModelForCausalLM, AutoTokenizer; "
             f"f = {str(work / folder)!r}; tok = AutoTokenizer.from_pretrained(f); "
             f"m = AutoModelForCausalLM.from_pretrained(f, trust_remote_code=True, dtype=torch.float32).eval(); "
             f"ids = tok({prompt['prompt']!r}, return_tensors='pt').input_ids; "
             f"out = m.generate(ids, max_new_tokens={prompt['max_tokens']}, do_sample=False); "
             f"print(json.dumps(tok.decode(out[0, ids.shape[1]:], skip_special_tokens=True)))")
    r = walk.run(f"python -c {shlex.quote(check)}", work, env)
    theirs = json.loads(r.stdout.strip().splitlines()[-1])
    same = theirs == served
    print(f"vLLM served {served!r}\ntransformers {theirs!r}\nequal: {same}", flush=True)

    # verify of that export by the relative path export printed, vLLM's engine found through $ROPECLI_VLLM_PYTHON
    walk.run(f"ROPECLI_VLLM_PYTHON={work / 'vllm-env' / 'bin' / 'python'} ropecli verify {folder}", work, env)
    result = {"rows": walk.rows, "served": served, "transformers": theirs, "equal": same}
    (work / "walk.json").write_text(json.dumps(result, indent=1))
    print(f"wrote {work / 'walk.json'}")
    return 0 if same and all(row["exit"] in (0, None) for row in walk.rows) else 1


if __name__ == "__main__":
    sys.exit(main())
