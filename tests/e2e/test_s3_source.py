"""A COG stored in S3-compatible storage (MinIO, started by scripts/test) is
read through GDAL's /vsis3/ with the endpoint and credentials from the
config file."""
import boto3

from conftest import ROOT, assert_same_tile, serving


def test_a_cog_in_s3_renders_the_same_tile_as_the_local_file(s3, tmp_path_factory, monkeypatch):
    client = boto3.client("s3", endpoint_url=s3["endpoint"], aws_access_key_id=s3["key"],
                          aws_secret_access_key=s3["secret"], region_name="us-east-1")
    try:
        client.create_bucket(Bucket="tessera-sources")
    except client.exceptions.BucketAlreadyOwnedByYou:
        pass  # a second run against the same MinIO
    client.upload_file(str(ROOT / "data/shadedrelief-5400.tif"), "tessera-sources", "relief/shadedrelief.tif")

    host = s3["endpoint"].removeprefix("http://")
    config = tmp_path_factory.mktemp("s3") / "tessera.yaml"
    config.write_text(f"""
gdal:
  config_options:
    AWS_S3_ENDPOINT: {host}
    AWS_HTTPS: "NO"
    AWS_VIRTUAL_HOSTING: "FALSE"
    AWS_ACCESS_KEY_ID: ${{TEST_KEY}}
    AWS_SECRET_ACCESS_KEY: ${{TEST_SECRET}}
layers:
  - name: s3
    source: {{ path: /vsis3/tessera-sources/relief/shadedrelief.tif }}
    max_zoom: 8
  - name: local
    source: {{ path: "{ROOT}/data/shadedrelief-5400.tif" }}
    max_zoom: 8
""")
    monkeypatch.setenv("TEST_KEY", s3["key"])
    monkeypatch.setenv("TEST_SECRET", s3["secret"])
    with serving(tmp_path_factory, "--config", str(config)) as server:
        assert_same_tile(server, "/tiles/s3/WorldCRS84Quad/3/9/2.png", "/tiles/local/WorldCRS84Quad/3/9/2.png")
