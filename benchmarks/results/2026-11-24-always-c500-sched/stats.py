import socket,sys
s=socket.create_connection(("127.0.0.1",int(sys.argv[1])))
s.sendall(b"stats\r\n")
buf=b""
while not buf.endswith(b"END\r\n"):
    buf+=s.recv(65536)
for line in buf.decode().splitlines():
    p=line.split()
    if len(p)==3: print(p[1],p[2])
