#!/usr/bin/env python3
"""MinIO's own write latency, without the library (docs/benchmarks.md, "Where a slow hand-over
goes"): N times a GET, then a PUT If-Match of a 600-byte object, 0.2-2.2 s apart (as the
hand-over bench's releases come); then N PUTs back to back. Needs boto3 (moto's dependency) and
`.cache/stores.env` sourced (LEASE_TEST_S3_MINIO, the test credentials). Loopback only.

    python3 scripts/bench/minio-put-latency.py N
"""
import os
import random
import sys
import time

import boto3
from botocore.config import Config


def summary(what, lat):
    lat = sorted(lat)
    n = len(lat)
    p = lambda q: lat[min(n - 1, round((n - 1) * q))]
    print(f"{what}: PUT median {p(0.5):.1f} p90 {p(0.9):.1f} p99 {p(0.99):.1f} max {lat[-1]:.1f} ms; "
          f"over 50 ms: {sum(x > 50 for x in lat)}")


def main():
    n = int(sys.argv[1])
    url = os.environ["LEASE_TEST_S3_MINIO"]
    endpoint = url.split("endpoint=")[1].split("&")[0]
    assert endpoint.startswith("http://127.0.0.1:"), f"loopback only, not {endpoint}"
    s3 = boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1",
                      config=Config(s3={"addressing_style": "path"}, retries={"max_attempts": 1}))
    bucket, key = url[len("s3://"):].split("?")[0], f"put-latency-{os.getpid()}"
    body = b'{"x":"' + b"y" * 600 + b'"}'
    s3.put_object(Bucket=bucket, Key=key, Body=body)
    spaced = []
    for _ in range(n):
        etag = s3.get_object(Bucket=bucket, Key=key)["ETag"]
        t = time.monotonic()
        s3.put_object(Bucket=bucket, Key=key, Body=body, IfMatch=etag)
        spaced.append((time.monotonic() - t) * 1000)
        time.sleep(0.2 + random.random() * 2)
    summary(f"{n} GET + PUT If-Match, 0.2-2.2 s apart", spaced)
    back_to_back, etag = [], s3.head_object(Bucket=bucket, Key=key)["ETag"]
    for _ in range(n * 10):
        t = time.monotonic()
        etag = s3.put_object(Bucket=bucket, Key=key, Body=body, IfMatch=etag)["ETag"]
        back_to_back.append((time.monotonic() - t) * 1000)
    summary(f"{n * 10} PUTs If-Match back to back", back_to_back)
    s3.delete_object(Bucket=bucket, Key=key)


if __name__ == "__main__":
    main()
