"""The client's version comes from the release's one definition, the repository's .mvn/maven.config."""

import os
import re
import runpy
import shutil
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))

import stoker  # noqa: E402

PACKAGE = os.path.join(os.path.dirname(HERE), "stoker")


def in_fake_checkout(config_text):
    """Runs a copy of stoker/_version.py placed in a fake checkout whose .mvn/maven.config holds config_text (None: absent)."""
    with tempfile.TemporaryDirectory() as root:
        package = os.path.join(root, "clients", "python", "stoker")
        os.makedirs(package)
        shutil.copy(os.path.join(PACKAGE, "_version.py"), package)
        if config_text is not None:
            os.makedirs(os.path.join(root, ".mvn"))
            with open(os.path.join(root, ".mvn", "maven.config"), "w", encoding="utf-8") as f:
                f.write(config_text)
        return runpy.run_path(os.path.join(package, "_version.py"))["__version__"]


class VersionTest(unittest.TestCase):
    def test_source_tree_version_is_the_maven_revision(self):
        with open(os.path.join(PACKAGE, "..", "..", "..", ".mvn", "maven.config"), encoding="utf-8") as f:
            revision = re.search(r"-Drevision=(\S+)", f.read()).group(1)
        self.assertRegex(revision, r"^\d+\.\d+\.\d+$")
        self.assertEqual(revision, stoker.__version__)

    def test_reads_the_revision_among_other_maven_options(self):
        self.assertEqual("9.8.7", in_fake_checkout("-B\n-Dfoo=1 -Drevision=9.8.7 -Dbar=2\n"))

    def test_without_a_definition_the_version_is_unknown_not_an_import_error(self):
        self.assertEqual("0+unknown", in_fake_checkout(None))
        self.assertEqual("0+unknown", in_fake_checkout("-Drevision=1.2.3-SNAPSHOT\n"))


if __name__ == "__main__":
    unittest.main()
