"""Raw HTTP for tests that must send exactly what they want (bad JSON, huge bodies, invalid UTF-8)."""
import http.client
import json as jsonlib
import urllib.parse


class Response:
    def __init__(self, status, headers, body):
        self.status = status
        self.headers = headers
        self.body = body

    def json(self):
        return jsonlib.loads(self.body)


def request(method, url, body=None, headers=None, timeout=120):
    u = urllib.parse.urlparse(url)
    conn = http.client.HTTPConnection(u.hostname, u.port, timeout=timeout)
    if isinstance(body, (dict, list)):
        body = jsonlib.dumps(body).encode()
    elif isinstance(body, str):
        body = body.encode()
    hdrs = {"Content-Type": "application/json"}
    hdrs.update(headers or {})
    conn.request(method, u.path + (("?" + u.query) if u.query else ""), body=body, headers=hdrs)
    r = conn.getresponse()
    data = r.read()
    conn.close()
    return Response(r.status, dict(r.getheaders()), data)


def get(url, **kw):
    return request("GET", url, **kw)


def post(url, body, **kw):
    return request("POST", url, body, **kw)
