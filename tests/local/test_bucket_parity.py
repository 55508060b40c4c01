"""The local bucket `sagemaker-local` answers as S3 does: the same boto3 calls against the
emulation (`official_session.boto_session`) and against moto's S3 over HTTP, answers compared.

Only what legitimately differs is normalised: ETags (the emulation's are size and time, not
MD5), dates, request ids, bucket names, the opaque continuation tokens. Where moto itself is not
S3 (v1 ListObjects paging, ranges in another unit, KeyTooLongError, part numbers out of range)
the expected answer is S3's documented one, asserted against the emulation alone.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import unquote

import boto3
import pytest
from botocore.exceptions import ClientError
from ddpjob.local.aws.official_session import boto_session
from ddpjob.local.session import LocalSession

from tests.conftest import REGION

LOCAL = "sagemaker-local"
#: Keys a file system would alias or refuse, or that URL encoding changes.
HOSTILE_KEYS = [
    "a", "a/b", "a//b", "./c", "c", "x\\y", "x/y", "data/", "data/f", "sp ace/f 1",
    "sp ace/f 2", "plus+key", "a b+c", "100%.csv", "%20lit", "é/ü", "한글/x.txt", "../up",
    "L" * 300, "deep/" + "s/" * 40 + "f", "q?x", "h#x", "t~x", ".f.x.tmp", "tab\tkey", "z",
]
MIB = 1024 * 1024

Call = Callable[[Any, str], Any]


class Side:
    """One S3 (the emulation or moto) and the bucket the calls go to."""

    def __init__(self, client: Any, bucket: str):
        self.client, self.bucket = client, bucket

    def outcome(self, call: Call) -> Any:
        """What `call` answered, normalised: its response, or (status, error code)."""
        try:
            return normalised(call(self.client, self.bucket))
        except ClientError as exc:
            return ("error", exc.response["ResponseMetadata"]["HTTPStatusCode"],
                    exc.response["Error"]["Code"])


@pytest.fixture
def sides(aws_env: str, s3_bucket: str, session: LocalSession) -> tuple[Side, Side]:
    """(the emulation, moto), each with an empty bucket."""
    ours = boto_session(session).client("s3")
    ours.head_bucket(Bucket=LOCAL)
    return Side(ours, LOCAL), Side(boto3.client("s3", region_name=REGION), s3_bucket)


def normalised(response: Any) -> Any:
    """`response` without what legitimately differs between two S3s."""
    if isinstance(response, list):
        return [normalised(item) for item in response]
    if not isinstance(response, dict):
        return response
    dropped = {"ResponseMetadata", "LastModified", "Owner", "ChecksumAlgorithm", "ChecksumType",
               "ContinuationToken", "Name", "Bucket", "ContentType", "AcceptRanges", "Metadata",
               "ServerSideEncryption", "ChecksumCRC32", "ChecksumCRC64NVME", "Location",
               "VersionId", "DeleteMarker", "RequestCharged"}
    out = {}
    for name, value in response.items():
        if name in dropped:
            continue
        if name in ("ETag", "UploadId"):
            value = "<opaque>"
        elif name == "NextContinuationToken":
            value = "<token>"
        elif name == "Body":
            value = value.read()
        out[name] = normalised(value)
    return out


def same(ours: Side, moto: Side, call: Call) -> Any:
    """What both answered to `call`, failing the test where they differ."""
    got, expected = ours.outcome(call), moto.outcome(call)
    assert got == expected
    return got


def _put_all(ours: Side, moto: Side, keys: list[str]) -> None:
    for key in keys:
        same(ours, moto, lambda s3, b, key=key: s3.put_object(Bucket=b, Key=key,
                                                               Body=key.encode()))


def _pages(side: Side, params: dict[str, Any]) -> Iterator[Any]:
    """Each page of a ListObjectsV2 listing, followed by hand, normalised."""
    params = dict(params)
    for _ in range(200):  # more pages than keys: a loop is a failure
        response = side.client.list_objects_v2(Bucket=side.bucket, **params)
        # S3 echoes StartAfter on every page, moto only without a continuation token; S3
        # encodes StartAfter and Delimiter (EncodingType=url), moto neither
        start = "" if "ContinuationToken" in params else response.get("StartAfter", "")
        yield normalised(response) | {"StartAfter": unquote(start),
                                      "Delimiter": unquote(response.get("Delimiter", ""))}
        if not response["IsTruncated"]:
            return
        params["ContinuationToken"] = response["NextContinuationToken"]
    pytest.fail(f"the listing {params} does not end")


def test_hostile_keys_are_distinct_objects_as_in_s3(sides: tuple[Side, Side]) -> None:
    """`a//b`, `./c`, `x\\y`, `data/`, `a` beside `a/b`, long or encoded keys: each its own
    object, none overwriting another, read back, deleted alone."""
    ours, moto = sides
    _put_all(ours, moto, HOSTILE_KEYS)
    for key in HOSTILE_KEYS:
        got = same(ours, moto, lambda s3, b, key=key: s3.get_object(Bucket=b, Key=key))
        assert got["Body"] == key.encode()
        same(ours, moto, lambda s3, b, key=key: s3.head_object(Bucket=b, Key=key))
    listed = same(ours, moto, lambda s3, b: s3.list_objects_v2(Bucket=b))
    assert [o["Key"] for o in listed["Contents"]] == sorted(HOSTILE_KEYS, key=str.encode)
    gone = ["a/b", "./c", "data/", "L" * 300]
    same(ours, moto, lambda s3, b: s3.delete_objects(
        Bucket=b, Delete={"Objects": [{"Key": key} for key in gone]}))
    same(ours, moto, lambda s3, b: s3.delete_object(Bucket=b, Key="x\\y"))
    for key in HOSTILE_KEYS:
        same(ours, moto, lambda s3, b, key=key: s3.get_object(Bucket=b, Key=key))
    same(ours, moto, lambda s3, b: s3.list_objects_v2(Bucket=b))


def test_listings_page_as_s3_for_every_parameter_combination(
        sides: tuple[Side, Side]) -> None:
    """Prefix x Delimiter x MaxKeys (0 included), with and without EncodingType=url and
    StartAfter: the same pages, each common prefix once, ending."""
    ours, moto = sides
    _put_all(ours, moto, HOSTILE_KEYS)
    prefixes = ["", "a", "sp ace/", "data/", "é", "deep/s/", "nothing"]
    combinations = itertools.product(prefixes, ["", "/", " "], [0, 1, 3, 1000])
    for index, (prefix, delimiter, max_keys) in enumerate(combinations):
        params: dict[str, Any] = {"Prefix": prefix, "Delimiter": delimiter, "MaxKeys": max_keys}
        if index % 2:
            params["EncodingType"] = "url"
        if index % 3 == 1:
            params["StartAfter"] = ["a", "c", "sp ace/f 1"][index % 9 // 3]
        assert list(_pages(ours, params)) == list(_pages(moto, params)), params


def test_boto3s_paginators_list_each_key_once(sides: tuple[Side, Side]) -> None:
    """boto3's paginators (which ask for url encoding themselves) over hostile keys: every key
    once, as moto lists them."""
    ours, moto = sides
    _put_all(ours, moto, HOSTILE_KEYS)
    for config in ({"PageSize": 1}, {"PageSize": 4}, {}):
        for delimiter in ("", "/"):
            def listing(s3: Any, bucket: str, config: dict = config,
                        delimiter: str = delimiter) -> list[tuple[list[str], list[str]]]:
                pages = s3.get_paginator("list_objects_v2").paginate(
                    Bucket=bucket, Delimiter=delimiter, PaginationConfig=config)
                return [([o["Key"] for o in page.get("Contents", [])],
                         [p["Prefix"] for p in page.get("CommonPrefixes", [])])
                        for page in pages]
            pages = same(ours, moto, listing)
            names = [name for keys, prefixes in pages for name in keys + prefixes]
            assert len(names) == len(set(names)) and names
    whole = ours.client.get_paginator("list_objects").paginate(Bucket=LOCAL, PaginationConfig={
        "PageSize": 2})
    assert [o["Key"] for page in whole for o in page["Contents"]] == sorted(
        HOSTILE_KEYS, key=str.encode)


def test_v1_listings_answer_s3s_markers(sides: tuple[Side, Side]) -> None:
    """ListObjects (v1): a whole listing as moto's; paging (which moto does not do as S3) by
    `Marker`, `NextMarker` only with a delimiter, common prefixes counted and once."""
    ours, moto = sides
    _put_all(ours, moto, HOSTILE_KEYS)
    for delimiter in ("", "/"):
        same(ours, moto, lambda s3, b, d=delimiter: {  # S3 echoes both, moto neither
            name: value for name, value in s3.list_objects(Bucket=b, Delimiter=d).items()
            if name not in ("Marker", "Prefix")})
    s3 = ours.client
    first = s3.list_objects(Bucket=LOCAL, MaxKeys=3)
    assert [o["Key"] for o in first["Contents"]] == ["%20lit", "../up", "./c"]
    assert first["IsTruncated"] and "NextMarker" not in first
    page = s3.list_objects(Bucket=LOCAL, Delimiter="/", MaxKeys=3, Marker="L" * 300)
    assert [p["Prefix"] for p in page["CommonPrefixes"]] == ["a/"]
    assert [o["Key"] for o in page["Contents"]] == ["a", "a b+c"]
    assert page["NextMarker"] == "a/"
    after = s3.list_objects(Bucket=LOCAL, Delimiter="/", MaxKeys=2, Marker=page["NextMarker"])
    assert ([o["Key"] for o in after["Contents"]], after["CommonPrefixes"]) == (
        ["c"], [{"Prefix": "data/"}])


def test_encoding_type_url_encodes_what_s3_encodes(sides: tuple[Side, Side]) -> None:
    """Asked for by the caller, the encoding stays in the answer: keys, common prefixes, the
    prefix and StartAfter percent-encoded as moto (`/` kept, a space `%20`, `+` `%2B`)."""
    ours, moto = sides
    _put_all(ours, moto, ["sp ace/f 1", "a b+c", "100%.csv", "é/ü"])
    got = same(ours, moto, lambda s3, b: s3.list_objects_v2(
        Bucket=b, EncodingType="url", Delimiter="/", Prefix=""))
    assert [o["Key"] for o in got["Contents"]] == ["100%25.csv", "a%20b%2Bc"]
    assert [p["Prefix"] for p in got["CommonPrefixes"]] == ["sp%20ace/", "%C3%A9/"]
    raw = ours.client.list_objects_v2(Bucket=LOCAL, EncodingType="url", Prefix="sp ace/",
                                      StartAfter="sp ace/f 0")
    assert (raw["Prefix"], raw["StartAfter"]) == ("sp%20ace/", "sp%20ace/f%200")


@pytest.mark.parametrize("size", [0, 1, 10])
def test_ranges_are_answered_as_s3(sides: tuple[Side, Side], size: int) -> None:
    """Ranged GETs and HEADs: open-ended, suffix, past the end, several ranges, `-0`."""
    ours, moto = sides
    body = bytes(range(size))
    same(ours, moto, lambda s3, b: s3.put_object(Bucket=b, Key="r", Body=body))
    ranges = ["bytes=0-0", "bytes=0-", "bytes=3-5", "bytes=5-100", "bytes=-3", "bytes=-100",
              "bytes=9-", "bytes=10-", "bytes=10-20", "bytes=-0", "bytes=0-1,3-4", "bytes=abc"]
    if size > 5:
        ranges.append("bytes=5-2")
    for wanted in ranges:
        same(ours, moto, lambda s3, b, r=wanted: s3.get_object(Bucket=b, Key="r", Range=r))
        same(ours, moto, lambda s3, b, r=wanted: s3.head_object(Bucket=b, Key="r", Range=r))


def test_ranges_moto_does_not_answer_as_s3(sides: tuple[Side, Side]) -> None:
    """RFC 7233, as S3: a range in another unit or with last before first is ignored (the
    whole object, 200) whatever the size; a suffix longer than the object is all of it."""
    ours, _ = sides
    s3 = ours.client
    s3.put_object(Bucket=LOCAL, Key="r", Body=b"0123")
    for ignored in ("items=0-1", "bytes=5-2", "bytes=1-2;", "bytes 0-1", "bytes=\u0661-\u0662"):
        got = s3.get_object(Bucket=LOCAL, Key="r", Range=ignored)
        assert (got["ResponseMetadata"]["HTTPStatusCode"], got["Body"].read()) == (200, b"0123")
    got = s3.get_object(Bucket=LOCAL, Key="r", Range="bytes=-10")
    assert (got["ContentRange"], got["Body"].read()) == ("bytes 0-3/4", b"0123")
    with pytest.raises(ClientError) as refused:
        s3.get_object(Bucket=LOCAL, Key="r", Range="bytes=4-")
    assert refused.value.response["Error"] == {
        "Code": "InvalidRange", "Message": "The requested range is not satisfiable",
        "RangeRequested": "bytes=4-", "ActualObjectSize": "4"}


def _multipart(side: Side, key: str, sizes: list[int]) -> tuple[str, list[dict[str, Any]]]:
    upload = side.client.create_multipart_upload(Bucket=side.bucket, Key=key)["UploadId"]
    parts = []
    for number, size in enumerate(sizes, start=1):
        answer = side.client.upload_part(Bucket=side.bucket, Key=key, UploadId=upload,
                                         PartNumber=number, Body=bytes([number]) * size)
        parts.append({"PartNumber": number, "ETag": answer["ETag"]})
    return upload, parts


@pytest.mark.parametrize(("sizes", "listed", "code"), [
    ([5 * MIB, 1], lambda parts: parts + [{"PartNumber": 3, "ETag": parts[0]["ETag"]}],
     "InvalidPart"),
    ([5 * MIB, 1], lambda parts: [parts[0], {**parts[1], "ETag": '"0123"'}], "InvalidPart"),
    ([1, 1], lambda parts: parts, "EntityTooSmall"),
    ([5 * MIB, 1], lambda parts: [], "MalformedXML"),
    # moto checks no order (its check never moves on from part 0): S3's answer alone
    ([5 * MIB, 1], lambda parts: parts[::-1], "InvalidPartOrder"),
    ([5 * MIB, 1], lambda parts: [parts[0], parts[0], parts[1]], "InvalidPartOrder"),
], ids=["missing-part", "wrong-etag", "too-small", "no-parts", "wrong-order", "repeated-part"])
def test_a_refused_multipart_completion_is_s3s_error_and_keeps_the_upload(
        sides: tuple[Side, Side], sizes: list[int], listed: Callable, code: str) -> None:
    """InvalidPart, EntityTooSmall, MalformedXML, InvalidPartOrder as S3; the upload is still
    there (completing it right then works) and no object was made."""
    ours, moto = sides
    uploads = {side: _multipart(side, "mp/key", sizes) for side in sides}

    def complete(s3: Any, bucket: str, parts_of: Callable = listed) -> Any:
        upload, parts = uploads[ours if bucket == LOCAL else moto]
        return s3.complete_multipart_upload(Bucket=bucket, Key="mp/key", UploadId=upload,
                                            MultipartUpload={"Parts": parts_of(parts)})

    assert ours.outcome(complete) == ("error", 400, code)
    if code != "InvalidPartOrder":
        same(ours, moto, complete)
    same(ours, moto, lambda s3, b: s3.head_object(Bucket=b, Key="mp/key"))
    if sizes[0] >= 5 * MIB:
        same(ours, moto, lambda s3, b: complete(s3, b, lambda parts: parts))
        got = same(ours, moto, lambda s3, b: s3.get_object(Bucket=b, Key="mp/key"))
        assert got["Body"] == bytes([1]) * sizes[0] + bytes([2])
    same(ours, moto, lambda s3, b: s3.abort_multipart_upload(Bucket=b, Key="mp/key",
                                                             UploadId="0" * 32))


def test_keys_and_part_numbers_s3_refuses(sides: tuple[Side, Side]) -> None:
    """A key over 1,024 bytes of UTF-8 is KeyTooLongError (a 1,024-byte one is an object);
    part numbers outside 1-10,000 are InvalidArgument (moto checks neither)."""
    ours, _ = sides
    s3 = ours.client
    longest = "é" * 512
    s3.put_object(Bucket=LOCAL, Key=longest, Body=b"x")
    assert s3.get_object(Bucket=LOCAL, Key=longest)["Body"].read() == b"x"
    for call in (lambda: s3.put_object(Bucket=LOCAL, Key=longest + "x", Body=b"y"),
                 lambda: s3.get_object(Bucket=LOCAL, Key=longest + "x"),
                 lambda: s3.create_multipart_upload(Bucket=LOCAL, Key="k" * 1025)):
        with pytest.raises(ClientError) as refused:
            call()
        assert refused.value.response["Error"]["Code"] == "KeyTooLongError"
    upload = s3.create_multipart_upload(Bucket=LOCAL, Key="k")["UploadId"]
    for number in (0, 10_001):
        with pytest.raises(ClientError, match="Part number must be an integer between 1 and"):
            s3.upload_part(Bucket=LOCAL, Key="k", UploadId=upload, PartNumber=number, Body=b"")
    with pytest.raises(ClientError, match="InvalidArgument"):
        s3.list_objects_v2(Bucket=LOCAL, ContinuationToken="not a token")


def test_the_bucket_folder_stays_what_jobs_read(sides: tuple[Side, Side],
                                                session: LocalSession) -> None:
    """Keys that are plain paths stay files of the folder (jobs read them there); a key whose
    place a folder or file holds is an object all the same, and none is overwritten."""
    ours, _ = sides
    s3, folder = ours.client, session.home / "buckets" / LOCAL
    for key in ("a", "a/b", "x/y", "x\\y", "data/", "data/f"):
        put = s3.put_object(Bucket=LOCAL, Key=key, Body=key.encode() * 10_000)["ETag"]
        assert s3.head_object(Bucket=LOCAL, Key=key)["ETag"] == put  # the object's own
        s3.put_object(Bucket=LOCAL, Key=key, Body=key.encode())
    assert (folder / "a").read_bytes() == b"a" and (folder / "x" / "y").read_bytes() == b"x/y"
    assert (folder / "data" / "f").read_bytes() == b"data/f"
    assert not (folder / "a").is_dir() and not (folder / "x\\y").exists()
    (folder / "dropped" / "by").mkdir(parents=True)
    (folder / "dropped" / "by" / "job.txt").write_text("job")  # a job's output
    assert s3.get_object(Bucket=LOCAL, Key="dropped/by/job.txt")["Body"].read() == b"job"
    s3.delete_object(Bucket=LOCAL, Key="a")
    assert s3.get_object(Bucket=LOCAL, Key="a/b")["Body"].read() == b"a/b"
    s3.put_object(Bucket=LOCAL, Key="n/m", Body=b"n/m")  # the other order: the folder first
    s3.put_object(Bucket=LOCAL, Key="n", Body=b"n")
    assert (folder / "n" / "m").read_bytes() == b"n/m"
    assert s3.get_object(Bucket=LOCAL, Key="n")["Body"].read() == b"n"
    (folder / "outside").symlink_to(session.home / "secret")  # a link out is no object
    (session.home / "secret").write_text("secret")
    with pytest.raises(ClientError, match="NoSuchKey"):
        s3.get_object(Bucket=LOCAL, Key="outside")
    listed = [o["Key"] for o in s3.list_objects_v2(Bucket=LOCAL)["Contents"]]
    assert listed == ["a/b", "data/", "data/f", "dropped/by/job.txt", "n", "n/m", "x/y", "x\\y"]
    assert not any(Path(p).name.endswith(".tmp") for p in folder.parent.rglob("*"))
