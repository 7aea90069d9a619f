"""Reports: explain() and (later) pictures of plans."""
from .explain import GraphReport, Report, explain

__all__ = ["GraphReport", "Report", "explain"]
