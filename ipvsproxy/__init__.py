"""ipvsproxy: a Kubernetes service proxy that programs the Linux kernel's IPVS load balancer."""

__version__ = "0.1.0.dev0"
