"""Builds one wheel with pip (scikit-build-core from PyPI), installs it into a fresh virtual
environment and generates there. Slow (a full library build): SITSRT_SKIP_WHEEL_TEST=1 skips it."""

import os
import pathlib
import subprocess
import sys
import venv

import pytest

from conftest import REFERENCE, REPO


@pytest.mark.skipif(os.environ.get("SITSRT_SKIP_WHEEL_TEST") == "1", reason="SITSRT_SKIP_WHEEL_TEST=1")
def test_wheel_installs_into_fresh_venv(tmp_path, model_path):
    wheels = tmp_path / "wheels"
    env = dict(os.environ, CMAKE_BUILD_PARALLEL_LEVEL=str(os.cpu_count() or 2))
    env.pop("PYTHONPATH", None)
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(wheels), str(REPO)],
                   check=True, env=env)
    (wheel,) = wheels.glob("sitsrt-*.whl")
    venv.create(tmp_path / "venv", with_pip=True)
    py = tmp_path / "venv" / "bin" / "python"
    subprocess.run([str(py), "-m", "pip", "install", "-q", "--no-index", str(wheel)], check=True, env=env)
    code = ("import sitsrt; print(sitsrt.Engine(%r).generate('Once upon a time', max_tokens=32, temperature=0).text)"
            % model_path)
    out = subprocess.run([str(py), "-c", code], check=True, capture_output=True, text=True, env=env,
                         cwd=tmp_path).stdout
    assert out.strip() == REFERENCE
    names = subprocess.run([str(py), "-c", "import sitsrt, sitsrt._sitsrt as m; print(sitsrt.__version__, m.__file__)"],
                           check=True, capture_output=True, text=True, env=env, cwd=tmp_path).stdout
    assert str(tmp_path / "venv") in names
