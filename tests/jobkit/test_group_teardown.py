"""`group_teardown.finish()`, shipped as a job ships it (beside the script), under real torchrun
with a real gloo group: no rank leaves it before every rank entered it, and it is a no-op before
init and after the group is gone."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import GROUP_TEARDOWN

SCRIPT = """
import sys, time
from pathlib import Path
import torch.distributed as dist
from group_teardown import finish

out = Path(sys.argv[1])
finish()  # no group yet: nothing to end
dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
if rank == world - 1:
    time.sleep(1.0)  # the last to arrive: without the barrier the others would be gone by now
(out / f"entered-{rank}").touch()
finish()
entered = sorted(p.name for p in out.glob("entered-*"))
assert entered == [f"entered-{r}" for r in range(world)], f"rank {rank} left early: {entered}"
assert not dist.is_initialized()
finish()  # already destroyed: nothing to do
(out / f"done-{rank}").touch()
"""


@pytest.mark.slow
def test_finish_waits_for_every_rank_then_destroys_the_group(tmp_path: Path) -> None:
    source, out = tmp_path / "src", tmp_path / "out"
    source.mkdir()
    out.mkdir()
    shutil.copy(GROUP_TEARDOWN, source)
    (source / "train.py").write_text(SCRIPT)
    run = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "3",
         str(source / "train.py"), str(out)],
        capture_output=True, text=True, timeout=120, check=False)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    assert sorted(p.name for p in out.glob("done-*")) == ["done-0", "done-1", "done-2"]
