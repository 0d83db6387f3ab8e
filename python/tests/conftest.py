"""Shared fixtures: the stories260K model from ../shared (relative to the repository) and the CLI."""

import os
import pathlib
import shutil

import pytest

REPO = pathlib.Path(__file__).resolve().parents[2]
SHARED = pathlib.Path(os.environ.get("SITSRT_SHARED", REPO.parent / "shared")).resolve()
STORIES = SHARED / "models" / "stories260K.gguf"
CLI = pathlib.Path(os.environ.get("SITSRT_CLI", REPO / "build" / "bin" / "sitsrt"))

# Greedy continuations of "Once upon a time" (as `sitsrt run --temp 0 -n 32` / `-n 40` print them).
REFERENCE = ", there was a little girl named Lily. She loved to play outside in the park. One day, she saw"
REFERENCE_40 = REFERENCE + " a big, red ball."


@pytest.fixture(scope="session")
def model_path() -> str:
    if not STORIES.is_file():
        pytest.skip(f"shared model data not found: {STORIES} (the project expects ../shared next to the checkout)")
    return str(STORIES)


@pytest.fixture(scope="session")
def engine(model_path):
    import sitsrt
    return sitsrt.Engine(model_path, threads=2)


@pytest.fixture(scope="session")
def cli() -> str:
    found = str(CLI) if CLI.is_file() else shutil.which("sitsrt")
    if found is None:
        pytest.skip(f"the sitsrt CLI was not built: {CLI}")
    return found
