"""The wheel's build hook: everything else is declared in pyproject.toml.

The version (pyproject's dynamic version) is stoker/_version.py's, read from the repository's
.mvn/maven.config; the wheel gets a _version.py holding it as a literal, so that an installed client
knows its version without the checkout.
"""

import re
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py


class BuildPyWithVersion(build_py):
    def run(self):
        super().run()
        version = self.distribution.get_version()
        if not re.fullmatch(r"\d+\.\d+\.\d+", version):
            raise SystemExit(f"stoker-client: the release version is {version!r}, not MAJOR.MINOR.PATCH: "
                             "build from the repository (its .mvn/maven.config defines it), e.g. ./stoker dist")
        target = Path(self.build_lib, "stoker", "_version.py")
        target.unlink(missing_ok=True)  # never write through a link to the source file
        target.write_text('"""The client\'s release version, written by the build from .mvn/maven.config."""\n\n'
                          f'__version__ = "{version}"\n', encoding="utf-8")


setup(cmdclass={"build_py": BuildPyWithVersion})
