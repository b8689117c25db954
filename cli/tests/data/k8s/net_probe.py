"""Real packets for the fence test (cli/tests/k8s.rs).

python3 net_probe.py serve PORTS ADDR...   listen on every ADDR (TCP on each of PORTS, UDP
                                           on 53): a TCP peer reads "ok", a UDP datagram
                                           comes back; prints "ready" once listening
python3 net_probe.py probe JSON            JSON: [[proto, addr, port], ...]; prints one JSON
                                           list of booleans: whether each one answered
"""

import json
import socket
import sys
import threading


def serve(ports, addrs):
    socks = []
    for a in addrs:
        fam = socket.AF_INET6 if ":" in a else socket.AF_INET
        for p in ports:
            s = socket.socket(fam, socket.SOCK_STREAM)
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            s.bind((a, p))
            s.listen(16)
            socks.append(("tcp", s))
        u = socket.socket(fam, socket.SOCK_DGRAM)
        u.bind((a, 53))
        socks.append(("udp", u))

    def tcp(s):
        while True:
            c, _ = s.accept()
            try:
                c.sendall(b"ok")
            finally:
                c.close()

    def udp(s):
        while True:
            data, peer = s.recvfrom(512)
            s.sendto(data, peer)

    for kind, s in socks:
        threading.Thread(target=tcp if kind == "tcp" else udp, args=(s,), daemon=True).start()
    print("ready", flush=True)
    threading.Event().wait()


def probe(targets):
    out = []
    for proto, addr, port in targets:
        fam = socket.AF_INET6 if ":" in addr else socket.AF_INET
        ok = False
        try:
            if proto == "tcp":
                s = socket.socket(fam, socket.SOCK_STREAM)
                s.settimeout(1.5)
                s.connect((addr, port))
                ok = s.recv(2) == b"ok"
            else:
                s = socket.socket(fam, socket.SOCK_DGRAM)
                s.settimeout(1.5)
                s.sendto(b"q", (addr, port))
                ok = s.recvfrom(16)[0] == b"q"
            s.close()
        except OSError:
            ok = False
        out.append(ok)
    print(json.dumps(out))


if __name__ == "__main__":
    if sys.argv[1] == "serve":
        serve([int(p) for p in sys.argv[2].split(",")], sys.argv[3:])
    else:
        probe(json.loads(sys.argv[2]))
