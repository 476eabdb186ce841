"""A local emulator of Slack for the bot's tests: the Web API, response URLs, file uploads and
a Socket Mode websocket, all on one aiohttp server on an ephemeral port.

Every call is recorded with its parsed body (form, JSON or multipart) in :attr:`SlackEmulator.calls`.
Faults are scripted per Web API method: ``emu.script("chat.postMessage", 429, 429, 500,
"not_in_channel")`` makes the next four calls of that method answer HTTP 429 (with
``Retry-After``), HTTP 500, and ``{"ok": false, "error": "not_in_channel"}``, then normal
answers again. ``apps.connections.open`` returns the ws:// URL of the emulator's Socket Mode
endpoint; :meth:`SlackEmulator.send_envelope` delivers an envelope there and returns the bot's ack.
Slash commands are built by :func:`slash_body` and signed by :func:`signed_headers` as Slack signs them.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import itertools
import json
import time
import urllib.parse
from dataclasses import dataclass, field

from aiohttp import WSMsgType, web

SIGNING_SECRET = "test-signing-secret"


@dataclass
class Call:
    """One request the emulator received: ``method`` (``chat.postMessage``, ``response``,
    ``upload``), the parsed ``body``, the HTTP ``status`` answered, and when (monotonic s)."""

    method: str
    body: dict
    status: int
    at: float = field(default_factory=time.monotonic)
    error: str | None = None


def slash_body(text: str, user: str = "U_ALLOWED", channel: str = "C_ALLOWED", trigger: str | None = None,
               response_url: str = "", team: str = "T1") -> dict:
    """The form fields of a ``/specperf`` slash command."""
    return {"token": "legacy", "team_id": team, "team_domain": "t", "channel_id": channel, "channel_name": "perf",
            "user_id": user, "user_name": "someone", "command": "/specperf", "text": text,
            "api_app_id": "A1", "response_url": response_url,
            "trigger_id": trigger or f"trig-{time.monotonic_ns()}"}


def signed_headers(body: bytes, secret: str = SIGNING_SECRET, timestamp: int | None = None) -> dict:
    """Slack's request signature: ``v0=`` HMAC-SHA256 of ``v0:{timestamp}:{body}``."""
    ts = str(int(time.time()) if timestamp is None else timestamp)
    digest = hmac.new(secret.encode(), f"v0:{ts}:".encode() + body, hashlib.sha256).hexdigest()
    return {"X-Slack-Request-Timestamp": ts, "X-Slack-Signature": f"v0={digest}",
            "Content-Type": "application/x-www-form-urlencoded"}


