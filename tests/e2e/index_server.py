#!/usr/bin/env python3
"""A package index on 127.0.0.1 for the tests: the wheels of a folder as a Simple API.

  index_server.py WHEELS_DIR LOG [--html-only] [--fault KIND]... [--auth USER:PASS]
                  [--tls CERT KEY] [--redirect-to URL]

Prints the port it listens on (a free one), then serves until killed:
  /simple/<project>/   PEP 691 JSON when the Accept header asks for it (unless --html-only),
                       else PEP 503 HTML; each file with its sha256 (JSON `hashes`, HTML
                       `#sha256=`), data-requires-python and yanked as the wheel's sidecar
                       file `<wheel>.meta.json` says ({"requires_python": ..., "yanked": ...}).
  /files/<wheel>       the file, with Range (206) and Cache-Control: max-age=600 and an ETag, so
                       that pip keeps it in its cache as it keeps PyPI's.
Faults (each applies to every /files/ request, counted per file):
  cut          the first whole-file (200) response of each file stops after half its bytes
               (the connection closed)
  wrong-hash   the index states a sha256 that is not the file's
  500x2        the first two requests of each file answer 500
  429          the first request of each file answers 429 with Retry-After: 1
  no-range     Range is ignored: always 200 and the whole file
  slow         each file's response sends nothing for 30 s
  redirect     /files/ answers 302 to --redirect-to + the same path
  wrong-types  each file of a JSON page has a "filename" that is a number (a hostile or broken
               index: its page must be refused by name, the other indexes still read)
  trickle      each project page is sent 2 bytes a second (its Content-Length honest)
  trickle-ranges  each range answer (206) is sent 2 bytes a second
  endless      each project page never ends: no Content-Length, bytes sent until the client goes
  endless-ranges  each range answer (206) never ends the same way
Every request is appended to LOG as one JSON line: method, path, range, whether an
Authorization header came, and the Host.
"""
import base64
import hashlib
import http.server
import json
import os
import ssl
import sys
import threading
import time

args = sys.argv[1:]
wheels_dir, log_path = args[0], args[1]
faults, auth, tls, html_only, redirect_to = set(), None, None, False, None
i = 2
while i < len(args):
    if args[i] == "--fault":
        faults.add(args[i + 1]); i += 2
    elif args[i] == "--auth":
        auth = args[i + 1]; i += 2
    elif args[i] == "--tls":
        tls = (args[i + 1], args[i + 2]); i += 3
    elif args[i] == "--html-only":
        html_only = True; i += 1
    elif args[i] == "--redirect-to":
        redirect_to = args[i + 1]; i += 2
    else:
        sys.exit(f"unknown argument {args[i]}")

counts = {}
cut_done = set()
lock = threading.Lock()


def normalize(name):
    import re
    return re.sub(r"[-_.]+", "-", name).lower()


