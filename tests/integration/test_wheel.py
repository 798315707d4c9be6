"""The wheel is what a user installs: built here, installed into a fresh venv with no
Node.js on PATH, it brings the JupyterLab extension (prebuilt), the server extension
and the IPython extension with it.

Dependencies come from pip's cache and the package index, as for a user; torch is
pinned to the version of this venv so a machine without a GPU gets the CPU build.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[2]

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]

# run by the fresh venv's python: a real kernel (its own ipykernel) loads the extension
KERNEL_CHECK = textwrap.dedent(
    """
    import json
    from jupyter_client.manager import start_new_kernel
    km, kc = start_new_kernel(kernel_name="python3")
    try:
        code = ("%load_ext ft_notebook\\n"
                "import ft_notebook, sys; print(ft_notebook.__file__); print(sys.prefix)")
        out = []
        def keep(msg):
            if msg["msg_type"] == "stream":
                out.append(msg["content"]["text"])
            if msg["msg_type"] == "error":
                out.append("\\n".join(msg["content"]["traceback"]))
        reply = kc.execute_interactive(code, timeout=120, output_hook=keep)
        print(json.dumps({"status": reply["content"]["status"], "out": "".join(out)}))
    finally:
        kc.stop_channels()
        km.shutdown_kernel(now=True)
    """
)


def _run(cmd: list[str], env: dict[str, str], timeout: float = 600, cwd: Path = ROOT) -> str:
    done = subprocess.run(cmd, env=env, cwd=cwd, capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, f"{cmd} failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return done.stdout + done.stderr


def test_the_wheel_installs_and_works_without_node(tmp_path: Path) -> None:
    import torch

    dist = tmp_path / "dist"
    _run([sys.executable, "-m", "build", "--wheel", "--outdir", str(dist), str(ROOT)], os.environ)
    (wheel,) = dist.glob("ft_notebook-*.whl")

    venv = tmp_path / "venv"
    _run([sys.executable, "-m", "venv", str(venv)], os.environ)
    bin_dir = venv / "bin"
    # only the venv on PATH: no node, no jlpm, nothing of this checkout's .venv. pip keeps
    # the user's settings (index, wheelhouse, cache); Jupyter and IPython get fresh dirs.
    env = {k: v for k, v in os.environ.items() if k.startswith(("PIP_", "XDG_"))}
    env |= {
        "PATH": str(bin_dir),
        "HOME": str(Path.home()),
        "JUPYTER_CONFIG_DIR": str(tmp_path / "jupyter-config"),
        "JUPYTER_DATA_DIR": str(tmp_path / "jupyter-data"),
        "IPYTHONDIR": str(tmp_path / "ipython"),
        "JUPYTER_PLATFORM_DIRS": "1",
    }
    assert shutil.which("node", path=env["PATH"]) is None
    assert shutil.which("jlpm", path=env["PATH"]) is None
    torch_pin = f"torch=={torch.__version__}"  # with its local label: +cpu stays CPU
    # --no-compile: what comes in is the same; pip only skips writing torch's .pyc files
    # up front (a fifth of the install's CPU here, Python writes them on first import)
    install = [str(bin_dir / "pip"), "install", "--quiet", "--no-compile", torch_pin, str(wheel)]
    _run(install, env, timeout=800)
    # the README's way on a machine without a GPU: torch's CPU build first, then no
    # CUDA package comes in with the wheel (the default torch brings 17 nvidia-* ones)
    pip_list = [str(bin_dir / "pip"), "list", "--format", "json"]
    listed = json.loads(subprocess.run(pip_list, env=env, capture_output=True, text=True).stdout)
    names = {p["name"].lower(): p["version"] for p in listed}
    assert names["torch"].endswith("+cpu"), names["torch"]
    # nvidia-ml-py: NVML's bindings (our GPU health), no CUDA in it
    cuda = sorted(
        n for n in names if n.startswith(("nvidia-", "triton", "cuda")) and n != "nvidia-ml-py"
    )
    assert not cuda, f"CUDA packages came in with the wheel: {cuda}"

    labext = _run([str(bin_dir / "jupyter"), "labextension", "list"], env, cwd=tmp_path)
    line = next((ln for ln in labext.splitlines() if "ft-notebook-labextension" in ln), "")
    assert "enabled" in line, labext
    assert "OK" in line, labext
    assert "(python, ft-notebook)" in line, labext  # installed by the package, not linked
    installed = venv / "share" / "jupyter" / "labextensions" / "ft-notebook-labextension"
    assert (installed / "static" / "style.js").is_file()
    assert not installed.is_symlink()  # from the wheel, not a link into this checkout

    server = _run([str(bin_dir / "jupyter"), "server", "extension", "list"], env, cwd=tmp_path)
    assert any("ft_notebook" in ln and "enabled" in ln for ln in server.splitlines()), server
    assert any("ft_notebook" in ln and "OK" in ln for ln in server.splitlines()), server

    checked = _run(  # away from this checkout, whose ft_notebook/ a kernel there would import
        [str(bin_dir / "python"), "-c", KERNEL_CHECK], env, timeout=300, cwd=tmp_path
    )
    reply = next(ln for ln in checked.splitlines() if ln.startswith('{"status"'))
    result = json.loads(reply)
    assert result["status"] == "ok", result["out"]
    module_file, prefix = result["out"].strip().splitlines()[-2:]
    assert Path(prefix) == venv
    assert Path(module_file).is_relative_to(venv), module_file  # the wheel's, not ours
