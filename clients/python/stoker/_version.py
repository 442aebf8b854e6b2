"""The client's release version, the same as the service's (``stoker --version``).

A built wheel (and the release tarball's copy) holds this file with the version as a literal, written
by the build (``setup.py``, ``./stoker dist``). In the source tree it reads the version's one
definition, the repository's ``.mvn/maven.config`` (``-Drevision=X.Y.Z``), which Maven reads too.
"""

import re
from pathlib import Path

# A copy of the package that is neither a wheel nor in its checkout (vendored, say) still imports;
# the build refuses this value, so no wheel carries it.
UNKNOWN = "0+unknown"


def _from_checkout() -> str:
    config = Path(__file__).resolve().parents[3] / ".mvn" / "maven.config"  # clients/python/stoker/ -> repository root
    try:
        text = config.read_text(encoding="utf-8")
    except OSError:
        return UNKNOWN
    m = re.search(r"(?:^|\s)-Drevision=(\d+\.\d+\.\d+)(?=\s|$)", text)
    return m.group(1) if m else UNKNOWN


__version__ = _from_checkout()
