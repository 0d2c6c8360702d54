#!/usr/bin/env python3
"""The servers Debian's check_* programs are pointed at in NagiosRunTests,
all on 127.0.0.1: HTTP, SSH, SMTP, FTP, POP3, IMAP, NNTP and time (RFC 868)
over TCP, and a UDP echo that answers "ping" with "pong". Each speaks just
enough of its protocol for its check. Writes {"name": port, ...} to the
file given as the only argument once every socket listens, then serves
until killed."""
import http.server
import json
import os
import socket
import socketserver
import struct
import sys
import threading
import time


class Banner(socketserver.StreamRequestHandler):
    """Sends a greeting, then answers each line by its first word."""
    greeting = b""
    replies = {}
    default = b""

    def handle(self):
        self.connection.settimeout(10)
        try:
            if self.greeting:
                self.wfile.write(self.greeting)
            for line in self.rfile:
                word = line.split(b" ", 1)[0].strip().upper()
                if len(line.split(b" ")) > 1 and self.__class__ is IMAP:
                    word = line.split(b" ")[1].strip().upper()
                reply = self.replies.get(word, self.default)
                if reply:
                    self.wfile.write(reply)
                if word in (b"QUIT", b"LOGOUT"):
                    return
        except OSError:
            pass


class SMTP(Banner):
    greeting = b"220 vigil-test ESMTP ready\r\n"
    replies = {b"EHLO": b"250-vigil-test\r\n250 HELP\r\n", b"HELO": b"250 vigil-test\r\n", b"QUIT": b"221 bye\r\n"}
    default = b"250 ok\r\n"


class FTP(Banner):
    greeting = b"220 vigil-test FTP ready\r\n"
    replies = {b"QUIT": b"221 bye\r\n"}


class POP(Banner):
    greeting = b"+OK vigil-test POP3 ready\r\n"
    replies = {b"QUIT": b"+OK bye\r\n"}


class IMAP(Banner):
    greeting = b"* OK vigil-test IMAP4rev1 ready\r\n"
    replies = {b"LOGOUT": b"* BYE\r\na1 OK LOGOUT done\r\n"}


class NNTP(Banner):
    greeting = b"200 vigil-test NNTP ready, posting ok\r\n"
    replies = {b"QUIT": b"205 bye\r\n"}


class SSH(Banner):
    greeting = b"SSH-2.0-OpenSSH_9.2p1 Debian-2+deb12u3\r\n"


class Time(socketserver.BaseRequestHandler):
    def handle(self):
        self.request.sendall(struct.pack("!I", (int(time.time()) + 2208988800) & 0xFFFFFFFF))


class HTTP(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.0"

    def do_GET(self):
        body = b"hello from vigil's test peer\n"
        self.send_response(200 if self.path == "/ok" else 404)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


class UDPEcho(socketserver.BaseRequestHandler):
    def handle(self):
        data, sock = self.request
        if data.strip() == b"ping":
            sock.sendto(b"pong\n", self.client_address)


class TCPServer(socketserver.ThreadingTCPServer):
    allow_reuse_address = True
    daemon_threads = True


def main():
    servers = {}
    for name, handler in [("http", HTTP), ("ssh", SSH), ("smtp", SMTP), ("ftp", FTP), ("pop", POP),
                          ("imap", IMAP), ("nntp", NNTP), ("time", Time)]:
        servers[name] = TCPServer(("127.0.0.1", 0), handler)
    servers["udp"] = socketserver.ThreadingUDPServer(("127.0.0.1", 0), UDPEcho)
    # A port nothing listens on: bound, never listening, so it stays ours.
    closed = socket.socket()
    closed.bind(("127.0.0.1", 0))
    ports = {name: s.server_address[1] for name, s in servers.items()}
    ports["closed"] = closed.getsockname()[1]
    for s in servers.values():
        threading.Thread(target=s.serve_forever, daemon=True).start()
    tmp = sys.argv[1] + ".tmp"
    with open(tmp, "w") as f:
        json.dump(ports, f)
    os.rename(tmp, sys.argv[1])
    while True:
        time.sleep(3600)


if __name__ == "__main__":
    main()
