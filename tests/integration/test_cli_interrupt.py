"""Ctrl-C while the ``mqstore`` command is still starting (Python importing its modules, about
a second): exit code 130 and no traceback, as for a command interrupted once it runs.

A ``sitecustomize`` on PYTHONPATH pauses the import of one module of the start-up until a
signal comes, so the interrupt lands at that very moment, every time, without sleeps.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from tests.conftest import REPO

#: Pauses the import of the module $PAUSE_AT_IMPORT until a signal ends the process.
SITECUSTOMIZE = """
import os, sys, time

class PauseAt:
    def find_spec(self, name, path=None, target=None):
        if name == os.environ["PAUSE_AT_IMPORT"]:
            sys.meta_path.remove(self)
            os.write(1, b"paused\\n")
            time.sleep(600)
        return None

sys.meta_path.insert(0, PauseAt())
"""

#: pip's console script for the ``mqstore`` entry point of pyproject.toml.
CONSOLE_SCRIPT = """import re
import sys
from {module} import {function}
if __name__ == '__main__':
    sys.argv[0] = re.sub(r'(-script\\.pyw|\\.exe)?$', '', sys.argv[0])
    sys.exit({function}())
"""


def _console_script() -> str:
    with open(REPO / "pyproject.toml", "rb") as f:
        target = tomllib.load(f)["project"]["scripts"]["mqstore"]
    module, function = target.split(":")
    return CONSOLE_SCRIPT.format(module=module, function=function)


#: Execs its arguments with SIGINT and SIGHUP at their defaults, as in a terminal, even when
#: the tests run in the background or under ``nohup`` (an ignored signal stays ignored).
SIGNALS_DEFAULT = (
    "import os, signal, sys; signal.signal(signal.SIGINT, signal.SIG_DFL); "
    "signal.signal(signal.SIGHUP, signal.SIG_DFL); os.execv(sys.argv[1], sys.argv[1:])"
)


@pytest.mark.parametrize("launcher", ["console script", "python -m mqstore"])
@pytest.mark.parametrize(
    "module",
    [
        "sqlalchemy",  # the first of the CLI module's imports
        "mqstore.settings",  # the last of them
        "mqstore.embedded",  # imported by main() before the command runs
    ],
)
def test_ctrl_c_while_the_command_starts_exits_130_without_a_traceback(
    tmp_path: Path, launcher: str, module: str
) -> None:
    (tmp_path / "sitecustomize.py").write_text(SITECUSTOMIZE)
    if launcher == "console script":
        script = tmp_path / "bin" / "mqstore"
        script.parent.mkdir()
        script.write_text(_console_script())
        command = [sys.executable, str(script), "--help"]
    else:
        command = [sys.executable, "-m", "mqstore", "--help"]
    env = {k: v for k, v in os.environ.items() if not k.startswith("MQSTORE_")}
    env["PYTHONPATH"] = os.pathsep.join(
        filter(None, [str(tmp_path), str(REPO), env.get("PYTHONPATH")])
    )
    env["PAUSE_AT_IMPORT"] = module
    proc = subprocess.Popen(
        [sys.executable, "-c", SIGNALS_DEFAULT, *command], cwd=tmp_path, env=env,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True,
    )  # fmt: skip
    try:
        assert proc.stdout is not None
        first = proc.stdout.readline()
        assert first == b"paused\n", (first, proc.poll())
        os.killpg(proc.pid, signal.SIGINT)  # Ctrl-C: the terminal signals the whole group
        _, stderr = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(10)
    text = stderr.decode(errors="replace")
    assert "Traceback" not in text and "KeyboardInterrupt" not in text, text
    assert len(text.strip().splitlines()) <= 1, text
    assert proc.returncode == 130, text
