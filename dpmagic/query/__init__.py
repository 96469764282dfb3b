"""Query model and SQL parsing (the first layer: no data, no budget)."""

from dpmagic.query.model import Aggregate, AggregateFunction, Query
from dpmagic.query.sql import canonical_sql, parse_query, split_statements

__all__ = ["Aggregate", "AggregateFunction", "Query", "canonical_sql", "parse_query", "split_statements"]
