"""A stand-in for the Hugging Face hub's file API on 127.0.0.1, for tests that never leave
the machine.

It serves what ``huggingface_hub.hf_hub_download`` and ``list_repo_files`` ask for:

- ``HEAD`` / ``GET /{repo}/resolve/{revision}/{file}``: the file, with the headers the
  client reads (``X-Repo-Commit``, ``ETag``, ``Content-Length``);
- ``GET /api/models/{repo}/tree/{revision}``: the repository's files as JSON.

- ``GET /{path}`` of ``files``: a plain file, as a model archive on an HTTP server
  (fairseq's ``dl.fbaipublicfiles.com``), at ``server.url + path``.

Point the client at it with ``HF_ENDPOINT`` (keras-posenc reads it at call time) or
``endpoint=``. A file can be served truncated (``HEAD`` announces its full size, ``GET``
sends fewer bytes), as a connection dropped mid-download leaves it; a plain file can
be cut short (its ``Content-Length`` announces the whole file, the connection closes
after half). Every request is
recorded, so a test can check that a cache hit asked nothing.

Usage::

    with HubServer({"timm/model": {"config.json": b"{}"}}) as server:
        os.environ["HF_ENDPOINT"] = server.url
"""

from __future__ import annotations

import hashlib
import http.server
import json
import threading
import urllib.parse


class HubServer:
    """Serves ``repos`` (``{repo_id: {filename: bytes}}``) until stopped."""

    def __init__(
        self, repos: dict[str, dict[str, bytes]], files: dict[str, bytes] | None = None
    ) -> None:
        self.repos = repos
        self.files = dict(files or {})  # "/path" -> bytes
        self.truncated: set[tuple[str, str]] = set()  # (repo, file) served short
        self.cut_short: set[str] = set()  # plain files whose connection drops halfway
        self.requests: list[tuple[str, str]] = []
        self._server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    def start(self) -> HubServer:
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._thread is not None:
            self._server.shutdown()
            self._thread.join()
            self._thread = None
        self._server.server_close()

    def __enter__(self) -> HubServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def commit(self, repo: str) -> str:
        """The repository's commit hash: a digest of its files, 40 hex digits like git's."""
        digest = hashlib.sha1()
        for name, data in sorted(self.repos[repo].items()):
            digest.update(name.encode() + hashlib.sha256(data).digest())
        return digest.hexdigest()

    def _handler(self) -> type[http.server.BaseHTTPRequestHandler]:
        hub = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:  # quiet test output
                pass

            def do_HEAD(self) -> None:  # noqa: N802 (http.server's naming)
                self._serve(body=False)

            def do_GET(self) -> None:  # noqa: N802
                self._serve(body=True)

            def _send(self, status: int, data: bytes, headers: dict, body: bool) -> None:
                self.send_response(status)
                for key, value in headers.items():
                    self.send_header(key, value)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                if body:
                    self.wfile.write(data)

            def _serve(self, body: bool) -> None:
                path = urllib.parse.unquote(urllib.parse.urlsplit(self.path).path)
                hub.requests.append((self.command, path))
                if path in hub.files:
                    return self._plain(path, body)
                parts = path.strip("/").split("/")
                if parts[:2] == ["api", "models"] and "tree" in parts:
                    at = parts.index("tree")
                    return self._tree("/".join(parts[2:at]), body)
                if "resolve" in parts:
                    at = parts.index("resolve")
                    repo, name = "/".join(parts[:at]), "/".join(parts[at + 2 :])
                    return self._file(repo, name, body)
                self._error(404, "EntryNotFound", body)

            def _plain(self, path: str, body: bool) -> None:
                data = hub.files[path]
                self.send_response(200)
                self.send_header("Content-Type", "application/octet-stream")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                if body:
                    self.wfile.write(data[: len(data) // 2] if path in hub.cut_short else data)
                self.close_connection = True

            def _error(self, status: int, code: str, body: bool) -> None:
                data = json.dumps({"error": code}).encode()
                self._send(status, data, {"X-Error-Code": code}, body)

            def _tree(self, repo: str, body: bool) -> None:
                if repo not in hub.repos:
                    return self._error(404, "RepoNotFound", body)
                listing = [
                    {
                        "type": "file",
                        "path": name,
                        "size": len(data),
                        "oid": hashlib.sha1(data).hexdigest(),
                    }
                    for name, data in sorted(hub.repos[repo].items())
                ]
                data = json.dumps(listing).encode()
                self._send(200, data, {"Content-Type": "application/json"}, body)

            def _file(self, repo: str, name: str, body: bool) -> None:
                if repo not in hub.repos:
                    return self._error(404, "RepoNotFound", body)
                if name not in hub.repos[repo]:
                    return self._error(404, "EntryNotFound", body)
                data = hub.repos[repo][name]
                headers = {
                    "X-Repo-Commit": hub.commit(repo),
                    "ETag": f'"{hashlib.sha256(data).hexdigest()}"',
                    "Accept-Ranges": "none",
                }
                if body and (repo, name) in hub.truncated:
                    data = data[: len(data) // 2]  # what a dropped connection leaves
                self._send(200, data, headers, body)

        return Handler
