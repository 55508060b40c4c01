"""SageMaker's folder sync: a local folder mirrored to a storage URI while a job runs.

SageMaker does this for `CheckpointConfig` on every instance (everything under `S3Uri` brought
down before the script starts, new or changed files of each instance's `LocalPath` uploaded to
the same `S3Uri` while it runs and at its end; the last writer of a name wins) and, upload-only,
for `TensorBoardOutputConfig`. One implementation for both and for every kind of local host:
ddpjob's runtime, SageMaker's own PyTorch container and container commands played by the local
backend. Nothing is ever deleted remotely, and nothing outside the folder is read: a link that
resolves outside it, a named pipe or a device is skipped with a warning, and each file is opened
below the folder without following a link swapped in meanwhile (`safefiles`). Every file is
synced under its own name, whatever it looks like. One file that fails is logged and tried
again next round; the round goes on with the others.

A sync given its `Writer` (every host's checkpoint sync) stamps its uploads (`upload_stamps`)
and, before uploading a changed file, reads the stamp there (one HEAD): the same bytes are not
sent again (where the object's own ETag, or the stored file's sha256, vouches for them: a
stamp alone is no proof), and different bytes from another host of the same job are warned
about once (a `logging` warning naming the file and the hosts); `finish()` looks once more at
what this host uploaded, for a clash that both hosts' uploads at the same moment hid.
Torch-free.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import IO

from ddpjob_runtime.shared import fsutil, safefiles, storage, upload_stamps
from ddpjob_runtime.shared.errors import StorageError, UnsafePathError
from ddpjob_runtime.shared.safefiles import Found
from ddpjob_runtime.shared.upload_stamps import Stamp, Writer

log = logging.getLogger(__name__)

INTERVAL_S = 2.0  # between two upload rounds while the job runs
LOOKUPS = 8  # stamps (one HEAD each) and digests read at once, ahead of the uploads


class FolderSync:
    """Mirror `folder` to the folder URI `uri` (no-op without one).

    `skip(relative posix path)` names files that are not this sync's business (in either
    direction), e.g. checkpoint step folders that `ddpjob_runtime.checkpoints` ships itself.
    `writer`: the job and host that upload, when other hosts upload to the same URI: uploads
    are then stamped and checked against what is there (see the module).
    """

    def __init__(self, folder: Path, uri: str | None,
                 skip: Callable[[str], bool] | None = None,
                 writer: Writer | None = None) -> None:
        self.folder = Path(folder)
        self.uri = uri or None
        self.writer = writer
        self._skip = skip or (lambda _rel: False)
        self._sent: dict[str, Found] = {}
        self._left: dict[str, str] = {}  # sha256 of what this host's stamped uploads left there
        self._refused: set[str] = set()  # links out of the folder, pipes: warned about once
        self._lock = threading.Lock()  # one upload round at a time (background and final)

    def _files(self) -> dict[str, Found]:
        """The files to sync by relative path (`safefiles.scan`: no link out of the folder,
        no pipe or device; each left out is warned about once)."""
        found = safefiles.scan(self.folder, skip=self._skip)
        for rel, why in found.refused.items():
            if rel not in self._refused:
                self._refused.add(rel)
                log.warning("not syncing %s: %s", self.folder / rel, why)
        return found.files

    def download(self) -> int:
        """Bring every object under `uri` (but the skipped ones) into the folder; they then
        count as uploaded. How many. A key no file can be named after (`x//y`, `../y`: legal
        on S3) is left there with a warning; it costs no other file."""
        self.folder.mkdir(parents=True, exist_ok=True)
        if not self.uri:
            return 0
        keys = [info.key for info in storage.list_objects(self.uri)
                if not self._skip(info.key) and self._is_file_name(info.key)]
        wanted = set(keys)
        if not keys:
            return 0
        log.info("bringing %d files down from %s into %s", len(keys), self.uri, self.folder)
        storage.download_prefix(self.uri, self.folder, keys=keys)
        with self._lock:
            self._sent.update({rel: found for rel, found in self._files().items()
                               if rel in wanted})
        return len(keys)

    def _is_file_name(self, key: str) -> bool:
        try:
            if fsutil.relative_name(key, "object key") == key:
                return True
        except UnsafePathError:
            pass
        log.warning("not bringing %s down: no file in %s can have that name",
                    storage.join(self.uri, key), self.folder)
        return False

    def upload(self) -> int:
        """Upload the files that are new or changed since the last round; how many.

        A file that fails is logged and tried again next round, and the round goes on; then
        StorageError names how many failed and the first.
        """
        if not self.uri:
            return 0
        failed: dict[str, Exception] = {}
        with self._lock, ThreadPoolExecutor(LOOKUPS) as pool:
            files = self._files()
            changed = [rel for rel, seen in files.items() if self._sent.get(rel) != seen]
            # With a writer: each file's digest and the stamp there, all read at once.
            looks = {rel: pool.submit(self._look, rel) for rel in changed} if self.writer else {}
            for rel in changed:
                try:
                    with safefiles.open_file(self.folder, rel) as source:
                        if rel in looks:
                            self._send_stamped(rel, source, *looks[rel].result())
                        else:
                            storage.upload_file(source, storage.join(self.uri, rel))
                except FileNotFoundError:
                    continue  # removed meanwhile: the next round sees it
                except Exception as exc:  # noqa: BLE001 - one file must not cost the others
                    failed[rel] = exc
                    log.warning("upload of %s to %s failed (tried again next round): %s",
                                self.folder / rel, self.uri, exc)
                    continue
                self._sent[rel] = files[rel]
        if failed:
            rel, exc = next(iter(failed.items()))
            raise StorageError(f"upload of {len(failed)} file(s) of {self.folder} to {self.uri} "
                               f"failed; the first, {rel!r}: {exc}")
        return len(changed)

    def _look(self, rel: str) -> tuple[str, Stamp | None]:
        with safefiles.open_file(self.folder, rel) as source:
            digest = fsutil.sha256_file(source)
        return digest, upload_stamps.read(storage.join(self.uri, rel))

    def _send_stamped(self, rel: str, source: IO[bytes], digest: str,
                      there: Stamp | None) -> None:
        """Upload one file stamped, unless its bytes are there already (this host's or
        another's, as the object itself vouches); warn when it replaces another host's
        different bytes."""
        if not upload_stamps.holds(there, digest, source):
            uri = storage.join(self.uri, rel)
            clash = self._clash(uri, there, kept=self.writer.host)
            upload_stamps.upload(source, uri, Stamp(self.writer, digest, clash))
        self._left[rel] = digest

    def finish(self) -> int:
        """The last round, once the job's program ended: `upload()`, then, with a writer, one
        HEAD per file this host uploaded in the job, so that another host's different bytes
        which replaced them (two hosts uploading at once, neither seeing the other's stamp) are
        warned about too. How many files the round uploaded; StorageError as `upload()`."""
        sent = self.upload()
        if self.writer is not None and self.uri:
            with self._lock, ThreadPoolExecutor(LOOKUPS) as pool:
                uris = [storage.join(self.uri, rel) for rel in self._left]
                stamps = pool.map(upload_stamps.read, uris)
                for uri, digest, there in zip(uris, self._left.values(), stamps, strict=True):
                    if there is not None and there.sha256 != digest:
                        self._clash(uri, there, kept=there.writer.host)
        return sent

    def _clash(self, uri: str, there: Stamp | None, kept: str) -> frozenset[str]:
        """The hosts of this job known to have written different bytes to `uri`, this one
        included; warns when this host is new to them (`kept`: whose bytes stay there)."""
        if there is None or there.writer.job != self.writer.job:
            return frozenset()  # nothing there, or from another job (e.g. the one resumed)
        if there.writer.host == self.writer.host:
            return there.clash
        hosts = there.clash | {there.writer.host, self.writer.host}
        if hosts != there.clash:
            log.warning("hosts %s wrote different bytes to %s; the last upload (%s's) is "
                        "kept there, as SageMaker keeps the last writer's",
                        " and ".join(sorted(hosts)), uri, kept)
        return hosts

    @contextlib.contextmanager
    def running(self, interval_s: float = INTERVAL_S) -> Iterator[None]:
        """Upload every `interval_s` in the background while the block runs. A failed round is
        logged and retried; the caller's `finish()` after the block reports what failed."""
        if not self.uri:
            yield
            return
        ended = threading.Event()

        def loop() -> None:
            while not ended.wait(interval_s):
                try:
                    self.upload()
                except Exception as exc:  # noqa: BLE001 - retried next round and at the end
                    log.warning("upload of %s to %s failed (retried): %s",
                                self.folder, self.uri, exc)

        thread = threading.Thread(target=loop, name="ddpjob-folder-sync", daemon=True)
        thread.start()
        try:
            yield
        finally:
            ended.set()
            thread.join()
