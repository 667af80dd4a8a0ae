"""Serving: the manager (the one door), routing and admission, the compile table, warm-ups, roles."""
