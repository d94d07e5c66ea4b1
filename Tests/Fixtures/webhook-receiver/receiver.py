#!/usr/bin/env python3
"""A webhook receiver for the WebhookOutbox tests: a real HTTP/1.1 server (keep-alive, one
thread per connection) that records every request and answers as its path says.

    receiver.py --port PORT --log FILE [--ready FILE]

Each request is appended to FILE as one JSON line, before it is answered:
{"key": Idempotency-Key or null, "method", "path", "body" (UTF-8, invalid bytes replaced),
"headers": [[name, value], ...], "attempt": how many requests with this key and path came before
this one, plus 1}. When it listens, it writes its port to the --ready file (atomically).

A path /do/A1,A2,... answers the n-th request of a key with action An (the last repeats):
  200, 404, 500 ...   that status, body "status N"
  429:S, 503:S        that status with Retry-After: S (seconds)
  hang                never answers (the connection stays open until the client gives up)
  reset               closes the connection with an RST (SO_LINGER 0), no answer
  slow:MS             200 after MS milliseconds
Any other path answers 200.
"""
import argparse
import json
import os
import socket
import struct
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class Receiver(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, address, log_path):
        super().__init__(address, Handler)
        self.log = open(log_path, "a", encoding="utf-8")
        self.lock = threading.Lock()
        self.seen = {}

    def record(self, entry):
        """Numbers the request among those with its key and path, and appends it to the log."""
        with self.lock:
            counter = (entry["key"], entry["path"])
            self.seen[counter] = self.seen.get(counter, 0) + 1
            entry["attempt"] = self.seen[counter]
            self.log.write(json.dumps(entry) + "\n")
            self.log.flush()
            return entry["attempt"]

    def handle_error(self, request, client_address):
        # A reset connection or a client that gave up on a hung request: expected here.
        pass


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, format, *args):
        pass

    def handle_any(self):
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        attempt = self.server.record({
            "key": self.headers.get("Idempotency-Key"),
            "method": self.command,
            "path": self.path,
            "body": body.decode("utf-8", "replace"),
            "headers": [[name, value] for name, value in self.headers.items()],
        })
        action = "200"
        if self.path.startswith("/do/"):
            actions = self.path[len("/do/"):].split(",")
            action = actions[min(attempt, len(actions)) - 1]
        name, _, argument = action.partition(":")
        if name == "hang":
            while True:
                time.sleep(3600)
        if name == "reset":
            self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            self.connection.close()
            self.close_connection = True
            return
        if name == "slow":
            time.sleep(int(argument) / 1000)
            name = "200"
        status = int(name)
        text = f"status {status}".encode()
        self.send_response(status)
        if argument and name != "200":
            self.send_header("Retry-After", argument)
        self.send_header("Content-Length", str(len(text)))
        self.end_headers()
        self.wfile.write(text)

    do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = handle_any


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--log", required=True)
    parser.add_argument("--ready")
    arguments = parser.parse_args()
    server = Receiver(("127.0.0.1", arguments.port), arguments.log)
    if arguments.ready:
        with open(arguments.ready + ".tmp", "w") as ready:
            ready.write(str(server.server_address[1]))
        os.rename(arguments.ready + ".tmp", arguments.ready)
    server.serve_forever()


if __name__ == "__main__":
    main()
