import boto3


def test_moto_server_serves_s3_over_http(s3_bucket):
    s3 = boto3.client("s3")
    s3.put_object(Bucket=s3_bucket, Key="a/b.txt", Body=b"hi")
    assert s3.get_object(Bucket=s3_bucket, Key="a/b.txt")["Body"].read() == b"hi"
