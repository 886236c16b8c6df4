"""A registry's HTTP API (the distribution spec) as publish needs it: HTTPS with a chosen CA
bundle, the credentials `docker login` stored in the Docker config, Basic or Bearer
authentication, and manifests read, checked against their digest and put under tags."""

from __future__ import annotations

import base64
import hashlib
import json
import os
import re
import ssl
import subprocess
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Optional

from pax.images.engine import ImageError

CERTS_D = Path("/etc/docker/certs.d")
MANIFEST_TYPES = (
    "application/vnd.docker.distribution.manifest.v2+json",
    "application/vnd.oci.image.manifest.v1+json",
    "application/vnd.docker.distribution.manifest.list.v2+json",
    "application/vnd.oci.image.index.v1+json",
)
DIGEST = re.compile(r"sha256:[0-9a-f]{64}")


def docker_config_path() -> Path:
    """Where `docker login` keeps credentials: $DOCKER_CONFIG/config.json, else ~/.docker."""
    base = os.environ.get("DOCKER_CONFIG") or str(Path.home() / ".docker")
    return Path(base) / "config.json"


def _host(key: str) -> str:
    """An `auths` key as HOST:PORT (docker has written both bare and URL forms)."""
    if "://" in key:
        key = urllib.parse.urlsplit(key).netloc
    return key.split("/", 1)[0]


def credentials(registry: str, config: Optional[Path] = None) -> Optional[tuple[str, str]]:
    """(user, password) for HOST:PORT from the Docker config, or None when it names none."""
    config = config or docker_config_path()
    if not config.is_file():
        return None
    try:
        data = json.loads(config.read_text())
    except (OSError, ValueError) as e:
        raise ImageError(f"Docker config {config} is not readable JSON: {e}") from None
    entry = next((v for k, v in (data.get("auths") or {}).items() if _host(k) == registry), None)
    if entry and entry.get("auth"):
        try:
            user, sep, password = (
                base64.b64decode(entry["auth"], validate=True).decode().partition(":")
            )
        except (ValueError, UnicodeDecodeError):
            sep = ""
        if not sep or not user:
            raise ImageError(
                f"Docker config {config}: auths[{registry}].auth is not base64 of USER:PASSWORD; "
                f"run docker login {registry} again"
            )
        return user, password
    helper = (data.get("credHelpers") or {}).get(registry) or data.get("credsStore")
    return _from_helper(helper, registry, config) if helper else None


def _from_helper(helper: str, registry: str, config: Path) -> Optional[tuple[str, str]]:
    """The credential helper's answer (docker-credential-HELPER get), as docker itself asks."""
    try:
        r = subprocess.run(
            [f"docker-credential-{helper}", "get"],
            input=registry,
            capture_output=True,
            text=True,
            timeout=30,
        )
    except (OSError, subprocess.TimeoutExpired) as e:
        raise ImageError(f"Docker config {config} names credential helper {helper}: {e}") from None
    if r.returncode != 0:
        return None  # the helper has nothing for this registry
    try:
        answer = json.loads(r.stdout)
        return answer["Username"], answer["Secret"]
    except (ValueError, KeyError, TypeError):
        raise ImageError(f"credential helper {helper} answered no Username/Secret") from None


def ca_bundle(registry: str, given: Optional[Path] = None, certs_d: Path = CERTS_D):
    """The CA bundle to trust: --ca-bundle, else the Docker engine's certs.d/HOST:PORT/ca.crt,
    else None (the system's trust store)."""
    if given is not None:
        if not Path(given).is_file():
            raise ImageError(f"--ca-bundle {given}: no such file", usage=True)
        return Path(given)
    engine_ca = certs_d / registry / "ca.crt"
    return engine_ca if engine_ca.is_file() else None


def check_digest(manifest: bytes, digest: Optional[str]) -> str:
    """The registry's Docker-Content-Digest, once it is the sha256 of the bytes it served."""
    if not digest or not DIGEST.fullmatch(digest):
        raise ImageError(f"registry answered no usable Docker-Content-Digest ({digest!r})")
    actual = "sha256:" + hashlib.sha256(manifest).hexdigest()
    if actual != digest:
        raise ImageError(
            f"registry says manifest {digest} but served bytes whose sha256 is {actual}"
        )
    return digest