def wheels_of(project):
    out = []
    for f in sorted(os.listdir(wheels_dir)):
        if f.endswith(".whl") and normalize(f.split("-")[0]) == project:
            meta = {}
            side = os.path.join(wheels_dir, f + ".meta.json")
            if os.path.exists(side):
                meta = json.load(open(side))
            digest = hashlib.sha256(open(os.path.join(wheels_dir, f), "rb").read()).hexdigest()
            if "wrong-hash" in faults:
                digest = hashlib.sha256(b"not this file").hexdigest()
            out.append((f, digest, meta))
    return out


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *a):
        pass

    def record(self):
        with open(log_path, "a") as log:
            log.write(json.dumps({"method": self.command, "path": self.path,
                                  "range": self.headers.get("Range"),
                                  "authorization": self.headers.get("Authorization") is not None,
                                  "host": self.headers.get("Host")}) + "\n")

    def authorized(self):
        if not auth:
            return True
        want = "Basic " + base64.b64encode(auth.encode()).decode()
        if self.headers.get("Authorization") == want:
            return True
        self.send_response(401)
        self.send_header("WWW-Authenticate", 'Basic realm="index"')
        self.send_header("Content-Length", "0")
        self.end_headers()
        return False

    def do_GET(self):
        self.record()
        if self.path.startswith("/simple/"):
            if not self.authorized():
                return
            return self.page(self.path[len("/simple/"):].strip("/"))
        if self.path.startswith("/files/"):
            if "redirect" in faults and redirect_to:
                self.send_response(302)
                self.send_header("Location", redirect_to + self.path)
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            if not self.authorized():
                return
            return self.file(self.path[len("/files/"):])
        self.send_error(404)

    def page(self, project):
        files = wheels_of(normalize(project))
        if not files:
            return self.send_error(404)
        accept = self.headers.get("Accept", "")
        if "application/vnd.pypi.simple.v1+json" in accept and not html_only:
            doc = {"meta": {"api-version": "1.1"}, "name": project, "files": []}
            for f, digest, meta in files:
                entry = {"filename": f, "url": f"../../files/{f}", "hashes": {"sha256": digest}}
                if meta.get("requires_python"):
                    entry["requires-python"] = meta["requires_python"]
                if meta.get("yanked"):
                    entry["yanked"] = meta["yanked"]
                if "wrong-types" in faults:
                    entry["filename"] = 42
                doc["files"].append(entry)
            body = json.dumps(doc).encode()
            ctype = "application/vnd.pypi.simple.v1+json"
        else:
            links = []
            for f, digest, meta in files:
                attrs = ""
                if meta.get("requires_python"):
                    rp = meta["requires_python"].replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
                    attrs += f' data-requires-python="{rp}"'
                if meta.get("yanked"):
                    attrs += f' data-yanked="{meta["yanked"]}"'
                links.append(f'<a href="/files/{f}#sha256={digest}"{attrs}>{f}</a><br/>')
            body = ("<!DOCTYPE html><html><body>\n" + "\n".join(links) + "\n</body></html>\n").encode()
            ctype = "text/html"
        self.send_response(200)
        self.send_header("Content-Type", ctype)
        self.send_body(body, "trickle" in faults, "endless" in faults)

    def send_body(self, body, trickle, endless):
        """Headers ended and `body` sent: whole, 2 bytes a second, or never ending."""
        try:
            if endless:
                self.send_header("Connection", "close")
                self.end_headers()
                self.close_connection = True
                self.wfile.write(body)
                junk = b" " * (1 << 20)
                while True:
                    self.wfile.write(junk)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            if not trickle:
                self.wfile.write(body)
                return
            for k in range(0, len(body), 2):
                self.wfile.write(body[k:k + 2])
                self.wfile.flush()
                time.sleep(1)
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True

    def file(self, name):
        path = os.path.join(wheels_dir, os.path.basename(name))
        if not os.path.exists(path):
            return self.send_error(404)
        with lock:
            n = counts[name] = counts.get(name, 0) + 1
        if "500x2" in faults and n <= 2:
            return self.send_error(500)
        if "429" in faults and n == 1:
            self.send_response(429)
            self.send_header("Retry-After", "1")
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        size = os.path.getsize(path)
        start, end, status = 0, size - 1, 200
        rng = self.headers.get("Range")
        if rng and rng.startswith("bytes=") and "no-range" not in faults:
            a, b = rng[6:].split("-")
            start = int(a) if a else max(0, size - int(b))
            end = min(int(b), size - 1) if a and b else size - 1
            status = 206
        with open(path, "rb") as f:
            f.seek(start)
            part = f.read(end - start + 1)
        self.send_response(status)
        self.send_header("Content-Type", "application/octet-stream")
        self.send_header("Cache-Control", "max-age=600, public")
        self.send_header("ETag", '"%x-%x"' % (size, int(os.path.getmtime(path))))
        self.send_header("Accept-Ranges", "none" if "no-range" in faults else "bytes")
        if status == 206:
            self.send_header("Content-Range", f"bytes {start}-{end}/{size}")
            if "trickle-ranges" in faults or "endless-ranges" in faults:
                return self.send_body(part, "trickle-ranges" in faults, "endless-ranges" in faults)
        self.send_header("Content-Length", str(len(part)))
        self.end_headers()
        if "slow" in faults:
            time.sleep(30)
        with lock:
            cut_now = "cut" in faults and status == 200 and name not in cut_done
            if cut_now:
                cut_done.add(name)
        if cut_now:
            self.wfile.write(part[:len(part) // 2])
            self.wfile.flush()
            self.close_connection = True
            self.connection.shutdown(2)
            return
        self.wfile.write(part)


server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
server.daemon_threads = True
if tls:
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(tls[0], tls[1])
    server.socket = ctx.wrap_socket(server.socket, server_side=True)
print(server.server_address[1], flush=True)
server.serve_forever()
