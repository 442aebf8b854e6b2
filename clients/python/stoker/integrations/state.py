"""The loader state file written into a training framework's checkpoint folder (``stoker_loader.json``).

Needs nothing but the standard library, so the file can be read and written (and tested) without torch,
transformers or Lightning.
"""

from __future__ import annotations

import json
import os
import tempfile
from typing import Optional

#: The file a checkpoint folder holds the loader's ``state_dict()`` in.
STATE_FILE = "stoker_loader.json"
#: A state is a few hundred bytes (more with many sources); anything far larger is not one.
MAX_STATE_BYTES = 1 << 20
_FORMAT = "stoker-loader-state"


def write_state(folder, state: Optional[dict]) -> str:
    """Writes ``state`` (a ``state_dict()``, or None when no batch was ever delivered: a resume then starts
    at the job's start) to ``folder/stoker_loader.json`` and returns the file's path.

    The file is written under a temporary name and renamed into place, so a crash leaves either the old
    file or the new one, never half of one. ``folder`` must exist: it is the framework's checkpoint
    folder, and creating it here would hide a wrong path."""
    folder = os.fspath(folder)
    if not os.path.isdir(folder):
        raise FileNotFoundError(f"checkpoint folder {folder} does not exist: the loader state belongs beside the "
                                f"checkpoint the framework just wrote")
    if state is not None and not isinstance(state, dict):
        raise TypeError(f"a loader state is a dict (state_dict()), got {type(state).__name__}")
    text = json.dumps({"format": _FORMAT, "version": 1, "state": state}, indent=1, sort_keys=True)
    path = os.path.join(folder, STATE_FILE)
    fd, tmp = tempfile.mkstemp(prefix=STATE_FILE + ".", dir=folder)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text + "\n")
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    return path


def read_state(folder) -> Optional[dict]:
    """The state saved by :func:`write_state` in ``folder`` (None: saved before any batch was delivered).

    FileNotFoundError when ``folder`` has no ``stoker_loader.json``: resuming the model at a checkpoint
    while the data starts over would silently train on the same samples again, so a missing file is an
    error, not a fresh start. ValueError when the file is not a loader state (too large, not JSON, another
    format); the state's own fields are checked when it is loaded (``Loader.load_state_dict``)."""
    path = os.path.join(os.fspath(folder), STATE_FILE)
    try:
        with open(path, "rb") as f:
            data = f.read(MAX_STATE_BYTES + 1)
    except FileNotFoundError:
        raise FileNotFoundError(
            f"{path} is missing: the checkpoint has no Stoker loader state, so resuming it would restart the data "
            f"at the job's start under a model that already trained on it. Checkpoints written with Stoker's "
            f"Trainer or Lightning glue have one; to start the data over on purpose, resume without the glue's "
            f"state (load nothing into the dataset)") from None
    if len(data) > MAX_STATE_BYTES:
        raise ValueError(f"{path} is larger than {MAX_STATE_BYTES} bytes: not a Stoker loader state")
    try:
        doc = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ValueError(f"{path} is not a Stoker loader state: {e}") from None
    if not isinstance(doc, dict) or doc.get("format") != _FORMAT or "state" not in doc:
        raise ValueError(f"{path} is not a Stoker loader state (expected an object with format {_FORMAT!r})")
    if doc.get("version") != 1:
        raise ValueError(f"{path}: state file version {doc.get('version')!r} is not supported (this client knows 1)")
    state = doc["state"]
    if state is not None and not isinstance(state, dict):
        raise ValueError(f"{path}: the state is a {type(state).__name__}, expected an object or null")
    return state
