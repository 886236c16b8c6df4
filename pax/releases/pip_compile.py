"""`python -m pax.releases.pip_compile ARGS`: pip-compile that takes hashes from the index's links.

pip-tools asks the PyPI JSON API for hashes and matches them to the simple index's files by
URL. Where those URLs differ (a mirror, or this machine's index, whose JSON API answers with
relative URLs) it falls back to downloading every file of every platform to hash it: several
GB for the gpu lock. The simple index already publishes each file's sha256 in its link
(`#sha256=...`), the same digest pip checks on install, so use that and download only what
has none.
"""

import sys

from piptools.repositories import pypi
from piptools.scripts.compile import cli

_download_and_hash = pypi.PyPIRepository._get_file_hash


def _get_file_hash(self, link):
    if link.hash_name == "sha256" and link.hash:
        return f"sha256:{link.hash}"
    return _download_and_hash(self, link)


pypi.PyPIRepository._get_file_hash = _get_file_hash

if __name__ == "__main__":
    sys.exit(cli(prog_name="pip-compile"))
