"""Mechanisms: every kind of release behind one interface (:class:`~dpmagic.releases.base.Mechanism`)."""

from dpmagic.releases.base import Backend, Mechanism
from dpmagic.releases.query import QueryMechanism

__all__ = ["Backend", "Mechanism", "QueryMechanism"]
