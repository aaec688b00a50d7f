"""A fault-injecting HTTP proxy in front of the test S3 server (issue 54, item 6).

Why: the object-storage tests must show what `dlm-data` does when a real bucket misbehaves
(503 SlowDown, a connection reset in the middle of an upload, slow answers, a 500 on the
multipart completion) without an in-process fake. This forwards every request unchanged to the
upstream server, except those a rule matches.

    python faultproxy.py PORT UPSTREAM_URL RULES.json LOG.jsonl

RULES.json is re-read whenever it changes, so a test can arm and clear faults between runs.
It holds a list of rules, each

    {"method": "PUT", "path": "regex on the path", "query": "substring of the query",
     "fault": "status" | "reset" | "delay", "status": 503, "code": "SlowDown",
     "seconds": 2.0, "times": 2}

`times` is how many matching requests get the fault (then the rule is spent; a large number
keeps it armed). A `reset` reads about half of the request body, then closes the socket with
SO_LINGER 0 (a TCP RST: "connection reset by peer" mid-upload). Every request is logged to
LOG.jsonl as {"method", "path", "query", "fault"} (fault null when forwarded untouched).
"""

import http.client
import http.server
import json
import os
import re
import socket
import struct
import sys
import threading
import time
import urllib.parse

PORT, UPSTREAM, RULES, LOG = int(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4]
UP = urllib.parse.urlsplit(UPSTREAM)
LOCK = threading.Lock()
STATE = {"mtime": None, "rules": [], "spent": []}
HOP = {"connection", "keep-alive", "transfer-encoding", "proxy-connection", "te", "upgrade"}


def rules():
    """The current rules (re-read when the file changed) and their spent counters."""
    try:
        m = os.stat(RULES).st_mtime_ns
    except FileNotFoundError:
        m = None
    if m != STATE["mtime"]:
        STATE["mtime"] = m
        STATE["rules"] = json.load(open(RULES)) if m is not None else []
        STATE["spent"] = [0] * len(STATE["rules"])
    return STATE["rules"], STATE["spent"]


def pick(method, path, query):
    """The rule this request fires, counting it spent, or None."""
    with LOCK:
        rs, spent = rules()
        for i, r in enumerate(rs):
            if r.get("method", method) != method:
                continue
            if not re.search(r.get("path", ""), path):
                continue
            if r.get("query", "") not in query:
                continue
            if spent[i] >= r.get("times", 1):
                continue
            spent[i] += 1
            return r
    return None


def log(method, path, query, fault):
    with LOCK, open(LOG, "a") as f:
        f.write(json.dumps({"method": method, "path": path, "query": query, "fault": fault}) + "\n")


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def body(self, limit=None):
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            out = b""
            while True:
                n = int(self.rfile.readline().split(b";")[0], 16)
                if n == 0:
                    self.rfile.readline()
                    return out
                out += self.rfile.read(n)
                self.rfile.readline()
        n = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(n if limit is None else min(n, limit))

    def handle_any(self):
        u = urllib.parse.urlsplit(self.path)
        method, path, query = self.command, u.path, u.query
        r = pick(method, path, query)
        fault = r.get("fault") if r else None
        log(method, path, query, fault)
        if fault == "reset":
            n = int(self.headers.get("Content-Length") or 0)
            self.body(limit=n // 2)
            s = self.connection
            s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            s.close()
            self.close_connection = True
            return
        data = self.body()
        if fault == "status":
            code = r.get("code", "InternalError")
            msg = f"<?xml version=\"1.0\" encoding=\"UTF-8\"?><Error><Code>{code}</Code><Message>injected by faultproxy</Message><RequestId>fp</RequestId></Error>".encode()
            self.send_response(int(r.get("status", 500)))
            self.send_header("Content-Type", "application/xml")
            self.send_header("Content-Length", str(len(msg)))
            self.end_headers()
            self.wfile.write(msg)
            return
        if fault == "delay":
            time.sleep(float(r.get("seconds", 1.0)))
        conn = http.client.HTTPConnection(UP.hostname, UP.port, timeout=300)
        headers = {k: v for k, v in self.headers.items() if k.lower() not in HOP}
        if data or method in ("PUT", "POST"):
            headers["Content-Length"] = str(len(data))
        try:
            conn.request(method, self.path, body=data, headers=headers)
            resp = conn.getresponse()
            payload = resp.read()
        except OSError:
            self.send_error(502)
            return
        finally:
            conn.close()
        self.send_response_only(resp.status, resp.reason)
        head = method == "HEAD"
        for k, v in resp.getheaders():
            if k.lower() not in HOP and (head or k.lower() != "content-length"):
                self.send_header(k, v)
        if not head:
            self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        if method != "HEAD":
            try:
                self.wfile.write(payload)
            except OSError:  # the client gave up (its timeout): nothing to answer
                self.close_connection = True

    do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = handle_any


class Server(http.server.ThreadingHTTPServer):
    daemon_threads = True


if __name__ == "__main__":
    Server(("127.0.0.1", PORT), Handler).serve_forever()
