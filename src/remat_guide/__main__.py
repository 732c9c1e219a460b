"""``python -m remat_guide``: the ``remat-guide`` command (see :mod:`remat_guide.cli`)."""

from remat_guide.cli import run

if __name__ == "__main__":
    run()
