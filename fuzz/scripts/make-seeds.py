#!/usr/bin/env python3
"""Writes the seed corpora in fuzz/corpus/<target>/ (small, realistic inputs).

Run from anywhere: python3 fuzz/scripts/make-seeds.py. The files are committed; this
script only documents (and can redo) how they were made. Needs nothing but the standard
library: the TLS ClientHellos are real ones from Python's ssl module (memory BIOs, no
network), the wire seeds are signed with the wire target's fixed key and clock.
"""

import hashlib
import hmac
import json
import os
import ssl
import struct

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "corpus")


def write(target, name, data):
    d = os.path.join(ROOT, target)
    os.makedirs(d, exist_ok=True)
    if isinstance(data, str):
        data = data.encode()
    with open(os.path.join(d, name), "wb") as f:
        f.write(data)


# --- sniff: real ClientHellos and HTTP heads ---------------------------------------
def client_hello(sni, alpn=None, tls13_only=False):
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    if tls13_only:
        ctx.minimum_version = ssl.TLSVersion.TLSv1_3
    if alpn:
        ctx.set_alpn_protocols(alpn)
    inc, out = ssl.MemoryBIO(), ssl.MemoryBIO()
    obj = ctx.wrap_bio(inc, out, server_hostname=sni)
    try:
        obj.do_handshake()
    except ssl.SSLWantReadError:
        pass
    return out.read()


write("sniff", "tls-api-github", client_hello("api.github.com", ["h2", "http/1.1"]))
write("sniff", "tls13-anthropic", client_hello("api.anthropic.com", tls13_only=True))
write("sniff", "tls-no-sni", client_hello(None))
hello = client_hello("split.example.com")
hs = hello[5:]
two = b"".join(b"\x16\x03\x01" + struct.pack(">H", len(p)) + p for p in (hs[:40], hs[40:]))
write("sniff", "tls-two-records", two)
write("sniff", "http-get", "GET /simple/ HTTP/1.1\r\nHost: pypi.org\r\nUser-Agent: pip/24\r\nAccept: */*\r\n\r\n")
write("sniff", "http-port", "POST /v1/messages HTTP/1.1\r\nhost: api.anthropic.com:443\r\ncontent-length: 2\r\n\r\n{}")
write("sniff", "http-two-hosts", "GET / HTTP/1.0\r\nHost: a.test\r\nHost: b.test\r\n\r\n")
write("sniff", "ssh", "SSH-2.0-OpenSSH_9.6\r\n")


# --- dns: queries as resolvers send them ------------------------------------------
def name(n):
    out = b""
    for label in n.rstrip(".").split("."):
        if label:
            out += bytes([len(label)]) + label.encode()
    return out + b"\x00"


def query(qid, n, qtype, edns=True, flags=0x0100):
    msg = struct.pack(">HHHHHH", qid, flags, 1, 0, 0, 1 if edns else 0)
    msg += name(n) + struct.pack(">HH", qtype, 1)
    if edns:
        msg += b"\x00" + struct.pack(">HHIH", 41, 1232, 0, 0)
    return msg


write("dns", "a-allowed", query(0x1234, "allowed.test", 1))
write("dns", "aaaa-wild", query(0x2345, "x.wild.test", 28))
write("dns", "https-allowed", query(0x3456, "Allowed.Test", 65, edns=False))
write("dns", "txt-tunnel", query(0x4567, "c2VjcmV0.evil.test", 16))
write("dns", "a-denied-wild", query(0x5678, "deny.wild.test", 1))
write("dns", "a-ip-literal", query(0x6789, "2130706433", 1))
write("dns", "update-opcode", query(0x789A, "allowed.test", 1, flags=0x2800))
write("dns", "response", query(0x89AB, "allowed.test", 1, flags=0x8180))

# --- host: authorities and names as clients write them ----------------------------
for i, h in enumerate([
    "api.github.com", "Example.COM.", "example.com:8443", "[2001:db8::1]:443",
    "0x7f.1", "::ffff:127.0.0.1", "bücher.de", "xn--bcher-kva.de", "ＥＸＡＭＰＬＥ.com",
    "a.b.example.com", "169.254.169.254:80", "user@host:443",
]):
    write("host", f"h{i:02}", h)

# --- l7_path: first byte = method index (0 GET, 1 POST, 2 PUT, 3 PATCH, 4 DELETE) ---
for i, (m, t) in enumerate([
    (2, "/repos/o/r/pulls/1/merge"),
    (1, "/repos/o/r/git/refs"),
    (0, "/repos/o/r/actions/secrets/X"),
    (2, "/repos/o/r/contents/src/main.rs"),
    (1, "/repos/o/r/pulls/1/reviews"),
    (0, "/repos/o/r/pulls?state=open"),
    (1, "/graphql"),
    (4, "/repos/o/r"),
    (2, "/repos/o/r/pulls/1/%6Derge.json;x=1"),
    (2, "/repos/x/../o/r/pulls%2F1%2Fmerge?_method=PUT"),
    (1, "/o/r.git/git-receive-pack"),
    (0, "/o/r/info/refs?service=git-upload-pack"),
]):
    write("l7_path", f"p{i:02}", bytes([m]) + t.encode())

# --- graphql: documents -----------------------------------------------------------
for i, d in enumerate([
    "query { viewer { login } }",
    'mutation { addComment(input: {subjectId: "X", body: "hi"}) { clientMutationId } }',
    "mutation M($id: ID!) { ok: mergePullRequest(input: {pullRequestId: $id}) { clientMutationId } }",
    "mutation { ...F } fragment F on Mutation { ... on Mutation { createRef(input: {}) { ref { id } } } }",
    'mutation { addPullRequestReview(input: {pullRequestId: "1", event: APPROVE}) { clientMutationId } }',
    '# comment mergePullRequest\nquery Q { repository(owner: "o", name: """mergePullRequest""") { id } }',
    "subscription S @live { x(a: [1, 2.5e3, -3], b: {c: $v}) { ...on T { y } } }",
]):
    write("graphql", f"d{i:02}", d)
