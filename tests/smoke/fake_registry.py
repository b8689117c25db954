#!/usr/bin/env python3
"""Fake package registries for the package-manager smoke test, served under their real
names (the host header picks the registry), HTTPS with a leaf of the smoke test CA:

  pypi.org                  /simple/smokepkg/  a PEP 503 index page linking the wheel
  files.pythonhosted.org    /packages/smokepkg-1.0.0-py3-none-any.whl
  registry.npmjs.org        /smokepkg  the packument;  /smokepkg/-/smokepkg-1.0.0.tgz

The wheel and the tarball are made here at start; each request is one JSON line in LOG.
Usage: fake_registry.py CERT KEY UNUSED LOG [PORT]
"""
import base64
import hashlib
import http.server
import io
import json
import socket
import ssl
import sys
import tarfile
import threading
import zipfile

CERT, KEY, _, LOG = sys.argv[1:5]
PORT = int(sys.argv[5]) if len(sys.argv) > 5 else 443
lock = threading.Lock()
WHEEL_NAME = "smokepkg-1.0.0-py3-none-any.whl"


def wheel():
    files = {
        "smokepkg/__init__.py": b'GREETING = "hello from the fake PyPI"\n',
        "smokepkg-1.0.0.dist-info/METADATA": b"Metadata-Version: 2.1\nName: smokepkg\nVersion: 1.0.0\n",
        "smokepkg-1.0.0.dist-info/WHEEL": b"Wheel-Version: 1.0\nGenerator: smoke\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    record = []
    for name, data in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        record.append(f"{name},sha256={digest},{len(data)}")
    record.append("smokepkg-1.0.0.dist-info/RECORD,,")
    files["smokepkg-1.0.0.dist-info/RECORD"] = ("\n".join(record) + "\n").encode()
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        for name, data in files.items():
            z.writestr(name, data)
    return buf.getvalue()


def tarball():
    files = {
        "package/package.json": json.dumps({"name": "smokepkg", "version": "1.0.0", "main": "index.js"}).encode(),
        "package/index.js": b'module.exports = "hello from the fake npm registry";\n',
    }
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as t:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            info.mode = 0o644
            t.addfile(info, io.BytesIO(data))
    return buf.getvalue()


WHEEL = wheel()
TGZ = tarball()
WHEEL_SHA = hashlib.sha256(WHEEL).hexdigest()
PACKUMENT = {
    "name": "smokepkg",
    "dist-tags": {"latest": "1.0.0"},
    "versions": {"1.0.0": {
        "name": "smokepkg", "version": "1.0.0", "main": "index.js",
        "dist": {
            "tarball": "https://registry.npmjs.org/smokepkg/-/smokepkg-1.0.0.tgz",
            "shasum": hashlib.sha1(TGZ).hexdigest(),
            "integrity": "sha512-" + base64.b64encode(hashlib.sha512(TGZ).digest()).decode(),
        },
    }},
}


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *a):
        pass

    def send(self, status, ctype, data):
        self.send_response(status)
        self.send_header("content-type", ctype)
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)

    def do_GET(self):
        host = (self.headers.get("host") or "").split(":")[0]
        path = self.path.split("?")[0]
        with lock, open(LOG, "a") as f:
            f.write(json.dumps({"method": self.command, "host": host, "path": path,
                                "user-agent": self.headers.get("user-agent")}) + "\n")
        if host == "pypi.org" and path.rstrip("/") == "/simple/smokepkg":
            url = f"https://files.pythonhosted.org/packages/{WHEEL_NAME}#sha256={WHEEL_SHA}"
            page = f'<!DOCTYPE html><html><body><a href="{url}">{WHEEL_NAME}</a></body></html>'
            return self.send(200, "text/html", page.encode())
        if host == "files.pythonhosted.org" and path == f"/packages/{WHEEL_NAME}":
            return self.send(200, "application/octet-stream", WHEEL)
        if host == "registry.npmjs.org" and path == "/smokepkg":
            return self.send(200, "application/json", json.dumps(PACKUMENT).encode())
        if host == "registry.npmjs.org" and path == "/smokepkg/-/smokepkg-1.0.0.tgz":
            return self.send(200, "application/octet-stream", TGZ)
        self.send(404, "text/plain", b"not found\n")

    do_HEAD = do_GET


class Server(http.server.ThreadingHTTPServer):
    address_family = socket.AF_INET6
    daemon_threads = True


srv = Server(("::", PORT), Handler)
ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
ctx.load_cert_chain(CERT, KEY)
srv.socket = ctx.wrap_socket(srv.socket, server_side=True)
print("ready", flush=True)
srv.serve_forever()
