"""llama_cpp.server with the two things the peer routers need from a worker.

Run exactly like `python -m llama_cpp.server` (same flags); scripts/backends.sh
uses it when BACKENDS_LLAMA_COMPAT=1, for `routers-start`. The plain server
stays the default backend: these are additions, not what llama_cpp.server
0.3.36 serves (docs/backends-facts.md).

1. GET /health answers 200 {"status": "ok"}. vllm-router 0.1.17 and
   sglang-router 0.3.2 probe /health before they route to a worker (vllm-router
   waits for it, up to --worker-startup-timeout-secs); llama_cpp.server has no
   such route (404). It answers without the model's lock, so also while a
   generation runs (the server's /v1/models waits for that lock). The server
   only listens once its model is loaded, so a 200 means loaded.
2. POST /v1/chat/completions: `max_completion_tokens` (OpenAI's current name,
   which sglang-router sends in place of `max_tokens`) is copied to
   `max_tokens` when that is absent. llama_cpp.server ignores the new name, so
   without this a request through sglang-router generates until the context
   is full.
"""

import json

import llama_cpp.server.__main__ as server_main

CHAT_PATH = "/v1/chat/completions"


def _rename_max_completion_tokens(body: bytes) -> bytes:
    try:
        req = json.loads(body)
    except ValueError:
        return body  # malformed: the server answers it as it would
    if not isinstance(req, dict) or req.get("max_completion_tokens") is None:
        return body
    if req.get("max_tokens") is None:
        req["max_tokens"] = req["max_completion_tokens"]
    return json.dumps(req).encode()


class Compat:
    """An ASGI wrapper around the llama_cpp.server app."""

    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        if scope["path"] == "/health" and scope["method"] in ("GET", "HEAD"):
            body = b'{"status":"ok"}'
            await send(
                {
                    "type": "http.response.start",
                    "status": 200,
                    "headers": [
                        (b"content-type", b"application/json"),
                        (b"content-length", str(len(body)).encode()),
                    ],
                }
            )
            await send({"type": "http.response.body", "body": body})
            return
        if scope["path"] == CHAT_PATH and scope["method"] == "POST":
            chunks = []
            while True:
                msg = await receive()
                if msg["type"] != "http.request":
                    return  # the client went away before its body was in
                chunks.append(msg.get("body", b""))
                if not msg.get("more_body", False):
                    break
            body = _rename_max_completion_tokens(b"".join(chunks))
            replayed = False

            async def replay():
                nonlocal replayed
                if not replayed:
                    replayed = True
                    return {"type": "http.request", "body": body, "more_body": False}
                return await receive()  # later: the disconnect, for streams

            return await self.app(scope, replay, send)
        return await self.app(scope, receive, send)


_create_app = server_main.create_app


def create_app(*args, **kwargs):
    return Compat(_create_app(*args, **kwargs))


if __name__ == "__main__":
    server_main.create_app = create_app
    server_main.main()
