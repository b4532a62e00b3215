"""The sidecar fleet: the wire protocol, the server's hub, sidecar-backed providers,
the sidecar agent and its local backends, and who may join."""
