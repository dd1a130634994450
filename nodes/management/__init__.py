"""Node management: MBeans over the Jolokia protocol and Prometheus text (D3.5 section 4.2)."""

from nodes.management.jolokia import Jolokia
from nodes.management.mbeans import ManagementError, MBean, MBeanRegistry
from nodes.management.metrics import render_metrics
from nodes.management.objectname import MalformedObjectName, ObjectName
from nodes.management.server import ManagementServer

__all__ = [
    "Jolokia",
    "MBean",
    "MBeanRegistry",
    "MalformedObjectName",
    "ManagementError",
    "ManagementServer",
    "ObjectName",
    "render_metrics",
]
