"""Channels staged once per local job, linked read-only into every host; the S3 object cache.

Real local jobs (supervisor, `ddpjob-train` hosts, torchrun workers) and real processes sharing
the cache, against a moto server over HTTP.
"""

from __future__ import annotations

import hashlib
import json
import multiprocessing
import os
import re
import signal
import time
from pathlib import Path

import boto3
import pytest
from ddpjob.local.base.admitted import AdmittedJob, admit
from ddpjob.local.isolation import sandbox
from ddpjob.local.run import staging
from ddpjob.local.run.datacache import DataCache
from ddpjob.local.session import LocalSession
from ddpjob_runtime.shared import storage

from tests.conftest import REGION
from tests.local.conftest import (
    JOBS,
    assert_no_processes,
    log_text,
    source_tar,
    training_request,
    wait_until_ended,
)

FILES = {"a.txt": b"alpha\n", "b/c.bin": os.urandom(3000), "b/d/e.csv": b"1,2\n3,4\n"}
_STAGED = re.compile(r"train: ([\d,]+) objects, .*?, (all cached|copied|([\d,]+) downloaded)")


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _channel(uri: str, distribution: str = "FullyReplicated") -> dict:
    return {"InputDataConfig": [{"ChannelName": "train", "DataSource": {"S3DataSource": {
        "S3DataType": "S3Prefix", "S3Uri": uri, "S3DataDistributionType": distribution}}}]}


def _admitted(uri: str, distribution: str = "FullyReplicated") -> AdmittedJob:
    """A 3-host job with the one channel `uri`, as admitted."""
    request = {"TrainingJobName": "staged", "OutputDataConfig": {"S3OutputPath": "file:///o"},
               "ResourceConfig": {"InstanceType": "local", "InstanceCount": 3},
               **_channel(uri, distribution)}
    return admit(request, "ddpjob's runtime", None)


def _run_probe(session: LocalSession, tmp_path: Path, name: str, uri: str, hosts: int) -> dict:
    """channel_probe.py on `hosts` hosts x 1 worker: torchrun and a gloo group order what the
    ranks see and change (barriers); the fixed `PYTHONHASHSEED` has the workers forked from
    the job's template (staging, not a hash seed per rank, is the subject)."""
    source = source_tar(tmp_path / f"src-{name}", JOBS / "channel_probe.py")
    session.sagemaker_client.create_training_job(**training_request(
        session, name, source, "channel_probe.py", hosts=hosts, workers=1, hash_seed="0",
        **_channel(uri)))
    job = wait_until_ended(session, name)
    assert job["TrainingJobStatus"] == "Completed", (job.get("FailureReason"),
                                                     log_text(session, name, "algo-1"))
    assert_no_processes(session.home)
    return job


def _host_file(session: LocalSession, job: str, host: str, name: str) -> str:
    return (session.job_dir(job) / "hosts" / host / "output" / "data" / name).read_text()


def _staged_line(session: LocalSession, job: str) -> tuple[int, str]:
    """(objects, 'all cached' | 'copied' | downloaded count) from the job's staging log line."""
    found = _STAGED.search(log_text(session, job, "algo-1"))
    assert found, log_text(session, job, "algo-1")
    return int(found.group(1).replace(",", "")), found.group(3) or found.group(2)


