"""Lets a script that needs the project's Python packages (matplotlib, numpy) be run as it is
written in the docs, `scripts/x.py ...`, by whatever python3 comes first on the PATH: when an
import fails there, the script runs again under the project's environment (.venv, which
scripts/setup.sh --test makes), if it has one."""
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
VENV_PYTHON = os.path.join(ROOT, ".venv", "bin", "python3")


def rerun_in_project_venv(missing, script):
    """Re-executes the running script under .venv's python3, or exits with one line saying how
    to get `missing` when that is not possible (no .venv, or already running in it)."""
    in_venv = os.path.realpath(sys.prefix) == os.path.realpath(os.path.join(ROOT, ".venv"))
    if os.path.exists(VENV_PYTHON) and not in_venv and not os.environ.get("HSTU_IN_VENV"):
        os.environ["HSTU_IN_VENV"] = "1"
        os.execv(VENV_PYTHON, [VENV_PYTHON, os.path.abspath(script)] + sys.argv[1:])
    sys.exit(f"{os.path.basename(script)}: {missing} is missing; scripts/setup.sh --test installs it into .venv "
             f"(or: python3 -m pip install {missing})")
