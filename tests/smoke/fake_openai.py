#!/usr/bin/env python3
"""A scripted fake of the OpenAI API for the agent smoke tests (Codex, Aider).

Serves HTTPS (a leaf for api.openai.com signed by the smoke test CA; plain HTTP with
CERT = "-") and plays a model that drives the agent through a fixed script, one step per
turn, streamed as server-sent events the way the real API streams them.

  POST /v1/responses          (Codex) the Responses API: with tools, the next step,
                              chosen by the number of tool outputs already in the input;
                              a step is a call of the agent's shell tool (whatever form it
                              offers: shell, shell_command, exec_command, local_shell) or
                              of apply_patch (function or custom/freeform), or a final text.
                              Streamed: response.created, response.output_item.added/done,
                              response.output_text.delta, response.completed.
  POST /v1/chat/completions   (Aider, through litellm) the Chat Completions API: the next
                              text step, chosen by the number of assistant messages already
                              in the conversation; streamed as chat.completion.chunk events
                              and [DONE] when the request asks for a stream.
  GET  /v1/models             a list with the model asked for.
  anything else:              200 {} (logged with a POST's body: the test sees every path
                              the CLI tried, and what an injected command sent)

Every request is one JSON line in LOG: method, path, the authorization header as
received, the tools offered, the step played, what the assistant said earlier in the
conversation ("said"). The script is a JSON file, a list of steps:
  {"shell": "command"}            run a shell command (Responses)
  {"patch": "*** Begin Patch..."} apply_patch, or {"shell": ...} as "fallback" when the
                                  agent offers no apply_patch tool
  {"text": "answer"}              a final answer (Responses) or the assistant's reply
                                  (Chat Completions: the edit blocks Aider applies)
  {"commit": "message"}           (Chat Completions) the answer when Aider asks for a
                                  commit message

Usage: fake_openai.py CERT KEY SCRIPT.json LOG [PORT]
"""
import http.server
import json
import socket
import ssl
import sys
import threading
import time

CERT, KEY, SCRIPT, LOG = sys.argv[1:5]
PORT = int(sys.argv[5]) if len(sys.argv) > 5 else 443
STEPS = json.load(open(SCRIPT))
DUMP = bool(__import__("os").environ.get("FAKE_OPENAI_DUMP"))  # whole request bodies in LOG
lock = threading.Lock()
OUTPUTS = ("function_call_output", "custom_tool_call_output", "local_shell_call_output")


# The first line of the sandbox's brief, as the proxy writes it.
BRIEF = b"You are working inside an airlock sandbox"

def log(entry):
    with lock, open(LOG, "a") as f:
        f.write(json.dumps(entry) + "\n")


def tool_name(t):
    if not isinstance(t, dict):
        return None
    return t.get("name") or (t.get("function") or {}).get("name") or t.get("type")


