#!/usr/bin/env python3
"""A remote write endpoint that answers as it is told, for the tests of the
remote_write sink's retries and credentials (what the real receivers make
of the requests is tested against VictoriaMetrics and Prometheus). Python's
standard library only: each request is written as one JSON line to OUT with
its arrival time, path, headers, the status answered and its body (base64,
as sent: snappy-compressed protobuf, decoded by the test).

    receiver.py OUT [--port P] [--answers 503,503:1,429,400] [--then 204]
                    [--authorization VALUE] [--discard] [--never-accept] [--delay S]

--answers: the statuses of the first requests, in order; `503:1` adds
`Retry-After: 1`. --then: the status of every request after them.
--authorization: a request without this exact Authorization header is
answered 401 (and counted among the scripted answers). --never-accept: listen with a full backlog and never accept,
so that a connection attempt is never answered. --discard: answer
204 at once and record nothing but the requests' and bytes' counts in
OUT.counts at exit (scripts/bench). Writes its port to OUT.port once
listening on loopback.
"""
import argparse
import base64
import json
import os
import signal
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--answers", default="")
    ap.add_argument("--then", type=int, default=204)
    ap.add_argument("--authorization")
    ap.add_argument("--discard", action="store_true")
    ap.add_argument("--never-accept", action="store_true")
    ap.add_argument("--delay", type=float, default=0, help="seconds each answer waits (a slow receiver)")
    args = ap.parse_args()
    if args.never_accept:
        import socket
        listener = socket.socket()
        listener.bind(("127.0.0.1", args.port))
        listener.listen(0)
        port = listener.getsockname()[1]
        # The backlog filled by connections of our own, never accepted: a
        # new attempt's SYN is dropped, as by a host that is away.
        held = []
        for _ in range(4):
            c = socket.socket()
            c.setblocking(False)
            try:
                c.connect(("127.0.0.1", port))
            except BlockingIOError:
                pass
            held.append(c)
        time.sleep(0.5)
        with open(args.out + ".port.tmp", "w") as f:
            f.write(str(port))
        os.rename(args.out + ".port.tmp", args.out + ".port")
        while True:
            time.sleep(3600)
    counts = {"requests": 0, "bytes": 0}
    script = [a for a in args.answers.split(",") if a]
    lock = threading.Lock()
    out = open(args.out, "a", buffering=1)

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *a):
            pass

        def do_POST(self):
            length = int(self.headers.get("Content-Length", "0"))
            body = self.rfile.read(length)
            if args.delay:
                time.sleep(args.delay)
            if args.discard:
                with lock:
                    counts["requests"] += 1
                    counts["bytes"] += len(body)
                self.send_response(204)
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            retry_after = None
            with lock:
                if args.authorization is not None and self.headers.get("Authorization") != args.authorization:
                    status = 401
                elif script:
                    answer = script.pop(0)
                    status, _, retry_after = answer.partition(":")
                    status = int(status)
                else:
                    status = args.then
                out.write(json.dumps({
                    "time": time.time(), "path": self.path, "status": status,
                    "headers": {k.lower(): v for k, v in self.headers.items()},
                    "body": base64.b64encode(body).decode(),
                }) + "\n")
            text = b"" if status < 300 else ("answer %d as scripted\nsecond line\n" % status).encode()
            self.send_response(status)
            if retry_after:
                self.send_header("Retry-After", retry_after)
            self.send_header("Content-Length", str(len(text)))
            self.end_headers()
            self.wfile.write(text)

    server = ThreadingHTTPServer(("127.0.0.1", args.port), Handler)
    with open(args.out + ".port.tmp", "w") as f:
        f.write(str(server.server_address[1]))
    os.rename(args.out + ".port.tmp", args.out + ".port")
    signal.signal(signal.SIGTERM, lambda *_: threading.Thread(target=server.shutdown).start())
    server.serve_forever()
    with open(args.out + ".counts", "w") as f:
        json.dump(counts, f)


if __name__ == "__main__":
    main()
