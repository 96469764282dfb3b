"""Presentation: the IPython magics, the live panel, plots, reports and the command line (thin, over the session's public API)."""
