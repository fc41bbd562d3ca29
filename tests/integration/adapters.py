"""What the framework adapters' tests share: a live service and running a README's Python examples."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.integration.test_docs_examples import code_blocks

ROOT = Path(__file__).resolve().parents[2]


def run_readme(readme: Path, url: str, key: str, workdir: Path) -> str:
    """Run every ```python block of ``readme`` as a script against the service at ``url``; the output of all."""
    blocks = [(line, body) for lang, line, body in code_blocks(readme.read_text()) if lang == "python"]
    assert blocks, f"{readme} has no Python example"
    env = {**os.environ, "PGCONTEXT_URL": url, "PGCONTEXT_API_KEY": key}
    out = []
    for line, body in blocks:
        script = workdir / f"{readme.parent.name}_{line}.py"
        script.write_text(body)
        done = subprocess.run([sys.executable, str(script)], env=env, cwd=workdir, capture_output=True, text=True,
                              timeout=180)
        assert done.returncode == 0, f"{readme}:{line} failed:\n{done.stdout}\n{done.stderr}"
        out.append(done.stdout)
    return "".join(out)
