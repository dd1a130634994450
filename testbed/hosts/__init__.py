"""Ways of reaching a host (docs/architecture.md "Hosts"): one small interface, `Host` in
base.py, and one implementation per way -- a local process (local.py), a network namespace
(netns.py), a container (container.py), an SSH host (ssh.py). Backends compose them; nothing
above a host knows whether it is a namespace, a container or a machine across the network."""
