"""The embedded default corpus: English text every CPython ships, so the reference run needs no
download."""


def embedded_text() -> str:
    """The pydoc topic help (about 465 KB), in a fixed order."""
    from pydoc_data import topics  # only when asked for: a few hundred KB of strings

    return "".join(topics.topics[key] for key in sorted(topics.topics))
