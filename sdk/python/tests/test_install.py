"""``pip install`` of a copy of sdk/python alone, into a fresh virtual environment, works.

It fetches the build backend and the dependencies from PyPI (or the configured index).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

from .conftest import SDK_DIR

#: What a checkout may hold that is not part of the package's source.
NOT_SOURCE = shutil.ignore_patterns(
    ".venv", "__pycache__", "*.egg-info", "build", "dist", ".pytest_cache", ".mypy_cache"
)
INSTALL_TIMEOUT = 600

CHECK = """
import pathlib, agenthold
from agenthold import Client, AsyncClient, NotFound
assert agenthold.__version__
pkg = pathlib.Path(agenthold.__file__).parent
assert (pkg / "py.typed").is_file(), "py.typed is missing"
assert "site-packages" in str(pkg), pkg
c = Client("http://127.0.0.1:9", "t")
c.close()
print(agenthold.__version__)
"""


def run(cmd: list[str], cwd: Path) -> str:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    done = subprocess.run(
        cmd,
        cwd=cwd,
        env={**env, "PIP_DISABLE_PIP_VERSION_CHECK": "1", "PIP_NO_INPUT": "1"},
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=INSTALL_TIMEOUT,
    )
    assert done.returncode == 0, f"{cmd} failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return done.stdout


def test_pip_install_of_the_folder_alone_into_a_fresh_venv(tmp_path: Path) -> None:
    copy = tmp_path / "python"
    shutil.copytree(SDK_DIR, copy, ignore=NOT_SOURCE)
    venv = tmp_path / "venv"
    run([sys.executable, "-m", "venv", str(venv)], tmp_path)
    py = venv / "bin" / "python"
    run([str(py), "-m", "pip", "install", "-q", str(copy)], tmp_path)
    # The copy may go: what is installed stands on its own.
    shutil.rmtree(copy)
    out = run([str(py), "-c", CHECK], tmp_path)
    assert out.strip() == __import__("agenthold").__version__
