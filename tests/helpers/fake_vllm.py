"""A stand-in for `vllm serve` in fault tests: the same endpoints, no model, scripted failures.

Run as ``python fake_vllm.py serve MODEL --host H --port P [...]`` (what jfbench's managed mode
runs). It answers /health, /v1/models, /metrics (spec counters: every request counts one draft of
two tokens, one accepted) and streamed /v1/completions that return token 7 repeated. Failures,
chosen by environment variables:

    FAKE_VLLM_FAIL_START=1        print a traceback-like error and exit 1 before listening
    FAKE_VLLM_DIE_AFTER=N         exit (code 3) during the (N+1)-th completion request
    FAKE_VLLM_DIE_MARKER=PATH     die only while PATH does not exist; create it when dying
                                  (so the re-run after a crash finds a healthy server)

and FAKE_VLLM_ENV_OUT=PATH writes its VLLM_* and OMP_* environment variables to PATH (JSON) at start.
For load tests, FAKE_VLLM_TOKEN_DELAY=SECONDS sleeps that long before each streamed token, and
FAKE_VLLM_LOG=PATH appends a JSON line per completion request as it arrives: its unix time, its
prompt and the requests in flight with it. A server started without --speculative-config
(plain decoding) exports no spec counters, as vLLM's does not.
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

STATE = {"requests": 0, "drafts": 0, "in_flight": 0}
LOCK = threading.Lock()


def _dies_now() -> bool:
    limit = os.environ.get("FAKE_VLLM_DIE_AFTER")
    if limit is None or STATE["requests"] <= int(limit):
        return False
    marker = os.environ.get("FAKE_VLLM_DIE_MARKER")
    if marker:
        if Path(marker).exists():
            return False
        Path(marker).write_text("died\n")
    return True


class Handler(BaseHTTPRequestHandler):
    model = "?"
    speculative = True

    def log_message(self, *args) -> None:
        pass

    def _send(self, status: int, body: str, kind: str = "application/json") -> None:
        data = body.encode()
        self.send_response(status)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:
        if self.path == "/health":
            self._send(200, "")
        elif self.path == "/v1/models":
            self._send(200, json.dumps({"data": [{"id": self.model, "root": self.model}]}))
        elif self.path == "/version":
            self._send(200, json.dumps({"version": "0.0-fake"}))
        elif self.path == "/metrics" and not Handler.speculative:
            self._send(200, "# no spec decoding\n", "text/plain")
        elif self.path == "/metrics":
            d = STATE["drafts"]
            text = (f"vllm:spec_decode_num_drafts_total{{engine=\"0\"}} {d}\n"
                    f"vllm:spec_decode_num_draft_tokens_total{{engine=\"0\"}} {2 * d}\n"
                    f"vllm:spec_decode_num_accepted_tokens_total{{engine=\"0\"}} {d}\n"
                    f"vllm:spec_decode_num_accepted_tokens_per_pos_total{{engine=\"0\",position=\"0\"}} {d}\n"
                    f"vllm:spec_decode_num_accepted_tokens_per_pos_total{{engine=\"0\",position=\"1\"}} 0\n")
            self._send(200, text, "text/plain")
        else:
            self._send(404, "{}")

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        with LOCK:
            STATE["requests"] += 1
            if _dies_now():
                print("RuntimeError: fake engine core died", flush=True)
                os._exit(3)
            STATE["drafts"] += 1
            STATE["in_flight"] += 1
            _log(body["prompt"])
        try:
            self._stream(body["max_tokens"])
        finally:
            with LOCK:
                STATE["in_flight"] -= 1

    def _stream(self, n: int) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.end_headers()
        delay = float(os.environ.get("FAKE_VLLM_TOKEN_DELAY", "0"))
        for i in range(n):
            time.sleep(delay)
            chunk = {"choices": [{"index": 0, "token_ids": [7], "finish_reason": "length" if i == n - 1 else None}]}
            self.wfile.write(f"data: {json.dumps(chunk)}\n\n".encode())
            self.wfile.flush()
        self.wfile.write(b"data: [DONE]\n\n")


def _log(prompt: list[int]) -> None:
    """One line per request as it arrives (FAKE_VLLM_LOG), under LOCK."""
    path = os.environ.get("FAKE_VLLM_LOG")
    if path:
        with open(path, "a") as log:
            log.write(json.dumps({"t": time.time(), "prompt": prompt, "in_flight": STATE["in_flight"]}) + "\n")


def main(argv: list[str]) -> None:
    assert argv[0] == "serve", argv
    model = argv[1]
    host = argv[argv.index("--host") + 1]
    port = int(argv[argv.index("--port") + 1])
    if os.environ.get("FAKE_VLLM_FAIL_START"):
        print(f"Traceback (most recent call last):\nOSError: {model} is not a model folder", flush=True)
        sys.exit(1)
    if os.environ.get("FAKE_VLLM_ENV_OUT"):
        settings = {k: v for k, v in os.environ.items() if k.startswith(("VLLM_", "OMP_"))}
        Path(os.environ["FAKE_VLLM_ENV_OUT"]).write_text(json.dumps(settings))
    Handler.model = model
    Handler.speculative = "--speculative-config" in argv
    ThreadingHTTPServer((host, port), Handler).serve_forever()


if __name__ == "__main__":
    main(sys.argv[1:])