class SlackEmulator:
    """The emulator; ``await start()`` then use :attr:`api_url` as the client's ``base_url``."""

    def __init__(self, retry_after_s: int = 1) -> None:
        self.calls: list[Call] = []
        self.retry_after_s = retry_after_s
        self._script: dict[str, list] = {}
        self._ts = itertools.count(1)
        self._files: dict[str, bytes] = {}
        self._ws: web.WebSocketResponse | None = None
        self._ws_connected = asyncio.Event()
        self._acks: dict[str, asyncio.Future] = {}
        self._runner: web.AppRunner | None = None
        self.port = 0

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def api_url(self) -> str:
        return f"{self.base}/api/"

    def response_url(self, name: str = "r") -> str:
        return f"{self.base}/response/{name}"

    def script(self, method: str, *outcomes) -> None:
        """Answer the next calls of ``method`` with ``outcomes``: 429, 500 or an error string."""
        self._script.setdefault(method, []).extend(outcomes)

    def recorded(self, method: str, ok_only: bool = True) -> list[Call]:
        """The calls of ``method`` (only those answered ok, by default), in order."""
        return [c for c in self.calls if c.method == method and (not ok_only or (c.status == 200 and not c.error))]

    def file(self, file_id: str) -> bytes:
        """The bytes uploaded for ``file_id``."""
        return self._files[file_id]

    async def start(self) -> None:
        app = web.Application(client_max_size=50 * 2**20)
        app.router.add_post("/api/{method}", self._api)
        app.router.add_get("/api/{method}", self._api)  # slack_sdk reads chat.getPermalink with GET
        app.router.add_post("/response/{name}", self._response)
        app.router.add_post("/upload/{file_id}", self._upload)
        app.router.add_get("/link", self._link)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", self.port)
        await site.start()
        self.port = site._server.sockets[0].getsockname()[1]

    async def close(self) -> None:
        if self._ws is not None:
            await self._ws.close()
        if self._runner is not None:
            await self._runner.cleanup()

    async def _body(self, request: web.Request) -> dict:
        ctype = request.content_type
        if ctype == "application/json":
            return await request.json()
        if ctype.startswith("multipart/"):
            form = await request.post()
            return {k: (v.file.read() if hasattr(v, "file") else v) for k, v in form.items()}
        raw = await request.read()
        parsed = dict(urllib.parse.parse_qsl(raw.decode(errors="replace"), keep_blank_values=True))
        return parsed or ({"_raw": raw} if raw else {})

    async def _api(self, request: web.Request) -> web.Response:
        method = request.match_info["method"]
        body = {**dict(request.query), **await self._body(request)}  # slack_sdk sends some params in the query
        for key in ("blocks", "attachments", "files"):
            if isinstance(body.get(key), str):
                try:
                    body[key] = json.loads(body[key])
                except ValueError:
                    pass
        body["_auth"] = request.headers.get("Authorization", "")
        outcome = self._script[method].pop(0) if self._script.get(method) else None
        if outcome == 429:
            self.calls.append(Call(method, body, 429))
            return web.json_response({"ok": False, "error": "ratelimited"}, status=429,
                                     headers={"Retry-After": str(self.retry_after_s)})
        if outcome == 500:
            self.calls.append(Call(method, body, 500))
            return web.Response(status=500, text="internal error")
        if isinstance(outcome, str):
            self.calls.append(Call(method, body, 200, error=outcome))
            return web.json_response({"ok": False, "error": outcome})
        self.calls.append(Call(method, body, 200))
        return web.json_response(self._answer(method, body))

    def _answer(self, method: str, body: dict) -> dict:
        if method == "auth.test":
            return {"ok": True, "url": "https://t.slack.com/", "team": "t", "user": "specperf", "team_id": "T1",
                    "user_id": "UBOT", "bot_id": "BBOT"}
        if method == "chat.postMessage":
            return {"ok": True, "channel": body.get("channel"), "ts": f"1700000000.{next(self._ts):06d}",
                    "message": {"text": body.get("text")}}
        if method == "chat.getPermalink":
            ts = body.get("message_ts", "").replace(".", "")
            return {"ok": True, "channel": body.get("channel"),
                    "permalink": f"https://t.slack.com/archives/{body.get('channel')}/p{ts}"}
        if method == "chat.update":
            return {"ok": True, "channel": body.get("channel"), "ts": body.get("ts"), "text": body.get("text")}
        if method == "files.getUploadURLExternal":
            file_id = f"F{next(self._ts):06d}"
            return {"ok": True, "upload_url": f"{self.base}/upload/{file_id}", "file_id": file_id}
        if method == "files.completeUploadExternal":
            files = body.get("files") or []
            return {"ok": True, "files": [{"id": f["id"], "title": f.get("title")} for f in files]}
        if method == "apps.connections.open":
            return {"ok": True, "url": f"ws://127.0.0.1:{self.port}/link"}
        return {"ok": True}

    async def _response(self, request: web.Request) -> web.Response:
        self.calls.append(Call("response", {"name": request.match_info["name"], **await request.json()}, 200))
        return web.Response(text="ok")

    async def _upload(self, request: web.Request) -> web.Response:
        file_id = request.match_info["file_id"]
        if request.content_type.startswith("multipart/"):
            form = await request.post()
            data = next(v.file.read() for v in form.values() if hasattr(v, "file"))
        else:
            data = await request.read()
        self._files[file_id] = data
        self.calls.append(Call("upload", {"file_id": file_id, "size": len(data)}, 200))
        return web.Response(text=f"OK - {len(data)}")

    async def _link(self, request: web.Request) -> web.WebSocketResponse:
        ws = web.WebSocketResponse()
        await ws.prepare(request)
        self._ws = ws
        await ws.send_str(json.dumps({"type": "hello", "num_connections": 1,
                                      "connection_info": {"app_id": "A1"}, "debug_info": {"host": "emulator"}}))
        self._ws_connected.set()
        async for message in ws:
            if message.type != WSMsgType.TEXT:
                continue
            data = json.loads(message.data)
            self.calls.append(Call("socket_ack", data, 200))
            future = self._acks.pop(data.get("envelope_id"), None)
            if future is not None and not future.done():
                future.set_result(data)
        return ws

    async def send_envelope(self, payload: dict, kind: str = "slash_commands", timeout: float = 10) -> dict:
        """Deliver a Socket Mode envelope; returns the bot's ack (``{"envelope_id", "payload"?}``)."""
        await asyncio.wait_for(self._ws_connected.wait(), timeout)
        envelope_id = f"env-{time.monotonic_ns()}"
        future = asyncio.get_running_loop().create_future()
        self._acks[envelope_id] = future
        await self._ws.send_str(json.dumps({"envelope_id": envelope_id, "type": kind, "payload": payload,
                                            "accepts_response_payload": True, "retry_attempt": 0,
                                            "retry_reason": ""}))
        return await asyncio.wait_for(future, timeout)