def shell_call(tools, command, n):
    """The agent's shell tool, called with COMMAND: (item type, name, arguments)."""
    by = {tool_name(t): t for t in tools}
    if "exec_command" in by:
        return "function_call", "exec_command", {"cmd": command, "yield_time_ms": 30000}
    if "shell_command" in by:
        return "function_call", "shell_command", {"command": command, "timeout_ms": 60000}
    if "shell" in by:
        return "function_call", "shell", {"command": ["bash", "-lc", command], "timeout_ms": 60000}
    if "local_shell" in by:
        return "local_shell_call", None, {"command": ["bash", "-lc", command]}
    return None


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *a):
        pass

    def body(self):
        n = int(self.headers.get("content-length") or 0)
        raw = self.rfile.read(n) if n else b""
        if self.headers.get("transfer-encoding", "").lower() == "chunked":
            raw = b""
            while True:
                size = int(self.rfile.readline().split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    self.rfile.readline()
                    break
                raw += self.rfile.read(size)
                self.rfile.readline()
        self.raw = raw
        if self.headers.get("content-encoding", "").lower() == "zstd":
            return {"_undecoded": "zstd"}
        try:
            return json.loads(raw or b"{}")
        except ValueError:
            return {}

    def entry(self, **kw):
        e = {
            "method": self.command,
            "path": self.path,
            "authorization": self.headers.get("authorization"),
            "user-agent": self.headers.get("user-agent"),
            "upgrade": self.headers.get("upgrade"),
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
        path = self.path.split("?")[0]
        if self.headers.get("upgrade", "").lower() == "websocket":
            # No websockets here: the client falls back to HTTP streaming.
            self.entry()
            return self.send_json({"error": {"message": "websockets not supported"}}, 426)
        self.entry()
        if path in ("/v1/models", "/models"):
            return self.send_json({"object": "list", "data": [
                {"id": "gpt-5", "object": "model", "created": 0, "owned_by": "smoke"}]})
        self.send_json({})

    do_HEAD = do_GET

    def do_POST(self):
        req = self.body()
        if DUMP:
            log({"dump": req})
        path = self.path.split("?")[0]
        if path.endswith("/responses"):
            return self.responses_api(req)
        if path.endswith("/chat/completions"):
            return self.chat(req)
        self.entry(keys=sorted(req)[:20] if isinstance(req, dict) else None,
                   body=self.raw[:2000].decode(errors="replace"))
        self.send_json({})

    # --- the Responses API (Codex) ---------------------------------------------------
    def responses_api(self, req):
        items = req.get("input") if isinstance(req.get("input"), list) else []
        tools = list(req.get("tools") or [])
        # Newer models get their tools as an input item, in namespaces ("code mode": one
        # freeform `exec` tool running JavaScript that calls the others).
        for i in items:
            if isinstance(i, dict) and i.get("type") == "additional_tools":
                for t in i.get("tools") or []:
                    tools += t.get("tools") or [] if t.get("type") == "namespace" else [t]
        names = [tool_name(t) for t in tools]
        done = sum(1 for i in items if isinstance(i, dict) and i.get("type") in OUTPUTS)
        if not tools:
            self.entry(tools=[], step=None, stream=req.get("stream"))
            return self.stream_response(req, [self.message("ok")])
        step = min(done, len(STEPS) - 1)
        s = STEPS[step]
        outputs = [i.get("output") for i in items if isinstance(i, dict) and i.get("type") in OUTPUTS]
        said = [c.get("text", "")[:200] for i in items if isinstance(i, dict) and i.get("role") == "assistant"
                for c in (i.get("content") if isinstance(i.get("content"), list) else []) if isinstance(c, dict)]
        self.entry(tools=names, step=step, stream=req.get("stream"), said=[t for t in said if t],
                   last_output=str(outputs[-1])[:400] if outputs else None)
        if "text" in s:
            return self.stream_response(req, [self.message(s["text"])])
        call_id = f"call_smoke{step:02d}"
        if any(tool_name(t) == "exec" and t.get("type") == "custom" for t in tools):
            # Code mode: the step as a script calling the nested tools.
            if "patch" in s:
                js = f"const r = await tools.apply_patch({json.dumps(s['patch'])});\ntext(r);\n"
            else:
                js = (f"const r = await tools.exec_command({{cmd: {json.dumps(s['shell'])}, yield_time_ms: 30000}});\n"
                      "text(r);\n")
            item = {"type": "custom_tool_call", "id": f"ctc_{step}", "status": "completed",
                    "call_id": call_id, "name": "exec", "input": js}
            return self.stream_response(req, [item])
        if "patch" in s:
            t = next((t for t in tools if tool_name(t) == "apply_patch"), None)
            if t is not None and t.get("type") == "custom":
                item = {"type": "custom_tool_call", "id": f"ctc_{step}", "status": "completed",
                        "call_id": call_id, "name": "apply_patch", "input": s["patch"]}
                return self.stream_response(req, [item])
            if t is not None:
                item = {"type": "function_call", "id": f"fc_{step}", "status": "completed",
                        "call_id": call_id, "name": "apply_patch",
                        "arguments": json.dumps({"input": s["patch"]})}
                return self.stream_response(req, [item])
        command = s.get("shell") or s.get("fallback")
        call = shell_call(tools, command, step)
        if call is None:
            return self.stream_response(req, [self.message(f"no shell tool among {names}")])
        kind, name, args = call
        if kind == "local_shell_call":
            item = {"type": kind, "id": f"lsc_{step}", "call_id": call_id, "status": "completed",
                    "action": {"type": "exec", **args}}
        else:
            item = {"type": kind, "id": f"fc_{step}", "status": "completed", "call_id": call_id,
                    "name": name, "arguments": json.dumps(args)}
        self.stream_response(req, [item])

    @staticmethod
    def message(text):
        return {"type": "message", "id": "msg_smoke", "status": "completed", "role": "assistant",
                "content": [{"type": "output_text", "text": text, "annotations": []}]}

    def stream_response(self, req, items):
        rid = f"resp_smoke{int(time.time() * 1000)}"
        model = req.get("model", "gpt-5")
        base = {"id": rid, "object": "response", "created_at": int(time.time()), "model": model,
                "status": "in_progress", "output": []}
        usage = {"input_tokens": 10, "input_tokens_details": {"cached_tokens": 0},
                 "output_tokens": 20, "output_tokens_details": {"reasoning_tokens": 0},
                 "total_tokens": 30}
        if not req.get("stream"):
            return self.send_json(dict(base, status="completed", output=items, usage=usage))
        events = [("response.created", {"type": "response.created", "response": base})]
        for i, item in enumerate(items):
            events.append(("response.output_item.added",
                           {"type": "response.output_item.added", "output_index": i, "item": item}))
            if item["type"] == "message":
                text = item["content"][0]["text"]
                events.append(("response.output_text.delta",
                               {"type": "response.output_text.delta", "item_id": item["id"],
                                "output_index": i, "content_index": 0, "delta": text}))
            events.append(("response.output_item.done",
                           {"type": "response.output_item.done", "output_index": i, "item": item}))
        events.append(("response.completed", {"type": "response.completed", "response": dict(
            base, status="completed", output=items, usage=usage)}))
        self.sse([f"event: {ev}\ndata: {json.dumps(d)}\n\n" for ev, d in events])

    # --- Chat Completions (Aider through litellm) -------------------------------------
    def chat(self, req):
        msgs = req.get("messages") or []
        texts = [s["text"] for s in STEPS if "text" in s]
        # The turns played so far: assistant messages that are replies of this script (Aider's
        # prompts also carry example exchanges and a repo map as assistant messages).
        turns = sum(1 for m in msgs if m.get("role") == "assistant"
                    and any(str(m.get("content") or "").strip()[:60] == t.strip()[:60] for t in texts))
        step = min(turns, len(texts) - 1)
        system = " ".join(str(m.get("content")) for m in msgs if m.get("role") == "system")
        # Aider asks its weak model for each commit message; that is not a turn of the script.
        commit = "commit message" in system.lower()
        said = [str(m.get("content") or "")[:200] for m in msgs if m.get("role") == "assistant"]
        self.entry(step=None if commit else step, commit_message=commit, stream=req.get("stream"), said=said,
                   model=req.get("model"), roles="".join((m.get("role") or "?")[0] for m in msgs),
                   last_user=str(next((m.get("content") for m in reversed(msgs) if m.get("role") == "user"), ""))[:300])
        text = next((s["commit"] for s in STEPS if "commit" in s), "agent: change") if commit else texts[step]
        cid = f"chatcmpl-smoke{step}"
        model = req.get("model", "gpt-4o")
        created = int(time.time())
        usage = {"prompt_tokens": 10, "completion_tokens": 20, "total_tokens": 30}
        if not req.get("stream"):
            return self.send_json({"id": cid, "object": "chat.completion", "created": created, "model": model,
                                   "choices": [{"index": 0, "finish_reason": "stop", "message": {
                                       "role": "assistant", "content": text}}], "usage": usage})
        chunk = {"id": cid, "object": "chat.completion.chunk", "created": created, "model": model}
        pieces = [text[i:i + 200] for i in range(0, len(text), 200)]
        events = [dict(chunk, choices=[{"index": 0, "delta": {"role": "assistant", "content": ""},
                                        "finish_reason": None}])]
        events += [dict(chunk, choices=[{"index": 0, "delta": {"content": p}, "finish_reason": None}])
                   for p in pieces]
        events.append(dict(chunk, choices=[{"index": 0, "delta": {}, "finish_reason": "stop"}]))
        if (req.get("stream_options") or {}).get("include_usage"):
            events.append(dict(chunk, choices=[], usage=usage))
        self.sse([f"data: {json.dumps(e)}\n\n" for e in events] + ["data: [DONE]\n\n"])

    def sse(self, frames):
        self.send_response(200)
        self.send_header("content-type", "text/event-stream")
        self.send_header("cache-control", "no-cache")
        self.send_header("transfer-encoding", "chunked")
        self.end_headers()
        for f in frames:
            data = f.encode()
            self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
            self.wfile.flush()
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()


class Server(http.server.ThreadingHTTPServer):
    address_family = socket.AF_INET6
    daemon_threads = True


srv = Server(("::", PORT), Handler)
if CERT != "-":
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(CERT, KEY)
    srv.socket = ctx.wrap_socket(srv.socket, server_side=True)
print("ready", flush=True)
srv.serve_forever()
