"""A template is the subreaper of the processes forked from it (`ddpjob_runtime.localkit.orphans`):
what a forked process leaves behind in a session of its own is reparented to the template, not
to init, and reaped by it once ended; the forked process itself has no trace of that (no
SIGCHLD handler, no wakeup fd)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
from pathlib import Path

from ddpjob.local.base import proctree
from ddpjob.local.base.templates import Template

from tests.local.conftest import wait_for
from tests.runtime.test_zygote import _client, _env, _module, template  # noqa: F401

LEAVER = """\
    import json, signal, subprocess
    quiet = {"stdin": subprocess.DEVNULL, "stdout": subprocess.DEVNULL,
             "stderr": subprocess.DEVNULL}
    left = subprocess.Popen(["sleep", "600"], start_new_session=True, **quiet)
    print(json.dumps({"pid": left.pid, "wakeup_fd": signal.set_wakeup_fd(-1),
                      "sigchld_default": signal.getsignal(signal.SIGCHLD) == signal.SIG_DFL}))
"""


def test_what_a_forked_process_leaves_behind_stays_below_the_template_and_is_reaped(
    template: Template, tmp_path: Path  # noqa: F811
) -> None:
    folder = _module(tmp_path, "leaver", LEAVER)
    done = subprocess.run(_client("leaver"), cwd=folder, env=_env(template),
                          capture_output=True, text=True, timeout=120, check=True)
    seen = json.loads(done.stdout)
    assert (seen["wakeup_fd"], seen["sigchld_default"]) == (-1, True)
    left = seen["pid"]
    try:  # its parent exited: the template adopted it
        assert left in proctree.children_map().get(template.running_pid() or 0, [])
        assert proctree.is_alive(left)
    finally:
        os.kill(left, signal.SIGKILL)
    wait_for(lambda: not Path(f"/proc/{left}").exists(), 30, "the template to reap it")
