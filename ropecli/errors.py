"""The one exception type a user's mistake becomes; the CLI prints it as one line, no traceback."""


class RopeCliError(Exception):
    """A problem the user can fix. The message names the problem and the fix, in one line."""
