"""The one error type the verbs raise: what failed, and the command that fixes it."""


class SeriesError(Exception):
    """A failure the user can act on.

    Args:
        what: one or more sentences saying what failed (names the file, patch, ref ...).
        fix: the next command to run, or None when there is nothing to run.
    """

    def __init__(self, what: str, fix: str | None = None):
        super().__init__(what)
        self.what = what
        self.fix = fix

    def __str__(self) -> str:
        return self.what if not self.fix else f"{self.what}\n  next: {self.fix}"
