#!/usr/bin/env python3
"""Hostile and odd /metrics endpoints for ScrapeRunTests, on 127.0.0.1, one
port each: an OpenMetrics answer, garbage, a body past any bound, a
server that never answers, one that closes in the middle of its body, a
500, a flood of series, gzip sent though identity was asked (with and
without a Content-Encoding), and a family with a 70 KB HELP over 900
series beside a series whose labels no event can hold. Writes {"name": port, ...} to the file given
as the only argument once every socket listens, then serves until killed."""
import gzip
import http.server
import json
import os
import socketserver
import sys
import threading
import time

OPENMETRICS = b"""# TYPE jobs counter
# HELP jobs Jobs done.
jobs_total{queue="a"} 12.0
jobs_created{queue="a"} 1.7e9
# TYPE temp_celsius gauge
# UNIT temp_celsius celsius
temp_celsius 21.5
# TYPE lat histogram
lat_bucket{le="0.1"} 1 # {trace_id="abc"} 0.05
lat_bucket{le="+Inf"} 3
lat_count 3
lat_sum 0.9
# EOF
"""


def handler_for(name):
    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args):
            pass

        def send_body(self, body, status=200, ctype="text/plain; version=0.0.4"):
            self.send_response(status)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self):
            if name == "openmetrics":
                self.send_body(OPENMETRICS, ctype="application/openmetrics-text; version=1.0.0; charset=utf-8")
            elif name == "garbage":
                self.send_body(b"this is { not = metrics\n\x00\xff")
            elif name == "huge":
                self.send_response(200)
                self.send_header("Content-Type", "text/plain")
                self.end_headers()  # no length: the body runs until the connection closes
                line = b"x 1\n" * 16384
                try:
                    for _ in range(4096):  # 256 MiB if nobody stops reading
                        self.wfile.write(line)
                except OSError:
                    pass
                self.close_connection = True
            elif name == "hang":
                time.sleep(30)
            elif name == "cut":
                self.send_response(200)
                self.send_header("Content-Type", "text/plain")
                self.send_header("Content-Length", "1000")
                self.end_headers()
                self.wfile.write(b"half 1\nhalf_more")
                self.wfile.flush()
                self.close_connection = True
            elif name == "error":
                self.send_body(b"oops\n", status=500)
            elif name == "flood":
                self.send_body(b"".join(b'flood{i="%d"} 1\n' % i for i in range(5000)))
            elif name == "gzipped":
                body = gzip.compress(b"gz 1\n")
                self.send_response(200)
                self.send_header("Content-Type", "text/plain; version=0.0.4")
                self.send_header("Content-Encoding", "gzip")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)
            elif name == "gzipraw":
                self.send_body(gzip.compress(b"gz 1\n"))
            elif name == "longhelp":
                help = b"h" * 70000
                self.send_body(b"# HELP wide " + help + b"\n# TYPE wide gauge\n"
                               + b"".join(b'wide{i="%d"} 1\n' % i for i in range(900))
                               + b'huge{l="' + b"x" * 70000 + b'"} 1\nafter 2\n')
            elif name == "headers":
                auth = self.headers.get("Authorization", "")
                accept = self.headers.get("Accept", "")
                self.send_body(b'seen{authorization="%s",accept_openmetrics="%d"} 1\n'
                               % (auth.encode(), 1 if "openmetrics" in accept else 0))
    return Handler


class Server(socketserver.ThreadingMixIn, http.server.HTTPServer):
    daemon_threads = True
    allow_reuse_address = True


def main():
    ports = {}
    for name in ["openmetrics", "garbage", "huge", "hang", "cut", "error", "flood", "headers", "gzipped", "gzipraw", "longhelp"]:
        server = Server(("127.0.0.1", 0), handler_for(name))
        ports[name] = server.server_address[1]
        threading.Thread(target=server.serve_forever, daemon=True).start()
    tmp = sys.argv[1] + ".tmp"
    with open(tmp, "w") as f:
        json.dump(ports, f)
    os.rename(tmp, sys.argv[1])
    while True:
        time.sleep(3600)


if __name__ == "__main__":
    main()
