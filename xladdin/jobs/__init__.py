"""Whole tables: a pool screened to a report, what changed, a replay, industries compared, eval; pandas and Ray."""
