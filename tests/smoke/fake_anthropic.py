#!/usr/bin/env python3
"""A scripted fake of the Anthropic Messages API for the agent smoke tests.

Serves HTTPS (a leaf for api.anthropic.com signed by the smoke test CA) and plays a model
that drives the agent through a fixed script of tool calls, one per turn, streamed as
server-sent events exactly as the real API streams them (message_start, content_block_*,
input_json_delta / text_delta, message_delta, message_stop, chunked transfer encoding).

  POST /v1/messages    with tools: the next step of the script, chosen by the number of
                       tool results already in the conversation; a call whose tool the
                       agent does not offer falls back to its shell tool. Without tools
                       (titles, topic checks, quota probes): a one-word text answer.
  POST /v1/messages/count_tokens: {"input_tokens": N}
  anything else:       200 {} (logged with a POST's body: the test sees every path the CLI
                       tried, and what an injected command sent)

Every request is one JSON line in LOG: method, path, the credential headers as received,
the tool names offered, the step played, what the assistant said earlier in the
conversation. The script is a JSON file:
  [{"tool": "Write", "input": {...}, "shell": "command for the fallback"}, ...,
   {"text": "final answer"}]

Usage: fake_anthropic.py CERT KEY SCRIPT.json LOG [PORT]
"""
import http.server
import json
import ssl
import sys
import threading

CERT, KEY, SCRIPT, LOG = sys.argv[1:5]
PORT = int(sys.argv[5]) if len(sys.argv) > 5 else 443
STEPS = json.load(open(SCRIPT))
lock = threading.Lock()
SHELL_TOOLS = ("Bash", "shell", "bash")


# The first line of the sandbox's brief, as the proxy writes it.
BRIEF = b"You are working inside an airlock sandbox"

def log(entry):
    with lock, open(LOG, "a") as f:
        f.write(json.dumps(entry) + "\n")


def said(messages):
    """The assistant's texts already in the conversation (each cut to 200 characters): a
    resumed session sends what was said before."""
    out = []
    for m in messages:
        if isinstance(m, dict) and m.get("role") == "assistant":
            c = m.get("content")
            blocks = [{"type": "text", "text": c}] if isinstance(c, str) else c if isinstance(c, list) else []
            out += [b["text"][:200] for b in blocks if isinstance(b, dict) and b.get("type") == "text" and b.get("text")]
    return out


def tool_results(messages):
    n = 0
    for m in messages:
        if m.get("role") == "user" and isinstance(m.get("content"), list):
            n += sum(1 for b in m["content"] if isinstance(b, dict) and b.get("type") == "tool_result")
    return n


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *a):
        pass

    def body(self):
        n = int(self.headers.get("content-length") or 0)
        raw = self.rfile.read(n) if n else b""
        self.raw = raw
        try:
            return json.loads(raw or b"{}")
        except ValueError:
            return {}

    def entry(self, **kw):
        e = {
            "method": self.command,
            "path": self.path,
            "x-api-key": self.headers.get("x-api-key"),
            "authorization": self.headers.get("authorization"),
            "user-agent": self.headers.get("user-agent"),
            # The sandbox's brief (the proxy's /v1/brief, which the agent's wrapper put
            # where the CLI reads its instructions) reached the model with the request.
            "brief": BRIEF in getattr(self, "raw", b""),
        }
        e.update(kw)
        log(e)

    def send_json(self, obj, status=200):
        data = json.dumps(obj).encode()
        self.send_response(status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):
        self.entry()
        self.send_json({})

    do_HEAD = do_GET

    def do_POST(self):
        req = self.body()
        path = self.path.split("?")[0]
        if path == "/v1/messages/count_tokens":
            self.entry()
            return self.send_json({"input_tokens": 42})
        if path != "/v1/messages":
            self.entry(body=self.raw[:2000].decode(errors="replace"))
            return self.send_json({})
        tools = [t.get("name") for t in req.get("tools") or [] if isinstance(t, dict)]
        if not tools:
            self.entry(tools=[], step=None)
            return self.reply(req, [{"type": "text", "text": "ok"}], "end_turn")
        step = min(tool_results(req.get("messages", [])), len(STEPS) - 1)
        s = STEPS[step]
        self.entry(tools=tools, step=step, said=said(req.get("messages", [])))
        if "text" in s:
            return self.reply(req, [{"type": "text", "text": s["text"]}], "end_turn")
        name, inp = s["tool"], s["input"]
        if name not in tools:
            shell = next((t for t in SHELL_TOOLS if t in tools), None)
            if shell is None:
                return self.reply(req, [{"type": "text", "text": f"no tool {name}"}], "end_turn")
            name, inp = shell, {"command": s["shell"], "description": "step"}
        block = {"type": "tool_use", "id": f"toolu_smoke{step:02d}", "name": name, "input": inp}
        self.reply(req, [{"type": "text", "text": f"Step {step + 1}."}, block], "tool_use")

    def reply(self, req, blocks, stop):
        model = req.get("model", "claude-smoke")
        msg = {"id": "msg_smoke", "type": "message", "role": "assistant", "model": model,
               "content": [], "stop_reason": None, "stop_sequence": None,
               "usage": {"input_tokens": 10, "output_tokens": 1}}
        if not req.get("stream"):
            msg.update(content=blocks, stop_reason=stop)
            return self.send_json(msg)
        events = [("message_start", {"type": "message_start", "message": msg})]
        for i, b in enumerate(blocks):
            if b["type"] == "text":
                start = {"type": "text", "text": ""}
                delta = {"type": "text_delta", "text": b["text"]}
            else:
                start = {"type": "tool_use", "id": b["id"], "name": b["name"], "input": {}}
                delta = {"type": "input_json_delta", "partial_json": json.dumps(b["input"])}
            events += [
                ("content_block_start", {"type": "content_block_start", "index": i, "content_block": start}),
                ("content_block_delta", {"type": "content_block_delta", "index": i, "delta": delta}),
                ("content_block_stop", {"type": "content_block_stop", "index": i}),
            ]
        events += [
            ("message_delta", {"type": "message_delta", "delta": {"stop_reason": stop, "stop_sequence": None},
                               "usage": {"output_tokens": 20}}),
            ("message_stop", {"type": "message_stop"}),
        ]
        self.send_response(200)
        self.send_header("content-type", "text/event-stream")
        self.send_header("cache-control", "no-cache")
        self.send_header("transfer-encoding", "chunked")
        self.end_headers()
        for ev, data in events:
            chunk = f"event: {ev}\ndata: {json.dumps(data)}\n\n".encode()
            self.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
            self.wfile.flush()
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()


class Server(http.server.ThreadingHTTPServer):
    address_family = __import__("socket").AF_INET6
    daemon_threads = True


srv = Server(("::", PORT), Handler)
ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
ctx.load_cert_chain(CERT, KEY)
srv.socket = ctx.wrap_socket(srv.socket, server_side=True)
print("ready", flush=True)
srv.serve_forever()
