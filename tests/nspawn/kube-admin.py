#!/usr/bin/python3
"""kube-admin.py KUBECONFIG METHOD PATH [BODY]: one request to the API double as the
kubeconfig's user (client certificate), as kubectl would make it; prints the status code and
the body. The nspawn rootfs has no kubectl or curl, and Python's standard library only."""
import base64, http.client, os, re, ssl, sys, tempfile, urllib.parse

kc, method, path = sys.argv[1:4]
body = sys.argv[4] if len(sys.argv) > 4 else None
text = open(kc).read()
field = lambda k: re.search(r"^\s*%s: (\S+)$" % re.escape(k), text, re.M).group(1)
d = tempfile.mkdtemp()
files = {}
for k in ("certificate-authority-data", "client-certificate-data", "client-key-data"):
    files[k] = os.path.join(d, k)
    with open(files[k], "wb") as f:
        f.write(base64.b64decode(field(k)))
ctx = ssl.create_default_context(cafile=files["certificate-authority-data"])
ctx.check_hostname = False
ctx.load_cert_chain(files["client-certificate-data"], files["client-key-data"])
u = urllib.parse.urlparse(field("server"))
c = http.client.HTTPSConnection(u.hostname, u.port, context=ctx, timeout=10)
c.request(method, path, body=body, headers={"Content-Type": "application/json"})
r = c.getresponse()
print(r.status)
print(r.read().decode())