def _challenge(header: str) -> tuple[str, dict]:
    scheme, _, rest = header.strip().partition(" ")
    return scheme.lower(), dict(re.findall(r'(\w+)="([^"]*)"', rest))


class Registry:
    """One registry at HOST:PORT; `scheme` is https except in tests of the auth flows."""

    def __init__(
        self,
        address: str,
        ca: Optional[Path] = None,
        creds: Optional[tuple[str, str]] = None,
        config: Optional[Path] = None,
        scheme: str = "https",
    ):
        self.address, self.ca, self.creds = address, ca, creds
        self.config = config or docker_config_path()
        self.base = f"{scheme}://{address}"
        # Like the Docker engine with certs.d: the given CAs in addition to the system's.
        self._ssl = ssl.create_default_context()
        if ca:
            self._ssl.load_verify_locations(cafile=str(ca))
        self._auth: Optional[str] = None  # the Authorization header that last worked

    def _open(self, req: urllib.request.Request):
        return urllib.request.urlopen(req, timeout=60, context=self._ssl)

    def request(self, method: str, path: str, body: Optional[bytes] = None, headers=None):
        """(status, headers, body); answers the registry's 401 challenge once."""
        for attempt in (0, 1):
            req = urllib.request.Request(
                self.base + path, data=body, method=method, headers=dict(headers or {})
            )
            if self._auth:
                req.add_header("Authorization", self._auth)
            try:
                with self._open(req) as r:
                    return r.status, r.headers, r.read()
            except urllib.error.HTTPError as e:
                if e.code != 401 or attempt:
                    return e.code, e.headers, e.read()
                self._auth = self._authorize(e.headers.get("WWW-Authenticate", ""))
            except (urllib.error.URLError, OSError) as e:
                raise ImageError(self._unreachable(getattr(e, "reason", e))) from None
        raise AssertionError("unreachable")

    def _unreachable(self, reason) -> str:
        if isinstance(reason, ssl.SSLCertVerificationError):
            trusted = f"{self.ca} and the system's CAs" if self.ca else "the system's CAs"
            return (
                f"registry {self.address}: its TLS certificate is not trusted by {trusted} "
                f"({reason.verify_message}); pass --ca-bundle FILE"
            )
        if isinstance(reason, ssl.SSLError):
            return (
                f"registry {self.address} does not speak TLS at {self.base}/v2/ ({reason.reason})"
            )
        return (
            f"registry {self.address} does not answer at {self.base}/v2/ ({reason}); start one "
            f"with ci/registry.sh start"
        )

    def _authorize(self, header: str) -> str:
        if self.creds is None:
            raise ImageError(
                f"registry {self.address} wants credentials and {self.config} has none for "
                f"it; run docker login {self.address}"
            )
        basic = "Basic " + base64.b64encode(":".join(self.creds).encode()).decode()
        scheme, params = _challenge(header)
        if scheme == "basic":
            return basic
        if scheme != "bearer" or "realm" not in params:
            raise ImageError(f"registry {self.address} asks for {header!r}, not Basic or Bearer")
        query = {k: params[k] for k in ("service", "scope") if k in params}
        url = params["realm"] + ("?" + urllib.parse.urlencode(query) if query else "")
        req = urllib.request.Request(url, headers={"Authorization": basic})
        try:
            with self._open(req) as r:
                answer = json.loads(r.read())
        except urllib.error.HTTPError as e:
            raise ImageError(self._refused(f"its token service {params['realm']} said {e.code}"))
        except (urllib.error.URLError, OSError, ValueError) as e:
            raise ImageError(f"token service {params['realm']} failed: {e}") from None
        token = answer.get("token") or answer.get("access_token")
        if not token:
            raise ImageError(f"token service {params['realm']} answered no token")
        return f"Bearer {token}"

    def _refused(self, detail: str) -> str:
        return (
            f"registry {self.address} refused the credentials of {self.creds[0]} from "
            f"{self.config} ({detail}); run docker login {self.address}"
        )

    def check_access(self) -> None:
        """GET /v2/ as this client: TLS trusted, credentials (if asked for) accepted."""
        status, _, _ = self.request("GET", "/v2/")
        if status == 401:
            raise ImageError(self._refused("401 Unauthorized"))
        if status != 200:
            raise ImageError(f"registry {self.address} answered {status} at {self.base}/v2/")

    def manifest(self, repo: str, ref: str) -> Optional[tuple[str, bytes, str]]:
        """(digest, bytes, media type) of repo:ref, the digest checked against the bytes; None
        when the registry has no such manifest."""
        status, headers, body = self.request(
            "GET", f"/v2/{repo}/manifests/{ref}", headers={"Accept": ", ".join(MANIFEST_TYPES)}
        )
        if status == 404:
            return None
        if status != 200:
            raise ImageError(f"registry {self.address}: GET manifest {repo}:{ref} -> {status}")
        digest = check_digest(body, headers.get("Docker-Content-Digest"))
        if DIGEST.fullmatch(ref) and ref != digest:
            raise ImageError(f"registry {self.address} served {digest} for {repo}@{ref}")
        media = headers.get("Content-Type", "").split(";")[0].strip()
        return digest, body, media

    def digest(self, repo: str, tag: str) -> Optional[str]:
        found = self.manifest(repo, tag)
        return found[0] if found else None

    def put_manifest(self, repo: str, tag: str, body: bytes, media: str) -> str:
        """Put these exact manifest bytes under tag; the digest the registry stored them at."""
        status, headers, answer = self.request(
            "PUT", f"/v2/{repo}/manifests/{tag}", body=body, headers={"Content-Type": media}
        )
        if status not in (200, 201):
            detail = answer.decode(errors="replace").strip()[:200]
            raise ImageError(
                f"registry {self.address} refused to tag {repo}:{tag} ({status}: {detail})"
            )
        want = "sha256:" + hashlib.sha256(body).hexdigest()
        got = headers.get("Docker-Content-Digest")
        if got and got != want:
            raise ImageError(f"registry {self.address} stored {repo}:{tag} as {got}, not {want}")
        return want

    def delete_tag(self, repo: str, tag: str) -> bool:
        """Remove one tag where the registry can (deleting by tag; deleting by digest would take
        every tag of that manifest with it, so it is never tried). False when it cannot."""
        status, _, _ = self.request("DELETE", f"/v2/{repo}/manifests/{tag}")
        return status in (200, 202)

    def put_blob(self, repo: str, data: bytes) -> str:
        """Upload one blob (a monolithic upload: POST, then PUT with its digest); its digest."""
        digest = "sha256:" + hashlib.sha256(data).hexdigest()
        status, _, _ = self.request("HEAD", f"/v2/{repo}/blobs/{digest}")
        if status == 200:
            return digest
        status, headers, answer = self.request("POST", f"/v2/{repo}/blobs/uploads/", body=b"")
        location = headers.get("Location", "")
        if status != 202 or not location:
            detail = answer.decode(errors="replace").strip()[:200]
            raise ImageError(
                f"registry {self.address} refused an upload to {repo} ({status}: {detail})"
            )
        url = urllib.parse.urlsplit(urllib.parse.urljoin(self.base + "/", location))
        query = "&".join(filter(None, [url.query, urllib.parse.urlencode({"digest": digest})]))
        status, _, answer = self.request(
            "PUT",
            f"{url.path}?{query}",
            body=data,
            headers={"Content-Type": "application/octet-stream"},
        )
        if status != 201:
            detail = answer.decode(errors="replace").strip()[:200]
            raise ImageError(f"registry {self.address} refused blob {digest} ({status}: {detail})")
        return digest

    def blob(self, repo: str, digest: str) -> bytes:
        """A blob's bytes, checked against its digest."""
        status, _, body = self.request("GET", f"/v2/{repo}/blobs/{digest}")
        if status != 200:
            raise ImageError(f"registry {self.address}: GET blob {repo}@{digest} -> {status}")
        if "sha256:" + hashlib.sha256(body).hexdigest() != digest:
            raise ImageError(f"registry {self.address} served blob {digest} with other bytes")
        return body
