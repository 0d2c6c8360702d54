#!/usr/bin/env python3
"""An OTLP/HTTP receiver for Vigil's tests, decoding with the official protos
(PyPI's opentelemetry-proto): POST /v1/logs and /v1/metrics, protobuf or
JSON, gzip or not. Each log record and each data point received is written
as one JSON line to OUT; each request as one line to OUT.requests.

    receiver.py OUT [--port P] [--fail N] [--fail-status 503] [--retry-after S]
                    [--reject K] [--status-after CODE]

--fail N: answer the first N requests with --fail-status (and Retry-After
S when given) without recording them. --reject K: answer each logs request
with a partial success rejecting K records (they are still recorded, marked).
--discard: answer 200 at once, decoding and recording nothing (for
scripts/bench). --status-after CODE: answer every request after the failures with CODE
(a final refusal) instead of 200. Writes its port to OUT.port once
listening on loopback (an ephemeral port unless --port).
"""
import argparse
import gzip
import json
import os
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from google.protobuf import json_format
from opentelemetry.proto.collector.logs.v1 import logs_service_pb2
from opentelemetry.proto.collector.metrics.v1 import metrics_service_pb2


def any_value(v):
    kind = v.WhichOneof("value")
    return None if kind is None else [kind, getattr(v, kind)]


def attributes(kvs):
    return {kv.key: any_value(kv.value) for kv in kvs}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--fail", type=int, default=0)
    ap.add_argument("--fail-status", type=int, default=503)
    ap.add_argument("--retry-after")
    ap.add_argument("--reject", type=int, default=0)
    ap.add_argument("--status-after", type=int, default=200)
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--discard", action="store_true", help="answer 200 without decoding or recording (benchmarks)")
    args = ap.parse_args()
    lock = threading.Lock()
    state = {"requests": 0}
    out = open(args.out, "a", buffering=1)
    requests_log = open(args.out + ".requests", "a", buffering=1)

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *a):
            pass

        def answer(self, code, body=b"", ctype="application/x-protobuf", extra=()):
            self.send_response(code)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(body)))
            for k, v in extra:
                self.send_header(k, v)
            self.end_headers()
            self.wfile.write(body)

        def do_POST(self):
            length = int(self.headers.get("Content-Length", "0"))
            raw = self.rfile.read(length)
            if args.discard:
                self.answer(200)
                return
            encoding = self.headers.get("Content-Encoding", "")
            body = gzip.decompress(raw) if encoding == "gzip" else raw
            ctype = self.headers.get("Content-Type", "")
            is_json = ctype.startswith("application/json")
            with lock:
                state["requests"] += 1
                n = state["requests"]
                requests_log.write(json.dumps({"path": self.path, "encoding": encoding, "content_type": ctype,
                                               "bytes": len(raw), "n": n, "at": time.time()}) + "\n")
            if n <= args.fail:
                extra = [("Retry-After", args.retry_after)] if args.retry_after else []
                self.answer(args.fail_status, b"try later", "text/plain", extra)
                return
            if args.status_after != 200:
                self.answer(args.status_after, b"refused by the test receiver", "text/plain")
                return
            if self.path == "/v1/logs":
                req = logs_service_pb2.ExportLogsServiceRequest()
                json_format.Parse(body, req) if is_json else req.ParseFromString(body)
                count = 0
                with lock:
                    for rl in req.resource_logs:
                        res = attributes(rl.resource.attributes)
                        for sl in rl.scope_logs:
                            for r in sl.log_records:
                                count += 1
                                out.write(json.dumps({
                                    "signal": "logs", "resource": res, "scope": sl.scope.name,
                                    "time_unix_nano": r.time_unix_nano, "observed_time_unix_nano": r.observed_time_unix_nano,
                                    "severity_number": r.severity_number, "severity_text": r.severity_text,
                                    "event_name": r.event_name, "body": any_value(r.body),
                                    "attributes": attributes(r.attributes), "json": is_json,
                                    "rejected": count <= args.reject}) + "\n")
                resp = logs_service_pb2.ExportLogsServiceResponse()
                if args.reject:
                    resp.partial_success.rejected_log_records = min(args.reject, count)
                    resp.partial_success.error_message = "the test receiver rejects %d" % args.reject
            elif self.path == "/v1/metrics":
                req = metrics_service_pb2.ExportMetricsServiceRequest()
                json_format.Parse(body, req) if is_json else req.ParseFromString(body)
                with lock:
                    for rm in req.resource_metrics:
                        for sm in rm.scope_metrics:
                            for m in sm.metrics:
                                data = m.WhichOneof("data")
                                for p in getattr(m, data).data_points:
                                    out.write(json.dumps({
                                        "signal": "metrics", "name": m.name, "unit": m.unit, "type": data,
                                        "monotonic": data == "sum" and m.sum.is_monotonic,
                                        "value": p.as_int if p.WhichOneof("value") == "as_int" else p.as_double,
                                        "time_unix_nano": p.time_unix_nano, "attributes": attributes(p.attributes)}) + "\n")
                resp = metrics_service_pb2.ExportMetricsServiceResponse()
            else:
                self.answer(404, b"no such path", "text/plain")
                return
            if is_json:
                self.answer(200, json_format.MessageToJson(resp).encode(), "application/json")
            else:
                self.answer(200, resp.SerializeToString())

    server = ThreadingHTTPServer(("127.0.0.1", args.port), Handler)
    # Written whole, then renamed: a reader never sees it half done.
    with open(args.out + ".port.tmp", "w") as f:
        f.write(str(server.server_address[1]))
    os.rename(args.out + ".port.tmp", args.out + ".port")
    print("ready", server.server_address[1], flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
