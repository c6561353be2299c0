"""Build hook: copy the top-level data folders into the wheel as ``harness/_data/``.

Everything else is configured in ``pyproject.toml``. ``evidence_schema/`` and
``reports_templates/`` stay at the top of the repository (they are contracts, not code);
``harness.resources.data_folder`` finds them there or, in an installed wheel, here.
"""

import os

from setuptools import setup
from setuptools.command.build_py import build_py

DATA_FOLDERS = ("evidence_schema", "reports_templates")


class BuildPyWithData(build_py):
    def run(self) -> None:
        super().run()
        if getattr(self, "editable_mode", False):
            return  # an editable install reads the source tree directly
        for name in DATA_FOLDERS:
            self.copy_tree(name, os.path.join(self.build_lib, "harness", "_data", name))


setup(cmdclass={"build_py": BuildPyWithData})