@pytest.mark.slow
@pytest.mark.parametrize("namespaces", ["on", "off"])
def test_hosts_share_one_read_only_copy(session: LocalSession, tmp_path: Path, namespaces: str,
                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """Three hosts see the same files, as one copy on disk; the last host cannot write into a
    staged file. In its own namespace the channel is a read-only mount (nothing in it can be
    replaced); without, replacing its own link changes only its own view."""
    if namespaces == "on" and sandbox.available():
        pytest.skip(f"no host namespaces here: {sandbox.available()}")
    if namespaces == "off":
        monkeypatch.setenv(sandbox.SWITCH_ENV, "0")
    data = tmp_path / "data"
    for rel, content in FILES.items():
        (data / rel).parent.mkdir(parents=True, exist_ok=True)
        (data / rel).write_bytes(content)
    _run_probe(session, tmp_path, "probe-3", data.as_uri(), hosts=3)

    expected = {rel: _sha(content) for rel, content in FILES.items()}
    hosts = ["algo-1", "algo-2", "algo-3"]
    before = {h: json.loads(_host_file(session, "probe-3", h, "view-before.json")) for h in hosts}
    after = {h: json.loads(_host_file(session, "probe-3", h, "view-after.json")) for h in hosts}
    for host in hosts:
        assert {rel: sha for rel, (sha, _) in before[host].items()} == expected, host
    for rel in FILES:  # one inode per file for every host: one copy on disk
        assert len({before[h][rel][1] for h in hosts}) == 1, rel
    attempts = json.loads(_host_file(session, "probe-3", "algo-3", "attempts.json"))
    for host in ("algo-1", "algo-2"):
        assert after[host] == before[host], host
    if namespaces == "on":
        assert attempts == {"write": "OSError EROFS", "replace": "OSError EROFS"}
        assert after["algo-3"] == before["algo-3"]
    else:
        assert attempts == {"write": "PermissionError EACCES", "replace": "done"}
        assert after["algo-3"]["a.txt"][0] == _sha(b"this host's own a.txt")
    assert _staged_line(session, "probe-3") == (3, "copied")
    # The job's staged copies are gone once it ended; its outputs stay.
    assert not (session.job_dir("probe-3") / "channels").exists()
    assert not (session.job_dir("probe-3") / "hosts" / "algo-1" / "input" / "data").exists()


@pytest.mark.slow
def test_s3_channel_cached_across_jobs_and_fetched_again_when_changed(
    session: LocalSession, tmp_path: Path, s3_bucket: str
) -> None:
    s3 = boto3.client("s3", region_name=REGION)
    for rel, content in FILES.items():
        s3.put_object(Bucket=s3_bucket, Key=f"ds/{rel}", Body=content)
    uri = f"s3://{s3_bucket}/ds"

    _run_probe(session, tmp_path, "first", uri, hosts=1)
    assert _staged_line(session, "first") == (3, "3")
    _run_probe(session, tmp_path, "second", uri, hosts=1)
    assert _staged_line(session, "second") == (3, "all cached")

    s3.put_object(Bucket=s3_bucket, Key="ds/a.txt", Body=b"alpha, version 2\n")  # new ETag
    _run_probe(session, tmp_path, "third", uri, hosts=1)
    assert _staged_line(session, "third") == (3, "1")
    seen = json.loads(_host_file(session, "third", "algo-1", "view-before.json"))
    assert seen["a.txt"][0] == _sha(b"alpha, version 2\n")


@pytest.mark.slow
def test_a_rank_that_chmods_and_writes_its_staged_file_poisons_no_later_job(
    session: LocalSession, tmp_path: Path, s3_bucket: str
) -> None:
    """Where no read-only mount stops the write, the cache entry it changed is not reused: the
    next job on the channel downloads the object again and reads its own bytes."""
    s3 = boto3.client("s3", region_name=REGION)
    for rel, content in FILES.items():
        s3.put_object(Bucket=s3_bucket, Key=f"ds/{rel}", Body=content)
    uri = f"s3://{s3_bucket}/ds"
    source = source_tar(tmp_path / "src-chmod", JOBS / "chmod_writer.py")
    session.sagemaker_client.create_training_job(**training_request(
        session, "chmod-write", source, "chmod_writer.py", workers=1, distributed=False,
        **_channel(uri)))
    job = wait_until_ended(session, "chmod-write")
    assert job["TrainingJobStatus"] == "Completed", job.get("FailureReason")
    outcome = _host_file(session, "chmod-write", "algo-1", "chmod.txt")
    _run_probe(session, tmp_path, "after-chmod", uri, hosts=1)
    seen = json.loads(_host_file(session, "after-chmod", "algo-1", "view-before.json"))
    assert seen["a.txt"][0] == _sha(FILES["a.txt"]), outcome
    assert _staged_line(session, "after-chmod") == (3, "1" if outcome == "written"
                                                    else "all cached")


@pytest.mark.slow
def test_two_jobs_at_once_download_each_object_once(
    session: LocalSession, tmp_path: Path, s3_bucket: str
) -> None:
    uri = _objects(s3_bucket, 40, 50_000)
    source = source_tar(tmp_path / "src", JOBS / "channel_probe.py")
    for name in ("twin-1", "twin-2"):
        session.sagemaker_client.create_training_job(**training_request(  # as _run_probe's
            session, name, source, "channel_probe.py", workers=1, hash_seed="0",
            **_channel(uri)))
    downloaded = 0
    for name in ("twin-1", "twin-2"):
        job = wait_until_ended(session, name)
        assert job["TrainingJobStatus"] == "Completed", job.get("FailureReason")
        objects, how = _staged_line(session, name)
        assert objects == 40
        downloaded += 0 if how == "all cached" else int(how)
        assert len(json.loads(_host_file(session, name, "algo-1", "view-before.json"))) == 40
    assert downloaded == 40
    assert_no_processes(session.home)


def test_sharded_channel_splits_objects_across_hosts(tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    for i in range(7):
        (data / f"part-{i}").write_text(str(i))
    hosts = ["algo-1", "algo-2", "algo-3"]
    staged = staging.stage_channels(tmp_path / "home", tmp_path / "job",
                                    _admitted(data.as_uri(), "ShardedByS3Key"))
    shares = {h: sorted(p.name for p in Path(staged[h]["train"]).iterdir()) for h in hosts}
    assert [len(shares[h]) for h in hosts] == [3, 2, 2]
    assert sorted(sum(shares.values(), [])) == sorted(f"part-{i}" for i in range(7))
    replicated = staging.stage_channels(tmp_path / "home", tmp_path / "job2",
                                        _admitted(data.as_uri()))
    assert len({replicated[h]["train"] for h in hosts}) == 1


# --- the cache, shared by processes -------------------------------------------------------


def _objects(bucket: str, count: int, size: int) -> str:
    s3 = boto3.client("s3", region_name=REGION)
    for i in range(count):
        s3.put_object(Bucket=bucket, Key=f"objs/{i:03d}", Body=bytes([i % 256]) * size)
    return f"s3://{bucket}/objs"


def _fetch_counting(root: str, uri: str, counter: str, delay: float, start) -> None:
    """In a child process: fetch `uri` into the cache at `root`, appending a line to `counter`
    for every GetObject request sent (and sleeping `delay` in it)."""

    def count(**_kwargs) -> None:
        with open(counter, "a") as f:
            f.write(f"{os.getpid()}\n")
        time.sleep(delay)

    storage.client().meta.events.register("before-send.s3.GetObject", count)
    start.wait()
    DataCache(Path(root)).fetch(storage.list_prefix(uri))


def test_two_processes_download_each_object_once(tmp_path: Path, s3_bucket: str) -> None:
    uri = _objects(s3_bucket, 12, 2000)
    counter = tmp_path / "requests"
    context = multiprocessing.get_context("fork")
    start = context.Event()
    procs = [context.Process(target=_fetch_counting,
                             args=(str(tmp_path / "cache"), uri, str(counter), 0.05, start))
             for _ in range(2)]
    for proc in procs:
        proc.start()
    start.set()
    for proc in procs:
        proc.join(60)
        assert proc.exitcode == 0
    assert len(counter.read_text().split()) == 12  # once per object, whichever process did it
    fetched = DataCache(tmp_path / "cache").fetch(storage.list_prefix(uri))
    assert fetched.downloaded == 0
    assert [p.read_bytes() for p in fetched.paths] == [bytes([i]) * 2000 for i in range(12)]


def test_eviction_takes_least_recently_used_never_in_use(tmp_path: Path, s3_bucket: str) -> None:
    uri = _objects(s3_bucket, 4, 1000)
    cache = DataCache(tmp_path / "cache")
    paths = cache.fetch(storage.list_prefix(uri)).paths
    for age, path in enumerate(paths):  # objs/000 used longest ago, objs/003 most recently
        os.utime(cache.records / path.parent.name / path.name, (1000 + age, 1000 + age))
    job = tmp_path / "job"
    job.mkdir()
    os.link(paths[0], job / "000")  # the oldest, in use by a job's staged channel
    assert cache.evict(2000) == 2000
    assert [p.exists() for p in paths] == [True, False, False, True]
    assert cache.info().in_use == 1
    (job / "000").unlink()  # the job ended
    cache.evict(0)
    assert cache.info().entries == 0


def _write_through(path: Path, data: bytes, *, keep_mode: bool = False) -> None:
    """What a rank can do to its staged (hard-linked) file where no read-only mount stops it."""
    os.chmod(path, 0o644)
    path.write_bytes(data)
    if keep_mode:
        os.chmod(path, 0o444)


def test_a_changed_entry_is_downloaded_again_never_served(
    tmp_path: Path, s3_bucket: str
) -> None:
    """Same-size corruption, a write through a job's link (chmod, write, chmod back) and a bare
    chmod: each makes the entry untrusted; the next fetch serves the object's own bytes again,
    and the job that wrote keeps its own copy."""
    uri = _objects(s3_bucket, 3, 1000)
    cache = DataCache(tmp_path / "cache")
    paths = cache.fetch(storage.list_prefix(uri)).paths
    job = tmp_path / "job"
    job.mkdir()
    os.link(paths[1], job / "001")  # a staged channel file of a running job
    _write_through(paths[0], b"X" * 1000)  # same size
    _write_through(job / "001", b"Y" * 1000, keep_mode=True)
    os.chmod(paths[2], 0o644)
    again = cache.fetch(storage.list_prefix(uri))
    assert again.downloaded == 3
    assert [p.read_bytes() for p in again.paths] == [bytes([i]) * 1000 for i in range(3)]
    assert (job / "001").read_bytes() == b"Y" * 1000
    assert cache.fetch(storage.list_prefix(uri)).downloaded == 0


def _fetch_slowly(root: str, uri: str, started: str) -> None:
    def stall(**_kwargs) -> None:
        Path(started).touch()
        time.sleep(60)

    storage.client().meta.events.register("before-send.s3.GetObject", stall)
    DataCache(Path(root)).fetch(storage.list_prefix(uri))


def test_killed_download_leaves_no_entry_a_later_job_trusts(
    tmp_path: Path, s3_bucket: str
) -> None:
    """A process killed while downloading an entry (holding its lock): the next fetch neither
    waits forever nor trusts anything it left; its half-written file is swept."""
    uri = _objects(s3_bucket, 1, 5000)
    root, started = tmp_path / "cache", tmp_path / "started"
    proc = multiprocessing.get_context("fork").Process(
        target=_fetch_slowly, args=(str(root), uri, str(started)))
    proc.start()
    deadline = time.monotonic() + 30
    while not started.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert started.exists()
    cache = DataCache(root)
    listing = storage.list_prefix(uri)
    name = cache._name(listing.folder, listing.objects[0])
    (root / "tmp" / f"{name}.dead.part").write_bytes(b"half")  # what a crash mid-write leaves
    os.kill(proc.pid, signal.SIGKILL)
    proc.join(10)
    assert cache.info().entries == 0
    fetched = cache.fetch(storage.list_prefix(uri))
    assert fetched.downloaded == 1
    assert fetched.paths[0].read_bytes() == bytes([0]) * 5000
    cache.evict(10**9)  # abandoned downloads are swept, the entry stays
    assert not list((root / "tmp").iterdir())
    assert cache.info().entries == 1


def test_cache_cli_info_and_clear(tmp_path: Path, s3_bucket: str, capsys,
                                  monkeypatch: pytest.MonkeyPatch) -> None:
    from ddpjob.cli import main

    monkeypatch.setenv("DDPJOB_HOME", str(tmp_path / "home"))
    (tmp_path / "config.yaml").write_text("")  # no defaults, whatever ~/.ddpjob holds
    monkeypatch.setenv("DDPJOB_CONFIG", str(tmp_path / "config.yaml"))
    uri = _objects(s3_bucket, 2, 1000)
    paths = staging.cache_of(tmp_path / "home").fetch(storage.list_prefix(uri)).paths
    os.link(paths[0], tmp_path / "in-use")
    assert main(["cache", "info"]) == 0
    assert "2 objects, 2.0 kB" in capsys.readouterr().out
    assert main(["cache", "clear"]) == 0
    out = capsys.readouterr().out
    assert "freed 1.0 kB" in out and "1 objects, 1.0 kB" in out
    assert "in use by running jobs: 1 objects" in out
    monkeypatch.setenv("DDPJOB_CACHE_MAX_GB", "lots")
    assert main(["cache", "info"]) == 2
    assert "DDPJOB_CACHE_MAX_GB" in capsys.readouterr().err
