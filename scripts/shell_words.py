"""Make's ARGS and PYTEST_ARGS as shell words (the Makefile's `shell_words`): split as a shell splits them,
quotes holding a word together, and each word printed quoted, so that nothing in them runs. A value
that cannot be split (an unclosed quote) becomes one word that the command refuses, naming it."""
import shlex
import sys

try:
    print(shlex.join(shlex.split(sys.argv[1])))
except ValueError as exc:
    print(shlex.quote(f"--ARGS-cannot-be-read:{exc}"))
