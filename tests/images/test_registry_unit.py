"""pax.images.registry without a Docker engine: Docker-config credentials, the CA bundle chosen,
the digest checked against the manifest bytes, and the Basic and Bearer flows against a small
in-process registry (plain HTTP; TLS is the container tests' part)."""

import base64
import hashlib
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from pax.images import registry
from pax.images.engine import ImageError

HOST = "127.0.0.1:5999"


def _config(tmp_path, monkeypatch, data) -> Path:
    monkeypatch.setenv("DOCKER_CONFIG", str(tmp_path))
    path = tmp_path / "config.json"
    path.write_text(data if isinstance(data, str) else json.dumps(data))
    return path


def _auth(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


def test_docker_config_path_honours_DOCKER_CONFIG(tmp_path, monkeypatch):
    monkeypatch.setenv("DOCKER_CONFIG", str(tmp_path / "dc"))
    assert registry.docker_config_path() == tmp_path / "dc" / "config.json"
    monkeypatch.delenv("DOCKER_CONFIG")
    monkeypatch.setenv("HOME", str(tmp_path))
    assert registry.docker_config_path() == tmp_path / ".docker" / "config.json"


def test_credentials_missing_file_or_entry_is_none(tmp_path, monkeypatch):
    monkeypatch.setenv("DOCKER_CONFIG", str(tmp_path / "absent"))
    assert registry.credentials(HOST) is None
    _config(tmp_path, monkeypatch, {"auths": {"127.0.0.1:1": {"auth": _auth("a:b")}}})
    assert registry.credentials(HOST) is None
    _config(tmp_path, monkeypatch, {})
    assert registry.credentials(HOST) is None


def test_credentials_read_the_entry_in_bare_or_url_form(tmp_path, monkeypatch):
    _config(tmp_path, monkeypatch, {"auths": {HOST: {"auth": _auth("pax:s3:cr3t")}}})
    assert registry.credentials(HOST) == ("pax", "s3:cr3t")
    _config(tmp_path, monkeypatch, {"auths": {f"https://{HOST}/v2/": {"auth": _auth("u:p")}}})
    assert registry.credentials(HOST) == ("u", "p")


@pytest.mark.parametrize("auth", ["%%%not-base64", _auth("no-colon"), _auth(":nouser")])
def test_credentials_malformed_auth_names_the_file_and_entry(tmp_path, monkeypatch, auth):
    path = _config(tmp_path, monkeypatch, {"auths": {HOST: {"auth": auth}}})
    with pytest.raises(ImageError, match=rf"{path}: auths\[{HOST}\]\.auth is not base64"):
        registry.credentials(HOST)


def test_credentials_unreadable_config(tmp_path, monkeypatch):
    path = _config(tmp_path, monkeypatch, "{not json")
    with pytest.raises(ImageError, match=f"Docker config {path} is not readable JSON"):
        registry.credentials(HOST)


def test_credentials_from_a_credential_helper(tmp_path, monkeypatch):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    helper = bin_dir / "docker-credential-fake"
    helper.write_text(
        "#!/bin/sh\nread server\n"
        f'[ "$server" = "{HOST}" ] || exit 1\n'
        'echo \'{"ServerURL": "x", "Username": "pax", "Secret": "from-helper"}\'\n'
    )
    helper.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:/usr/bin:/bin")
    _config(tmp_path, monkeypatch, {"auths": {HOST: {}}, "credsStore": "fake"})
    assert registry.credentials(HOST) == ("pax", "from-helper")
    assert registry.credentials("127.0.0.1:1") is None  # the helper has nothing for it


def test_ca_bundle_choice(tmp_path):
    certs_d = tmp_path / "certs.d"
    assert registry.ca_bundle(HOST, certs_d=certs_d) is None  # the system's trust store
    (certs_d / HOST).mkdir(parents=True)
    (certs_d / HOST / "ca.crt").write_text("engine CA")
    assert registry.ca_bundle(HOST, certs_d=certs_d) == certs_d / HOST / "ca.crt"
    given = tmp_path / "mine.pem"
    given.write_text("given CA")
    assert registry.ca_bundle(HOST, given, certs_d=certs_d) == given
    with pytest.raises(ImageError, match="--ca-bundle .*absent.pem: no such file") as e:
        registry.ca_bundle(HOST, tmp_path / "absent.pem", certs_d=certs_d)
    assert e.value.usage


def test_digest_is_checked_against_the_bytes():
    body = b'{"schemaVersion": 2}'
    digest = "sha256:" + hashlib.sha256(body).hexdigest()
    assert registry.check_digest(body, digest) == digest
    with pytest.raises(ImageError, match="served bytes whose sha256 is"):
        registry.check_digest(body + b" ", digest)
    for bad in (None, "", "sha256:abc", "md5:" + "0" * 32):
        with pytest.raises(ImageError, match="no usable Docker-Content-Digest"):
            registry.check_digest(body, bad)


MANIFEST = b'{"schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json"}'
MEDIA = "application/vnd.oci.image.manifest.v1+json"


class _Fake(BaseHTTPRequestHandler):
    """A registry wanting Basic credentials pax:good, or Bearer tokens from /token; `lie` makes
    it serve other bytes than the digest it names."""

    scheme = "basic"
    lie = False
    tags: dict = {}

    def log_message(self, *args):
        pass

    def _send(self, code, body=b"", headers=()):
        self.send_response(code)
        for k, v in headers:
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _authorized(self) -> bool:
        got = self.headers.get("Authorization", "")
        if self.scheme == "basic":
            if got == "Basic " + _auth("pax:good"):
                return True
            self._send(401, headers=[("WWW-Authenticate", 'Basic realm="fake"')])
            return False
        if got == "Bearer tok-push":
            return True
        realm = f"http://{self.headers['Host']}/token"
        challenge = f'Bearer realm="{realm}",service="fake",scope="repository:pax:pull,push"'
        self._send(401, headers=[("WWW-Authenticate", challenge)])
        return False

    def do_GET(self):
        if self.path.startswith("/token"):
            ok = self.headers.get("Authorization") == "Basic " + _auth("pax:good")
            ok = ok and "scope=repository%3Apax%3Apull%2Cpush" in self.path
            return self._send(200, b'{"token": "tok-push"}') if ok else self._send(401)
        if not self._authorized():
            return
        if self.path == "/v2/":
            return self._send(200, b"{}")
        ref = self.path.rsplit("/", 1)[1]
        body = self.tags.get(ref)
        if body is None:
            return self._send(404)
        digest = "sha256:" + hashlib.sha256(body).hexdigest()
        served = body + b"\n" if self.lie else body
        self._send(200, served, [("Docker-Content-Digest", digest), ("Content-Type", MEDIA)])

    def do_PUT(self):
        if not self._authorized():
            return
        body = self.rfile.read(int(self.headers["Content-Length"]))
        self.tags[self.path.rsplit("/", 1)[1]] = body
        digest = "sha256:" + hashlib.sha256(body).hexdigest()
        self._send(201, headers=[("Docker-Content-Digest", digest)])

    def do_DELETE(self):
        if self._authorized():
            self._send(405)  # as distribution 2.x answers for a tag


@pytest.fixture
def fake(monkeypatch):
    handler = type("Handler", (_Fake,), {"tags": {"cand": MANIFEST}})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    yield handler, f"127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def _client(address, creds=("pax", "good")):
    return registry.Registry(address, creds=creds, config=Path("/cfg.json"), scheme="http")


@pytest.mark.parametrize("scheme", ["basic", "bearer"])
def test_auth_flows_read_and_tag_a_manifest(fake, scheme):
    handler, address = fake
    handler.scheme = scheme
    reg = _client(address)
    reg.check_access()
    digest, body, media = reg.manifest("pax", "cand")
    assert (body, media) == (MANIFEST, MEDIA)
    assert reg.put_manifest("pax", "latest-tpu", body, media) == digest
    assert reg.digest("pax", "latest-tpu") == digest
    assert reg.digest("pax", "absent") is None
    assert reg.delete_tag("pax", "cand") is False


@pytest.mark.parametrize("scheme", ["basic", "bearer"])
def test_wrong_or_missing_credentials_are_one_line(fake, scheme):
    handler, address = fake
    handler.scheme = scheme
    with pytest.raises(ImageError, match=f"registry {address} refused the credentials of pax"):
        _client(address, ("pax", "bad")).check_access()
    with pytest.raises(ImageError, match="wants credentials and /cfg.json has none"):
        _client(address, None).check_access()


def test_served_bytes_that_do_not_hash_to_the_digest_are_refused(fake):
    handler, address = fake
    handler.lie = True
    with pytest.raises(ImageError, match="served bytes whose sha256 is"):
        _client(address).manifest("pax", "cand")


def test_unreachable_registry_is_one_line():
    with pytest.raises(ImageError, match="does not answer at https://127.0.0.1:9/v2/"):
        registry.Registry("127.0.0.1:9").check_access()


def test_pulled_labels_must_name_the_release_lock_and_pushed_image(tmp_path, monkeypatch):
    from pax.images import publish, target
    from pax.releases import catalog

    lock = tmp_path / "tpu.txt"
    lock.write_text("absl-py==2.1.0\n")
    sha = hashlib.sha256(lock.read_bytes()).hexdigest()
    release = target.Target(catalog.Release("1.4.0", tmp_path, {}), "tpu", lock, sha)
    good = {
        "org.opencontainers.image.version": "1.4.0",
        "org.opencontainers.image.revision": "abc123",
        "io.pax.platform": "tpu",
        "io.pax.lock.sha256": sha,
    }
    images = {"pushed": good, "pulled": dict(good)}
    monkeypatch.setattr(publish, "_labels", lambda image: images[image])
    assert publish.check_labels("pulled", "pushed", release)["io.pax.lock.sha256"] == sha
    images["pushed"] = images["pulled"] = {
        **good,
        "org.opencontainers.image.version": "1.4.0-dev.1a2b3c4",
    }
    publish.check_labels("pulled", "pushed", release)
    for key, value in [
        ("io.pax.lock.sha256", "0" * 64),
        ("org.opencontainers.image.revision", "other"),
        ("org.opencontainers.image.version", "1.5.0"),
        ("io.pax.platform", "gpu"),
    ]:
        images["pushed"], images["pulled"] = good, {**good, key: value}
        with pytest.raises(ImageError, match=f"labels of pulled: {key}='{value}'"):
            publish.check_labels("pulled", "pushed", release)
    images["pushed"] = images["pulled"] = {**good, "org.opencontainers.image.revision": ""}
    with pytest.raises(ImageError, match="no revision label"):
        publish.check_labels("pulled", "pushed", release)
