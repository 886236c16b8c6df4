"""The embedded default corpus: CPython 3.11.7's pydoc topic help (English, about 465 KB), kept
inside pax so the reference run needs no download.

The text lives here rather than being read from the interpreter's own `pydoc_data.topics`
because that module is regenerated with every CPython release: 3.12's is 492 KB and 3.13's
511 KB, so a run on another Python trained and, above all, was evaluated on other text, and its
eval loss left the reference band with no package changed. The file is the topics joined in
sorted key order, UTF-8, gzip with no name or time stamp; its licence is pydoc_topics.LICENSE.
"""

import gzip
import hashlib
from functools import cache
from pathlib import Path

from pax.errors import PaxError

FILE = Path(__file__).with_name("pydoc_topics.txt.gz")
SOURCE = "CPython 3.11.7 Lib/pydoc_data/topics.py"
SHA256 = "37d06970fc926e60c16dff401e441b84752446a36b6b64516c229fdec77e992c"  # of the UTF-8 text


@cache
def embedded_text() -> str:
    """The corpus, checked against its digest (a damaged install fails here, not in the loss)."""
    data = gzip.decompress(FILE.read_bytes())
    if hashlib.sha256(data).hexdigest() != SHA256:
        raise PaxError(
            f"{FILE} is not the embedded corpus (sha256 differs); reinstall pax or restore the "
            f"file from the release"
        )
    return data.decode("utf-8")
