"""``python -m dprm.cli``: the ``dprm`` program."""

from dprm.cli import program

program()
