# SPDX-License-Identifier: MIT
"""Write the sample output in README.md and docs/cli.md from what the commands print now, so it
cannot go stale: each fenced block after a `<!-- sample: NAME -->` line is replaced by the output
of SAMPLES[NAME], run in a private cache on this machine.

    python scripts/samples.py           # rewrite the blocks
    python scripts/samples.py --check   # exit 1 where a block's shape differs from what the commands print

The check compares each line's first word and the number of lines (times, paths, sizes and this
machine's tools differ from the machine that wrote the block): a renamed column, a new line or a
changed status message fails it. tests/test_readme.py runs it.
"""

import argparse
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
FILES = [REPO / "README.md", REPO / "docs" / "cli.md"]
QUICKSTART = "import torch, jitops; jitops.add2(torch.randn(4), torch.randn(4))"
# name -> the commands whose output makes the block: (what the reader sees after `$ `, argv)
CLI = [
    (f"jitops-cache {args}", [sys.executable, "-m", "jitops.cache_tools", *args.split()])
    for args in ("build add2 lltm", "list", "stats", "doctor", "clear lltm")
]
SAMPLES = {
    "quickstart": [(None, [sys.executable, "-c", QUICKSTART])],
    "cli": CLI,
}
BLOCK = re.compile(r"(<!-- sample: (\w+) -->\n```\n)(.*?)(```)", re.S)


def run_samples(cache: Path) -> dict[str, str]:
    env = {**os.environ, "JITOPS_CACHE_DIR": str(cache)}
    env.pop("JITOPS_VERBOSE", None)
    outputs = {}
    for name, commands in SAMPLES.items():
        text = ""
        for shown, argv in commands:
            done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=900, cwd=REPO)
            if done.returncode not in (0, 1):  # doctor exits 1 where an op cannot be had
                raise SystemExit(f"{argv}: exit {done.returncode}\n{done.stderr}")
            text += (f"$ {shown}\n{done.stdout}" if shown else "") + (done.stderr if shown is None else "")
        outputs[name] = text
    return outputs


def shape(text: str) -> list[str]:
    return [line.split()[0] if line.split() else "" for line in text.splitlines()]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="compare the blocks' shape instead of rewriting them")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="jitops-samples-") as folder:
        outputs = run_samples(Path(folder) / "cache")
    problems = []
    for path in FILES:
        text = path.read_text()
        for match in BLOCK.finditer(text):
            name, old = match.group(2), match.group(3)
            if name not in outputs:
                problems.append(f"{path.name}: no sample named {name!r}")
            elif args.check and shape(old) != shape(outputs[name]):
                problems.append(f"{path.name}: sample {name!r} is stale; run python scripts/samples.py")
        if not args.check:
            path.write_text(BLOCK.sub(lambda m: m.group(1) + outputs.get(m.group(2), m.group(3)) + m.group(4), text))
    print("\n".join(problems) or "samples up to date" if args.check else "samples written")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