write("graphql", "batch-body", json.dumps([{"query": "query { viewer { login } }", "variables": {}}]))

# --- json: bodies ---------------------------------------------------------------
for i, j in enumerate([
    '{"query": "mutation { x }", "variables": {"a": [1, 2.5, -3e-2, true, null]}}',
    '{"event": "COMMENT", "body": "looks good \\u00e9\\ud83d\\ude00"}',
    '{"event":"A","\\u0065vent":"B"}',
    '[{"a":1},{"a":2}]',
    '{"message":"m","content":"aGVsbG8=","branch":"sandbox/demo/x","sha":"abc"}',
    "12345678901234567890123",
]):
    write("json", f"j{i:02}", j)

# --- wire: what the shim sends (Auth frame, Body frame), signed with the fixed key ----
KEY = bytes(range(32))
NOW = 1_700_000_000


def frame(kind, payload):
    return bytes([kind]) + struct.pack(">I", len(payload)) + payload


def signed(body, ts=NOW, nonce=bytes(range(16)), mac_override=None):
    n = nonce.hex()
    text = f"AIRLOCK-HMAC-SHA256-V1\nRUN\n/v1/git\n{hashlib.sha256(body).hexdigest()}\n{ts}\n{n}"
    mac = mac_override or hmac.new(KEY, text.encode(), hashlib.sha256).hexdigest()
    auth = json.dumps({"version": 1, "method": "RUN", "path": "/v1/git", "timestamp": ts,
                       "nonce": n, "mac": mac}, separators=(",", ":")).encode()
    return frame(1, auth) + frame(2, body)


inv = lambda argv, stdin=None: json.dumps(
    {"version": 1, "argv": argv, "cwd": "", "env": {"GIT_AUTHOR_NAME": "a"},
     **({"stdin": stdin.hex()} if stdin else {}), "term_width": 80, "stdout_tty": False},
    separators=(",", ":")).encode()
write("wire", "status", signed(inv(["status", "--short"])))
write("wire", "commit-stdin", signed(inv(["commit", "-F", "-"], b"message\n"), nonce=b"\x01" * 16))
write("wire", "push", signed(inv(["push", "origin", "HEAD:sandbox/demo/x"]), ts=NOW - 29))
write("wire", "stale", signed(inv(["log"]), ts=NOW - 31))
write("wire", "bad-mac", signed(inv(["log"]), mac_override="00" * 32))
write("wire", "exit-denied", frame(5, b'{"code":130}') + frame(6, b'{"reason":"x","message":"y"}'))


# --- gate: request heads as clients send them on the proxy's ports -------------------
# Byte 0: max_head (bits 0-1: 24, 96, 512, 64 KiB) and the answers to the first upgrade
# requests (bits 2-7, 1 = upgraded); byte 1: hyper's read size (bits 4-7) and how many
# read sizes follow (bits 0-3); the read sizes (each + 1); then the client's bytes.
def gate(name, stream, max_head=3, upgrades=0, hyper=14, sizes=b""):
    head = bytes([max_head | (upgrades << 2), (hyper << 4) | len(sizes)]) + sizes
    write("gate", name, head + stream.encode())


gate("get-absolute", "GET http://pypi.org/simple/ HTTP/1.1\r\nHost: pypi.org\r\nUser-Agent: pip/24\r\nAccept: */*\r\n\r\n")
gate("connect", "CONNECT api.github.com:443 HTTP/1.1\r\nHost: api.github.com:443\r\nProxy-Connection: keep-alive\r\n\r\n\x16\x03\x01\x00\x05hello", upgrades=1)
gate("connect-denied-then-get", "CONNECT a.test:443 HTTP/1.1\r\nHost: a.test:443\r\n\r\nGET / HTTP/1.1\r\nHost: b.test\r\n\r\n", upgrades=0)
gate("chunked-post", "POST /v1/messages HTTP/1.1\r\nHost: api.anthropic.com\r\nTransfer-Encoding: chunked\r\nContent-Type: application/json\r\n\r\n2\r\n{}\r\n3;ext=1\r\nabc\r\n0\r\nX-Trailer: t\r\n\r\nGET /next HTTP/1.1\r\nHost: a\r\n\r\n", sizes=b"\x06\x00\x1f")
gate("pipelined", "GET /a HTTP/1.1\r\nHost: a.test\r\n\r\nPOST /b HTTP/1.1\r\nHost: a.test\r\nContent-Length: 5\r\n\r\nhelloHEAD /c HTTP/1.0\r\nHost: a.test\r\n\r\n", hyper=5, sizes=b"\x02\x10")
gate("upgrade-websocket", "GET /socket HTTP/1.1\r\nHost: a.test\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n\x81\x05hello", upgrades=1)
gate("cl-te-smuggle", "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\nGET /admin HTTP/1.1\r\n\r\n")
gate("obs-fold", "GET / HTTP/1.1\r\nHost: a\r\nX-A: 1\r\n  folded\r\n\r\n")
gate("bare-lf", "GET / HTTP/1.1\nHost: a\n\n")
gate("too-large", "GET / HTTP/1.1\r\nHost: a.test\r\nCookie: " + "c" * 200 + "\r\n\r\n", max_head=1)
gate("base-url", "GET /https/api.github.com/repos/o/r HTTP/1.1\r\nHost: 127.0.0.1:3128\r\nAuthorization: Bearer x\r\n\r\n", max_head=2)
