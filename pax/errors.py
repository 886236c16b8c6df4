"""The one exception type for bad input: the entry point prints it as one line and exits 2."""


class UsageError(Exception):
    """A problem with what the user asked for, with the fix in the message."""
