"""Ten guarded behaviours broken one at a time; for each, the first test that goes red in a checkout TREE (run it on
the tree before a change and after: docs/measurements/suite.md). Usage: python benchmarks/guarded_behaviours.py TREE OUT.json"""
import json
import os
import subprocess
import sys
import time
from pathlib import Path

MUTATIONS = [
    ("a schedule formula: PI's factor 0.1 % off", "ropecli/rope/methods.py",
     "return np.full(geom.n_pairs, geom.factor), 1.0", "return np.full(geom.n_pairs, geom.factor * 1.001), 1.0",
     ["tests/test_schedules_oracle.py"]),
    ("a map's region: Self-Extend's grouped query one position on", "ropecli/maps/position_maps.py",
     "lambda i: i // G + shift, lambda j: j // G))", "lambda i: i // G + shift + 1, lambda j: j // G))",
     ["tests/test_position_maps.py"]),
    ("the folder's decode: in a one-token step each cached key one position on", "ropecli/maps/map_run.py",
     "kpos = torch.arange(Tk, device=device) + base", "kpos = torch.arange(Tk, device=device) + base + int(Tq == 1)",
     ["tests/test_map_folder.py"]),
    ("a vLLM export: mixed_b written 10 % low", "ropecli/export/runtimes/vllm.py",
     '"mixed_b": float(params["b"])}', '"mixed_b": 0.9 * float(params["b"])}',
     ["tests/test_vllm_formula.py", "tests/test_export.py", "-k", "vllm"]),
    ("the cache key: the method left out (two schedules of equal parameters share an entry)", "ropecli/evaluation/evaluator.py",
     '            "method": sched.method,\n',
     "",
     ["tests/test_window_cache.py", "tests/test_cli_eval.py"]),
    ("a verdict's rule: equivalent when either TOST bound is inside the margin", "ropecli/evaluation/inference.py",
     "return lo is not None and hi is not None and -margin < lo and hi < margin",
     "return lo is not None and hi is not None and (-margin < lo or hi < margin)",
     ["tests/test_estimand.py", "tests/test_agreement.py", "tests/test_verdicts.py"]),
    ("a writer's refusal: advise writes into a folder it did not make", "ropecli/tuning/advise.py",
     'raise RopeCliError(f"--out {out} is not empty and was not made by ropecli advise; pass a new or empty folder")',
     'pass',
     ["tests/test_writers.py", "tests/test_advise.py", "-k", "out or keeps or fresh"]),
    ("a bad input's message: a method parameter out of range no longer names the range", "ropecli/rope/methods.py",
     'is outside [{lo}, {hi}]; pick a value in that range")', 'is not allowed")',
     ["tests/test_cli_analysis.py", "tests/test_user_errors.py"]),
    ("the BOS policy: auto puts the BOS first whatever the tokenizer does", "ropecli/evaluation/bos_policy.py",
     "        return tokenizer_lead(tokenizer)", "        return [tokenizer.bos_token_id]",
     ["tests/test_bos_policy.py"]),
    ("a task's scoring: the published passkey rule reads the first digit only", "ropecli/evaluation/ruler/answer_scoring.py",
     'found = re.search(r"\\d+", said)', 'found = re.search(r"\\d", said)',
     ["tests/test_passkey_generate.py", "tests/test_published_passkey.py"]),
]


def main():
    tree, out = Path(sys.argv[1]), Path(sys.argv[2])
    py = sys.executable
    results = json.loads(out.read_text()) if out.exists() else []
    done = {r["what"] for r in results}
    for what, path, old, new, tests in MUTATIONS:
        if what in done:
            continue
        f = tree / path
        text = f.read_text()
        assert text.count(old) == 1, (what, text.count(old))
        f.write_text(text.replace(old, new))
        t0 = time.time()
        try:
            r = subprocess.run([py, "-m", "pytest", "-q", "-n", "0", "-x", "-p", "no:cacheprovider", *tests],
                               cwd=tree, env={**os.environ, "PYTHONPATH": str(tree)},
                               capture_output=True, text=True, timeout=1500)
        finally:
            f.write_text(text)
        red = [ln.split(" - ")[0].removeprefix("FAILED ").removeprefix("ERROR ") for ln in r.stdout.splitlines()
               if ln.startswith(("FAILED", "ERROR"))]
        results.append({"what": what, "file": path, "red": red, "rc": r.returncode, "s": round(time.time() - t0),
                        "tail": r.stdout.strip().splitlines()[-1:] })
        print(what, "->", red or r.stdout.strip().splitlines()[-1:], flush=True)
        out.write_text(json.dumps(results, indent=1))


main()
